"""Turn a recorded response body (socket reads with arrival times) into per-event records. Pure; no clocks.

The runner keeps `(t_ns, bytes)` per socket read and calls `parse_stream` only after the request has finished, off the
per-chunk hot path. An SSE event is stamped with the arrival time of the read that *completed* it (`\\n\\n` seen), the
earliest moment a client could have acted on it.

Event kinds (one letter each, stored as a string in events.jsonl):
    r  role-only delta (vLLM's first chat chunk: role set, no text, no tool call)
    c  carries output: non-empty `content`/`text`, `reasoning_content`, or a tool-call fragment
    e  a choice chunk without output (empty delta text, e.g. vLLM holding back incomplete UTF-8; a bare finish chunk)
    u  `choices: []` (the usage chunk)
    x  an in-stream error object `{"error": ...}` (vLLM sends these with HTTP 200)
    d  `[DONE]`
    ?  not JSON / unrecognised
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

__all__ = ["ParsedStream", "parse_stream", "OUTPUT_KINDS"]

OUTPUT_KINDS = frozenset("ce")  # chunks that carry one engine output step (a token, possibly with held-back text)


@dataclass
class ParsedStream:
    t: list[int] = field(default_factory=list)  # arrival ns per event (same clock as the reads)
    nbytes: list[int] = field(default_factory=list)
    kinds: str = ""
    chars: list[int] = field(default_factory=list)  # output characters in the event
    usage: dict | None = None
    finish_reason: str | None = None
    error: str | None = None
    done: bool = False


def _classify(obj: dict, out: ParsedStream) -> tuple[str, int]:
    if "error" in obj and "choices" not in obj:
        err = obj["error"]
        out.error = json.dumps(err)[:500] if not isinstance(err, str) else err[:500]
        return "x", 0
    choices = obj.get("choices")
    if obj.get("usage"):
        out.usage = obj["usage"]
    if not choices:
        return ("u" if choices == [] or obj.get("usage") else "?"), 0
    kind, nchars = "e", 0
    role_only = False
    for ch in choices:
        if ch.get("finish_reason"):
            out.finish_reason = ch["finish_reason"]
        delta = ch.get("delta")
        if delta is None:  # completions
            txt = ch.get("text") or ""
        else:
            txt = (delta.get("content") or "") + (delta.get("reasoning_content") or delta.get("reasoning") or "")
            if delta.get("tool_calls"):
                kind = "c"
                for tc in delta["tool_calls"]:
                    fn = tc.get("function") or {}
                    nchars += len(fn.get("arguments") or "") + len(fn.get("name") or "")
            if delta.get("role") and not txt and not delta.get("tool_calls"):
                role_only = True
        if txt:
            kind = "c"
            nchars += len(txt)
    if role_only and kind != "c" and not any(ch.get("finish_reason") for ch in choices):
        return "r", 0
    return kind, nchars


def _fast(p: bytes, out: ParsedStream) -> tuple[str, int] | None:
    """Classify a compact (no-space) single-choice OpenAI chunk from its bytes; None = let json decide.
    Inside a JSON string a quote is always escaped, so an unescaped `"content":"` can only be the key."""
    if b'"choices":[{' not in p or b'"error"' in p or b'"usage":{' in p or b"tool_calls" in p or b'"reasoning' in p:
        return None
    if p.count(b'"index":') != 1:
        return None
    f = p.find(b'"finish_reason":"')
    if f >= 0:
        out.finish_reason = p[f + 17 : p.index(b'"', f + 17)].decode()
    i = p.find(b'"content":"')
    j = i + 11
    if i < 0:
        i = p.find(b'"text":"')
        j = i + 8
    if i < 0:
        txt = b""
        if b'"content":' not in p and b'"text":' not in p and b'"role":' not in p and f < 0:
            return None
    else:
        k = p.index(b'"', j)
        txt = p[j:k]
        if b"\\" in txt:
            return None
    if txt:
        t = txt.decode()
        return "c", len(t)
    if b'"role":' in p and f < 0:
        return "r", 0
    return "e", 0


def parse_stream(reads: list[tuple[int, bytes]]) -> ParsedStream:
    """Split into SSE events (each stamped with the read that completed it) and classify them."""
    out = ParsedStream()
    body = b"".join(d for _, d in reads)
    if b"\r\n" in body:
        body = body.replace(b"\r\n", b"\n")
        ends, acc = [], 0
        for _, d in reads:  # offsets in the normalised body: count CRLF pairs per read (approximate at a split CRLF)
            acc += len(d) - d.count(b"\r\n")
            ends.append(acc)
    else:
        ends, acc = [], 0
        for _, d in reads:
            acc += len(d)
            ends.append(acc)
    times = [t for t, _ in reads]
    kinds, t_out, b_out, c_out = [], out.t, out.nbytes, out.chars
    parts = body.split(b"\n\n")
    parts.pop()  # the remainder after the last complete event (b"" for a complete stream)
    pos, ri, nreads = 0, 0, len(ends)
    for ev in parts:
        pos += len(ev) + 2
        while ri < nreads - 1 and ends[ri] < pos:
            ri += 1
        if ev.startswith(b"data: "):
            p = ev[6:] if b"\n" not in ev else None
        else:
            p = None
        if p is None:
            lines = [ln[5:].lstrip(b" ") for ln in ev.split(b"\n") if ln.startswith(b"data:")]
            if not lines:
                continue  # comment / keep-alive / event-name only
            p = b"\n".join(lines)
        t_out.append(times[ri])
        b_out.append(len(ev) + 2)
        if p == b"[DONE]":
            kinds.append("d")
            c_out.append(0)
            out.done = True
            continue
        r = _fast(p, out)
        if r is None:
            try:
                obj = json.loads(p)
            except ValueError:
                obj = None
            r = _classify(obj, out) if isinstance(obj, dict) else ("?", 0)
        kinds.append(r[0])
        c_out.append(r[1])
    out.kinds = "".join(kinds)
    return out
