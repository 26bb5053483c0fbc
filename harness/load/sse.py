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
    ?  not JSON / unrecognised (also: NaN/Infinity, nesting past 64 levels, or fields of the wrong type)

Whatever bytes a server sends, `parse_stream` returns; it never raises. `usage` keeps only non-negative integer counts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from harness.readers import check_depth

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


def _usage(u: object) -> dict | None:
    """The usage object's integer counts only (a server could send strings, floats or nested junk)."""
    if not isinstance(u, dict):
        return None
    kept = {k: v for k, v in u.items() if isinstance(k, str) and type(v) is int and 0 <= v < 1 << 53}
    return kept or None


def _text(v: object) -> str:
    return v if isinstance(v, str) else ""


def _classify(obj: dict, out: ParsedStream) -> tuple[str, int]:
    if "error" in obj and "choices" not in obj:
        err = obj["error"]
        out.error = json.dumps(err)[:500] if not isinstance(err, str) else err[:500]
        return "x", 0
    choices = obj.get("choices")
    if obj.get("usage"):
        out.usage = _usage(obj["usage"])
    if not choices:
        return ("u" if choices == [] or obj.get("usage") else "?"), 0
    if not isinstance(choices, list) or not all(isinstance(ch, dict) for ch in choices):
        return "?", 0
    kind, nchars = "e", 0
    role_only = False
    for ch in choices:
        if ch.get("finish_reason"):
            out.finish_reason = str(ch["finish_reason"])[:100]
        delta = ch.get("delta")
        if delta is None:  # completions
            txt = _text(ch.get("text"))
        elif not isinstance(delta, dict):
            return "?", 0
        else:
            txt = _text(delta.get("content")) + _text(delta.get("reasoning_content") or delta.get("reasoning"))
            calls = delta.get("tool_calls")
            if calls:
                kind = "c"
                for tc in calls if isinstance(calls, list) else ():
                    fn = tc.get("function") if isinstance(tc, dict) else None
                    fn = fn if isinstance(fn, dict) else {}
                    nchars += len(_text(fn.get("arguments"))) + len(_text(fn.get("name")))
            if delta.get("role") and not txt and not calls:
                role_only = True
        if txt:
            kind = "c"
            nchars += len(txt)
    if role_only and kind != "c" and not any(ch.get("finish_reason") for ch in choices):
        return "r", 0
    return kind, nchars


def _no_constants(name: str):
    raise ValueError(name)


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):  # 1e999 parses as inf
        raise ValueError(text)
    return v


def _decode(p: bytes) -> object:
    """One event's JSON, or None when it is not JSON a server may send (NaN, inf, too deep)."""
    try:
        obj = json.loads(p, parse_constant=_no_constants, parse_float=_finite_float)
    except (ValueError, RecursionError):
        return None
    return obj if check_depth(obj) is None else None


def _fast(p: bytes, out: ParsedStream) -> tuple[str, int] | None:
    try:
        return _fast_bytes(p, out)
    except (ValueError, UnicodeDecodeError):  # no closing quote, or not UTF-8: let the slow path decide
        return None


def _fast_bytes(p: bytes, out: ParsedStream) -> tuple[str, int] | None:
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
    """Split into SSE events (each stamped with the read that completed it) and classify them. Never raises."""
    try:
        return _parse(reads)
    except Exception as exc:  # noqa: BLE001 - hostile bytes must not end the run; say so in the record instead
        out = ParsedStream()
        out.error = f"unparsable stream ({type(exc).__name__}: {str(exc)[:200]})"
        return out


def _parse(reads: list[tuple[int, bytes]]) -> ParsedStream:
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
            obj = _decode(p)
            r = _classify(obj, out) if isinstance(obj, dict) else ("?", 0)
        kinds.append(r[0])
        c_out.append(r[1])
    out.kinds = "".join(kinds)
    return out
