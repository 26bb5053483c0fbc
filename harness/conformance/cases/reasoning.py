"""Reasoning through the engine's own reasoning parser (`reasoning.*`), on the scripted model.

With thinking on (the template's default, as Qwen3's) the scripted model answers "Hi" with
`<think>\\nThe user says hello. I greet them back.\\n</think>\\n\\nHello! How can I help?`; the parser (vLLM
`--reasoning-parser qwen3`, llama.cpp `--reasoning-format deepseek`) moves the block into a reasoning field. Which
field that is (`reasoning_content`, renamed `reasoning` by vLLM around 0.12, the old name removed in 0.16) is the
observation of `reasoning.field`; the other cases check where the text goes, whatever the field is called. Text is
compared without surrounding whitespace (engines differ in the newlines they keep around a think block; the raw
values are in the evidence). On any other model (`ctx.scripted_reasoning` false) the contract that holds for any model is
judged: the reasoning in its field and not in content, no think marker in either, reasoning deltas before content,
a cut answer billed in full; where no reasoning came back the verdict is `inconclusive`, with what the model did.
"""

from __future__ import annotations

from typing import Any

from harness.client import Trace
from harness.conformance.cases.callparts import call_list
from harness.conformance.cases.tools import MAX_TOKENS, NO_THINKING, message_of
from harness.conformance.context import probe
from harness.conformance.model import (
    Check,
    Deviations,
    Level,
    failed,
    inconclusive,
    info,
    passed,
    skipped,
    status_problem,
)
from harness.conformance.registry import case
from harness.conformance.view import StreamView, choices, from_trace
from harness.models.scripted import ANSWERS, REASONING

__all__ = [
    "REASONING_FIELDS",
    "reasoning_of",
    "judge_split",
    "judge_reasoning_stream",
    "field_names",
    "judge_any_split",
    "judge_any_reasoning_stream",
]

CHAT = "/v1/chat/completions"
REASONING_FIELDS = ("reasoning_content", "reasoning")
HI = [{"role": "user", "content": "Hi"}]
THINK_MARKERS = ("<think>", "</think>")


@probe("reasoning")
async def _reasoning(ctx) -> Trace:
    return await ctx.post(CHAT, ctx.chat(messages=HI, max_tokens=MAX_TOKENS), sse=False)


@probe("reasoning.stream")
async def _reasoning_stream(ctx) -> Trace:
    body = ctx.chat(messages=HI, max_tokens=MAX_TOKENS, stream=True, stream_options={"include_usage": True})
    return await ctx.post(CHAT, body)


def field_names(obj: dict) -> list[str]:
    """The reasoning fields present with a non-empty string, in REASONING_FIELDS order."""
    return [f for f in REASONING_FIELDS if isinstance(obj.get(f), str) and obj.get(f)]


def reasoning_of(obj: dict) -> str:
    """The reasoning text of a message or delta, whichever field holds it (the first non-empty one)."""
    names = field_names(obj)
    return obj[names[0]] if names else ""


def _has_markers(text: Any) -> bool:
    return isinstance(text, str) and any(m in text for m in THINK_MARKERS)


def _without_markers(text: str) -> str:
    for m in THINK_MARKERS:
        text = text.replace(m, "")
    return text


def judge_split(message: dict, reasoning: str, answer: str) -> Check:
    """The reasoning block is in a reasoning field, the answer alone in content, no think marker in either."""
    content = message.get("content")
    text = reasoning_of(message)
    dev = Deviations()
    if not text:
        if isinstance(content, str) and reasoning in content:
            return failed("reasoning-in-content", {"reasoning": reasoning, "content": answer}, content)
        return failed("no-reasoning", reasoning, {f: message.get(f) for f in ("content", *REASONING_FIELDS)})
    if _has_markers(content):
        dev.add("think-markers-in-content", "content without <think> markers", content)
    if _has_markers(text):
        dev.add("think-markers-in-reasoning", "reasoning without <think> markers", text)
    if text.strip() != reasoning:
        if answer in text and not (isinstance(content, str) and content.strip()):
            dev.add("answer-in-reasoning", {"reasoning": reasoning, "content": answer}, {"reasoning": text,
                    "content": content})  # fmt: skip
        else:
            dev.add("reasoning-mismatch", reasoning, text)
    if not (isinstance(content, str) and content.strip() == answer) and "answer-in-reasoning" not in dev.behaviours:
        dev.add("content-mismatch", answer, content)
    return dev.check(passed(f"reasoning {text.strip()[:40]!r}, content {str(content).strip()[:40]!r}"))


