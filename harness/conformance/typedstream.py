"""A typed event stream (Responses, Messages): each SSE event's `event:` name and its JSON data, in order, with how the
stream ended. Built from a live Trace (or one replayed from evidence); never raises on garbage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.client import Trace
from harness.client.sse import parse_sse_bytes
from harness.conformance.apischema import MAX_NODES, MAX_STREAM_NODES, json_size
from harness.conformance.model import Check, Deviations, failed

__all__ = ["TypedEvent", "TypedStream", "typed_stream", "end_problem", "is_error_event", "add_error_events",
           "too_large_for_sdk"]  # fmt: skip


@dataclass
class TypedEvent:
    n: int  # position among the stream's data events (0-based): the evidence's chunk index
    name: str | None  # the SSE `event:` field
    obj: Any  # the parsed data (None when it is not JSON)
    error: str | None = None

    @property
    def type(self) -> str:
        t = self.obj.get("type") if isinstance(self.obj, dict) else None
        return t if isinstance(t, str) else ""


@dataclass
class TypedStream:
    events: list[TypedEvent] = field(default_factory=list)
    done_markers: list[int] = field(default_factory=list)  # positions of `data: [DONE]` (no such thing in these APIs)
    ended: str = ""  # the trace's end: eof | disconnect | timeout | limit | cancel | error
    error: str = ""
    content_type: str = ""


def typed_stream(trace: Trace) -> TypedStream:
    out = TypedStream(ended=trace.ended, error=trace.error or "", content_type=trace.content_type)
    n = 0
    for ev in parse_sse_bytes(trace.body):
        if ev.kind == "done":
            out.done_markers.append(n)
        elif ev.kind == "data":
            obj = ev.json()
            out.events.append(TypedEvent(n, ev.event, obj, None if obj is not None else "not JSON"))
            n += 1
    return out


def is_error_event(e: TypedEvent) -> bool:
    """An event that says the answer failed, as the SDKs read one: `event: error`, data of type error, or data with an
    `error` (the OpenAI SDK raises on that)."""
    return e.name == "error" or e.type == "error" or (isinstance(e.obj, dict) and bool(e.obj.get("error")))


def add_error_events(s: TypedStream, dev: Deviations) -> None:
    """Every error event as the `error-event` tag (chat's no-error-event's tag): every stream case adds it, so no
    case passes a stream whose server said it failed, whatever else the case judges."""
    for e in s.events:
        if is_error_event(e):
            dev.add("error-event", "no error event for a valid request", e.obj, e.n)


def too_large_for_sdk(create: Trace, stream: Trace) -> Check | None:
    """A fail when the server's answer (`create`) or stream (`stream`) to the request an SDK case sends holds more JSON
    values than a schema judge validates: an SDK reads them inside the event loop (up to ~1 ms a value, the OpenAI
    SDK's stream accumulator), where no deadline reaches it, so it is not run against such a server."""
    doc, _ = create.body_json()
    big = ["the answer"] if json_size(doc, MAX_NODES) > MAX_NODES else []
    left = MAX_STREAM_NODES
    for e in typed_stream(stream).events:
        left -= json_size(e.obj, left)
        if left < 0:
            big.append("the stream")
            break
    if not big:
        return None
    return failed("sdk-answer-too-large", f"at most {MAX_NODES} JSON values in an answer, {MAX_STREAM_NODES} in a "
                  "stream (the harness's bound)", f"more in {' and '.join(big)}",
                  note="the SDK was not run: it would read them beyond the case's deadline")  # fmt: skip


def end_problem(s: TypedStream) -> tuple[str, str] | None:
    """(tag, what happened) when the stream did not end by the server closing it after its last event."""
    if s.ended == "timeout":
        return "stream-never-ended", s.error or "the stream did not end within the harness's bound"
    if s.ended == "limit":
        return "stream-over-limit", s.error or "the stream went past the harness's byte bound"
    if s.ended == "disconnect":
        return "stream-broken", s.error or "the connection broke before the stream ended"
    return None
