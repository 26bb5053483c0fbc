"""Streaming shape (chat and completions), n=2, usage options, stream == non-stream. The cases that are more than one
shape check judge through a pure `judge_*` function of the recorded trace."""

from __future__ import annotations

from harness.client import Trace
from harness.conformance.context import probe
from harness.conformance.model import Check, Deviations, Level, failed, passed, skipped, status_problem
from harness.conformance.registry import case, shape_cases
from harness.conformance.shape import SHAPE_CHECKS, one_finish_reason, per_index, role_first, streamed_text
from harness.conformance.view import choices, from_trace

MAX_TOKENS = 16


@probe("chat.stream")
async def _chat_stream(ctx):
    # logprobs give one entry per sampled token, so "tokens actually streamed" is counted, not guessed from chunks
    # (vLLM merges several tokens into one chunk when its API process falls behind).
    body = ctx.chat(max_tokens=MAX_TOKENS, stream=True, stream_options={"include_usage": True}, logprobs=True)
    return await ctx.post("/v1/chat/completions", body)


@probe("completions.stream")
async def _completions_stream(ctx):
    body = ctx.completion(max_tokens=MAX_TOKENS, stream=True, stream_options={"include_usage": True})
    return await ctx.post("/v1/completions", body)


shape_cases("chat.stream", "chat.stream", SHAPE_CHECKS, "chat")
shape_cases("completions.stream", "completions.stream", SHAPE_CHECKS, "completions")


def _no_chunks(t) -> Check:
    # a 200 with an empty stream shows nothing: that is a failure to stream, never a vacuous pass
    return failed(
        "no-chunks", "at least one data chunk", "none", note=f"stream ended: {t.ended or '?'} {t.error or ''}".strip()
    )


@case(
    "chat.stream.n2-role-first", "with n=2 each choice index gets its own role-only first delta and one finish_reason"
)
async def n2(ctx) -> Check:
    return judge_n2(
        await ctx.post("/v1/chat/completions", ctx.chat(max_tokens=8, n=2, stream=True, temperature=0.8, seed=1))
    )


def judge_n2(t: Trace) -> Check:
    """Choice indexes [0, 1], each judged by role-first and one-finish-reason; every tag of all three is reported.
    One choice only (index 0) is `n-ignored`; any other set of indexes `wrong-choice-indexes`."""
    if (p := status_problem(t)) is not None:
        return p
    v = from_trace(t)
    idx = sorted(per_index(v))
    if not idx:
        return failed(
            "no-choices", "choice indexes [0, 1]", [], note=f"{len(v.chunks)} chunks, stream ended: {t.ended}"
        )
    dev = Deviations()
    if idx == [0]:
        dev.add("n-ignored", "choice indexes [0, 1]", idx)
    elif idx != [0, 1]:
        dev.add("wrong-choice-indexes", "choice indexes [0, 1]", idx)
    dev.merge(role_first(v))
    dev.merge(one_finish_reason(v))
    return dev.check()


@case("chat.stream.no-usage-without-option", "without stream_options no chunk carries usage")
async def no_usage(ctx) -> Check:
    return judge_no_usage(await ctx.post("/v1/chat/completions", ctx.chat(max_tokens=6, stream=True)))


def judge_no_usage(t: Trace) -> Check:
    if (p := status_problem(t)) is not None:
        return p
    objs = from_trace(t).objects()
    if not objs:
        return _no_chunks(t)
    dev = Deviations()
    for n, o in objs:
        if o.get("usage") is not None:
            dev.add("usage-without-option", "no usage (or usage: null)", o.get("usage"), n)
    return dev.check()


@case("chat.stream.continuous-usage", "continuous_usage_stats puts running usage on every chunk", Level.SHOULD)
async def continuous(ctx) -> Check:
    so = {"include_usage": True, "continuous_usage_stats": True}
    return judge_continuous_usage(
        await ctx.post("/v1/chat/completions", ctx.chat(max_tokens=6, stream=True, stream_options=so))
    )


def judge_continuous_usage(t: Trace) -> Check:
    """Usage on every chunk, completion_tokens never decreasing. Usage only on the final chunk (the option ignored,
    include_usage kept: TGI) is `no-continuous-usage`; on some chunks but not all `continuous-usage-gaps`; on none
    `no-usage`."""
    if (p := status_problem(t)) is not None:
        return p
    objs = from_trace(t).objects()
    if not objs:
        return _no_chunks(t)
    bare = [n for n, o in objs if not isinstance(o.get("usage"), dict)]
    if len(bare) == len(objs):
        tag = "no-usage"
    elif bare == [n for n, _ in objs[:-1]]:
        tag = "no-continuous-usage"
    else:
        tag = "continuous-usage-gaps"
    dev = Deviations()
    last = -1
    for n, o in objs:
        u = o.get("usage")
        if not isinstance(u, dict):
            dev.add(tag, "usage on every chunk", None, n)
            continue
        c = u.get("completion_tokens")
        if type(c) is not int or c < last:
            dev.add("usage-not-monotonic", f"completion_tokens >= {last}", c, n)
        else:
            last = c
    return dev.check(passed(f"{len(objs)} chunks, final completion_tokens={last}"))


async def _equals(ctx, path: str, body: dict) -> Check:
    ns = await ctx.post(path, {**body, "stream": False})
    st = await ctx.post(path, {**body, "stream": True})
    for t in (ns, st):
        if (p := status_problem(t)) is not None:
            return p
    doc, err = ns.body_json()
    ch = choices(doc)
    if err or not ch:
        return failed("non-stream-shape", "a JSON response with choices", err or doc)
    c0 = ch[0]
    text = (c0.get("message") or {}).get("content") if "message" in c0 else c0.get("text")
    streamed = streamed_text(from_trace(st))
    if text != streamed:
        k = next(
            (i for i, (a, b) in enumerate(zip(text or "", streamed)) if a != b), min(len(text or ""), len(streamed))
        )
        return failed(
            "stream-text-differs", (text or "")[: k + 20], streamed[: k + 20], note=f"first difference at char {k}"
        )
    return passed(f"{len(streamed)} chars")


@case("chat.stream.equals-nonstream", "streamed text equals the non-streamed text at temperature 0")
async def chat_equals(ctx) -> Check:
    return await _equals(ctx, "/v1/chat/completions", ctx.chat(max_tokens=24))


@case("completions.stream.equals-nonstream", "streamed text equals the non-streamed text at temperature 0")
async def completions_equals(ctx) -> Check:
    return await _equals(ctx, "/v1/completions", ctx.completion(max_tokens=24))


_ = skipped  # re-exported helper used by sibling modules
