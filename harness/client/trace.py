"""The trace client: every HTTP exchange with an engine becomes a `Trace` of raw, timestamped events.

    async with make_client(base_url, api_key=key) as client:       # harness.client.http: the one client factory
        trace = await record(client, "POST", "/v1/chat/completions", json=body)
        trace = await record(client, "POST", path, json=body, stop_after=lambda t: len(t.data_events()) >= 3)

A trace stores only raw facts: status, headers, the response bytes, and for SSE each event (data, [DONE], comments /
keep-alives, data after [DONE], a truncated tail) with `time.monotonic_ns()` and its exact bytes, plus how the exchange
ended: "eof" (server closed), "cancel" (we disconnected on purpose), "disconnect" (transport error mid-body),
"error" (no response at all), "limit" (we stopped reading at `max_bytes`) or "timeout" (the whole exchange took longer
than `max_duration_s`; per-read timeouts alone never end a server that drips a byte a second).
Nothing here judges the engine; checks are pure functions over traces.
Transport failures never raise out of `record`: they are recorded in `trace.error`.
"""

from __future__ import annotations

import asyncio
import base64
import json as jsonlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from harness.client.http import Timeouts, as_httpx_timeout, failure_kind
from harness.client.sse import SSEParser, decode_json

__all__ = ["TraceEvent", "Trace", "record", "DEFAULT_TIMEOUT", "MAX_BODY"]

DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=5.0)
MAX_BODY = 64 << 20  # stop reading past this many bytes (an endless stream must not grow memory without end)


@dataclass
class TraceEvent:
    t_ns: int
    kind: str  # data | done | comment | other | truncated | eof | cancel | disconnect | limit | timeout
    raw: bytes = b""
    data: str | None = None
    oversized: bool = False

    def json(self) -> tuple[Any, str | None]:
        return decode_json(self.data)


@dataclass
class Trace:
    method: str
    url: str
    request_json: Any = None
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    events: list[TraceEvent] = field(default_factory=list)
    t_start_ns: int = 0
    t_headers_ns: int | None = None
    t_end_ns: int | None = None
    error: str | None = None  # transport error (no response, or the body broke off)
    failure: str = ""  # its kind (harness.client.http.failure_kind): unsent | connect | timeout | protocol | other
    ended: str = ""  # eof | cancel | disconnect | error | limit | timeout
    sse: bool = False
    retried: str = ""  # the error of a first attempt that a caller retried (a pooled connection the server had closed)

    # -- raw views -------------------------------------------------------------------------------------------
    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    def data_events(self) -> list[TraceEvent]:
        return [e for e in self.events if e.kind == "data"]

    def body_json(self) -> tuple[Any, str | None]:
        return decode_json(self.body.decode("utf-8", errors="replace") if self.body else None)

    # -- persistence -----------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = asdict(self)
        d["body"] = base64.b64encode(self.body).decode()
        d["events"] = [{**asdict(e), "raw": base64.b64encode(e.raw).decode()} for e in self.events]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Trace:
        d = dict(d)
        d["body"] = base64.b64decode(d.get("body", ""))
        d["events"] = [TraceEvent(**{**e, "raw": base64.b64decode(e.get("raw", ""))}) for e in d.get("events", [])]
        return cls(**d)


async def _raw_chunks(response: httpx.Response):
    """The body as it arrives. A response built from bytes (a mock) is already in memory: yield it at once."""
    if getattr(response, "_content", None) is not None:
        yield response.content
        return
    async for chunk in response.aiter_raw():
        yield chunk