def _no_reasoning(message: dict, what: str = "reasoning") -> Check:
    """No reasoning came back from another model: a think block in content is the parser's failure; else the model
    did not reason (inconclusive, with what it said)."""
    content = message.get("content")
    if _has_markers(content):
        return failed("reasoning-in-content", f"{what} in a reasoning field", content)
    return inconclusive("no-reasoning", {f: message.get(f) for f in ("content", *REASONING_FIELDS) if f in message},
                        note="the model gave no reasoning")  # fmt: skip


def judge_any_split(message: dict) -> Check:
    """Any model's answer with thinking on: the reasoning in its field, no think marker in it or in content."""
    text = reasoning_of(message)
    if not text:
        return _no_reasoning(message)
    content = message.get("content")
    dev = Deviations()
    if _has_markers(content):
        dev.add("think-markers-in-content", "content without <think> markers", content)
    if _has_markers(text):
        dev.add("think-markers-in-reasoning", "reasoning without <think> markers", text)
    return dev.check(passed(f"any model: reasoning {text.strip()[:40]!r}, content {str(content).strip()[:40]!r}"))


def _deltas(view: StreamView) -> list[tuple[int, dict]]:
    out = []
    for n, obj in view.objects():
        for c in choices(obj):
            if isinstance(c.get("delta"), dict):
                out.append((n, c["delta"]))
    return out


def judge_reasoning_stream(view: StreamView, reasoning: str, answer: str) -> Check:
    """Reasoning deltas come before content deltas (a client shows the thinking, then the answer); each adds up to
    the script's text; no think marker in content."""
    if view.status is not None and view.status != 200:
        return failed(f"status-{view.status}", 200, view.status)
    dev = Deviations()
    r_parts, c_parts = _split_stream(view, dev, content_first_is_a_deviation=True)
    r_text, c_text = "".join(r_parts), "".join(c_parts)
    if not r_text:
        tag = "reasoning-in-content" if reasoning in c_text else "no-reasoning-deltas"
        return failed(tag, reasoning, c_text[:300])
    if _has_markers(c_text):
        dev.add("think-markers-in-content", "content without <think> markers", c_text[:300])
    if _has_markers(r_text):
        # a parser that passes a delta holding <think> and more text on whole (vLLM's qwen3 when deltas coalesce,
        # which they do when the server falls behind the engine): the marker is the deviation, not the text
        dev.add("think-markers-in-reasoning", "reasoning deltas without <think> markers", r_text[:300])
    if _without_markers(r_text).strip() != reasoning:
        dev.add("stream-reasoning-differs", reasoning, r_text)
    if c_text.strip() != answer:
        dev.add("stream-content-differs", answer, c_text)
    fields = sorted({f for _, d in _deltas(view) for f in field_names(d)})
    return dev.check(passed(f"{len(r_parts)} reasoning and {len(c_parts)} content deltas in {fields}"))


def _split_stream(view: StreamView, dev: Deviations, *, content_first_is_a_deviation: bool) -> tuple[list, list]:
    """The reasoning and content parts of a stream, in order; reasoning after the first content delta is a deviation
    (and content before any reasoning, where the judge knows reasoning comes first: the scripted model's)."""
    r_parts: list[str] = []
    c_parts: list[str] = []
    first_content: int | None = None
    for n, d in _deltas(view):
        if r := reasoning_of(d):
            if first_content is not None:
                dev.add("reasoning-after-content", "every reasoning delta before the first content delta", d, n)
            r_parts.append(r)
        c = d.get("content")
        if isinstance(c, str) and c:
            if content_first_is_a_deviation and not r_parts and first_content is None and c.strip():
                dev.add("content-before-reasoning", "reasoning deltas first", d, n)
            if first_content is None and c.strip():
                first_content = n
            c_parts.append(c)
    return r_parts, c_parts


