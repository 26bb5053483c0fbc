"""A typed event stream (Responses, Messages): each SSE event's `event:` name and its JSON data, in order, with how the
stream ended. Built from a live Trace (or one replayed from evidence); never raises on garbage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.client import Trace
from harness.client.sse import parse_sse_bytes

__all__ = ["TypedEvent", "TypedStream", "typed_stream", "end_problem"]


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


def end_problem(s: TypedStream) -> tuple[str, str] | None:
    """(tag, what happened) when the stream did not end by the server closing it after its last event."""
    if s.ended == "timeout":
        return "stream-never-ended", s.error or "the stream did not end within the harness's bound"
    if s.ended == "limit":
        return "stream-over-limit", s.error or "the stream went past the harness's byte bound"
    if s.ended == "disconnect":
        return "stream-broken", s.error or "the connection broke before the stream ended"
    return None
