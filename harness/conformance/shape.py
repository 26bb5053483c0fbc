"""Stream-shape checks: pure functions StreamView -> Check. Shared by live runs and `harness check-stream`.

Reference = the OpenAI streaming contract. Every function tolerates any garbage in the view (never raises).
A check that scans chunks or choices reports every deviation it saw (`Deviations`), each tag naming one exact shape:
`role-on-every-chunk` is every later delta, `role-repeated` some; `empty-id` is every id "", a mix is `id-changes`;
`created-changes` never goes backwards, `created-backwards` does. So a declared quirk never covers a partial one.
A check that looks for something wrong in every chunk skips when there are no chunks (`@needs_chunks`): no observation
is not a pass (json-chunks reports the empty stream itself), and a vacuous pass would even mark a declared quirk as fixed.
`SHAPE_CHECKS` maps a check name to (function, level, requirement, kinds it applies to).
"""

from __future__ import annotations

from collections.abc import Callable

from harness.client.sse import decode_json
from harness.conformance.model import Check, Deviations, Level, failed, finish_reason_tag, info, passed, skipped
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


CallKey = tuple[int, int | None]  # (choice index, tool-call index); None: a fragment without an integer index


def calls_by_index(view: StreamView) -> dict[CallKey, list[tuple[int, dict]]]:
    """Tool-call fragments grouped as a client joins them: per choice, per tool-call `index`, in wire order."""
    out: dict[CallKey, list[tuple[int, dict]]] = {}
    for i, seq in per_index(view).items():
        for n, _, c in seq:
            tcs = _delta(c).get("tool_calls")
            for tc in tcs if isinstance(tcs, list) else []:
                if isinstance(tc, dict):
                    k = tc.get("index")
                    out.setdefault((i, k if type(k) is int else None), []).append((n, tc))
    return out


def _fn(tc: dict) -> dict:
    fn = tc.get("function")
    return fn if isinstance(fn, dict) else {}


def _call_name(key: CallKey) -> str:
    return f"choice {key[0]} call {'(no index)' if key[1] is None else key[1]}"


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
    dev = Deviations()
    raw_len = None
    for c in view.chunks:
        if c.error:
            dev.add("invalid-json", "every data payload is a JSON object", c.error, c.n)
            raw_len = c.raw_len if raw_len is None else raw_len
        elif not isinstance(c.obj, dict):
            dev.add("not-an-object", "JSON object", type(c.obj).__name__, c.n)
        elif "error" not in c.obj and not isinstance(c.obj.get("choices"), list):
            dev.add("no-choices-list", "'choices' list", sorted(c.obj)[:10], c.n)
    chk = dev.check(passed(f"{len(view.chunks)} chunks"))
    if raw_len is not None:
        chk.extra["raw_len"] = raw_len
    return chk


@needs_chunks(error_events=True)
def no_error_event(view: StreamView) -> Check:
    dev = Deviations()
    for n, obj in view.objects():
        if "error" in obj:
            dev.add("error-event", "no error event for a valid request", obj.get("error"), n)
    return dev.check()


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


def _identity_chunks(view: StreamView) -> list[tuple[int, dict]]:
    return [(n, o) for n, o in view.objects() if "error" not in o]


def _same_everywhere(view: StreamView, key: str, empty_tag: str, missing_tag: str) -> Check:
    """One value on every chunk. Every chunk "" is `empty_tag`, every chunk without it `missing_tag`; any mix
    (of values, or of empty and non-empty) is `<key>-changes`, never the tag of the uniform shape."""
    objs = _identity_chunks(view)
    if not objs:
        return skipped("no chunks")
    first_n, first = objs[0]
    v0 = first.get(key)
    for n, o in objs[1:]:
        if o.get(key) != v0:
            return failed(f"{key}-changes", f"{key} {v0!r} on every chunk", o.get(key), n)
    if v0 == "":
        return failed(empty_tag, f'a non-empty {key} (every chunk has "")', v0, first_n)
    if v0 is None:
        return failed(missing_tag, f"a non-empty {key} (no chunk has one)", v0, first_n)
    return passed(f"{key}={v0!r}")


