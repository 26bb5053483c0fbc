"""The load runner: the only module of harness.load with clocks and sockets.

It sends the planned requests (asyncio; clients from `harness.client.make_client` with `FastTransport` injected),
records raw facts per request and writes them to `events.jsonl` (one JSON object per line, every request including
failed, rejected and cancelled ones), scrapes `/metrics` before, during and after the run into the same file, stops by
itself at the scenario's bounds and aborts early when an abort threshold trips. Everything derived (metrics,
cross-check, reports) is computed later from the file.

All times are `time.monotonic_ns()` minus the run's t0 (integers, ns). Per request:
    scheduled_ns  when the request was due (open loop: t_measured + planned offset; closed loop: when its slot freed)
    ready_ns      when it could go (max of scheduled and a free slot under `max_concurrency`)
    sent_ns       just before the request is handed to httpx;  send lag = sent_ns - ready_ns
    headers_ns    response status line and headers parsed
    end_ns        body complete (or the moment it failed / was cancelled)
    ev_t          per SSE event: arrival of the socket read that completed it, relative to sent_ns

Bounds: `bounds.max_duration_s` is wall-clock for the whole run from its start (model discovery, the first scrape,
warm-up and the measured phase); only the closing steps (a 1 s pause after cancellations, the last scrape) may add up to
CLOSING_ALLOWANCE_S after it. Each request is bounded by `request_timeout_s` in total, not per read. Whatever a server
does, every request sent ends as exactly one outcome record, and the events go to `events.jsonl.partial` first, renamed
to `events.jsonl` when the run ends (so a run that fails at once leaves an earlier result in place).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import msgspec

from harness.client import Timeouts, failure_kind, make_client
from harness.cpuwait import cpu_wait_s, since
from harness.engines import all_metric_prefixes, profile_for
from harness.errors import OutputError, RefusedError, UsageError
from harness.load.scenario import PlannedRequest, Scenario, iter_plan
from harness.load.stream import OUTPUT_KINDS, parse_stream
from harness.load.transport import FastTransport
from harness.metrics import keep_series
from harness.net import loopback_url, redact_url
from harness.outputs import output_dir
from harness.readers import parse_json

__all__ = ["Target", "RunResult", "check_target", "run_scenario", "EVENTS_FILE", "OUTPUT_NAMES", "CLOSING_ALLOWANCE_S"]

EVENTS_FILE = "events.jsonl"
PARTIAL_FILE = EVENTS_FILE + ".partial"
OUTPUT_NAMES = (EVENTS_FILE, PARTIAL_FILE, "summary.json", "summary.md", "report.html")  # what a load run writes
SCRAPE_PREFIXES = all_metric_prefixes()  # the series a load run keeps per scrape when it does not know the engine
DISCOVERY_TIMEOUT_S = 10.0  # /v1/models, wall clock (and never past the run's deadline)
SCRAPE_TIMEOUT_S = 5.0  # one /metrics scrape, wall clock (never past the run's deadline)
CLOSING_SCRAPE_S = 2.0  # the scrape after the run, which follows the deadline
MAX_SIDE_BYTES = 8 << 20  # a /v1/models or /metrics reply
DISCONNECT_PAUSE_S = 1.0  # after cancelling requests: let the server notice before the last scrape
CLOSING_ALLOWANCE_S = DISCONNECT_PAUSE_S + CLOSING_SCRAPE_S  # what may follow max_duration_s
SIDE_TIMEOUTS = Timeouts(connect=5.0, read=5.0)  # per read; each side request is also bounded in wall time
OUTCOME_OF_FAILURE = {"unsent": "timeout", "timeout": "timeout"}  # failure_kind -> outcome; any other: transport_error


def check_target(url: str, allow_remote: bool = False) -> str:
    """The one loopback rule (harness.net) on the parsed URL, no DNS, no socket. Returns it without a trailing slash."""
    try:
        return loopback_url(url, allow_remote=allow_remote, what="--url")
    except RefusedError as exc:
        raise RefusedError(f"{exc}; not a loopback address: pass --allow-remote to load a server you are entitled "
                           "to load") from None  # fmt: skip


@dataclass
class Target:
    base_url: str
    model: str | None = None
    api_key: str | None = None
    allow_remote: bool = False
    # the engine kind whose profile names the series to keep and cross-check (None: not known; every profile's series
    # are kept and the report uses the default profile), and where it came from ("manifest", "--engine")
    engine: str | None = None
    engine_source: str | None = None

    def scrape_prefixes(self) -> tuple[str, ...]:
        return (profile_for(self.engine).metrics.prefix,) if self.engine else SCRAPE_PREFIXES


@dataclass
class RunResult:
    out_dir: Path
    events_path: Path
    stop_reason: str  # max_requests | max_duration | abort | interrupted
    abort: dict | None
    n_requests: int


def _now() -> int:
    return time.monotonic_ns()


def response_limit(max_tokens: int) -> int:
    """Most bytes one streamed reply may hold: generous per token (vLLM sends ~250 B), so an endless stream is cut."""
    return min(max(1 << 20, max_tokens * 4096), 256 << 20)


_encode = msgspec.json.Encoder().encode
_INT_LISTS = frozenset(("ev_t", "ev_b", "ev_c", "usage"))  # built by parse_stream from ints only (usage: int counts)
_PLAIN = (int, str, bool, type(None))


def request_line(rec: dict) -> str:
    """`rec` as one events.jsonl line: exactly `json.dumps(rec, separators=(",", ":")) + "\\n"`, the bytes
    `write` gives, encoded by msgspec (several times faster) when that provably gives the same text: no floats (their
    spelling differs), only the parse's int lists as containers, and an ASCII result with no escape and no DEL (json
    escapes non-ASCII and DEL, msgspec does not). Anything else goes through json itself."""
    for k, v in rec.items():
        if not isinstance(v, _PLAIN) or type(v) is float:
            if k not in _INT_LISTS or not isinstance(v, (list, dict)):
                break
    else:
        try:
            line = _encode(rec)
        except (TypeError, ValueError, OverflowError):
            line = b"\x7f"  # not encodable here: json decides
        if line.isascii() and b"\\" not in line and b"\x7f" not in line:
            return line.decode() + "\n"
    return json.dumps(rec, separators=(",", ":")) + "\n"


class _Run:
    def __init__(self, sc: Scenario, target: Target, out_dir: Path, progress: bool, flush_interval_s: float):
        self.sc, self.target, self.out_dir = sc, target, out_dir
        self.shown_url = redact_url(target.base_url)  # what reaches events, reports and messages
        self.progress_enabled = progress
        self.flush_interval_s = flush_interval_s
        self.t0 = _now()
        self.deadline = self.t0 + int(sc.bounds.max_duration_s * 1e9)  # the whole run, discovery included
        self.prefixes = target.scrape_prefixes()
        self.step = "discovery"  # the step running now; `bound_step` names the one the deadline hit
        self.bound_step: str | None = None
        self.sent = 0  # measured requests handed to the client
        self.finished: list[tuple[dict, list]] = []
        self.n_written = 0
        self.ok = self.failed = self.cancelled = 0
        self.consecutive_failures = 0
        self.lags: list[int] = []
        self.inflight = 0
        self.bytes = 0
        self.stop = asyncio.Event()
        self.abort: dict | None = None
        self.stop_reason = "max_requests"
        self.tasks: set[asyncio.Task] = set()
        self.measured_start = 0
        self.header_written = False
        try:
            self.fh = open(out_dir / PARTIAL_FILE, "w", buffering=1 << 16)
        except OSError as exc:
            raise OutputError(f"{out_dir / PARTIAL_FILE}: cannot write: {exc.strerror or exc}") from None

    # ------------------------------------------------------------------ output
    def write(self, obj: dict) -> None:
        self.fh.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def scrub(self, text: str) -> str:
        """An error text with the target's userinfo taken out (an exception may quote the URL)."""
        return text.replace(self.target.base_url, self.shown_url) if self.shown_url != self.target.base_url else text

    def flush(self) -> None:
        # Parsing allocates ~10 short-lived objects per event and frees them at once: the cyclic collector would only
        # walk the whole heap (every retained read) again and again, ~25% of the parse. Nothing here makes a cycle.
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._flush()
        finally:
            if collecting:
                gc.enable()

    def _flush(self) -> None:
        batch, self.finished = self.finished, []
        lines = []
        for rec, reads in batch:
            sent = rec["sent_ns"]
            if reads:
                ps = parse_stream(reads, t_base=self.t0 + sent)
                rec["first_byte_ns"] = reads[0][0] - self.t0
                rec["reads"] = len(reads)
                rec["ev_t"] = ps.t
                rec["ev_b"] = ps.nbytes
                rec["ev_k"] = ps.kinds
                rec["ev_c"] = ps.chars
                rec["usage"] = ps.usage
                rec["finish_reason"] = ps.finish_reason
                rec["done"] = ps.done
            if rec["outcome"] == "ok":  # HTTP 200 and the body read to its end: now judge what it held
                kinds = rec.get("ev_k") or ""
                if reads and ps.error:
                    rec["outcome"], rec["error"] = "stream_error", ps.error
                elif not (reads and ps.done):
                    rec["outcome"], rec["error"] = "incomplete", "stream ended without [DONE]"
                elif not any(k in OUTPUT_KINDS for k in kinds):
                    rec["outcome"], rec["error"] = (
                        "no_output",
                        "[DONE] without a single output event: no token received",
                    )
            lines.append(request_line(rec))
            self.n_written += 1
        self.fh.write("".join(lines))
        self.fh.flush()

    # ------------------------------------------------------------------ one request
    def body(self, pr: PlannedRequest, model: str) -> tuple[str, dict]:
        sc = self.sc
        b: dict = {
            "model": model,
            "max_tokens": pr.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": sc.temperature,
        }
        if sc.ignore_eos:
            b["ignore_eos"] = True
        if sc.endpoint == "chat":
            b["messages"] = [{"role": "user", "content": pr.prompt}]
            return "/v1/chat/completions", b
        b["prompt"] = pr.prompt
        return "/v1/completions", b

    async def one(
        self,
        client: httpx.AsyncClient,
        pr: PlannedRequest,
        model: str,
        rid,
        warmup: bool,
        scheduled_ns: int,
        ready_ns: int,
    ) -> None:
        """Send one request and record exactly one outcome for it, whatever the server (or the transport) does."""
        path, body = self.body(pr, model)
        rec = {
            "type": "request",
            "id": rid,
            "warmup": warmup,
            "prompt_units": pr.prompt_units,
            "max_tokens": pr.max_tokens,
            "prefixed": pr.prefixed,
            "scheduled_ns": scheduled_ns - self.t0,
            "ready_ns": ready_ns - self.t0,
            "sent_ns": 0,
            "headers_ns": None,
            "end_ns": None,
            "status": None,
            "outcome": None,
            "error": None,
            "bytes": 0,
        }
        reads: list[tuple[int, bytes]] = []
        limit = response_limit(pr.max_tokens)
        self.inflight += 1
        if not warmup:
            self.sent += 1
        sent = _now()
        rec["sent_ns"] = sent - self.t0
        try:
            async with asyncio.timeout(self.sc.request_timeout_s):  # the whole request, not each read
                async with client.stream("POST", path, json=body) as r:
                    rec["headers_ns"] = _now() - self.t0
                    rec["status"] = r.status_code
                    if r.status_code != 200:
                        data = b""
                        async for chunk in r.aiter_raw():
                            data += chunk
                            if len(data) > 4096:
                                break
                        rec["outcome"] = "rejected" if r.status_code in (429, 503) else "http_error"
                        rec["error"] = data[:500].decode(errors="replace")
                    else:
                        append, n = reads.append, 0
                        async for chunk in r.aiter_raw():
                            append((_now(), chunk))
                            n += len(chunk)
                            if n > limit:
                                rec["outcome"] = "too_large"
                                rec["error"] = f"response body passed {limit} bytes for max_tokens {pr.max_tokens}"
                                break
                        else:
                            rec["outcome"] = "ok"  # read to its end; flush() judges the events
        except asyncio.CancelledError:
            rec["outcome"] = "cancelled"
            rec["error"] = self.stop_reason if self.stop.is_set() else "cancelled"
        except TimeoutError:
            rec["outcome"] = "timeout"
            rec["error"] = f"not complete within request_timeout_s = {self.sc.request_timeout_s} s"
        except httpx.HTTPError as exc:  # the client seam names the failure; timeouts are their own outcome
            rec["outcome"] = OUTCOME_OF_FAILURE.get(failure_kind(exc), "transport_error")
            rec["error"] = self.scrub(f"{type(exc).__name__}: {exc}")[:500]
        except Exception as exc:  # noqa: BLE001 - any failure to get a reply is this request's outcome, never the run's
            rec["outcome"], rec["error"] = "transport_error", self.scrub(f"{type(exc).__name__}: {exc}")[:500]
        finally:
            if rec["outcome"] is None:  # left early without an outcome (cannot happen above; never record it as ok)
                rec["outcome"], rec["error"] = "transport_error", "request ended without a reply"
            rec["end_ns"] = _now() - self.t0
            self.inflight -= 1
            n = 0
            for _, c in reads:
                n += len(c)
            rec["bytes"] = n
            self.bytes += n
            self.finished.append((rec, reads))
            if not warmup:
                self.account(rec, reads, sent - ready_ns)

    def account(self, rec: dict, reads: list, lag_ns: int) -> None:
        self.lags.append(lag_ns)
        if rec["outcome"] == "cancelled":
            self.cancelled += 1
            return
        # cheap in-flight judgement for the abort rules; the exact classification happens in flush()
        tail = b"".join(c for _, c in reads[-2:])[-4096:] if reads else b""
        failed = rec["outcome"] != "ok" or b"[DONE]" not in tail or b'{"error"' in tail
        if failed:
            self.failed += 1
            self.consecutive_failures += 1
        else:
            self.ok += 1
            self.consecutive_failures = 0
        self.check_abort()

    def check_abort(self) -> None:
        a = self.sc.abort
        if self.stop.is_set():
            return
        done = self.ok + self.failed
        why = None
        if a.max_consecutive_failures and self.consecutive_failures >= a.max_consecutive_failures:
            why = {
                "rule": "max_consecutive_failures",
                "threshold": a.max_consecutive_failures,
                "value": self.consecutive_failures,
                "detail": f"{self.consecutive_failures} consecutive failed requests (threshold {a.max_consecutive_failures})",
            }
        elif a.max_error_rate and done >= a.min_requests and self.failed / done > a.max_error_rate:
            why = {
                "rule": "max_error_rate",
                "threshold": a.max_error_rate,
                "value": round(self.failed / done, 4),
                "detail": f"error rate {self.failed}/{done} = {self.failed / done:.1%} > {a.max_error_rate:.1%}",
            }
        elif a.max_send_lag_ms and len(self.lags) >= 20:
            last = sorted(self.lags[-20:])
            med = (last[9] + last[10]) / 2 / 1e6
            if med > a.max_send_lag_ms:
                why = {
                    "rule": "max_send_lag_ms",
                    "threshold": a.max_send_lag_ms,
                    "value": round(med, 3),
                    "detail": f"median send lag of the last 20 sends {med:.1f} ms > {a.max_send_lag_ms} ms: the client cannot keep up",
                }
        if why:
            self.abort = why
            self.stop_reason = "abort"
            self.stop.set()

    # ------------------------------------------------------------------ bounds
    def start_clock(self) -> None:
        self.t0 = _now()
        self.deadline = self.t0 + int(self.sc.bounds.max_duration_s * 1e9)

    def remaining_s(self) -> float:
        return max(self.deadline - _now(), 0) / 1e9

    def hit_bound(self) -> None:
        """The run's deadline passed during `self.step`: stop everything, and say where."""
        if not self.stop.is_set():
            self.stop_reason, self.bound_step = "max_duration", self.step
            self.stop.set()

    async def until_deadline(self, fn, *args) -> None:
        """Await fn(*args), but not past the run's deadline (then it is cancelled and records itself as cancelled)."""
        if self.stop.is_set():
            return
        if self.remaining_s() <= 0:
            self.hit_bound()
            return
        task = asyncio.create_task(fn(*args))
        done, _ = await asyncio.wait({task}, timeout=self.remaining_s())
        if task not in done:
            self.hit_bound()
        await _cancel_all([task])

    # ------------------------------------------------------------------ scrapes
    async def scrape(self, client: httpx.AsyncClient, phase: str, closing: bool = False) -> None:
        """One /metrics scrape, recorded whatever happens; bounded in wall time and bytes, and by the run's deadline
        (the closing scrape gets CLOSING_SCRAPE_S of its own, counted in CLOSING_ALLOWANCE_S)."""
        t = _now()
        limit = CLOSING_SCRAPE_S if closing else min(SCRAPE_TIMEOUT_S, self.remaining_s())
        rec = {"type": "scrape", "phase": phase, "t_ns": t - self.t0, "status": None}
        try:
            async with asyncio.timeout(limit):
                status, data = await _get_bounded(client, "/metrics", MAX_SIDE_BYTES)
            rec["status"] = status
            if status == 200:
                text = data.decode("utf-8", errors="replace")
                rec["text"] = keep_series(text, self.prefixes)
        except TimeoutError:
            rec["error"] = f"no complete /metrics reply within {limit:.1f} s"
            if not closing and self.remaining_s() <= 0:
                rec["error"] += " (the run's max_duration_s was reached)"
                self.hit_bound()
        except Exception as exc:  # noqa: BLE001 - a failed scrape is recorded, never fatal
            rec["error"] = self.scrub(f"{type(exc).__name__}: {exc}")[:500]
        rec["dur_ns"] = _now() - t
        self.write(rec)

    async def scraper(self, client: httpx.AsyncClient) -> None:
        while not self.stop.is_set():
            try:
                await asyncio.wait_for(self.stop.wait(), self.sc.scrape_interval_s)
            except TimeoutError:
                await self.scrape(client, "during")

    async def flusher(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_s)
            self.flush()

    # ------------------------------------------------------------------ main
    async def resolve_model(self, client: httpx.AsyncClient) -> str:
        if self.sc.model or self.target.model:
            return self.sc.model or self.target.model
        where = f"{self.shown_url}/v1/models"
        limit = min(DISCOVERY_TIMEOUT_S, self.remaining_s())
        try:
            async with asyncio.timeout(limit):
                status, data = await _get_bounded(client, "/v1/models", MAX_SIDE_BYTES)
        except TimeoutError:
            bound = (
                " (max_duration_s bounds the whole run, model discovery included)"
                if limit < DISCOVERY_TIMEOUT_S
                else ""
            )
            raise UsageError(f"{where}: no complete reply within {limit:.1f} s{bound}; give --model") from None
        except Exception as exc:  # noqa: BLE001 - any failure here means: no model name
            raise UsageError(f"could not learn the model name from {where} "
                             f"({self.scrub(f'{type(exc).__name__}: {exc}')[:200]}); give --model") from None  # fmt: skip
        try:
            if status != 200:
                raise ValueError(f"HTTP {status}")
            model = parse_json(data.decode("utf-8"), where, "reply", error=UsageError)["data"][0]["id"]
            if not isinstance(model, str) or not 0 < len(model) <= 512 or not model.isprintable():
                raise ValueError(f"model id {str(model)[:60]!r} is not a printable string of 1-512 characters")
        except Exception as exc:  # noqa: BLE001 - wrong shape, wrong types, not JSON, not UTF-8
            raise UsageError(f"could not learn the model name from {where} ({type(exc).__name__}: "
                             f"{str(exc)[:200]}); give --model") from None  # fmt: skip
        return model

    async def main(self) -> RunResult:
        sc = self.sc
        n = sc.bounds.max_requests
        url, key = self.target.base_url, self.target.api_key
        plain = url.startswith("http://")  # FastTransport speaks plain HTTP/1.1; https keeps httpx's own transport
        async with make_client(url, api_key=key, transport=FastTransport() if plain else None,
                               timeout=Timeouts(connect=10.0, read=sc.request_timeout_s)) as client, \
                make_client(url, api_key=key, transport=FastTransport() if plain else None,
                            timeout=SIDE_TIMEOUTS) as side:  # side requests: discovery and scrapes  # fmt: skip
            self.start_clock()  # the clients exist: from here on the server could stretch the run, so the bound runs
            model = await self.resolve_model(side)
            self.write(
                {
                    "type": "run",
                    "schema": 1,
                    "scenario": sc.model_dump(mode="json"),
                    "scenario_source": sc.source,
                    "target": self.shown_url,
                    "model": model,
                    "endpoint": sc.endpoint,
                    "engine": self.target.engine,  # None: not known (the report uses the default profile)
                    "engine_source": self.target.engine_source,
                    "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "pid": os.getpid(),
                    "clock": "time.monotonic_ns() - t0",
                    "python": sys.version.split()[0],
                }
            )
            self.header_written = True
            self.step = "scrape before"
            await self.scrape(side, "before")
            self.step = "warm-up"
            if sc.warmup.requests:
                for pr in iter_plan(sc.model_copy(update={"seed": sc.seed + 1000}), sc.warmup.requests):
                    if self.stop.is_set():
                        break
                    now = _now()
                    await self.until_deadline(self.one, client, pr, model, f"w{pr.index}", True, now, now)
            self.flush()
            self.step = "measured"
            self.measured_start = _now()
            cpu0 = time.process_time()
            wait0 = cpu_wait_s()  # this loop's thread: time it was runnable but not run is the client's own queueing
            deadline = self.deadline
            bg = [asyncio.create_task(self.flusher())]
            if sc.scrape_interval_s:
                bg.append(asyncio.create_task(self.scraper(side)))
            prog = _Progress(self, n) if self.progress_enabled else None
            if prog:
                bg.append(asyncio.create_task(prog.ticker()))
            if not self.stop.is_set():
                driver = asyncio.create_task(self.drive(client, iter_plan(sc), model, deadline))
                stopper = asyncio.create_task(self.stop.wait())
                done, _ = await asyncio.wait({driver, stopper}, timeout=self.remaining_s(),
                                             return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
                if driver not in done:
                    self.hit_bound()  # no-op when an abort already stopped the run
                self.stop.set()
                await _cancel_all([driver, *self.tasks])
                stopper.cancel()
                await asyncio.gather(stopper, return_exceptions=True)
            self.step = "closing"
            for t in bg:
                t.cancel()
            await asyncio.gather(*bg, return_exceptions=True)
            if prog:
                prog.close()
            end_ns = _now()
            cpu = time.process_time() - cpu0
            waited = since(wait0)
            self.flush()
            if self.cancelled:
                await asyncio.sleep(DISCONNECT_PAUSE_S)  # let the server notice disconnects before the final scrape
            await self.scrape(side, "after", closing=True)
            self.write({"type": "end", "stop_reason": self.stop_reason, "bound_step": self.bound_step, "abort": self.abort,
                        "measured_start_ns": self.measured_start - self.t0, "end_ns": end_ns - self.t0,
                        "client_cpu_s": round(cpu, 4),
                        "client_cpu_wait_s": None if waited is None else round(waited, 4),
                        "planned": n, "sent": self.sent, "not_sent": n - self.sent,
                        "written": self.n_written})  # fmt: skip
            self.fh.close()
        return RunResult(self.out_dir, self.out_dir / EVENTS_FILE, self.stop_reason, self.abort, self.n_written)

    async def drive(self, client, planned: Iterator[PlannedRequest], model: str, deadline: int) -> None:
        arr = self.sc.arrival
        if arr.kind == "concurrency":
            it = iter(planned)

            async def worker():
                for pr in it:
                    if self.stop.is_set() or _now() >= deadline:
                        return
                    now = _now()
                    await self.one(client, pr, model, pr.index, False, now, now)

            workers = [asyncio.create_task(worker()) for _ in range(arr.concurrency)]
            self.tasks.update(workers)
            await asyncio.gather(*workers)
            return
        sem = asyncio.Semaphore(arr.max_concurrency) if arr.max_concurrency else None
        window_s = (deadline - self.measured_start) / 1e9

        async def go(pr, scheduled):
            try:
                ready = _now()
                await self.one(client, pr, model, pr.index, False, scheduled, max(ready, scheduled))
            finally:
                if sem:
                    sem.release()

        pending = []
        for pr in planned:
            if (
                pr.offset_s >= window_s
            ):  # due after the deadline (compared as floats: a far offset never hits the clock)
                break
            due = self.measured_start + int(pr.offset_s * 1e9)
            delay = (due - _now()) / 1e9
            if delay > 0:
                try:
                    await asyncio.wait_for(self.stop.wait(), delay)
                except TimeoutError:
                    pass
            if self.stop.is_set() or due >= deadline:
                break
            if sem:
                await sem.acquire()
                if self.stop.is_set():
                    sem.release()
                    break
            t = asyncio.create_task(go(pr, due))
            self.tasks.add(t)
            t.add_done_callback(self.tasks.discard)
            pending.append(t)
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


async def _cancel_all(tasks: list[asyncio.Task]) -> None:
    """Cancel until every task is done: a cancel that lands as an await completes can be lost (asyncio.wait_for on
    3.11, or library code), and one lost cancel would let a request run on past the deadline."""
    pending = {t for t in tasks if not t.done()}
    while pending:
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.05)
    await asyncio.gather(*tasks, return_exceptions=True)


