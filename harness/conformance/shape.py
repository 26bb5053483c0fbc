"""Stream-shape checks: pure functions StreamView -> Check. Shared by live runs and `harness check-stream`.

Reference = the OpenAI streaming contract. Every function tolerates any garbage in the view (never raises).
A check that looks for something wrong in every chunk skips when there are no chunks (`@needs_chunks`): no observation
is not a pass (json-chunks reports the empty stream itself), and a vacuous pass would even mark a declared quirk as fixed.
`SHAPE_CHECKS` maps a check name to (function, level, requirement, kinds it applies to).
"""

from __future__ import annotations

from collections.abc import Callable

from harness.conformance.model import Check, Level, failed, info, passed, skipped
from harness.conformance.view import StreamView, choices

__all__ = ["SHAPE_CHECKS", "streamed_text", "per_index", "is_role_only", "usage_chunk"]

FINISH_REASONS = {"stop", "length", "tool_calls", "content_filter", "function_call"}
OBJECT = {"chat": "chat.completion.chunk", "completions": "text_completion"}


def needs_chunks(error_events: bool = False):
    """Skip when the stream holds no JSON chunk to judge; only no-error-event judges error events too."""

    def deco(check: Callable[[StreamView], Check]) -> Callable[[StreamView], Check]:
        def guarded(view: StreamView) -> Check:
            judged = [o for _, o in view.objects() if error_events or "error" not in o]
            if not judged:
                status = f" (HTTP {view.status})" if view.status not in (None, 200) else ""
                return skipped(f"no JSON chunks to check{status}; see json-chunks")
            return check(view)

        guarded.__name__, guarded.__doc__ = check.__name__, check.__doc__
        return guarded

    return deco


def _kind(view: StreamView) -> str:
    from harness.conformance.view import guess_kind

    return guess_kind(view)


def per_index(view: StreamView) -> dict[int, list[tuple[int, dict, dict]]]:
    """choice index -> [(chunk n, chunk obj, choice)] in wire order."""
    out: dict[int, list[tuple[int, dict, dict]]] = {}
    for n, obj in view.objects():
        for c in choices(obj):
            idx = c.get("index", 0)
            out.setdefault(idx if isinstance(idx, int) else -1, []).append((n, obj, c))
    return out


def _delta(c: dict) -> dict:
    d = c.get("delta")
    return d if isinstance(d, dict) else {}


def is_role_only(c: dict) -> bool:
    d = _delta(c)
    return (
        d.get("role") is not None
        and d.get("content") in ("", None)
        and not d.get("tool_calls")
        and c.get("finish_reason") is None
    )


def usage_chunk(view: StreamView) -> tuple[int, dict] | None:
    """The last chunk with a non-null usage and no choices (or the last with usage at all)."""
    found = None
    for n, obj in view.objects():
        if isinstance(obj.get("usage"), dict):
            found = (n, obj)
    return found


def streamed_text(view: StreamView, index: int = 0) -> str:
    parts: list[str] = []
    for _, _, c in per_index(view).get(index, []):
        if "delta" in c:
            v = _delta(c).get("content")
        else:
            v = c.get("text")
        if isinstance(v, str):
            parts.append(v)
    return "".join(parts)


def tool_calls(view: StreamView) -> list[tuple[int, dict]]:
    out = []
    for n, obj in view.objects():
        for c in choices(obj):
            tcs = _delta(c).get("tool_calls")
            if isinstance(tcs, list):
                out.extend((n, tc) for tc in tcs if isinstance(tc, dict))
    return out


# -- framing ----------------------------------------------------------------------------------------------------


def content_type(view: StreamView) -> Check:
    if view.content_type is None:
        return skipped("content type unknown for a recorded stream")
    if view.content_type.split(";")[0].strip().lower() != "text/event-stream":
        return failed("wrong-content-type", "text/event-stream", view.content_type)
    return passed()


def json_chunks(view: StreamView) -> Check:
    if not view.chunks:
        return failed("no-chunks", "at least one data chunk", "none", note=f"stream ended: {view.ended or '?'}")
    for c in view.chunks:
        if c.error:
            return failed("invalid-json", "every data payload is a JSON object", c.error, c.n, raw_len=c.raw_len)
        if not isinstance(c.obj, dict):
            return failed("not-an-object", "JSON object", type(c.obj).__name__, c.n)
        if "error" not in c.obj and not isinstance(c.obj.get("choices"), list):
            return failed("no-choices-list", "'choices' list", sorted(c.obj)[:10], c.n)
    return passed(f"{len(view.chunks)} chunks")