def consistent_id(view: StreamView) -> Check:
    return _same_everywhere(view, "id", "empty-id", "missing-id")


def consistent_model(view: StreamView) -> Check:
    return _same_everywhere(view, "model", "empty-model", "missing-model")


def consistent_created(view: StreamView) -> Check:
    """One created on every chunk. Per-chunk stamps that change but never decrease are `created-changes`; any
    decrease is `created-backwards` (and not created-changes); chunks without an integer stamp are tagged apart."""
    objs = _identity_chunks(view)
    if not objs:
        return skipped("no chunks")
    dev = Deviations()
    stamps: list[tuple[int, int]] = []
    for n, o in objs:
        v = o.get("created")
        if v is None:
            dev.add("missing-created", "an integer created on every chunk", v, n)
        elif type(v) is not int:
            dev.add("created-not-an-integer", "an integer created on every chunk", v, n)
        else:
            stamps.append((n, v))
    back = [(pv, n, v) for (_, pv), (n, v) in zip(stamps, stamps[1:], strict=False) if v < pv]
    for pv, n, v in back:
        dev.add("created-backwards", f"created never decreases (was {pv})", v, n)
    if stamps and not back:
        for (_, pv), (n, v) in zip(stamps, stamps[1:], strict=False):
            if v != pv:
                dev.add("created-changes", f"created {stamps[0][1]} on every chunk", v, n)
    return dev.check(passed(f"created={stamps[0][1]!r}" if stamps else ""))


@needs_chunks()
def object_name(view: StreamView) -> Check:
    want = OBJECT[_kind(view)]
    dev = Deviations()
    for n, o in view.objects():
        if "error" not in o and o.get("object") != want:
            dev.add("wrong-object", want, o.get("object"), n)
    return dev.check()


# -- choices ----------------------------------------------------------------------------------------------------


def role_first(view: StreamView) -> Check:
    """The first delta of each choice is role-only. With role assistant, what else it carries is named apart:
    content (`no-role-only-chunk`, TGI's text streams), a tool call, a finish_reason."""
    idx = per_index(view)
    if not idx:
        return skipped("no choices in the stream")
    dev = Deviations()
    for i, seq in sorted(idx.items()):
        n, _, c = seq[0]
        d = _delta(c)
        want = f"choice {i}: first delta is role-only (role assistant, content '')"
        if d.get("role") is None:
            dev.add("missing-role", f"choice {i}: first delta has role 'assistant'", d, n)
            continue
        if d.get("role") != "assistant":
            dev.add("wrong-role", "assistant", d.get("role"), n)
            continue
        content = d.get("content")
        if isinstance(content, str) and content != "":
            dev.add("no-role-only-chunk", want, d, n)
        elif content not in ("", None):
            dev.add("content-not-a-string", want, d, n)
        if d.get("tool_calls"):
            dev.add("tool-call-on-role-chunk", want, d, n)
        if c.get("finish_reason") is not None:
            dev.add("finish-reason-on-role-chunk", want, c.get("finish_reason"), n)
    return dev.check(passed(f"{len(idx)} choice index(es)"))


@needs_chunks()
def role_once(view: StreamView) -> Check:
    """Role only on the first delta. Role assistant on every later delta is `role-on-every-chunk`; on some of them
    `role-repeated`; any other role on a later delta `role-changes`."""
    dev = Deviations()
    judged = 0
    for i, seq in sorted(per_index(view).items()):
        later = [(n, _delta(c)) for n, _, c in seq[1:]]
        if not later:
            continue
        judged += 1
        want = f"choice {i}: role only on the first delta"
        for n, d in later:
            if d.get("role") not in (None, "assistant"):
                dev.add("role-changes", want, d, n)
        repeated = [(n, d) for n, d in later if d.get("role") == "assistant"]
        if len(repeated) == len(later):
            dev.add("role-on-every-chunk", want, repeated[0][1], repeated[0][0])
        elif repeated:
            dev.add("role-repeated", want, f"role on {len(repeated)} of {len(later)} later deltas", repeated[0][0])
    if not judged:
        return skipped("no choice has a second delta: nothing to judge")
    return dev.check()


