"""Stream integrity: how a stream ends. A generation cut short by max_tokens says `length` (text, and a tool call whose
arguments were cut: they either parse, or the call is reported truncated with finish_reason length), and after an error
event nothing but `data: [DONE]` follows.

That every stream ends with one finish_reason per choice and `data: [DONE]` is judged already by the shape cases
(`<kind>.stream.one-finish-reason`, `<kind>.stream.done-present`) on the suite's plain streams; the streams sent here
are judged by the same functions (merged into each verdict, never re-implemented). Each case hands what came back to a
pure `judge_*` function of a StreamView, so recorded streams are judged exactly as live ones.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.client import Trace
from harness.client.sse import decode_json
from harness.conformance.model import Check, Deviations, failed, finish_reason_tag, passed, skipped, status_problem
from harness.conformance.registry import case
from harness.conformance.shape import (
    done_present,
    one_finish_reason,
    per_index,
    tokens_streamed,
    tool_arguments,
    tool_calls,
    usage_chunk,
)
from harness.conformance.view import StreamView, from_trace

__all__ = ["judge_length_cut", "judge_tool_call_cut", "judge_after_error", "judge_refusable", "finish_reasons",
           "TOOL_CUT_TOKENS"]  # fmt: skip

CHAT = "/v1/chat/completions"
LENGTH_TOKENS = 4
TOOL_CUT_TOKENS = 4
# A forced call to this tool cannot finish in TOOL_CUT_TOKENS tokens: the argument object's one key alone is longer.
CUT_TOOL_SCHEMA = {
    "type": "object",
    "properties": {"a_deliberately_long_property_name_for_the_cut": {"type": "string"}},
    "required": ["a_deliberately_long_property_name_for_the_cut"],
}


def finish_reasons(view: StreamView) -> dict[int, list[str]]:
    """choice index -> every non-empty finish_reason it carried, in wire order."""
    return {
        i: [c["finish_reason"] for _, _, c in seq if c.get("finish_reason") not in (None, "")]
        for i, seq in sorted(per_index(view).items())
    }


def _status(view: StreamView) -> Check | None:
    """A recorded view may not know its status (None); a live one was checked by `status_problem` before."""
    if view.status not in (None, 200):
        return failed(f"status-{view.status}", 200, view.status)
    return None


def _ends_well(view: StreamView, dev: Deviations) -> None:
    """The end-of-stream rules every stream keeps, with the shape cases' own tags: one finish_reason per choice on its
    last chunk, `data: [DONE]`, and nothing but [DONE] after an error event."""
    dev.merge(one_finish_reason(view))
    dev.merge(done_present(view))
    dev.merge(judge_after_error(view))


def _completion_tokens(view: StreamView) -> int | None:
    uc = usage_chunk(view)
    c = uc[1]["usage"].get("completion_tokens") if uc is not None else None
    return c if type(c) is int else None


def judge_length_cut(view: StreamView, max_tokens: int) -> Check:
    """A text generation cut short by `max_tokens` reports finish_reason `length` on every choice; any other value is
    its `finish_reason_tag`. A generation that ended by itself before the bound (fewer tokens than `max_tokens`, by
    usage or by the tokens streamed) was not cut: nothing to judge."""
    if (p := _status(view)) is not None:
        return p
    frs = finish_reasons(view)
    if not frs:
        return failed(
            "no-choices", f"a stream cut at max_tokens={max_tokens}", "no choices", note=f"ended: {view.ended}"
        )
    made = _completion_tokens(view)
    made = made if made is not None else tokens_streamed(view) // max(1, len(frs))
    last = {i: r[-1] for i, r in frs.items() if r}
    if made < max_tokens and last and all(r == "stop" for r in last.values()):
        return skipped(f"the generation ended by itself after {made} of {max_tokens} tokens: nothing was cut")
    dev = Deviations()
    for i, r in frs.items():
        if r and r[-1] != "length":
            dev.add(finish_reason_tag(r[-1]), f"choice {i}: length (cut at max_tokens={max_tokens})", r[-1])
    _ends_well(view, dev)
    return dev.check(passed(f"{len(frs)} choice(s) cut at {made} tokens, finish_reason length"))


def judge_tool_call_cut(view: StreamView, max_tokens: int) -> Check:
    """A tool call cut short by `max_tokens`: its argument fragments either concatenate to JSON, or the call is
    reported truncated, finish_reason `length`. Arguments that do not parse under any other finish_reason are
    `truncated-tool-call-not-length` (a client would run a call with half its arguments)."""
    if (p := _status(view)) is not None:
        return p
    if not tool_calls(view):
        return skipped("no tool call in the stream (see chat.tools.present)")
    text = tool_arguments(view)
    frs = [r for rs in finish_reasons(view).values() for r in rs]
    last = frs[-1] if frs else None
    dev = Deviations()
    parsed = decode_json(text)[1] is None  # bounded in depth, as every JSON a judge parses
    if not parsed and last != "length":
        dev.add(
            "truncated-tool-call-not-length",
            f"arguments that parse, or finish_reason length (cut at max_tokens={max_tokens})",
            {"finish_reason": last, "arguments": text[:200]},
        )
    _ends_well(view, dev)
    how = "arguments parse" if parsed else "arguments cut, reported as length"
    return dev.check(passed(f"{how}: {text[:80]!r}, finish_reason={last}"))


# what may follow an error event besides [DONE]: keep-alive comments, and how the exchange itself ended
_HARMLESS = {"comment", "eof", "disconnect", "cancel", "limit", "timeout"}


def judge_after_error(view: StreamView) -> Check:
    """After the first error event nothing but `data: [DONE]` follows (keep-alive comments aside): more data is
    `data-after-error`, a second [DONE] or any other event `events-after-error`. No error event: nothing to judge.
    A recording without SSE framing shows data only, so only `data-after-error` can be judged there."""
    objs = view.objects()
    first = next((n for n, o in objs if "error" in o), None)
    if first is None:
        return skipped("no error event in the stream")
    dev = Deviations()
    if not view.framed:
        for n, o in objs:
            if n > first:
                dev.add("data-after-error", "only data: [DONE] after the error event", o, n)
        return dev.check(passed(f"error event at chunk {first}, no data after it"))
    after: list[str] = []
    pos = -1  # the data chunk index of the event being read (view.chunks numbers data and truncated events)
    for k in view.kinds:
        if pos >= first:
            after.append(k)
        if k in ("data", "truncated"):
            pos += 1
    data = [k for k in after if k in ("data", "truncated")]
    if data:
        obj = next((o for n, o in objs if n > first), None)
        dev.add("data-after-error", "only data: [DONE] after the error event", obj if obj is not None else data,
                first + 1, note=f"{len(data)} data event(s) after the error event")  # fmt: skip
    other = [k for k in after if k not in _HARMLESS and k not in ("data", "truncated", "done")]
    if after.count("done") > 1:
        other.append(f"{after.count('done')} x [DONE]")
    if other:
        dev.add("events-after-error", "only data: [DONE] after the error event", other)
    return dev.check(passed(f"error event at chunk {first}; then {'[DONE]' if 'done' in after else 'the end'}"))


def judge_refusable(t: Trace, judge: Callable[[StreamView], Check], judged_by: str = "") -> Check:
    """`judge` over the stream. With `judged_by` (the case that judges the refusal itself), a 4xx refusal is not
    judged here (a skip naming that case): a request refused before streaming has no end of stream to judge."""
    if judged_by and t.status is not None and 400 <= t.status < 500:
        return skipped(f"refused before streaming (HTTP {t.status}): nothing to judge here (see {judged_by})")
    if (p := status_problem(t)) is not None:
        return p
    return judge(from_trace(t))


@case("integrity.chat-length", "a chat stream cut short by max_tokens ends with finish_reason length and [DONE]")
async def chat_length(ctx) -> Check:
    body = ctx.chat(max_tokens=LENGTH_TOKENS, stream=True, stream_options={"include_usage": True},
                    **ctx.extra("long_request"))  # fmt: skip
    return judge_refusable(await ctx.post(CHAT, body), lambda v: judge_length_cut(v, LENGTH_TOKENS))


@case("integrity.completions-length", "a completions stream cut short by max_tokens ends with finish_reason length")
async def completions_length(ctx) -> Check:
    body = ctx.completion(max_tokens=LENGTH_TOKENS, stream=True, stream_options={"include_usage": True},
                          **ctx.extra("long_request"))  # fmt: skip
    return judge_refusable(await ctx.post("/v1/completions", body), lambda v: judge_length_cut(v, LENGTH_TOKENS))


@case(
    "integrity.tool-call-length",
    "a streamed tool call cut short by max_tokens has arguments that parse, or is reported truncated (length)",
)
async def tool_call_length(ctx) -> Check:
    name = "record_the_cut"
    tools = [{"type": "function", "function": {"name": name, "description": "Record.", "parameters": CUT_TOOL_SCHEMA}}]
    body = ctx.chat(max_tokens=TOOL_CUT_TOKENS, stream=True, tools=tools,
                    tool_choice={"type": "function", "function": {"name": name}})  # fmt: skip
    # a named tool_choice refused outright (vLLM 0.32.0 without a tool parser) is chat.tools.present's to judge
    t = await ctx.post(CHAT, body)
    return judge_refusable(t, lambda v: judge_tool_call_cut(v, TOOL_CUT_TOKENS), "chat.tools.present")


@case("integrity.after-error", "after an error event in a stream nothing but data: [DONE] follows")
async def after_error(ctx) -> Check:
    # errors.in-stream's request: a token id outside every vocabulary, found only once generation starts
    body = {"model": ctx.model, "prompt": [2_000_000_000], "max_tokens": 4, "stream": True}
    return judge_refusable(await ctx.post("/v1/completions", body), judge_after_error, "errors.in-stream")