@needs_chunks(error_events=True)
def no_error_event(view: StreamView) -> Check:
    for n, obj in view.objects():
        if "error" in obj:
            return failed("error-event", "no error event for a valid request", obj.get("error"), n)
    return passed()


def done_present(view: StreamView) -> Check:
    if not view.framed:
        return skipped("recorded as a list of chunks: SSE framing not captured")
    if "done" not in view.kinds:
        return failed(
            "no-done", "data: [DONE] terminates the stream", f"stream ended by {view.ended or 'eof'} without [DONE]"
        )
    return passed()


def nothing_after_done(view: StreamView) -> Check:
    if not view.framed:
        return skipped("recorded as a list of chunks: SSE framing not captured")
    if "done" not in view.kinds:
        return skipped("no [DONE] in the stream (see done-present)")
    first = view.kinds.index("done")
    after = [k for k in view.kinds[first + 1 :] if k in ("data", "done", "truncated", "other")]
    if after:
        return failed("data-after-done", "nothing after [DONE]", f"{len(after)} event(s) after [DONE]: {after[:5]}")
    return passed()


# -- identity fields --------------------------------------------------------------------------------------------


def _consistent(view: StreamView, key: str, empty_tag: str | None) -> Check:
    objs = [(n, o) for n, o in view.objects() if "error" not in o]
    if not objs:
        return skipped("no chunks")
    first_n, first = objs[0]
    v0 = first.get(key)
    if empty_tag and v0 in ("", None):
        return failed(empty_tag, f"a non-empty {key}", v0, first_n)
    for n, o in objs[1:]:
        if o.get(key) != v0:
            return failed(f"{key}-changes", f"{key} {v0!r} on every chunk", o.get(key), n)
    return passed(f"{key}={v0!r}")


def consistent_id(view: StreamView) -> Check:
    return _consistent(view, "id", "empty-id")


def consistent_created(view: StreamView) -> Check:
    return _consistent(view, "created", "missing-created")


def consistent_model(view: StreamView) -> Check:
    return _consistent(view, "model", "missing-model")


@needs_chunks()
def object_name(view: StreamView) -> Check:
    want = OBJECT[_kind(view)]
    for n, o in view.objects():
        if "error" in o:
            continue
        if o.get("object") != want:
            return failed("wrong-object", want, o.get("object"), n)
    return passed()


# -- choices ----------------------------------------------------------------------------------------------------


def role_first(view: StreamView) -> Check:
    idx = per_index(view)
    if not idx:
        return skipped("no choices in the stream")
    for i, seq in sorted(idx.items()):
        n, _, c = seq[0]
        d = _delta(c)
        if d.get("role") is None:
            return failed("missing-role", f"choice {i}: first delta has role 'assistant'", d, n)
        if d.get("role") != "assistant":
            return failed("wrong-role", "assistant", d.get("role"), n)
        if not is_role_only(c):
            return failed("no-role-only-chunk", f"choice {i}: first delta is role-only (content '')", d, n)
    return passed(f"{len(idx)} choice index(es)")


@needs_chunks()
def role_once(view: StreamView) -> Check:
    for i, seq in sorted(per_index(view).items()):
        for n, _, c in seq[1:]:
            if _delta(c).get("role") is not None:
                return failed("role-on-every-chunk", f"choice {i}: role only on the first delta", _delta(c), n)
    return passed()


def one_finish_reason(view: StreamView) -> Check:
    idx = per_index(view)
    if not idx:
        return skipped("no choices in the stream")
    for i, seq in sorted(idx.items()):
        frs = [(n, c.get("finish_reason")) for n, _, c in seq if c.get("finish_reason") not in (None, "")]
        if not frs:
            tag = "no-finish-reason-after-tool-call" if tool_calls(view) else "no-finish-reason"
            return failed(tag, f"choice {i}: exactly one finish_reason", "none", seq[-1][0])
        if len(frs) > 1:
            return failed("multiple-finish-reasons", f"choice {i}: exactly one finish_reason", frs, frs[1][0])
        last_n = seq[-1][0]
        if frs[0][0] != last_n:
            return failed("chunks-after-finish", f"choice {i}: finish_reason on its last chunk", frs, last_n)
    return passed()