def one_finish_reason(view: StreamView) -> Check:
    idx = per_index(view)
    if not idx:
        return skipped("no choices in the stream")
    dev = Deviations()
    for i, seq in sorted(idx.items()):
        want = f"choice {i}: exactly one finish_reason, on its last chunk"
        frs = [(n, c.get("finish_reason")) for n, _, c in seq if c.get("finish_reason") not in (None, "")]
        last_n = seq[-1][0]
        if not frs:
            called = any(isinstance(_delta(c).get("tool_calls"), list) and _delta(c)["tool_calls"] for _, _, c in seq)
            dev.add("no-finish-reason-after-tool-call" if called else "no-finish-reason", want, "none", last_n)
            continue
        if len(frs) > 1:
            dev.add("multiple-finish-reasons", want, frs, frs[1][0])
        if frs[-1][0] != last_n:
            dev.add("chunks-after-finish", want, frs, last_n)
    return dev.check()


@needs_chunks()
def finish_reason_values(view: StreamView) -> Check:
    dev = Deviations()
    for n, o in view.objects():
        for c in choices(o):
            fr = c.get("finish_reason")
            if fr is None or fr == "":
                continue
            if not isinstance(fr, str):
                dev.add("finish-reason-not-a-string", sorted(FINISH_REASONS), fr, n)
            elif fr not in FINISH_REASONS:
                dev.add(finish_reason_tag(fr), sorted(FINISH_REASONS), fr, n)
    return dev.check()


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
    dev = Deviations()
    if choices(obj):
        # TGI's completions shape: usage rides on the choice's final chunk; usage beside an unfinished choice is not it
        finished = all(c.get("finish_reason") not in (None, "") for c in choices(obj))
        tag = "usage-with-choices" if finished else "usage-on-unfinished-choice"
        dev.add(tag, "usage chunk has choices: []", obj.get("choices"), n)
    elif obj.get("choices") != []:
        dev.add("usage-chunk-bad-choices", "usage chunk has choices: []", obj.get("choices"), n)
    data_ns = [c.n for c in view.chunks]
    if data_ns and n != data_ns[-1]:
        dev.add("usage-not-last", "usage chunk is the last data chunk", f"{data_ns[-1] - n} chunk(s) after it", n)
    return dev.check()


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


def is_bare_finish(c: dict) -> bool:
    """A finish chunk that carries no output at all (`delta: {}` or content null, no logprobs): no token. A chunk with
    content "" is a token whose text is held back (incomplete UTF-8), so it is not one of these."""
    out = _delta(c).get("content") if "delta" in c else c.get("text")
    return (
        c.get("finish_reason") not in (None, "")
        and out is None
        and not _delta(c).get("tool_calls")
        and not c.get("logprobs")
    )


def tokens_streamed(view: StreamView) -> int:
    total = 0
    for _, seq in per_index(view).items():
        for k, (_, _, c) in enumerate(seq):
            lp = c.get("logprobs")
            if isinstance(lp, dict) and isinstance(lp.get("content"), list):
                total += len(lp["content"])
            elif not (k == 0 and is_role_only(c)) and not is_bare_finish(c):
                total += 1
    return total


REASONING_FIELDS = ("reasoning_content", "reasoning")  # the field's name before and after vLLM ~0.12


def _carries_output(c: dict) -> bool:
    """A chunk that shows generated output: text (even "", a token whose text is held back), reasoning text or a
    tool-call fragment. Role-only chunks, bare finish chunks and empty deltas show none."""
    if "delta" not in c:
        return isinstance(c.get("text"), str)
    d = _delta(c)
    return (
        isinstance(d.get("content"), str)
        or any(isinstance(d.get(f), str) and d.get(f) != "" for f in REASONING_FIELDS)
        or bool(d.get("tool_calls"))
    ) and not is_role_only(c)