def judge_any_reasoning_stream(view: StreamView) -> Check:
    """Any model's stream with thinking on: reasoning deltas before content deltas, no think marker in either."""
    if view.status is not None and view.status != 200:
        return failed(f"status-{view.status}", 200, view.status)
    dev = Deviations()
    r_parts, c_parts = _split_stream(view, dev, content_first_is_a_deviation=False)
    r_text, c_text = "".join(r_parts), "".join(c_parts)
    if not r_text:
        return _no_reasoning({"content": c_text}, "streamed reasoning")
    if _has_markers(c_text):
        dev.add("think-markers-in-content", "content without <think> markers", c_text[:300])
    if _has_markers(r_text):
        dev.add("think-markers-in-reasoning", "reasoning deltas without <think> markers", r_text[:300])
    return dev.check(passed(f"any model: {len(r_parts)} reasoning and {len(c_parts)} content deltas"))


@case("reasoning.field", "which field of the message holds the reasoning (reasoning_content or reasoning)",
      level=Level.INFO)  # fmt: skip
async def reasoning_field(ctx) -> Check:
    msg, _, problem = message_of(await ctx.probe("reasoning"))
    if problem is not None:
        return problem
    m = msg or {}
    names = field_names(m)
    if not names and not ctx.scripted_reasoning:  # another model that gave no reasoning: no field to see
        return _no_reasoning(m)
    present = [f for f in REASONING_FIELDS if f in m]  # a null key still tells a client what the schema carries
    return info("+".join(names) if names else "none", {f: m.get(f) for f in present}, note=f"keys present: {present}")


@case("reasoning.split", "the reasoning block is in a reasoning field, the answer alone in content")
async def reasoning_split(ctx) -> Check:
    msg, _, problem = message_of(await ctx.probe("reasoning"))
    if problem is not None:
        return problem
    if ctx.scripted_reasoning:
        return judge_split(msg or {}, REASONING["think"], ANSWERS["think"])
    return judge_any_split(msg or {})


@case("reasoning.stream", "streamed: reasoning deltas first, then content deltas; each adds up to the text")
async def reasoning_stream(ctx) -> Check:
    view = from_trace(await ctx.probe("reasoning.stream"))
    if ctx.scripted_reasoning:
        return judge_reasoning_stream(view, REASONING["think"], ANSWERS["think"])
    return judge_any_reasoning_stream(view)


@case("reasoning.usage", "completion_tokens counts the reasoning tokens too", level=Level.SHOULD)
async def reasoning_usage(ctx) -> Check:
    t = await ctx.probe("reasoning")
    if (p := status_problem(t)) is not None:
        return p
    from harness.models.scripted import encode_script

    doc, _ = t.body_json()
    usage = doc.get("usage") if isinstance(doc, dict) else None
    got = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if not ctx.scripted_reasoning:
        return judge_any_usage(doc, got)
    whole = len(encode_script("think", ctx.family)) - 1  # the script's tokens, without the end-of-turn token
    if not isinstance(got, int):
        return failed("no-usage", "usage.completion_tokens", usage)
    if got < whole:
        return failed("usage-excludes-reasoning", f">= {whole}", got)
    return passed(f"completion_tokens {got} (script {whole} + end of turn)")


def judge_any_usage(doc: Any, got: Any) -> Check:
    """Any model: an answer with reasoning cut at max_tokens bills max_tokens (the reasoning counted); an answer that
    ended by itself has no count to hold it to (the script's is unknown): inconclusive."""
    msg, finish = {}, None
    ch = choices(doc)
    if ch and isinstance(ch[0].get("message"), dict):
        msg, finish = ch[0]["message"], ch[0].get("finish_reason")
    if not reasoning_of(msg):
        return _no_reasoning(msg)
    if not isinstance(got, int):
        return failed("no-usage", "usage.completion_tokens", got)
    if finish != "length":
        return inconclusive("not-cut", got, note=f"the answer ended by itself (finish_reason {finish!r}): "
                            "no token count to hold completion_tokens to")  # fmt: skip
    if got < MAX_TOKENS:
        return failed("usage-excludes-reasoning", f"{MAX_TOKENS} (max_tokens, reached)", got)
    return passed(f"any model: cut at max_tokens, completion_tokens {got}")


