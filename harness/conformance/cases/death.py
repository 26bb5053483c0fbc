"""Engine death, a fault case: kill the engine's worker process with SIGKILL while streams are in flight.

Opt-in and always last (`harness conform MANIFEST --fault engine-death`, or `-k fault.engine-death`): it is never part
of the default suite (registered in `registry.FAULTS`, selected only by a pattern that names it), and it ends with the
engine dead; the launcher's stop() then removes whatever is left of its process group.

What is killed is data: the engine profile's `worker_match` (a pattern for the worker's command line or process title,
found among the engine's own processes), or, when it is None, the server process itself. What must happen is data
too, the expectation file's `fault: {engine-death: {...}}` (defaults below): every stream in flight ends, by an error
event (or an error response) or a closed connection (`stream_ends` narrows which), within `streams_end_within_s` of the
kill, never as if complete and never by hanging; after an error event nothing but [DONE] follows; `/health` stops
answering 200 within `health_down_within_s`. What the identity endpoint and /v1/models say meanwhile, and whether the
server process exited, are recorded (extra), not judged.

The kill comes only when a stream is known to be unfinished at the engine: once every stream has a chunk, the worker
is frozen (SIGSTOP), the client reads what the engine had already made, and the worker is killed (SIGKILL) if a stream
is still open; if none is (on a loaded machine the client and the server run seconds behind the tiny model's engine,
which makes 900 tokens in about 2 s), the worker is let go on, and new streams are tried, up to ATTEMPTS rounds. A
stream that still ends by `finish_reason: length` had been generated whole before the kill and is not judged.

The judging part is the pure `judge_engine_death` over a `DeathRun` (traces and polls with monotonic timestamps), so
recorded runs are judged as live ones.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.client import Timeouts, Trace
from harness.conformance.cases.integrity import judge_after_error
from harness.conformance.model import Check, Deviations, Level, errored, passed, skipped
from harness.conformance.registry import case
from harness.conformance.view import choices, from_trace
from harness.procs import pid_alive

__all__ = ["DEFAULTS", "DeathRun", "Poll", "find_workers", "read_cmdlines", "stream_end", "judge_engine_death"]

DEFAULTS: dict[str, Any] = {
    "streams_end_within_s": 30.0,
    "health_down_within_s": 30.0,
    "streams": 4,
    "stream_ends": ["error-event", "closed"],
}
LONG_TOKENS = 900  # far more than the few seconds before the kill produce (with the expectation's long_request extras)
START_WITHIN_S = 30.0  # each stream has streamed a chunk (or this bound passed) when the worker is frozen
DRAIN_QUIET_S = 1.0  # the frozen engine's last words: no event for this long means the client has read them
DRAIN_MAX_S = 10.0
ATTEMPTS = 3  # rounds of streams tried until one is still open, unfinished, when the worker is frozen
EXIT_WAIT_S = 15.0  # how long the case watches for the server process to exit after the worker's death (recorded)


@dataclass
class Poll:
    t_ns: int  # time.monotonic_ns() when the answer (or the failure) came
    status: int | None
    error: str = ""


@dataclass
class DeathRun:
    """What the live case saw; every time is time.monotonic_ns(), like the traces' own."""

    workers: list[dict[str, Any]]  # each killed process: pid, cmdline
    t_kill_ns: int
    streams: list[Trace]
    in_flight: list[bool]  # per stream: still open when the worker was killed
    health: list[Poll] = field(default_factory=list)  # /health after the kill, until it stopped answering 200
    meanwhile: dict[str, Any] = field(default_factory=dict)  # identity endpoint and /v1/models after the kill
    server_exit: int | None = None  # the server's exit status when the case ended (None: still running)
    server_exit_s: float | None = None  # seconds from the kill to the server's exit


def read_cmdlines(pids: set[int]) -> dict[int, str]:
    """pid -> command line as `ps` shows it (a process that set its title shows the title), NULs as spaces."""
    out = {}
    for pid in sorted(pids):
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        text = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
        if not text:  # a kernel thread or a process on its way out; its comm is all there is
            try:
                text = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
        out[pid] = text
    return out


def find_workers(cmdlines: Mapping[int, str], server_pid: int | None, pattern: str | None) -> list[int]:
    """The processes to kill: those whose command line matches `pattern` (the server excluded), or the server itself
    when there is no pattern (it does the work). [] when none is there."""
    if pattern is None:
        return [server_pid] if server_pid is not None and server_pid in cmdlines else []
    rx = re.compile(pattern)
    return sorted(pid for pid, cmd in cmdlines.items() if pid != server_pid and rx.search(cmd))