def tokens_shown(view: StreamView) -> int:
    """The fewest tokens the stream proves were generated, over all choices: per chunk, its logprobs entries (one per
    sampled token) or, for a chunk that shows output, at least one. A floor, never a count: a delta may carry several
    tokens, and billed tokens may stream nothing (reasoning markers, the end token)."""
    total = 0
    for _, _, c in (x for seq in per_index(view).values() for x in seq):
        lp = c.get("logprobs")
        entries = len(lp["content"]) if isinstance(lp, dict) and isinstance(lp.get("content"), list) else 0
        total += max(entries, 1 if _carries_output(c) else 0)
    return total


def _max_tokens(view: StreamView) -> int | None:
    req = view.request or {}
    for key in ("max_completion_tokens", "max_tokens"):
        v = req.get(key)
        if type(v) is int and v >= 0:
            return v
    return None


def usage_completion_count(view: StreamView) -> Check:
    """What the protocol promises of usage.completion_tokens, from the stream alone: at least the tokens it shows
    (`fewer-tokens-billed-than-streamed`) and, when the request is known, at most its max_tokens
    (`completion-count-above-max-tokens`). Not one token per delta: deltas coalesce, and billed tokens such as
    reasoning markers or the end token stream nothing. A non-integer count is usage-totals' to judge."""
    uc = usage_chunk(view)
    if uc is None:
        return skipped("no usage chunk")
    n, obj = uc
    c = obj["usage"].get("completion_tokens")
    if type(c) is not int:
        return skipped(f"completion_tokens is not an integer ({c!r}): see usage-totals")
    shown, cap = tokens_shown(view), _max_tokens(view)
    dev = Deviations()
    if c < shown:
        dev.add(
            "fewer-tokens-billed-than-streamed", f"completion_tokens >= the {shown} token(s) the stream shows", c, n
        )
    if cap is not None and c > cap:
        dev.add("completion-count-above-max-tokens", f"completion_tokens <= max_tokens {cap}", c, n)
    return dev.check(
        passed(f"{c} billed, at least {shown} streamed" + (f", max_tokens {cap}" if cap is not None else ""))
    )


# -- parser markup ----------------------------------------------------------------------------------------------

# The marker text of the tool-call and reasoning formats engines parse (hermes/Qwen, Mistral, Llama 3, DeepSeek V3,
# Kimi K2, gpt-oss Harmony). A parser removes them; in content they are what a client would show or run as text.
TOOL_CALL_MARKERS = ("<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>", "<｜tool▁calls▁begin｜>",
                     "<｜tool▁call▁begin｜>", "<|tool_calls_section_begin|>", "<|tool_call_begin|>")  # fmt: skip
THINK_OPEN = ("<think>", "[THINK]")
THINK_CLOSE = ("</think>", "[/THINK]")
HARMONY_MARKERS = ("<|channel|>", "<|message|>", "<|call|>", "<|constrain|>")


