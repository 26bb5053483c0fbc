"""Turn a recorded response body (socket reads with arrival times) into per-event records. Pure; no clocks.

The runner keeps `(t_ns, bytes)` per socket read and calls `parse_stream` only after the request has finished, off the
per-chunk hot path. Framing is `harness.client.sse.scan_reads` (the one SSE framer, post hoc): an event is stamped with
the arrival time of the read that *completed* it (its dispatching blank line seen), the earliest moment a client could
have acted on it. Only `data` and `done` events count; comments and field-only blocks are framing, not events here.

Event kinds (one letter per framed event, stored as a string in events.jsonl):
    d  the framer's `done` (`[DONE]`)
    and for the framer's `data`, what the chunk carries:
    r  role-only delta (vLLM's first chat chunk: role set, no text, no tool call)
    c  carries output: non-empty `content`/`text`, `reasoning_content`, or a tool-call fragment
    e  a choice chunk without output (empty delta text, e.g. vLLM holding back incomplete UTF-8; a bare finish chunk)
    u  `choices: []` (the usage chunk)
    x  an in-stream error object `{"error": ...}` (vLLM sends these with HTTP 200)
    ?  not JSON / unrecognised (also: not UTF-8, NaN/Infinity, nesting past 64 levels, or fields of the wrong type)

Whatever bytes a server sends, `parse_stream` returns; it never raises. `usage` keeps only non-negative integer counts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from itertools import repeat
from operator import add

import msgspec

from harness.client.sse import DATA, DONE, scan_reads
from harness.readers import MAX_DEPTH, check_depth

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
    """(kind, output characters) of one decoded chunk; notes usage, finish reason and an error on `out`.
    Runs once per event of every request: written for speed (one pass, no generators), checked by the tests."""
    if "error" in obj and "choices" not in obj:
        err = obj["error"]
        out.error = json.dumps(err)[:500] if not isinstance(err, str) else err[:500]
        return "x", 0
    choices = obj.get("choices")
    usage = obj.get("usage")
    if usage:
        out.usage = _usage(usage)
    if not choices:
        return ("u" if choices == [] or usage else "?"), 0
    if not isinstance(choices, list):
        return "?", 0
    for ch in choices:
        if not isinstance(ch, dict):
            return "?", 0
    kind, nchars, role_only, finished = "e", 0, False, False
    for ch in choices:
        reason = ch.get("finish_reason")
        if reason:
            out.finish_reason = str(reason)[:100]
            finished = True
        delta = ch.get("delta")
        if delta is None:  # completions
            txt = _text(ch.get("text"))
        elif not isinstance(delta, dict):
            return "?", 0
        else:
            txt = _text(delta.get("content"))
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning:
                txt += _text(reasoning)
            calls = delta.get("tool_calls")
            if calls:
                kind = "c"
                for tc in calls if isinstance(calls, list) else ():
                    fn = tc.get("function") if isinstance(tc, dict) else None
                    fn = fn if isinstance(fn, dict) else {}
                    nchars += len(_text(fn.get("arguments"))) + len(_text(fn.get("name")))
            if not txt and not calls and delta.get("role"):
                role_only = True
        if txt:
            kind = "c"
            nchars += len(txt)
    if role_only and kind != "c" and not finished:
        return "r", 0
    return kind, nchars


def _no_constants(name: str):
    raise ValueError(name)


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):  # 1e999 parses as inf
        raise ValueError(text)
    return v


_fast_json = msgspec.json.Decoder()  # strict JSON (no NaN, no inf, UTF-8 only): what it accepts, json reads alike


def _shallow(p: bytes, obj: object) -> bool:
    """Nesting within MAX_DEPTH (a text with few brackets cannot be deep: the walk is for the rare rest)."""
    return p.count(b"[") + p.count(b"{") <= MAX_DEPTH or check_depth(obj) is None


def _decode(p: bytes) -> object:
    """One event's JSON, or None when it is not JSON a server may send (NaN, inf, not UTF-8, too deep).

    msgspec decodes what it can (several times faster); anything it refuses goes to the stdlib parser, which decides,
    so the result is what `json.loads` with the rules above gives."""
    try:
        obj = _fast_json.decode(p)
    except (msgspec.MsgspecError, RecursionError):
        try:
            obj = json.loads(p, parse_constant=_no_constants, parse_float=_finite_float)
        except (ValueError, RecursionError):
            return None
    return obj if _shallow(p, obj) else None


def _decode_all(datas: list[bytes]) -> list[object]:
    """`_decode` of each event's data, in bulk: msgspec over the lot and one bracket count each (C loops), so the
    usual stream, all plain JSON of little depth, costs no Python-level step per event; else one by one."""
    try:
        objs = list(map(_fast_json.decode, datas))
    except (msgspec.MsgspecError, RecursionError):
        return [_decode(d) for d in datas]
    brackets = map(add, map(bytes.count, datas, repeat(b"[")), map(bytes.count, datas, repeat(b"{")))
    if max(brackets, default=0) <= MAX_DEPTH:
        return objs
    return [obj if _shallow(d, obj) else None for d, obj in zip(datas, objs)]


def parse_stream(reads: list[tuple[int, bytes]]) -> ParsedStream:
    """Frame the body (each event stamped with the read that completed it) and classify its events. Never raises."""
    try:
        return _parse(reads)
    except Exception as exc:  # noqa: BLE001 - hostile bytes must not end the run; say so in the record instead
        out = ParsedStream()
        out.error = f"unparsable stream ({type(exc).__name__}: {str(exc)[:200]})"
        return out


def _parse(reads: list[tuple[int, bytes]]) -> ParsedStream:
    out = ParsedStream()
    # comments, keep-alives, field-only blocks and a truncated tail are framing, not events here
    events = [ev for ev in scan_reads(reads) if ev[1] == DATA or ev[1] == DONE]
    objs = iter(_decode_all([data for _, kind, data, _ in events if kind == DATA]))
    kinds, chars = [], out.chars
    for _, kind, _, _ in events:
        if kind == DATA:
            obj = next(objs)
            k, nchars = _classify(obj, out) if isinstance(obj, dict) else ("?", 0)
        else:
            k, nchars = "d", 0
            out.done = True
        kinds.append(k)
        chars.append(nchars)
    out.kinds = "".join(kinds)
    out.t = [reads[ri][0] for ri, _, _, _ in events]
    out.nbytes = [nbytes for _, _, _, nbytes in events]
    return out