@needs_chunks()
def finish_reason_values(view: StreamView) -> Check:
    for n, o in view.objects():
        for c in choices(o):
            fr = c.get("finish_reason")
            if fr is None or fr == "":
                continue
            if not isinstance(fr, str):
                return failed("finish-reason-not-a-string", sorted(FINISH_REASONS), fr, n)
            if fr not in FINISH_REASONS:
                return failed(f"finish-reason-{fr}", sorted(FINISH_REASONS), fr, n)
    return passed()


@needs_chunks()
def empty_deltas(view: StreamView) -> Check:
    count, where = 0, []
    for seq in per_index(view).values():
        for k, (n, _, c) in enumerate(seq):
            if k == 0 and is_role_only(c):
                continue
            d = _delta(c) if "delta" in c else {"content": c.get("text")}
            if d.get("content") in ("", None) and not d.get("tool_calls") and c.get("finish_reason") is None:
                count += 1
                where.append(n)
    return info("empty-content-deltas", count, note=f"chunk indexes {where[:10]}")


# -- usage ------------------------------------------------------------------------------------------------------


def usage_last(view: StreamView) -> Check:
    so = view.stream_options()
    uc = usage_chunk(view)
    if uc is None:
        if so is not None and so.get("include_usage"):
            return failed("no-usage", "a final usage chunk (include_usage=true)", "none")
        return skipped("no usage chunk in the stream (usage not requested or not recorded)")
    n, obj = uc
    if choices(obj) or obj.get("choices") != []:
        return failed("usage-with-choices", "usage chunk has choices: []", obj.get("choices"), n)
    data_ns = [c.n for c in view.chunks]
    if data_ns and n != data_ns[-1]:
        return failed("usage-not-last", "usage chunk is the last data chunk", f"{data_ns[-1] - n} chunk(s) after it", n)
    return passed()


def usage_totals(view: StreamView) -> Check:
    uc = usage_chunk(view)
    if uc is None:
        return skipped("no usage chunk")
    n, obj = uc
    u = obj["usage"]
    p, c, t = u.get("prompt_tokens"), u.get("completion_tokens"), u.get("total_tokens")
    if not all(isinstance(x, int) for x in (p, c, t)):
        return failed("usage-fields", "integer prompt/completion/total_tokens", u, n)
    if p + c != t:
        return failed("total-mismatch", f"total_tokens = {p} + {c} = {p + c}", t, n)
    return passed(f"{p}+{c}={t}")


def tokens_streamed(view: StreamView) -> int:
    total = 0
    for _, seq in per_index(view).items():
        for k, (_, _, c) in enumerate(seq):
            lp = c.get("logprobs")
            if isinstance(lp, dict) and isinstance(lp.get("content"), list):
                total += len(lp["content"])
            elif not (k == 0 and is_role_only(c)):
                total += 1
    return total


def usage_completion_count(view: StreamView) -> Check:
    uc = usage_chunk(view)
    if uc is None:
        return skipped("no usage chunk")
    n, obj = uc
    c = obj["usage"].get("completion_tokens")
    streamed = tokens_streamed(view)
    if c != streamed:
        return failed("completion-count-mismatch", f"completion_tokens = tokens streamed ({streamed})", c, n)
    return passed(f"{c} tokens")


# -- completions ------------------------------------------------------------------------------------------------

_COMPLETION_CHOICE_KEYS = {"index", "text", "logprobs", "finish_reason", "stop_reason"}


@needs_chunks()
def no_extra_choice_fields(view: StreamView) -> Check:
    for n, o in view.objects():
        for c in choices(o):
            extra = {k: v for k, v in c.items() if k not in _COMPLETION_CHOICE_KEYS and v is not None}
            if "prompt_token_ids" in extra:
                return failed("prompt-token-ids-on-first-chunk", "no prompt_token_ids unless requested", "present", n)
            if extra:
                return failed("extra-choice-fields", "only OpenAI choice fields carry values", sorted(extra), n)
    return passed()


# -- tool calls -------------------------------------------------------------------------------------------------


def tools_first_fragment(view: StreamView) -> Check:
    tcs = tool_calls(view)
    if not tcs:
        return skipped("no tool calls in this stream")
    n, first = tcs[0]
    fn = first.get("function") if isinstance(first.get("function"), dict) else {}
    missing = [
        k
        for k, ok in (("id", first.get("id")), ("type", first.get("type") == "function"), ("name", fn.get("name")))
        if not ok
    ]
    if missing:
        return failed("first-fragment-incomplete", "first fragment has id, type=function, function.name", first, n)
    return passed(f"name={fn.get('name')!r} id={first.get('id')!r}")


