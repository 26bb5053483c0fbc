"""The load runner: the only module of harness.load with clocks and sockets.

It sends the planned requests (asyncio + httpx over `FastTransport`), records raw facts per request and writes them to
`events.jsonl` (one JSON object per line, every request including failed, rejected and cancelled ones), scrapes
`/metrics` before, during and after the run into the same file, stops by itself at the scenario's bounds and aborts
early when an abort threshold trips. Everything derived (metrics, cross-check, reports) is computed later from the file.

All times are `time.monotonic_ns()` minus the run's t0 (integers, ns). Per request:
    scheduled_ns  when the request was due (open loop: t_measured + planned offset; closed loop: when its slot freed)
    ready_ns      when it could go (max of scheduled and a free slot under `max_concurrency`)
    sent_ns       just before the request is handed to httpx;  send lag = sent_ns - ready_ns
    headers_ns    response status line and headers parsed
    end_ns        body complete (or the moment it failed / was cancelled)
    ev_t          per SSE event: arrival of the socket read that completed it, relative to sent_ns
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from harness.client import bearer
from harness.errors import RefusedError, UsageError
from harness.load.scenario import PlannedRequest, Scenario, plan
from harness.load.sse import parse_stream
from harness.load.transport import FastTransport
from harness.manifest import is_loopback_host

__all__ = ["Target", "RunResult", "check_target", "run_scenario", "EVENTS_FILE"]

EVENTS_FILE = "events.jsonl"
SCRAPE_PREFIXES = ("vllm:", "tgi_", "# TYPE vllm:", "# TYPE tgi_")


def check_target(url: str, allow_remote: bool = False) -> str:
    """Validate the base URL on its parsed form (no DNS, no socket). Returns it without a trailing slash."""
    try:
        u = httpx.URL(url)
    except Exception as exc:
        raise UsageError(f"not a URL: {url!r} ({exc})") from None
    if u.scheme not in ("http", "https") or not u.host:
        raise UsageError(f"need an http(s)://host:port URL, got {url!r}")
    if not allow_remote and not is_loopback_host(u.host):
        raise RefusedError(
            f"refusing to send load to {u.host!r}: not a loopback address (127.0.0.0/8, ::1, localhost); "
            "pass --allow-remote to load a server you are entitled to load"
        )
    return str(u).rstrip("/")


@dataclass
class Target:
    base_url: str
    model: str | None = None
    api_key: str | None = None
    allow_remote: bool = False


@dataclass
class RunResult:
    out_dir: Path
    events_path: Path
    stop_reason: str  # max_requests | max_duration | abort | interrupted
    abort: dict | None
    n_requests: int


def _now() -> int:
    return time.monotonic_ns()


class _Run:
    def __init__(self, sc: Scenario, target: Target, out_dir: Path, progress: bool, flush_interval_s: float):
        self.sc, self.target, self.out_dir = sc, target, out_dir
        self.progress_enabled = progress
        self.flush_interval_s = flush_interval_s
        self.t0 = _now()
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
        self.fh = open(out_dir / EVENTS_FILE, "w", buffering=1 << 16)

    # ------------------------------------------------------------------ output
    def write(self, obj: dict) -> None:
        self.fh.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def flush(self) -> None:
        batch, self.finished = self.finished, []
        for rec, reads in batch:
            sent = rec["sent_ns"]
            if reads:
                ps = parse_stream(reads)
                rec["first_byte_ns"] = reads[0][0] - self.t0
                rec["reads"] = len(reads)
                rec["ev_t"] = [t - self.t0 - sent for t in ps.t]
                rec["ev_b"] = ps.nbytes
                rec["ev_k"] = ps.kinds
                rec["ev_c"] = ps.chars
                rec["usage"] = ps.usage
                rec["finish_reason"] = ps.finish_reason
                rec["done"] = ps.done
                if rec["outcome"] == "ok":
                    if ps.error:
                        rec["outcome"], rec["error"] = "stream_error", ps.error
                    elif not ps.done:
                        rec["outcome"], rec["error"] = "incomplete", "stream ended without [DONE]"
            self.write(rec)
            self.n_written += 1
        self.fh.flush()

    # ------------------------------------------------------------------ one request
    def body(self, pr: PlannedRequest, model: str) -> tuple[str, dict]:
        sc = self.sc
        b: dict = {"model": model, "max_tokens": pr.max_tokens, "stream": True,
                   "stream_options": {"include_usage": True}, "temperature": sc.temperature}
        if sc.ignore_eos:
            b["ignore_eos"] = True
        if sc.endpoint == "chat":
            b["messages"] = [{"role": "user", "content": pr.prompt}]
            return "/v1/chat/completions", b
        b["prompt"] = pr.prompt
        return "/v1/completions", b

    async def one(self, client: httpx.AsyncClient, pr: PlannedRequest, model: str, rid, warmup: bool,
                  scheduled_ns: int, ready_ns: int) -> None:
        path, body = self.body(pr, model)
        rec = {"type": "request", "id": rid, "warmup": warmup, "prompt_units": pr.prompt_units,
               "max_tokens": pr.max_tokens, "prefixed": pr.prefixed, "scheduled_ns": scheduled_ns - self.t0,
               "ready_ns": ready_ns - self.t0, "sent_ns": 0, "headers_ns": None, "end_ns": None, "status": None,
               "outcome": "ok", "error": None, "bytes": 0}
        reads: list[tuple[int, bytes]] = []
        self.inflight += 1
        sent = _now()
        rec["sent_ns"] = sent - self.t0
        try:
            async with client.stream("POST", path, json=body) as r:
                rec["headers_ns"] = _now() - self.t0
                rec["status"] = r.status_code
                if r.status_code != 200:
                    data = await r.aread()
                    rec["outcome"] = "rejected" if r.status_code in (429, 503) else "http_error"
                    rec["error"] = data[:500].decode(errors="replace")
                else:
                    append = reads.append
                    async for chunk in r.aiter_raw():
                        append((_now(), chunk))
        except asyncio.CancelledError:
            rec["outcome"] = "cancelled"
            rec["error"] = self.stop_reason if self.stop.is_set() else "cancelled"
        except httpx.TimeoutException as exc:
            rec["outcome"], rec["error"] = "timeout", f"{type(exc).__name__}: {exc}"
        except (httpx.HTTPError, OSError) as exc:
            rec["outcome"], rec["error"] = "transport_error", f"{type(exc).__name__}: {exc}"
        finally:
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
            why = {"rule": "max_consecutive_failures", "threshold": a.max_consecutive_failures,
                   "value": self.consecutive_failures,
                   "detail": f"{self.consecutive_failures} consecutive failed requests (threshold {a.max_consecutive_failures})"}
        elif a.max_error_rate and done >= a.min_requests and self.failed / done > a.max_error_rate:
            why = {"rule": "max_error_rate", "threshold": a.max_error_rate, "value": round(self.failed / done, 4),
                   "detail": f"error rate {self.failed}/{done} = {self.failed / done:.1%} > {a.max_error_rate:.1%}"}
        elif a.max_send_lag_ms and len(self.lags) >= 20:
            last = sorted(self.lags[-20:])
            med = (last[9] + last[10]) / 2 / 1e6
            if med > a.max_send_lag_ms:
                why = {"rule": "max_send_lag_ms", "threshold": a.max_send_lag_ms, "value": round(med, 3),
                       "detail": f"median send lag of the last 20 sends {med:.1f} ms > {a.max_send_lag_ms} ms: the client cannot keep up"}
        if why:
            self.abort = why
            self.stop_reason = "abort"
            self.stop.set()

    # ------------------------------------------------------------------ scrapes
    async def scrape(self, client: httpx.AsyncClient, phase: str) -> None:
        t = _now()
        rec = {"type": "scrape", "phase": phase, "t_ns": t - self.t0}
        try:
            r = await client.get("/metrics", timeout=5.0)
            rec["status"] = r.status_code
            if r.status_code == 200:
                rec["text"] = "\n".join(l for l in r.text.splitlines() if l.startswith(SCRAPE_PREFIXES))
        except (httpx.HTTPError, OSError) as exc:
            rec["status"], rec["error"] = None, f"{type(exc).__name__}: {exc}"
        rec["dur_ns"] = _now() - t
        self.write(rec)

    async def scraper(self, client: httpx.AsyncClient) -> None:
        while not self.stop.is_set():
            try:
                await asyncio.wait_for(self.stop.wait(), self.sc.scrape_interval_s)
            except asyncio.TimeoutError:
                await self.scrape(client, "during")

    async def flusher(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_s)
            self.flush()

    # ------------------------------------------------------------------ main
    async def resolve_model(self, client: httpx.AsyncClient) -> str:
        if self.sc.model or self.target.model:
            return self.sc.model or self.target.model
        try:
            r = await client.get("/v1/models", timeout=10.0)
            return r.json()["data"][0]["id"]
        except Exception as exc:
            raise UsageError(f"could not learn the model name from {self.target.base_url}/v1/models ({exc}); give --model") from None

    async def main(self) -> RunResult:
        sc = self.sc
        headers = bearer(self.target.api_key)
        timeout = httpx.Timeout(sc.request_timeout_s, connect=10.0)
        transport = FastTransport() if self.target.base_url.startswith("http://") else None
        kw = {"transport": transport} if transport else {}
        async with httpx.AsyncClient(base_url=self.target.base_url, headers=headers, timeout=timeout, trust_env=False, **kw) as client, \
                httpx.AsyncClient(base_url=self.target.base_url, headers=headers, trust_env=False) as side:
            model = await self.resolve_model(side)
            planned = plan(sc)
            self.write({"type": "run", "schema": 1, "scenario": sc.model_dump(mode="json"), "scenario_source": sc.source,
                        "target": self.target.base_url, "model": model, "endpoint": sc.endpoint,
                        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "pid": os.getpid(),
                        "clock": "time.monotonic_ns() - t0", "python": sys.version.split()[0]})
            await self.scrape(side, "before")
            cpu0 = time.process_time()
            warm = plan(sc.model_copy(update={"seed": sc.seed + 1000}), sc.warmup.requests) if sc.warmup.requests else []
            for pr in warm:
                now = _now()
                await self.one(client, pr, model, f"w{pr.index}", True, now, now)
            self.flush()
            self.measured_start = _now()
            deadline = self.measured_start + int(sc.bounds.max_duration_s * 1e9)
            bg = [asyncio.create_task(self.flusher())]
            if sc.scrape_interval_s:
                bg.append(asyncio.create_task(self.scraper(side)))
            prog = _Progress(self, len(planned)) if self.progress_enabled else None
            if prog:
                bg.append(asyncio.create_task(prog.ticker()))
            driver = asyncio.create_task(self.drive(client, planned, model, deadline))
            stopper = asyncio.create_task(self.stop.wait())
            remaining = max(deadline - _now(), 0) / 1e9
            done, _ = await asyncio.wait({driver, stopper}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            if driver not in done and not self.stop.is_set():
                self.stop_reason = "max_duration"
            self.stop.set()
            for t in list(self.tasks):
                t.cancel()
            driver.cancel()
            await asyncio.gather(driver, *self.tasks, return_exceptions=True)
            stopper.cancel()
            for t in bg:
                t.cancel()
            await asyncio.gather(*bg, stopper, return_exceptions=True)
            if prog:
                prog.close()
            end_ns = _now()
            cpu = time.process_time() - cpu0
            self.flush()
            if self.cancelled:
                await asyncio.sleep(1.0)  # let the server notice disconnects before the final scrape
            await self.scrape(side, "after")
            self.write({"type": "end", "stop_reason": self.stop_reason, "abort": self.abort,
                        "measured_start_ns": self.measured_start - self.t0, "end_ns": end_ns - self.t0,
                        "client_cpu_s": round(cpu, 4), "planned": len(planned), "written": self.n_written})
            self.fh.close()
        return RunResult(self.out_dir, self.out_dir / EVENTS_FILE, self.stop_reason, self.abort, self.n_written)

    async def drive(self, client, planned: list[PlannedRequest], model: str, deadline: int) -> None:
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

        async def go(pr, scheduled):
            try:
                ready = _now()
                await self.one(client, pr, model, pr.index, False, scheduled, max(ready, scheduled))
            finally:
                if sem:
                    sem.release()

        pending = []
        for pr in planned:
            due = self.measured_start + int(pr.offset_s * 1e9)
            delay = (due - _now()) / 1e9
            if delay > 0:
                try:
                    await asyncio.wait_for(self.stop.wait(), delay)
                except asyncio.TimeoutError:
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


class _Progress:
    """Live progress (rich), an observer: errors here never affect the run."""

    def __init__(self, run: _Run, total: int):
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.run = run
        self.p = Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                          TextColumn("{task.fields[info]}"), TimeElapsedColumn(), transient=False)
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
            self.p.update(self.task, completed=r.ok + r.failed + r.cancelled,
                          info=f"ok {r.ok} failed {r.failed} cancelled {r.cancelled} — {r.stop_reason}")
            self.p.stop()
        except Exception:
            pass


def run_scenario(sc: Scenario, target: Target, out_dir: str | Path, *, progress: bool | None = None,
                 flush_interval_s: float = 2.0) -> RunResult:
    """Run one scenario against target (checked for loopback first) and write out_dir/events.jsonl."""
    target.base_url = check_target(target.base_url, target.allow_remote)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if progress is None:
        progress = sys.stderr.isatty()

    async def _go():
        run = _Run(sc, target, out, progress, flush_interval_s)
        try:
            return await run.main()
        finally:
            if not run.fh.closed:
                run.flush()
                run.write({"type": "end", "stop_reason": "interrupted", "abort": None,
                           "measured_start_ns": run.measured_start - run.t0 if run.measured_start else None,
                           "end_ns": _now() - run.t0, "client_cpu_s": None, "written": run.n_written})
                run.fh.close()

    return asyncio.run(_go())