def stream_end(trace: Trace, t_kill_ns: int) -> tuple[str, float | None]:
    """How a stream ended and how many seconds after the kill: `error-event` (an error event, or an error response),
    `closed` (the connection ended without [DONE]), `finished` ([DONE] after `finish_reason: length`: every token
    asked for was generated, so the engine had finished it before the kill and it was not in flight there),
    `complete` ([DONE], no error and no such finish: it looks like a whole answer), `hung` (still open at the
    harness's bound, or a read that timed out)."""
    after = None if trace.t_end_ns is None else (trace.t_end_ns - t_kill_ns) / 1e9
    if trace.ended in ("timeout", "limit", "") or (trace.ended == "disconnect" and trace.failure == "timeout"):
        return "hung", after
    if trace.status is not None and trace.status != 200:
        return "error-event", after
    view = from_trace(trace)
    if any("error" in o for _, o in view.objects()):
        return "error-event", after
    if "done" in view.kinds:
        reasons = [c.get("finish_reason") for _, o in view.objects() for c in choices(o)]
        return ("finished" if "length" in reasons else "complete"), after
    return "closed", after


def _secs(t_ns: int, t_kill_ns: int) -> float:
    return round((t_ns - t_kill_ns) / 1e9, 3)


def judge_engine_death(run: DeathRun, spec: Mapping[str, Any]) -> Check:
    """Every in-flight stream ended (an allowed way, within the bound, nothing after an error event but [DONE]) and
    /health stopped answering 200 within its bound. Tags: `stream-hung`, `stream-ended-late`,
    `stream-ended-as-complete`, `stream-closed-without-error` / `stream-ended-by-error-event` (an ending the
    expectation's `stream_ends` leaves out), the after-error tags, `health-still-up`."""
    s = {**DEFAULTS, **spec}
    end_bound, health_bound = float(s["streams_end_within_s"]), float(s["health_down_within_s"])
    allowed = list(s["stream_ends"])
    flying = [t for t, f in zip(run.streams, run.in_flight, strict=False) if f]
    if not flying:
        return errored(f"no stream was in flight when the worker was killed ({len(run.streams)} sent): not judged")
    dev = Deviations()
    ends: list[dict[str, Any]] = []
    for i, t in enumerate(flying):
        how, after = stream_end(t, run.t_kill_ns)
        ends.append({"end": how, "after_s": None if after is None else round(after, 3), "ended": t.ended,
                     "error": (t.error or "")[:200],
                     "chunks_before_kill": sum(1 for e in t.events if e.kind == "data" and e.t_ns < run.t_kill_ns)})  # fmt: skip
        if how == "finished":  # generated whole before the kill; what was still in the server's or client's buffers
            continue
        want = f"stream {i}: an error event or a closed connection within {end_bound:g}s of the kill"
        if how == "hung":
            dev.add("stream-hung", want, f"{t.ended or 'open'} {after if after is None else round(after, 1)}s", i)
            continue
        if after is not None and after > end_bound:
            dev.add("stream-ended-late", want, f"{how} after {after:.1f}s", i)
        if how == "complete":
            dev.add(
                "stream-ended-as-complete", want, "[DONE] without an error: a client takes it for a whole answer", i
            )
        elif how not in allowed:
            tag = "stream-closed-without-error" if how == "closed" else "stream-ended-by-error-event"
            dev.add(tag, f"stream {i} ends by: {', '.join(allowed)}", how, i)
        if how == "error-event":
            dev.merge(judge_after_error(from_trace(t)))
    polls = [p for p in run.health if p.t_ns >= run.t_kill_ns]
    down = next((p for p in polls if p.status != 200), None)
    down_s = None if down is None else _secs(down.t_ns, run.t_kill_ns)
    health: dict[str, Any] = {"down_after_s": down_s, "answered": (down.status if down else 200) if polls else None,
              "error": (down.error[:200] if down else ""), "polls": len(polls)}  # fmt: skip
    if down is None or (down_s is not None and down_s > health_bound):
        last = polls[-1] if polls else None
        seen = f"200 for {_secs(last.t_ns, run.t_kill_ns)}s" if last and down is None else f"down after {down_s}s"
        dev.add("health-still-up", f"/health not 200 within {health_bound:g}s of the kill", seen)
    counts: dict[str, int] = {}
    for e in ends:
        counts[e["end"]] = counts.get(e["end"], 0) + 1
    if counts.get("finished") == len(ends):
        return errored(f"all {len(ends)} stream(s) open at the kill had been generated whole before it "
                       "(finish_reason length): none was in flight at the engine, not judged")  # fmt: skip
    pids = ", ".join(str(w.get("pid")) for w in run.workers)
    exited = "still running" if run.server_exit is None else f"exited {run.server_exit} after {run.server_exit_s}s"
    note = (f"killed {pids}; {len(flying)} in-flight stream(s): "
            + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))
            + f"; /health down after {down_s}s ({health['answered'] or health['error'][:60]}); server {exited}")  # fmt: skip
    extra = {"workers": run.workers, "streams": ends, "health": health, "meanwhile": run.meanwhile,
             "server_exit": run.server_exit, "server_exit_s": run.server_exit_s,
             "bounds": {"streams_end_within_s": end_bound, "health_down_within_s": health_bound},
             "stream_ends": allowed}  # fmt: skip
    chk = dev.check(passed(note), note=note)
    chk.extra.update(extra)
    return chk