def tool_arguments(view: StreamView) -> str:
    parts = []
    for _, tc in tool_calls(view):
        fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
        a = fn.get("arguments")
        if isinstance(a, str):
            parts.append(a)
    return "".join(parts)


def tools_arguments_json(view: StreamView) -> Check:
    import json

    if not tool_calls(view):
        return skipped("no tool calls in this stream")
    text = tool_arguments(view)
    try:
        val = json.loads(text)
    except ValueError as exc:
        return failed("arguments-not-json", "fragments concatenate to a JSON object", text[:200], note=str(exc))
    return passed(f"{type(val).__name__}: {text[:120]}")


def tools_finish_reason(view: StreamView) -> Check:
    if not tool_calls(view):
        return skipped("no tool calls in this stream")
    frs = [c.get("finish_reason") for _, o in view.objects() for c in choices(o) if c.get("finish_reason")]
    if not frs:
        return failed("no-finish-reason", "finish_reason tool_calls (or stop for a named tool_choice)", "none")
    if frs[-1] not in ("tool_calls", "stop"):
        return failed(f"finish-reason-{frs[-1]}", "tool_calls or stop", frs[-1])
    return passed(f"finish_reason={frs[-1]}")


Shape = tuple[Callable[[StreamView], Check], Level, str, tuple[str, ...]]

# name -> (check, level, requirement, kinds). Case ids are "<kind>.stream.<name>" (tools: "chat.tools.<name>").
SHAPE_CHECKS: dict[str, Shape] = {
    "content-type": (content_type, Level.MUST, "a stream is served as text/event-stream", ("chat", "completions")),
    "json-chunks": (
        json_chunks,
        Level.MUST,
        "every data event is a JSON object with a choices list",
        ("chat", "completions"),
    ),
    "no-error-event": (no_error_event, Level.MUST, "a valid request streams no error event", ("chat", "completions")),
    "done-present": (done_present, Level.MUST, "the stream ends with data: [DONE]", ("chat", "completions")),
    "nothing-after-done": (nothing_after_done, Level.MUST, "no event follows data: [DONE]", ("chat", "completions")),
    "consistent-id": (consistent_id, Level.MUST, "one non-empty id on every chunk", ("chat", "completions")),
    "consistent-created": (
        consistent_created,
        Level.SHOULD,
        "one created timestamp on every chunk",
        ("chat", "completions"),
    ),
    "consistent-model": (consistent_model, Level.MUST, "one model on every chunk", ("chat", "completions")),
    "object": (object_name, Level.MUST, "object is chat.completion.chunk / text_completion", ("chat", "completions")),
    "role-first": (
        role_first,
        Level.MUST,
        "the first delta of each choice index is role-only (assistant, content '')",
        ("chat",),
    ),
    "role-once": (role_once, Level.SHOULD, "role appears only on the first delta of each choice", ("chat",)),
    "one-finish-reason": (
        one_finish_reason,
        Level.MUST,
        "exactly one finish_reason per choice, on its last chunk",
        ("chat", "completions"),
    ),
    "finish-reason-values": (
        finish_reason_values,
        Level.MUST,
        "finish_reason is one of the OpenAI values",
        ("chat", "completions"),
    ),
    "usage-last": (
        usage_last,
        Level.MUST,
        "with include_usage the last data chunk has choices: [] and usage",
        ("chat", "completions"),
    ),
    "usage-totals": (
        usage_totals,
        Level.MUST,
        "usage total_tokens = prompt_tokens + completion_tokens",
        ("chat", "completions"),
    ),
    "usage-completion-count": (
        usage_completion_count,
        Level.MUST,
        "usage completion_tokens = tokens actually streamed",
        ("chat",),
    ),
    "empty-deltas": (empty_deltas, Level.INFO, "count of content chunks with empty text", ("chat", "completions")),
    "no-extra-fields": (
        no_extra_choice_fields,
        Level.SHOULD,
        "choices carry only OpenAI fields unless extras are requested",
        ("completions",),
    ),
}

TOOL_CHECKS: dict[str, Shape] = {
    "first-fragment": (
        tools_first_fragment,
        Level.MUST,
        "the first tool-call fragment has id, type and function.name",
        ("chat",),
    ),
    "arguments-json": (tools_arguments_json, Level.MUST, "argument fragments concatenate to valid JSON", ("chat",)),
    "finish-reason": (
        tools_finish_reason,
        Level.MUST,
        "a forced tool call ends with finish_reason tool_calls or stop",
        ("chat",),
    ),
}
