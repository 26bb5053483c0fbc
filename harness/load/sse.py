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
    text: str = ""


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
            out.text += txt
    if role_only and kind != "c" and not any(ch.get("finish_reason") for ch in choices):
        return "r", 0
    return kind, nchars


def parse_stream(reads: list[tuple[int, bytes]]) -> ParsedStream:
    out = ParsedStream()
    pending = b""
    kinds = []
    for t_ns, data in reads:
        buf = pending + data if pending else data
        if b"\r\n" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        start = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            ev = buf[start:end]
            start = end + 2
            payload = []
            for line in ev.split(b"\n"):
                if line.startswith(b"data:"):
                    payload.append(line[5:].lstrip(b" "))
            if not payload:
                continue  # comment / keep-alive / event-name only
            p = b"\n".join(payload)
            out.t.append(t_ns)
            out.nbytes.append(len(ev) + 2)
            if p == b"[DONE]":
                kinds.append("d")
                out.chars.append(0)
                out.done = True
                continue
            try:
                obj = json.loads(p)
            except ValueError:
                kinds.append("?")
                out.chars.append(0)
                continue
            if not isinstance(obj, dict):
                kinds.append("?")
                out.chars.append(0)
                continue
            k, n = _classify(obj, out)
            kinds.append(k)
            out.chars.append(n)
        pending = buf[start:]
    out.kinds = "".join(kinds)
    return out
