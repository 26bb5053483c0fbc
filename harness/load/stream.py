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
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from harness.client.sse import DATA, DONE, scan_columns
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


# The decoded shape of one chunk: only the fields the classifier reads are decoded (ids, model names, logprobs and
# the like are skipped, not built), every leaf is `Any`, and every place an object is expected also takes any other
# JSON value, so whatever JSON a server sends decodes (a field absent and a field null read alike, as `dict.get`
# would; `choices` and `error` keep "absent" as UNSET). Duplicate keys: the last wins, as in a dict.
_Value = list | str | int | float | bool | None  # any JSON value but an object


class _Delta(msgspec.Struct, gc=False):
    content: Any = None
    reasoning_content: Any = None
    reasoning: Any = None
    tool_calls: Any = None  # rare: a list of plain dicts, read with the checks below
    role: Any = None


class _Choice(msgspec.Struct, gc=False):
    delta: _Delta | _Value = None
    text: Any = None
    finish_reason: Any = None


class _Chunk(msgspec.Struct, gc=False):
    choices: list[_Choice | _Value] | dict | str | int | float | bool | None | UnsetType = UNSET
    usage: Any = None
    error: Any = UNSET


_Decoded = _Chunk | _Value  # what one event's data decodes to; None also when it is not JSON a server may send
_typed = msgspec.json.Decoder(_Decoded)  # strict JSON (no NaN, no inf, UTF-8 only)


def _text(v: object) -> str:
    return v if type(v) is str else ""


def _classify(obj: _Decoded, out: ParsedStream) -> str:
    """The kind of one decoded chunk; appends its output characters to `out.chars` and notes usage, finish reason and
    an error on `out`. The one classifier. Runs once per event of every request: written for speed (one pass, no
    generators), checked by the tests."""
    chars = out.chars
    if type(obj) is not _Chunk:
        chars.append(0)
        return "?"
    choices = obj.choices
    if choices is UNSET and obj.error is not UNSET:
        err = obj.error
        out.error = json.dumps(err)[:500] if not isinstance(err, str) else err[:500]
        chars.append(0)
        return "x"
    usage = obj.usage
    if usage:
        out.usage = _usage(usage)
    if not choices:
        chars.append(0)
        return "u" if choices == [] or usage else "?"
    if type(choices) is not list:
        chars.append(0)
        return "?"
    for ch in choices:
        if type(ch) is not _Choice:
            chars.append(0)
            return "?"
    kind, nchars, role_only, finished = "e", 0, False, False
    for ch in choices:
        reason = ch.finish_reason
        if reason:
            out.finish_reason = str(reason)[:100]
            finished = True
        delta = ch.delta
        if delta is None:  # completions
            txt = _text(ch.text)
        elif type(delta) is not _Delta:
            chars.append(0)
            return "?"
        else:
            txt = delta.content
            if type(txt) is not str:
                txt = ""
            reasoning = delta.reasoning_content or delta.reasoning
            if reasoning:
                txt += _text(reasoning)
            calls = delta.tool_calls
            if calls:
                kind = "c"
                for tc in calls if isinstance(calls, list) else ():
                    fn = tc.get("function") if isinstance(tc, dict) else None
                    fn = fn if isinstance(fn, dict) else {}
                    nchars += len(_text(fn.get("arguments"))) + len(_text(fn.get("name")))
            if not txt and not calls and delta.role:
                role_only = True
        if txt:
            kind = "c"
            nchars += len(txt)
    if role_only and kind != "c" and not finished:
        chars.append(0)
        return "r"
    chars.append(nchars)
    return kind


def _no_constants(name: str):
    raise ValueError(name)


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):  # 1e999 parses as inf
        raise ValueError(text)
    return v


_fast_json = msgspec.json.Decoder()


def _decode(p: bytes) -> _Decoded:
    """One event's data, decoded; None when it is not JSON a server may send (NaN, inf, not UTF-8, nested deeper
    than MAX_DEPTH). The rare path: msgspec decodes what it can, anything it refuses goes to the stdlib parser,
    which decides (so the result is what `json.loads` with the rules above gives), then the value takes the typed
    shape the classifier reads."""
    try:
        obj = _fast_json.decode(p)
    except (msgspec.MsgspecError, RecursionError):
        try:
            obj = json.loads(p, parse_constant=_no_constants, parse_float=_finite_float)
        except (ValueError, RecursionError):
            return None
    if p.count(b"[") + p.count(b"{") > MAX_DEPTH and check_depth(obj) is not None:
        return None
    try:
        return msgspec.convert(obj, _Decoded)
    except (msgspec.MsgspecError, RecursionError):  # pragma: no cover - every JSON value has the shape
        return None


def _decode_all(datas: list[bytes]) -> list[_Decoded]:
    """`_decode` of each event's data, in bulk: the typed decoder over the lot and one bracket count each (C loops),
    so the usual stream, all plain JSON of little depth, costs no Python-level step per event; else one by one."""
    try:
        objs = list(map(_typed.decode, datas))
    except (msgspec.MsgspecError, RecursionError):
        return [_decode(d) for d in datas]
    brackets = map(add, map(bytes.count, datas, repeat(b"[")), map(bytes.count, datas, repeat(b"{")))
    if max(brackets, default=0) <= MAX_DEPTH:
        return objs
    return [obj if d.count(b"[") + d.count(b"{") <= MAX_DEPTH else _decode(d) for d, obj in zip(datas, objs)]


def parse_stream(reads: list[tuple[int, bytes]], t_base: int = 0) -> ParsedStream:
    """Frame the body (each event stamped with the read that completed it, its time less `t_base`) and classify its
    events. Never raises."""
    try:
        return _parse(reads, t_base)
    except Exception as exc:  # noqa: BLE001 - hostile bytes must not end the run; say so in the record instead
        out = ParsedStream()
        out.error = f"unparsable stream ({type(exc).__name__}: {str(exc)[:200]})"
        return out


_DONE_EVENT = object()  # stands for a `done` event among the decoded data


def _parse(reads: list[tuple[int, bytes]], t_base: int) -> ParsedStream:
    out = ParsedStream()
    ris, kinds, datas, sizes = scan_columns(reads)
    n_done = kinds.count(DONE)
    if kinds.count(DATA) + n_done != len(kinds):  # comments, keep-alives, field-only blocks, a truncated tail:
        keep = [i for i, k in enumerate(kinds) if k == DATA or k == DONE]  # framing, not events here
        ris, kinds, datas, sizes = ([col[i] for i in keep] for col in (ris, kinds, datas, sizes))
    if n_done:
        done_at = [i for i, k in enumerate(kinds) if k == DONE]
        objs = _decode_all([d for d, k in zip(datas, kinds) if k == DATA])
        for i in done_at:  # ascending: each lands at its place among the events
            objs.insert(i, _DONE_EVENT)
    else:
        objs = _decode_all(datas)
    out.kinds = "".join(map(_kind, objs, repeat(out)))
    times = [t - t_base for t, _ in reads]
    out.t = list(map(times.__getitem__, ris))
    out.nbytes = sizes
    return out


def _kind(obj: object, out: ParsedStream) -> str:
    if obj is _DONE_EVENT:
        out.done = True
        out.chars.append(0)
        return "d"
    return _classify(obj, out)