async def _get_bounded(client: httpx.AsyncClient, path: str, max_bytes: int) -> tuple[int, bytes]:
    """GET path: (status, body), refusing a body over max_bytes (a side request must not grow without bound)."""
    async with client.stream("GET", path) as r:
        data = bytearray()
        async for chunk in r.aiter_bytes():
            data += chunk
            if len(data) > max_bytes:
                raise ValueError(f"{path}: reply passed {max_bytes} bytes")
        return r.status_code, bytes(data)


class _Progress:
    """Live progress (rich), an observer: errors here never affect the run."""

    def __init__(self, run: _Run, total: int):
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.run = run
        self.p = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            transient=False,
        )
        self.task = self.p.add_task(run.sc.name, total=total, info="")
        self.p.start()

    async def ticker(self) -> None:
        last_b, last_t = 0, time.monotonic()
        while True:
            await asyncio.sleep(0.5)
            try:
                r = self.run
                now = time.monotonic()
                rate = (r.bytes - last_b) / max(now - last_t, 1e-9) / 1e6
                last_b, last_t = r.bytes, now
                info = f"ok {r.ok} failed {r.failed} cancelled {r.cancelled} in-flight {r.inflight} {rate:.2f} MB/s"
                self.p.update(self.task, completed=r.ok + r.failed + r.cancelled, info=info)
            except Exception:
                pass

    def close(self) -> None:
        try:
            r = self.run
            self.p.update(
                self.task,
                completed=r.ok + r.failed + r.cancelled,
                info=f"ok {r.ok} failed {r.failed} cancelled {r.cancelled} — {r.stop_reason}",
            )
            self.p.stop()
        except Exception:
            pass