async def record(
    client: httpx.AsyncClient,
    method: str,
    path: str,
    *,
    json: Any = None,
    content: bytes | None = None,
    headers: dict[str, str] | None = None,
    sse: bool | None = None,
    stop_after: Callable[[Trace], bool] | None = None,
    timeout: Timeouts | httpx.Timeout | float | None = None,
    max_bytes: int = MAX_BODY,
    max_duration_s: float | None = None,
) -> Trace:
    """Send one request and record everything that comes back. Never raises for transport problems.

    sse: parse the body as SSE (default: when the response says text/event-stream or the JSON body asks stream=true).
    stop_after: called once the headers arrived and after each batch of events; when it returns True we disconnect
    (trace.ended = "cancel"); `lambda t: True` leaves before the first byte of the body.
    max_bytes: read at most this many body bytes, then disconnect (trace.ended = "limit").
    max_duration_s: a wall-clock bound on the whole exchange, headers included (trace.ended = "timeout").
    """
    trace = Trace(method=method, url=str(path), request_json=json, t_start_ns=time.monotonic_ns())
    kwargs: dict[str, Any] = {"headers": headers}
    if content is not None:
        kwargs["content"] = content
    elif json is not None:
        kwargs["content"] = jsonlib.dumps(json).encode()
        kwargs["headers"] = {"Content-Type": "application/json", **(headers or {})}
    if timeout is not None:
        kwargs["timeout"] = as_httpx_timeout(timeout)
    exchange = _exchange(client, trace, method, path, kwargs, sse, stop_after, max_bytes)
    if max_duration_s is None:
        await exchange
    else:
        try:
            await asyncio.wait_for(exchange, timeout=max_duration_s)
        except TimeoutError:
            # The exchange was cancelled inside; what arrived so far stays in the trace.
            trace.error = f"BoundExceeded: the exchange did not end within {max_duration_s:g}s"
            trace.ended = "timeout"
            trace.events.append(TraceEvent(time.monotonic_ns(), "timeout"))
            trace.t_end_ns = time.monotonic_ns()
    return trace


async def _exchange(client: httpx.AsyncClient, trace: Trace, method: str, path: str, kwargs: dict[str, Any],
                    sse: bool | None, stop_after: Callable[[Trace], bool] | None, max_bytes: int) -> None:  # fmt: skip
    """Fill `trace` in place, so a caller that cancels this (a time bound) keeps what had arrived."""
    json = trace.request_json
    try:
        request = client.build_request(method, path, **kwargs)
        trace.url = str(request.url)
        response = await client.send(request, stream=True)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:  # InvalidURL: a path made of a server's text (a response id)
        trace.error, trace.ended, trace.t_end_ns = f"{type(exc).__name__}: {exc}", "error", time.monotonic_ns()
        trace.failure = failure_kind(exc)
        return
    trace.t_headers_ns = time.monotonic_ns()
    trace.status = response.status_code
    trace.headers = {k.lower(): v for k, v in response.headers.items()}
    wants_stream = isinstance(json, dict) and json.get("stream") is True
    trace.sse = sse if sse is not None else ("text/event-stream" in trace.content_type or wants_stream)
    parser = SSEParser() if trace.sse else None
    body = bytearray()
    try:
        if stop_after is not None and stop_after(trace):  # e.g. leave before the first token
            trace.ended = "cancel"
            trace.events.append(TraceEvent(time.monotonic_ns(), "cancel"))
            trace.t_end_ns = time.monotonic_ns()
            return
        try:
            async for chunk in _raw_chunks(response):
                now = time.monotonic_ns()
                over = len(body) + len(chunk) > max_bytes
                chunk = chunk[: max_bytes - len(body)]
                body += chunk
                if parser is not None:
                    for ev in parser.feed(chunk):
                        trace.events.append(TraceEvent(now, ev.kind, ev.raw, ev.data, ev.oversized))
                if over:
                    trace.error, trace.ended = f"BoundExceeded: the body went past {max_bytes} bytes", "limit"
                    break
                if parser is not None and stop_after is not None and stop_after(trace):
                    trace.ended = "cancel"
                    trace.events.append(TraceEvent(time.monotonic_ns(), "cancel"))
                    break
            else:
                trace.ended = "eof"
        except httpx.HTTPError as exc:
            trace.error, trace.ended = f"{type(exc).__name__}: {exc}", "disconnect"
            trace.failure = failure_kind(exc)
        finally:
            trace.body = bytes(body)  # also when a time bound cancels the read
        if parser is not None and trace.ended != "cancel":
            now = time.monotonic_ns()
            for ev in parser.close():
                trace.events.append(TraceEvent(now, ev.kind, ev.raw, ev.data, ev.oversized))
        if trace.ended in ("eof", "disconnect", "limit"):
            trace.events.append(TraceEvent(time.monotonic_ns(), trace.ended))
    finally:
        try:
            await response.aclose()
        except Exception:  # closing a broken connection must not hide the trace
            pass
    trace.t_end_ns = time.monotonic_ns()