# -- the live case ------------------------------------------------------------------------------------------------


async def _snapshot(ctx, client, path: str, t_kill_ns: int) -> dict[str, Any]:
    t = await ctx.record(client, "GET", path, sse=False, max_duration_s=3.0, max_bytes=1 << 16)
    doc, _ = t.body_json()
    seen: dict[str, Any] = {"after_s": _secs(time.monotonic_ns(), t_kill_ns), "status": t.status}
    if t.status is None:
        seen["error"] = (t.error or "")[:200]
    elif isinstance(doc, dict):
        data = doc.get("data")
        if isinstance(data, list):  # a model list: the ids it names (each entry may carry host paths)
            seen["models"] = [m.get("id") for m in data[:8] if isinstance(m, dict)]
        else:
            seen["body"] = {k: doc[k] for k in list(doc)[:8] if isinstance(doc[k], (str, int, float, bool))}
    else:
        seen["body"] = t.body[:200].decode("utf-8", "replace")
    return seen


async def _poll_health(ctx, client, t_kill_ns: int, bound_s: float) -> list[Poll]:
    polls: list[Poll] = []
    deadline = t_kill_ns + int(bound_s * 1e9)
    while time.monotonic_ns() < deadline:
        t = await ctx.record(client, "GET", "/health", sse=False, max_duration_s=2.0, max_bytes=1 << 16)
        polls.append(Poll(time.monotonic_ns(), t.status, t.error or ""))
        if t.status != 200:
            break
        await asyncio.sleep(0.2)
    return polls


def _watch(seen: dict[int, Trace], i: int):
    def on_events(t: Trace) -> bool:
        seen[i] = t
        return False  # never leave: the stream is watched, not cut

    return on_events


def _signal(pids: list[int], sig: signal.Signals) -> list[int]:
    """Send `sig` to each pid still there; the pids it reached."""
    reached = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            reached.append(pid)
        except ProcessLookupError:
            pass
    return reached


async def _drain(seen: dict[int, Trace], tasks: list[asyncio.Future]) -> float:
    """Wait until the client has read what the (frozen) engine had made: every stream ended, or no event came for
    DRAIN_QUIET_S (at most DRAIN_MAX_S). The seconds it took."""
    t0 = last_change = time.monotonic()
    count = -1
    while time.monotonic() - t0 < DRAIN_MAX_S and not all(t.done() for t in tasks):
        now_count = sum(len(t.events) for t in seen.values())
        if now_count != count:
            count, last_change = now_count, time.monotonic()
        elif time.monotonic() - last_change >= DRAIN_QUIET_S:
            break
        await asyncio.sleep(0.05)
    return round(time.monotonic() - t0, 3)


