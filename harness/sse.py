"""Server-sent events over raw bytes: an incremental parser that never raises.

    parser = SSEParser()
    for event in parser.feed(chunk_bytes): ...
    for event in parser.close(): ...        # flushes an unterminated event as kind "truncated"

Each `SSEEvent` keeps the exact bytes it was parsed from (`raw`), so a trace can be replayed byte for byte.
Kinds: "data" (one dispatched event with a data field), "done" (data == "[DONE]"), "comment" (a ":" line,
keep-alives included), "other" (fields without data, e.g. a lone "event:" or "id:" block, or unknown fields),
"truncated" (bytes left when the stream ended without the blank line that dispatches an event).
Lines are split on CRLF, LF or CR (WHATWG rules); one UTF-8 BOM at the very start of the stream is dropped (WHATWG
again: otherwise the first field name would be "\ufeffdata" and the first event lost; its bytes stay in the first
event's `raw`); bytes are decoded as UTF-8 with
replacement. Lines longer than
`max_line` bytes are kept whole but the event is flagged `oversized=True` (the parser never drops data silently).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SSEEvent", "SSEParser", "parse_sse_bytes", "decode_json"]

DONE = "[DONE]"
BOM = b"\xef\xbb\xbf"
MAX_JSON_DEPTH = 32  # a chunk is ~6 levels deep; the cap keeps a hostile payload out of every later step


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


@dataclass
class SSEEvent:
    kind: str  # data | done | comment | other | truncated
    data: str | None  # joined data lines (comment text for comments)
    raw: bytes  # the bytes this event was parsed from
    event: str | None = None  # the "event:" field, if any
    id: str | None = None
    oversized: bool = False
    fields: dict[str, str] = field(default_factory=dict)  # unknown fields, last value wins

    def json(self) -> Any:
        """The data parsed as JSON, or None when it is not JSON (see `decode_json` for the reason)."""
        return decode_json(self.data)[0]


def decode_json(text: str | None) -> tuple[Any, str | None]:
    """(value, error). Never raises; error is a short message when the text is not JSON (NaN/Infinity are not JSON,
    and nesting deeper than MAX_JSON_DEPTH is refused, so no later step can recurse on it)."""
    from harness.readers import check_depth

    if text is None:
        return None, "no data"
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, TypeError, RecursionError) as exc:
        return None, f"invalid JSON: {type(exc).__name__}: {str(exc)[:120]}"
    if check_depth(value, MAX_JSON_DEPTH) is not None:
        return None, f"invalid JSON: nested deeper than {MAX_JSON_DEPTH} levels"
    return value, None


class SSEParser:
    """Incremental WHATWG-style SSE parser over bytes. `feed` and `close` never raise."""

    def __init__(self, max_line: int = 1 << 20):
        self.max_line = max_line
        self._buf = bytearray()  # bytes not yet split into lines
        self._event_raw = bytearray()  # raw bytes of the event being built
        self._data: list[str] = []
        self._has_data = False
        self._event: str | None = None
        self._id: str | None = None
        self._fields: dict[str, str] = {}
        self._oversized = False
        self._pending_cr = False  # a CR ended the previous feed; a following LF belongs to it
        self._at_start = True  # no byte seen yet: a leading BOM is not content
        self._head = bytearray()  # the first bytes, while they could still be a BOM
        self._lead = b""  # a BOM read but not yet handed out in an event's raw bytes

    # -- public -------------------------------------------------------------------------------------------------
    def feed(self, chunk: bytes) -> list[SSEEvent]:
        out: list[SSEEvent] = []
        try:
            if not chunk:
                return out
            data = bytes(chunk)
            if self._at_start:
                data = bytes(self._head) + data
                if len(data) < len(BOM) and BOM.startswith(data):  # a BOM may arrive split across reads
                    self._head = bytearray(data)
                    return out
                self._at_start, self._head = False, bytearray()
                if data.startswith(BOM):  # not content, but kept in the first event's raw bytes for replay
                    self._lead = BOM
                    data = data[len(BOM) :]
            if self._pending_cr:
                self._pending_cr = False
                if data[:1] == b"\n":
                    self._event_raw += b"\n"
                    data = data[1:]
            self._buf += data
            self._split(out)
        except Exception as exc:  # pragma: no cover - defensive: the parser must never raise
            out.append(SSEEvent("truncated", f"parser error: {exc!r}", bytes(self._buf)))
            self._buf.clear()
        return out

    def close(self) -> list[SSEEvent]:
        out: list[SSEEvent] = []
        try:
            if self._head:  # a stream of one or two bytes that began like a BOM: they are content
                self._buf += self._head
                self._head = bytearray()
            if self._buf:
                self._line(bytes(self._buf), bytes(self._buf), out)
                self._buf.clear()
            pending = self._has_data or self._event is not None or self._id is not None or self._fields
            if pending or self._lead or self._event_raw.strip():
                out.append(
                    SSEEvent(
                        "truncated",
                        "\n".join(self._data) if self._has_data else None,
                        self._take_lead() + bytes(self._event_raw),
                        self._event,
                        self._id,
                        self._oversized,
                        dict(self._fields),
                    )
                )
            self._reset()
        except Exception as exc:  # pragma: no cover
            out.append(SSEEvent("truncated", f"parser error: {exc!r}", b""))
        return out

    # -- internals ----------------------------------------------------------------------------------------------
    def _take_lead(self) -> bytes:
        lead, self._lead = self._lead, b""
        return lead

    def _reset(self) -> None:
        self._event_raw = bytearray()
        self._data = []
        self._has_data = False
        self._event = None
        self._id = None
        self._fields = {}
        self._oversized = False

    def _split(self, out: list[SSEEvent]) -> None:
        buf = self._buf
        start = 0
        n = len(buf)
        cr = buf.find(b"\r")
        while start < n:
            lf = buf.find(b"\n", start)
            if 0 <= cr < start:
                cr = buf.find(b"\r", start)
            if lf < 0 and cr < 0:
                break
            if cr >= 0 and (lf < 0 or cr < lf):
                end = cr
                if cr + 1 < n:
                    term_end = cr + 2 if buf[cr + 1 : cr + 2] == b"\n" else cr + 1
                else:  # CR at the end of what we have: a following LF may complete CRLF
                    term_end = cr + 1
                    self._pending_cr = True
            else:
                end = lf
                term_end = lf + 1
            self._line(bytes(buf[start:end]), bytes(buf[start:term_end]), out)
            start = term_end
        del buf[:start]
        if len(buf) > self.max_line:
            self._oversized = True

    def _line(self, line: bytes, raw: bytes, out: list[SSEEvent]) -> None:
        self._event_raw += raw
        if len(line) > self.max_line:
            self._oversized = True
        if not line:
            self._dispatch(out)
            return
        text = line.decode("utf-8", errors="replace")
        if text.startswith(":"):
            # A comment is its own event in the trace (keep-alives must be visible), even mid-event. It carries every
            # byte not yet handed out (blank lines before it, the first lines of an event it interrupts), so the raw
            # bytes of the events, joined in order, are always the stream itself.
            comment_raw = self._take_lead() + bytes(self._event_raw)
            self._event_raw = bytearray()
            out.append(SSEEvent("comment", text[1:].lstrip(" "), comment_raw))
            return
        name, sep, value = text.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "event":
            self._event = value
        elif name == "id":
            self._id = value
        else:
            self._fields[name] = value

    def _dispatch(self, out: list[SSEEvent]) -> None:
        if self._has_data:
            data = "\n".join(self._data)
            kind = "done" if data.strip() == DONE else "data"
        elif self._event is not None or self._id is not None or self._fields:
            data, kind = None, "other"
        else:
            # A blank line with nothing pending: keep its bytes on the next event, no event emitted.
            return
        out.append(
            SSEEvent(kind, data, self._take_lead() + bytes(self._event_raw), self._event, self._id, self._oversized,
                     dict(self._fields))
        )
        self._reset()


def parse_sse_bytes(blob: bytes, max_line: int = 1 << 20) -> list[SSEEvent]:
    """Parse a whole captured stream (e.g. a file). Never raises."""
    p = SSEParser(max_line=max_line)
    return p.feed(blob) + p.close()