def content_markup(view: StreamView) -> Check:
    """Content, joined per choice, holds no parser markup. A closing think marker after text means that text was
    reasoning: `reasoning-in-content`; a think marker with no reasoning before it `think-markers-in-content`; tool-call
    markers `tool-call-markers-in-content`; Harmony's `harmony-markers-in-content`. Judged without knowing the model,
    so only by the markers: reasoning text without its markers is not recognisable, and an answer that quotes a
    marker on purpose fails here too."""
    idx = per_index(view)
    if not idx:
        return skipped("no choices in the stream")
    dev = Deviations()
    for i in sorted(idx):
        text = streamed_text(view, i)

        def at(markers: tuple[str, ...], i: int = i, text: str = text) -> int | None:
            """The chunk where the first of these markers ends (its evidence), None when none is in the text."""
            ends = [p + len(m) for m in markers if (p := text.find(m)) >= 0]
            return _chunk_at(view, i, min(ends)) if ends else None

        close = min((p for m in THINK_CLOSE if (p := text.find(m)) >= 0), default=-1)
        before = text[: max(close, 0)]
        for m in THINK_OPEN:
            before = before.replace(m, "")
        shown = text[:200]
        if before.strip():
            dev.add("reasoning-in-content", f"choice {i}: reasoning in its own field", shown, at(THINK_CLOSE))
        elif (n := at((*THINK_OPEN, *THINK_CLOSE))) is not None:
            dev.add("think-markers-in-content", f"choice {i}: content without think markers", shown, n)
        if (n := at(TOOL_CALL_MARKERS)) is not None:
            dev.add("tool-call-markers-in-content", f"choice {i}: tool calls in tool_calls", shown, n)
        if (n := at(HARMONY_MARKERS)) is not None:
            dev.add("harmony-markers-in-content", f"choice {i}: content without Harmony markup", shown, n)
    return dev.check()


def _chunk_at(view: StreamView, index: int, end: int) -> int | None:
    """The chunk whose content reaches position `end` of choice `index`'s joined content."""
    seen = 0
    for n, _, c in per_index(view).get(index, []):
        v = _delta(c).get("content") if "delta" in c else c.get("text")
        seen += len(v) if isinstance(v, str) else 0
        if seen >= end:
            return n
    return None


# -- completions ------------------------------------------------------------------------------------------------

_COMPLETION_CHOICE_KEYS = {"index", "text", "logprobs", "finish_reason", "stop_reason"}


@needs_chunks()
def no_extra_choice_fields(view: StreamView) -> Check:
    """No extra choice fields. prompt_token_ids on the first chunk of every choice and nowhere else is
    `prompt-token-ids-on-first-chunk` (vLLM 0.11.0); on the first chunk of only some choices, or on a later chunk,
    it is tagged apart."""
    idx = per_index(view)
    firsts = {id(seq[0][2]) for seq in idx.values()}  # each choice's first chunk (the very dicts choices() yields)
    on_first = {i for i, seq in idx.items() if seq[0][2].get("prompt_token_ids") is not None}
    first_tag = "prompt-token-ids-on-first-chunk" if on_first == set(idx) else "prompt-token-ids-on-some-choices"
    want = "no prompt_token_ids unless requested"
    dev = Deviations()
    for n, o in view.objects():
        for c in choices(o):
            extra = {k: v for k, v in c.items() if k not in _COMPLETION_CHOICE_KEYS and v is not None}
            if extra.pop("prompt_token_ids", None) is not None:
                tag = first_tag if id(c) in firsts else "prompt-token-ids-on-later-chunk"
                dev.add(tag, want, "present", n)
            if extra:
                dev.add("extra-choice-fields", "only OpenAI choice fields carry values", sorted(extra), n)
    return dev.check()


# -- tool calls -------------------------------------------------------------------------------------------------


def _sorted_calls(view: StreamView) -> list[tuple[CallKey, list[tuple[int, dict]]]]:
    return sorted(calls_by_index(view).items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1]))


def tools_first_fragment(view: StreamView) -> Check:
    """The first fragment of every call (per choice, per tool-call index) has id, type function and a name."""
    calls = _sorted_calls(view)
    if not calls:
        return skipped("no tool calls in this stream")
    dev = Deviations()
    for key, frags in calls:
        n, first = frags[0]
        if not (first.get("id") and first.get("type") == "function" and _fn(first).get("name")):
            want = f"{_call_name(key)}: first fragment has id, type=function, function.name"
            dev.add("first-fragment-incomplete", want, first, n)
    names = ", ".join(f"{_fn(f[0][1]).get('name')!r} id={f[0][1].get('id')!r}" for _, f in calls)
    return dev.check(passed(f"{len(calls)} call(s): {names}"[:200]))