@case(
    "fault.engine-death",
    "when the engine's worker dies mid-stream, in-flight streams end (error event or closed connection) within a "
    "bound and /health stops answering 200 (opt-in: --fault engine-death)",
    Level.MUST,
    timeout_s=300,
    fault=True,
)
async def engine_death(ctx) -> Check:
    eng = ctx.engine
    if eng is None:
        return skipped("attached by --url: the harness kills only an engine it launched")
    pids = eng.local_pids()
    if not pids:
        return skipped("the engine's processes are not host processes the harness can signal (a container)")
    profile = eng.spec.profile
    spec = {**DEFAULTS, **ctx.exp.fault.get("engine-death", {})}
    server_pid = eng.describe().get("pid")
    cmdlines = read_cmdlines(pids)
    targets = find_workers(cmdlines, server_pid, profile.worker_match)
    if not targets:
        return errored(f"no process of the engine matches the profile's worker pattern {profile.worker_match!r}: "
                       f"{sorted(cmdlines.values())[:6]}")  # fmt: skip
    workers = [{"pid": p, "cmdline": cmdlines[p][:120], "server": p == server_pid} for p in targets]
    end_bound, health_bound = float(spec["streams_end_within_s"]), float(spec["health_down_within_s"])
    n = int(spec["streams"])
    extras = {**ctx.extra("long_request"), **dict(spec.get("request") or {})}
    body = ctx.completion(max_tokens=LONG_TOKENS, stream=True, **extras)
    bound = START_WITHIN_S + DRAIN_MAX_S + end_bound + 5.0  # the whole exchange: a stream still open then is `hung`
    streams_client = ctx.new_client(ctx.api_key, timeout=Timeouts(connect=START_WITHIN_S, read=bound).to_httpx())
    probe_client = ctx.new_client(ctx.api_key, timeout=5.0)
    # /health is the engine's own state: behind a gateway it is polled at the engine (the streams go through it)
    health_client = ctx.new_engine_client(timeout=5.0)
    tasks: list[asyncio.Future] = []
    frozen: list[int] = []
    try:
        attempts: list[dict[str, Any]] = []
        for _ in range(ATTEMPTS):
            seen: dict[int, Trace] = {}
            tasks = [
                asyncio.ensure_future(ctx.record(streams_client, "POST", "/v1/completions", json=body,
                                                 stop_after=_watch(seen, i), max_duration_s=bound))
                for i in range(n)
            ]  # fmt: skip
            t0 = time.monotonic()
            while time.monotonic() - t0 < START_WITHIN_S:
                if all((i in seen and seen[i].data_events()) or tasks[i].done() for i in range(n)):
                    break
                await asyncio.sleep(0.05)
            if not any(i in seen and seen[i].data_events() for i in range(n)):
                return errored(f"no stream started within {START_WITHIN_S:g}s: the engine was not killed")
            # Freeze the worker, then let the client read what it had made: a stream still open after that is
            # one the engine had not finished (a loaded machine puts seconds between the engine and the client).
            frozen = _signal(targets, signal.SIGSTOP)
            drained_s = await _drain(seen, tasks)
            in_flight = [not task.done() for task in tasks]
            attempts.append({"drained_s": drained_s, "open_after_drain": sum(in_flight)})
            if any(in_flight):
                break
            _signal(frozen, signal.SIGCONT)
            frozen = []
            await asyncio.gather(*tasks, return_exceptions=True)
        else:
            return errored(f"in {ATTEMPTS} attempts every stream had been generated whole before the worker could be "
                           f"stopped ({attempts}): the engine was not killed")  # fmt: skip
        t_kill = time.monotonic_ns()
        gone = sorted(set(targets) - set(_signal(targets, signal.SIGKILL)))
        frozen = []
        if gone:
            return errored(f"the worker process(es) {gone} had exited before the kill")
        health_task = asyncio.ensure_future(_poll_health(ctx, health_client, t_kill, health_bound))
        ident = profile.identity.path
        meanwhile = {
            "right_after_kill": {p: await _snapshot(ctx, probe_client, p, t_kill) for p in (ident, "/v1/models")}
        }
        health = await health_task
        meanwhile["after_health_down"] = {
            p: await _snapshot(ctx, probe_client, p, t_kill) for p in (ident, "/v1/models")
        }
        traces = list(await asyncio.gather(*tasks))
        deadline = time.monotonic() + EXIT_WAIT_S
        while eng.exit_status() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        status = eng.exit_status()
        run = DeathRun(
            workers=[{**w, "killed": not pid_alive(w["pid"])} for w in workers], t_kill_ns=t_kill, streams=traces,
            in_flight=in_flight, health=health, meanwhile=meanwhile, server_exit=status,
            server_exit_s=None if status is None else _secs(time.monotonic_ns(), t_kill),
        )  # fmt: skip
        chk = judge_engine_death(run, spec)
        chk.extra["left_for_stop"] = len(eng.local_pids())  # processes of the group the launcher's stop() removes
        chk.extra["attempts"] = attempts
        return chk
    finally:
        _signal(frozen, signal.SIGCONT)  # a case that ends early never leaves the worker stopped
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await streams_client.aclose()
        await probe_client.aclose()
        await health_client.aclose()
