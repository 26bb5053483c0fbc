"""Frozen reference: the load parse and record writing as they were before the typed decode (commit 95bde30),
framed by `SSEParser` fed read by read (the framer's own definition). test_parse_identity.py holds the product to it
byte for byte; do not "fix" this file: it is the oracle."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from itertools import repeat
from operator import add

import msgspec

from harness.client.sse import DATA, DONE, SSEParser
from harness.readers import MAX_DEPTH, check_depth


def scan_reads(reads):
    p, out = SSEParser(), []
    for i, (_, d) in enumerate(reads):
        out += [(i, e.kind, e.data_bytes, len(e.raw)) for e in p.feed(d)]
    return out + [(len(reads) - 1, e.kind, e.data_bytes, len(e.raw)) for e in p.close()]


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


OUTPUT_KINDS = frozenset("ce")


def flush_lines(t0: int, batch: list[tuple[dict, list]]) -> str:
    """What `_Run._flush` wrote for a batch of finished requests (records are updated in place, as there)."""
    out = []
    for rec, reads in batch:
        sent = rec["sent_ns"]
        if reads:
            ps = parse_stream(reads)
            rec["first_byte_ns"] = reads[0][0] - t0
            rec["reads"] = len(reads)
            rec["ev_t"] = [t - t0 - sent for t in ps.t]
            rec["ev_b"] = ps.nbytes
            rec["ev_k"] = ps.kinds
            rec["ev_c"] = ps.chars
            rec["usage"] = ps.usage
            rec["finish_reason"] = ps.finish_reason
            rec["done"] = ps.done
        if rec["outcome"] == "ok":
            kinds = rec.get("ev_k") or ""
            if reads and ps.error:
                rec["outcome"], rec["error"] = "stream_error", ps.error
            elif not (reads and ps.done):
                rec["outcome"], rec["error"] = "incomplete", "stream ended without [DONE]"
            elif not any(k in OUTPUT_KINDS for k in kinds):
                rec["outcome"], rec["error"] = "no_output", "[DONE] without a single output event: no token received"
        out.append(json.dumps(rec, separators=(",", ":")) + "\n")
    return "".join(out)