def tool_arguments(view: StreamView) -> str:
    parts = []
    for _, tc in tool_calls(view):
        fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
        a = fn.get("arguments")
        if isinstance(a, str):
            parts.append(a)
    return "".join(parts)


def tools_arguments_json(view: StreamView) -> Check:
    """Each call's argument fragments, joined per choice and per tool-call index (as a client joins them), are
    JSON on their own: fragments that do not concatenate (a brace sent twice, a piece lost) are `arguments-not-json`."""
    calls = _sorted_calls(view)
    if not calls:
        return skipped("no tool calls in this stream")
    dev = Deviations()
    shown: list[str] = []
    for key, frags in calls:
        text = "".join(a for _, tc in frags if isinstance(a := _fn(tc).get("arguments"), str))
        val, err = decode_json(text)  # bounded in depth, as every JSON a judge parses
        if err is not None:
            dev.add("arguments-not-json", f"{_call_name(key)}: fragments concatenate to JSON", text[:200],
                    frags[-1][0], note=f"{_call_name(key)}: {err}")  # fmt: skip
        else:
            shown.append(f"{type(val).__name__}: {text[:60]}")
    return dev.check(passed("; ".join(shown)[:240]))


def tools_ids_stable(view: StreamView) -> Check:
    """A call keeps the id (and name) it was first given: a later fragment of the same index that carries another
    one is `id-changes` (`name-changes`); a later fragment without one, or repeating it, is fine. Two calls of one
    choice with the same id are `id-reused` (a client could not tell their results apart)."""
    calls = _sorted_calls(view)
    if not calls:
        return skipped("no tool calls in this stream")
    dev = Deviations()
    owners: dict[tuple[int, str], CallKey] = {}
    for key, frags in calls:
        given: dict[str, str] = {}
        for n, tc in frags:
            for field, value in (("id", tc.get("id")), ("name", _fn(tc).get("name"))):
                if not isinstance(value, str) or not value:
                    continue
                first = given.setdefault(field, value)
                if value != first:
                    dev.add(f"{field}-changes", f"{_call_name(key)}: {field} {first!r} on every fragment", value, n)
        cid = given.get("id")
        if cid is not None:
            other = owners.setdefault((key[0], cid), key)
            if other != key:
                dev.add("id-reused", f"{_call_name(key)}: an id of its own", f"{cid!r}, as {_call_name(other)}",
                        frags[0][0])  # fmt: skip
    return dev.check(passed(f"{len(calls)} call(s), one id each"))


def tools_finish_reason(view: StreamView) -> Check:
    if not tool_calls(view):
        return skipped("no tool calls in this stream")
    frs = [c.get("finish_reason") for _, o in view.objects() for c in choices(o) if c.get("finish_reason")]
    if not frs:
        return failed("no-finish-reason", "finish_reason tool_calls (or stop for a named tool_choice)", "none")
    if frs[-1] not in ("tool_calls", "stop"):
        return failed(finish_reason_tag(frs[-1]), "tool_calls or stop", frs[-1])
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
        "usage completion_tokens counts at least the tokens streamed and at most max_tokens",
        ("chat",),
    ),
    "content-markup": (
        content_markup,
        Level.MUST,
        "content holds no tool-call or reasoning markup and no reasoning block",
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
        "the first fragment of each tool call (per index) has id, type and function.name",
        ("chat",),
    ),
    "arguments-json": (
        tools_arguments_json,
        Level.MUST,
        "each call's argument fragments (per tool-call index) concatenate to valid JSON",
        ("chat",),
    ),
    "ids-stable": (
        tools_ids_stable,
        Level.MUST,
        "a tool call keeps its id and name across its fragments; no two calls share an id",
        ("chat",),
    ),
    "finish-reason": (
        tools_finish_reason,
        Level.MUST,
        "a forced tool call ends with finish_reason tool_calls or stop",
        ("chat",),
    ),
}
