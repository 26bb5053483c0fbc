"""Server-sent events over raw bytes: the one SSE framer, incremental, and its post-hoc scan. Neither ever raises.

    parser = SSEParser()
    for event in parser.feed(chunk_bytes): ...
    for event in parser.close(): ...        # flushes an unterminated event as kind "truncated"
    for read_index, kind, data, nbytes in scan_reads([(t_ns, chunk_bytes), ...]): ...   # a finished body, at once

Event kinds, the one vocabulary of framed events (traces, conformance views and the load path all use these):
    data       one dispatched event with a data field
    done       its data is "[DONE]" (surrounding whitespace aside)
    comment    a ":" line (keep-alives included), its own event even inside an event, so keep-alives stay visible
    other      fields without data, e.g. a lone "event:", "id:" or "retry:" block, or unknown fields
    truncated  bytes left when the stream ended without the blank line that dispatches an event
Each `SSEEvent` keeps the exact bytes it was parsed from (`raw`), so a trace can be replayed byte for byte: the raw
bytes of the events, joined in order, are the stream (blank lines that dispatch nothing ride on the next event).
WHATWG rules: lines end at CRLF, LF or CR; one UTF-8 BOM at the very start of the stream is dropped (otherwise the first
field name would be "\\ufeffdata" and the first event lost; its bytes stay in the first event's `raw`); a field's value
loses one leading space; `retry` counts only when all ASCII digits, an `id` holding NUL is ignored. Data is decoded as
UTF-8 with replacement (`data`); its bytes stay in `data_bytes` for readers with a stricter rule. Lines longer than
`max_line` bytes are kept whole but the event is flagged `oversized=True` (the parser never drops data silently).

`scan_reads` frames a finished body post hoc (the load runner's path, off the per-chunk hot path) and stamps each event
with the index of the read that completed it: the read in whose `feed` the incremental parser emits it. It is the same
framer, specialised: a part between blank lines that is one `data: ` line with no other line (what engines send) is
taken as it is; every other part, and any stream holding a CR or starting with a BOM, goes through `SSEParser` itself.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from typing import Any

__all__ = ["SSEEvent", "SSEParser", "parse_sse_bytes", "scan_reads", "scan_columns", "decode_json", "data_kind", "EVENT_KINDS", "DATA",
           "DONE", "COMMENT", "OTHER", "TRUNCATED", "DONE_DATA", "BOM"]  # fmt: skip

DATA, DONE, COMMENT, OTHER, TRUNCATED = "data", "done", "comment", "other", "truncated"
EVENT_KINDS = (DATA, DONE, COMMENT, OTHER, TRUNCATED)
DONE_DATA = "[DONE]"
BOM = b"\xef\xbb\xbf"
MAX_JSON_DEPTH = 32  # a chunk is ~6 levels deep; the cap keeps a hostile payload out of every later step
_DONE_BYTES = DONE_DATA.encode()


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


@dataclass
class SSEEvent:
    kind: str  # one of EVENT_KINDS
    data: str | None  # joined data lines (comment text for comments)
    raw: bytes  # the bytes this event was parsed from
    event: str | None = None  # the "event:" field, if any
    id: str | None = None
    oversized: bool = False
    fields: dict[str, str] = field(default_factory=dict)  # unknown fields, last value wins
    retry: int | None = None  # the "retry:" field, when all ASCII digits
    data_bytes: bytes | None = None  # the data lines' bytes, joined by LF, before decoding

    def json(self) -> Any:
        """The data parsed as JSON, or None when it is not JSON (see `decode_json` for the reason)."""
        return decode_json(self.data)[0]


def data_kind(data: bytes) -> str:
    """ "done" for the data of a `[DONE]` event, else "data": the one rule, for the parser and the scan alike."""
    if _DONE_BYTES not in data:
        return DATA
    return DONE if data == _DONE_BYTES or _text(data).strip() == DONE_DATA else DATA


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


def _text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


class SSEParser:
    """Incremental WHATWG-style SSE parser over bytes. `feed` and `close` never raise."""

    def __init__(self, max_line: int = 1 << 20):
        self.max_line = max_line
        self._buf = bytearray()  # bytes not yet split into lines
        self._event_raw = bytearray()  # raw bytes of the event being built
        self._data: list[bytes] = []  # data values, decoded at dispatch (UTF-8 resynchronises at ASCII ":" and LF)
        self._event: str | None = None
        self._id: str | None = None
        self._retry: int | None = None
        self._fields: dict[str, str] = {}
        self._field_seen = False  # a field line since the last dispatch (an ignored id or retry too: "other")
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
            out.append(SSEEvent(TRUNCATED, f"parser error: {exc!r}", bytes(self._buf)))
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
            if self._field_seen or self._lead or self._event_raw.strip():
                out.append(self._event_of(TRUNCATED))
            self._reset()
        except Exception as exc:  # pragma: no cover
            out.append(SSEEvent(TRUNCATED, f"parser error: {exc!r}", b""))
        return out

    # -- internals ----------------------------------------------------------------------------------------------
    def _take_lead(self) -> bytes:
        lead, self._lead = self._lead, b""
        return lead

    def _reset(self) -> None:
        self._event_raw = bytearray()
        self._data = []
        self._event = None
        self._id = None
        self._retry = None
        self._fields = {}
        self._field_seen = False
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
        if line[:1] == b":":
            # A comment is its own event in the trace (keep-alives must be visible), even mid-event. It carries every
            # byte not yet handed out (blank lines before it, the first lines of an event it interrupts), so the raw
            # bytes of the events, joined in order, are always the stream itself.
            comment_raw = self._take_lead() + bytes(self._event_raw)
            self._event_raw = bytearray()
            out.append(SSEEvent(COMMENT, _text(line[1:]).lstrip(" "), comment_raw))
            return
        name_b, sep, value_b = line.partition(b":")
        if sep and value_b[:1] == b" ":
            value_b = value_b[1:]
        name = _text(name_b)
        self._field_seen = True
        if name == "data":
            self._data.append(value_b)
        elif name == "event":
            self._event = _text(value_b)
        elif name == "id":
            if b"\0" not in value_b:  # WHATWG: an id holding NUL is ignored
                self._id = _text(value_b)
        elif name == "retry":
            if value_b.isdigit():  # WHATWG: only ASCII digits set the reconnection time
                self._retry = int(value_b)
        else:
            self._fields[name] = _text(value_b)

    def _event_of(self, kind: str | None) -> SSEEvent:
        """The event being built; kind None: decided by its data (data or done)."""
        data_b = b"\n".join(self._data) if self._data else None
        if kind is None:
            kind = data_kind(data_b) if data_b is not None else OTHER
        return SSEEvent(kind, _text(data_b) if data_b is not None else None, self._take_lead() + bytes(self._event_raw),
                        self._event, self._id, self._oversized, dict(self._fields), self._retry, data_b)  # fmt: skip

    def _dispatch(self, out: list[SSEEvent]) -> None:
        if not self._field_seen:
            # A blank line with nothing pending: keep its bytes on the next event, no event emitted.
            return
        out.append(self._event_of(None))
        self._reset()


def parse_sse_bytes(blob: bytes, max_line: int = 1 << 20) -> list[SSEEvent]:
    """Parse a whole captured stream (e.g. a file). Never raises."""
    p = SSEParser(max_line=max_line)
    return p.feed(blob) + p.close()


_Columns = tuple[list[int], list[str], list[Any], list[int]]


def scan_reads(reads: Sequence[tuple[Any, bytes]]) -> list[tuple[int, str, bytes | None, int]]:
    """Frame a finished body given as its reads: per event (index of the read that completed it, kind, data bytes or
    None, length of its raw bytes). Exactly the events `SSEParser` emits when fed the reads one by one (events of
    `close()` carry the last read's index). Never raises."""
    return list(zip(*scan_columns(reads)))


def scan_columns(reads: Sequence[tuple[Any, bytes]]) -> _Columns:
    """`scan_reads` by column: (read indices, kinds, data bytes, raw lengths), one entry per event in each; the load
    path's form (no tuple per event)."""
    if not reads:
        return [], [], [], []
    body = b"".join(d for _, d in reads)
    if b"\r" in body or body[:1] == BOM[:1]:  # CR line ends, or a possible BOM: the parser itself, read by read
        return _columns(_scan_incremental(reads))
    ends = list(accumulate(len(d) for _, d in reads))
    if body.startswith(b"data: ") and body.endswith(b"\n\n"):  # what engines send: one data line per event?
        datas = body[6:-2].split(b"\n\ndata: ")
        if body.count(b"\n") == 2 * len(datas):  # yes: no LF but the blank-line pairs, each followed by "data: "
            return _scan_data_lines(body, datas, ends)
    parts = body.split(b"\n\n")
    tail = parts.pop()  # after the last blank line: an unterminated event, or b""
    out: list[tuple[int, str, bytes | None, int]] = []
    pos = handed = ri = 0  # start of the current part; end of the last event's raw bytes; read index
    for part in parts:
        end = pos + len(part) + 2  # the second LF dispatches: byte end - 1
        if part[:6] == b"data: " and b"\n" not in part:  # one data line and nothing else: no parser needed
            while ends[ri] < end:
                ri += 1
            data = part[6:]
            out.append((ri, data_kind(data), data, end - handed))
            handed = end
        else:
            handed, ri = _scan_part(part + b"\n\n", pos, handed, ri, ends, out, close=False)
        pos = end
    if tail:
        _scan_part(tail, pos, handed, ri, ends, out, close=True)
    return _columns(out)


def _columns(events: list[tuple[int, str, bytes | None, int]]) -> _Columns:
    if not events:
        return [], [], [], []
    ris, kinds, datas, sizes = map(list, zip(*events))
    return ris, kinds, datas, sizes


def _scan_data_lines(body: bytes, datas: list[bytes], ends: list[int]) -> _Columns:
    """The body is `data: <datas[i]>` lines, each followed by a blank line: every one is a data event (or done), its
    raw bytes the line and the blank line."""
    sizes = list(map((8).__add__, map(len, datas)))
    offsets = list(accumulate(sizes))  # where each event's raw bytes end
    if 4 * len(ends) < len(offsets):  # far fewer reads than events: count the events each read completes
        reads, done = [], 0
        for i, end in enumerate(ends):
            upto = bisect_right(offsets, end)  # events whose dispatching LF (byte end - 1) is in reads 0..i
            reads += [i] * (upto - done)
            done = upto
    else:  # the read holding each event's dispatching LF
        reads = list(map(bisect_left, repeat(ends, len(offsets)), offsets))
    kinds = [DATA] * len(datas)
    at = body.find(_DONE_BYTES)
    while at >= 0:  # only an event holding [DONE] can be a done event
        i = bisect_right(offsets, at)
        kinds[i] = data_kind(datas[i])
        at = body.find(_DONE_BYTES, at + 1)
    return reads, kinds, datas, sizes


def _scan_part(blob: bytes, pos: int, handed: int, ri: int, ends: list[int],
               out: list[tuple[int, str, bytes | None, int]], close: bool) -> tuple[int, int]:  # fmt: skip
    """The parser's events for one part of an LF-only body starting at offset `pos` (the parser's state there is
    the state after a dispatch: only unclaimed blank-line bytes, counted from `handed`). Returns (handed, ri)."""
    p = SSEParser()
    p._at_start = False  # mid-stream: a BOM here is content
    offset = pos
    for ev in p.feed(blob):
        offset += len(ev.raw)
        while ends[ri] < offset:
            ri += 1
        out.append((ri, ev.kind, ev.data_bytes, offset - handed))
        handed = offset
    for ev in p.close() if close else ():
        offset += len(ev.raw)
        out.append((len(ends) - 1, ev.kind, ev.data_bytes, offset - handed))
        handed = offset
    return handed, ri


def _scan_incremental(reads: Sequence[tuple[Any, bytes]]) -> list[tuple[int, str, bytes | None, int]]:
    p = SSEParser()
    out: list[tuple[int, str, bytes | None, int]] = []
    for i, (_, d) in enumerate(reads):
        out += [(i, ev.kind, ev.data_bytes, len(ev.raw)) for ev in p.feed(d)]
    out += [(len(reads) - 1, ev.kind, ev.data_bytes, len(ev.raw)) for ev in p.close()]
    return out