def run_scenario(
    sc: Scenario,
    target: Target,
    out_dir: str | Path,
    *,
    progress: bool | None = None,
    flush_interval_s: float = 2.0,
    force: bool = False,
) -> RunResult:
    """Run one scenario against target (checked for loopback first) and write out_dir/events.jsonl. An existing
    result in out_dir is refused unless force; it is replaced only when the new run has a run header to record."""
    target.base_url = check_target(target.base_url, target.allow_remote)
    out = output_dir(out_dir, OUTPUT_NAMES, force=force)
    if progress is None:
        progress = sys.stderr.isatty()

    async def _go():
        run = _Run(sc, target, out, progress, flush_interval_s)  # opens the partial events file
        try:
            return await run.main()
        finally:
            if not run.fh.closed:
                run.flush()
                run.write(
                    {
                        "type": "end",
                        "stop_reason": "interrupted",
                        "bound_step": run.bound_step,
                        "abort": None,
                        "measured_start_ns": run.measured_start - run.t0 if run.measured_start else None,
                        "end_ns": _now() - run.t0,
                        "client_cpu_s": None,
                        "client_cpu_wait_s": None,
                        "planned": sc.bounds.max_requests,
                        "sent": run.sent,
                        "not_sent": sc.bounds.max_requests - run.sent,
                        "written": run.n_written,
                    }
                )
                run.fh.close()
            _publish(out, run.header_written)

    return asyncio.run(_go())


def _publish(out: Path, keep: bool) -> None:
    """Move the finished (or interrupted) events file into place; a run that never started leaves no trace."""
    partial = out / PARTIAL_FILE
    try:
        if keep:
            os.replace(partial, out / EVENTS_FILE)
        else:
            partial.unlink(missing_ok=True)
    except OSError as exc:
        raise OutputError(f"{out / EVENTS_FILE}: cannot write: {exc.strerror or exc}") from None