@case("reasoning.disabled", "enable_thinking false: the answer in content, no reasoning")
async def reasoning_disabled(ctx) -> Check:
    msg, _, problem = message_of(await ctx.post(CHAT, ctx.chat(messages=HI, max_tokens=MAX_TOKENS, **NO_THINKING),
                                                sse=False))  # fmt: skip
    if problem is not None:
        return problem
    m = msg or {}
    text, content = reasoning_of(m), m.get("content")
    if not ctx.scripted_reasoning:
        return await _any_disabled(ctx, text, content)
    if text and ANSWERS["plain"] in text:
        return failed("answer-in-reasoning", {"content": ANSWERS["plain"]}, {"reasoning": text, "content": content})
    if text:
        return failed("reasoning-when-disabled", "no reasoning", text)
    if not (isinstance(content, str) and content.strip() == ANSWERS["plain"]):
        return failed("content-mismatch", ANSWERS["plain"], content)
    return passed(repr(content))


async def _any_disabled(ctx, text: str, content: Any) -> Check:
    """Any model with thinking off: no reasoning shows the switch only if the same model reasons when it is on; a
    model that reasons anyway may have a template that ignores the switch (inconclusive, not the server's)."""
    if text:
        return inconclusive("reasoning-when-disabled", {"reasoning": text, "content": content},
                            note="reasoning despite enable_thinking false: the model's template may ignore it")  # fmt: skip
    on, _, refused = message_of(await ctx.probe("reasoning"))
    if refused is None and reasoning_of(on or {}):
        return passed(f"any model: no reasoning with thinking off, reasoning with it on; content {content!r}"[:120])
    return inconclusive("disabled-not-shown", content, note="no reasoning with thinking off, but none with it on "
                        "either (reasoning.split): nothing for the switch to stop")  # fmt: skip


@case("reasoning.with-tools", "a tool call after a think block: the reasoning in its field, the call in tool_calls")
async def reasoning_with_tools(ctx) -> Check:
    msg, _, problem = message_of(await ctx.probe("tools.auto"))
    if problem is not None:
        return problem
    m = msg or {}
    text = reasoning_of(m)
    if not ctx.scripted_reasoning:
        return judge_any_with_tools(m)
    if not text:
        return failed("no-reasoning", REASONING["call"], {f: m.get(f) for f in ("content", *REASONING_FIELDS)})
    if text.strip() != REASONING["call"]:
        return failed("reasoning-mismatch", REASONING["call"], text)
    return passed(repr(text.strip()))


def judge_any_with_tools(message: dict) -> Check:
    """Any model's answer with a tool offered: when it both reasoned and called, the reasoning in its field, the call
    in tool_calls and no think marker in content; otherwise inconclusive (what it did)."""
    text, calls = reasoning_of(message), [tc for tc in call_list(message) if isinstance(tc, dict)]
    if not text:
        return _no_reasoning(message)
    if _has_markers(message.get("content")):
        return failed("think-markers-in-content", "content without <think> markers", message.get("content"))
    if not calls:
        return inconclusive("no-tool-call", message.get("content"), note="the model reasoned but made no tool call")
    return passed(f"any model: reasoning {text.strip()[:40]!r} and {len(calls)} call(s)")


@case("reasoning.no-parser", "the request's own switch off of reasoning parsing (the expectation file's probe)",
      level=Level.INFO)  # fmt: skip
async def reasoning_no_parser(ctx) -> Check:
    extra = ctx.extra("reasoning.unparsed")
    if not extra:
        return skipped("the expectation file declares no per-request switch (probes: reasoning.unparsed)")
    msg, _, problem = message_of(await ctx.post(CHAT, ctx.chat(messages=HI, max_tokens=MAX_TOKENS, **extra),
                                                sse=False))  # fmt: skip
    if problem is not None:
        return problem
    m = msg or {}
    content, text = m.get("content"), reasoning_of(m)
    where = "content" if _has_markers(content) else "reasoning" if text else "neither"
    if where == "neither" and not ctx.scripted_reasoning:  # another model wrote no think block: nothing to see
        return inconclusive("no-think-block", content, note=f"sent {sorted(extra)}; the model wrote no think block")
    return info(f"think-block-in-{where}", {"content": content, "reasoning": text}, note=f"sent {sorted(extra)}")
