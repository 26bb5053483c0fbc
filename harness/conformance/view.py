"""A `StreamView`: the chunk-level view of one streamed response, built from a live Trace or from a recorded file.

Recorded files may be raw SSE bytes as captured (framed: [DONE] and comments are visible), a JSON list of chunk
objects as TGI's tests store them (unframed: framing cases skip), or a saved Trace (`Trace.to_dict()` JSON).
Building a view never raises on garbage; unparseable data chunks stay in the view with their error. Reading a file
goes through the bounded readers: a file that is no stream at all (an error body, a corrupt trace, nesting too deep,
unreadable) is one DataError naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.client import Trace, TraceEvent
from harness.client.sse import BOM, parse_sse_bytes
from harness.errors import DataError
from harness.readers import parse_json, read_bytes

__all__ = ["Chunk", "StreamView", "from_trace", "from_chunks", "load_recorded", "choices", "guess_kind"]


@dataclass
class Chunk:
    n: int  # position among data chunks (0-based): the "chunk index" in evidence
    obj: Any  # parsed JSON (None when invalid)
    error: str | None = None  # why it could not be parsed
    raw_len: int = 0


@dataclass
class StreamView:
    chunks: list[Chunk]
    framed: bool  # True when SSE framing is known ([DONE], comments, trailing data)
    kinds: list[str] = field(default_factory=list)  # event kinds in wire order (framed only)
    content_type: str | None = None
    status: int | None = None
    request: dict | None = None  # the request body, when known (live); None for recordings
    ended: str = ""
    source: str = ""

    def objects(self) -> list[tuple[int, dict]]:
        return [(c.n, c.obj) for c in self.chunks if isinstance(c.obj, dict)]

    def stream_options(self) -> dict | None:
        if self.request is None:
            return None
        so = self.request.get("stream_options")
        return so if isinstance(so, dict) else {}


def choices(obj: Any) -> list[dict]:
    ch = obj.get("choices") if isinstance(obj, dict) else None
    return [c for c in ch if isinstance(c, dict)] if isinstance(ch, list) else []


def from_trace(trace: Trace) -> StreamView:
    chunks: list[Chunk] = []
    kinds: list[str] = []
    for ev in trace.events:
        kinds.append(ev.kind)
        if ev.kind in ("data", "truncated") and ev.data is not None:
            obj, err = ev.json()
            if ev.kind == "truncated":
                err = "truncated event (stream ended mid-event)" + (f"; {err}" if err else "")
            chunks.append(Chunk(len(chunks), obj if err is None else None, err, len(ev.raw)))
    req = trace.request_json if isinstance(trace.request_json, dict) else None
    return StreamView(chunks, True, kinds, trace.content_type, trace.status, req, trace.ended, trace.url)


def from_chunks(objs: list[Any], source: str = "") -> StreamView:
    return StreamView([Chunk(i, o) for i, o in enumerate(objs)], False, ["data"] * len(objs), source=source)


def _from_sse_bytes(blob: bytes, source: str) -> StreamView:
    t = Trace("GET", source, sse=True)
    t.events = [TraceEvent(0, e.kind, e.raw, e.data, e.oversized) for e in parse_sse_bytes(blob)]
    t.ended = "eof"
    t.events.append(TraceEvent(0, "eof"))
    v = from_trace(t)
    v.content_type = None  # unknown for a capture file
    return v


MAX_RECORDED_BYTES = 64 << 20  # a recorded stream is KBs; the cap keeps a wrong file from filling memory


def _is_response(doc: dict) -> bool:
    """A single non-stream completion response (what a request without stream=true returns)."""
    ch = doc.get("choices")
    return (doc.get("object") in ("chat.completion", "text_completion") and isinstance(ch, list)) or (
        isinstance(ch, list) and bool(ch) and all(isinstance(c, dict) and ("message" in c or "text" in c) for c in ch)
    )


def _from_trace_dict(doc: dict, p: Path) -> StreamView:
    try:
        trace = Trace.from_dict(doc)
        if not isinstance(trace.events, list) or not all(isinstance(e.kind, str) for e in trace.events):
            raise ValueError("events must be a list of events with a kind")
        return from_trace(trace)
    except Exception as exc:  # noqa: BLE001 - any shape error of a hostile file is one clear line
        raise DataError(f"{p}: a saved trace that cannot be read ({type(exc).__name__}: {str(exc)[:120]})") from None


def load_recorded(path: str | Path) -> StreamView | None:
    """Load a recorded stream. Returns None when the file is a single non-stream completion response; any other
    JSON object (an error body, a corrupt trace) is a DataError: nothing to check is not a pass."""
    p = Path(path)
    blob = read_bytes(p, "recorded stream", max_bytes=MAX_RECORDED_BYTES, error=DataError)
    if blob.startswith(BOM):  # a BOM is not content (and would hide the first chunk of an SSE capture)
        blob = blob[len(BOM) :]
    head = blob.lstrip()[:1]
    if head not in (b"[", b"{"):
        return _from_sse_bytes(blob, str(p))
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = blob[: exc.start].count(b"\n") + 1
        raise DataError(f"{p}: line {line}: a JSON stream file that is not UTF-8 text") from None
    doc = parse_json(text, p, "recorded stream", error=DataError)
    if isinstance(doc, list):
        return from_chunks(doc, str(p))
    if isinstance(doc, dict) and "events" in doc and "method" in doc:
        return _from_trace_dict(doc, p)
    if isinstance(doc, dict) and _is_response(doc):
        return None
    if isinstance(doc, dict) and "error" in doc:
        err = doc["error"]
        msg = err.get("message") if isinstance(err, dict) else err
        raise DataError(f"{p}: an error response, not a stream ({str(msg)[:120]!r}): nothing to check")
    raise DataError(f"{p}: a JSON {type(doc).__name__} that is neither a list of chunks, a saved trace nor a "
                    f"completion response: nothing to check")  # fmt: skip


def guess_kind(view: StreamView) -> str:
    for _, obj in view.objects():
        o = obj.get("object")
        if o == "text_completion":
            return "completions"
        if o == "chat.completion.chunk":
            return "chat"
        for c in choices(obj):
            if "delta" in c:
                return "chat"
            if "text" in c:
                return "completions"
    return "chat"
