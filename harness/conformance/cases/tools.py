"""Tool calls through the engine's own tool-call parser (`tools.auto.*`), on the scripted model.

The scripted model (harness.models.scripted) answers a request offering `get_weather` with one hermes tool call, one
offering `get_weather` and `get_time` with two, and a conversation ending in a `tool` message with a sentence; the
engine's parser (vLLM `--enable-auto-tool-choice --tool-call-parser hermes`, llama.cpp `--jinja`) turns the markup
into `tool_calls`. So every check here compares what a client gets with what the model said, and a deviation is the
parser's or the server's. On any other model these cases skip: their expectations are the scripts.

The judges are pure functions over a response document or a StreamView (tests feed them broken streams):

    judge_message(message, finish_reason, calls)   the non-streamed message: ids, type, names, arguments, content
    judge_stream(view, calls)                      the streamed delta contract, per tool-call index
    judge_parallel_false(message)                  parallel_tool_calls false: at most one call
    judge_choice_none(message)                     tool_choice none: no call, no markup in content
    judge_required(message)                        tool_choice required: a well-formed call
    judge_required_cut(finish_reason)              tool_choice required cut by max_tokens: finish_reason length
    judge_named(message)                           a named tool_choice: only that tool is called
    judge_result_answer(message, finish_reason)    the answer after a tool result
"""

from __future__ import annotations

import json
from typing import Any

from harness.client import Trace
from harness.client.sse import decode_json
from harness.conformance.context import probe
from harness.conformance.model import (
    Check,
    Deviations,
    Level,
    failed,
    finish_reason_tag,
    info,
    passed,
    skipped,
    status_problem,
)
from harness.conformance.registry import case
from harness.conformance.view import StreamView, choices, from_trace
from harness.models.scripted import ANSWERS, MARKERS, TOOL_CALLS

__all__ = [
    "WEATHER_TOOL",
    "TIME_TOOL",
    "judge_message",
    "judge_stream",
    "judge_stream_equals_message",
    "judge_id",
    "judge_sdk_calls",
    "judge_parallel_false",
    "judge_choice_none",
    "judge_required",
    "judge_required_cut",
    "judge_named",
    "judge_result_answer",
    "streamed_calls",
    "message_of",
    "needs_scripted",
]

CHAT = "/v1/chat/completions"
MAX_TOKENS = 96  # the longest script (two calls after a think block) is 24 tokens
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time in a time zone",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
    },
}
CUT_TOKENS = 8  # far short of any tool call: the answer is cut inside its JSON
OPENAI_ID_LIMIT = 40  # OpenAI's API refuses a replayed tool_call_id longer than this (vllm#22966)
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}
Calls = list[tuple[str, dict[str, Any]]]


def needs_scripted(ctx) -> Check | None:
    if not getattr(ctx, "scripted", False):
        return skipped("needs the scripted model (model.source scripted-tiny, or --scripted for a URL)")
    return None


def _body(ctx, tools: list[dict], **kw: Any) -> dict:
    return ctx.chat(messages=QUESTION, tools=tools, max_tokens=MAX_TOKENS, **kw)


def _stream_body(ctx, tools: list[dict], **kw: Any) -> dict:
    return _body(ctx, tools, stream=True, stream_options={"include_usage": True}, **kw)


@probe("tools.auto")
async def _auto(ctx) -> Trace:
    return await ctx.post(CHAT, _body(ctx, [WEATHER_TOOL]), sse=False)


@probe("tools.auto.stream")
async def _auto_stream(ctx) -> Trace:
    return await ctx.post(CHAT, _stream_body(ctx, [WEATHER_TOOL]))


@probe("tools.parallel")
async def _parallel(ctx) -> Trace:
    return await ctx.post(CHAT, _body(ctx, [WEATHER_TOOL, TIME_TOOL]), sse=False)


@probe("tools.parallel.stream")
async def _parallel_stream(ctx) -> Trace:
    return await ctx.post(CHAT, _stream_body(ctx, [WEATHER_TOOL, TIME_TOOL]))


@probe("tools.direct")
async def _direct(ctx) -> Trace:
    return await ctx.post(CHAT, _body(ctx, [WEATHER_TOOL], **NO_THINKING), sse=False)


@probe("tools.direct.stream")
async def _direct_stream(ctx) -> Trace:
    return await ctx.post(CHAT, _stream_body(ctx, [WEATHER_TOOL], **NO_THINKING))


def message_of(t: Trace) -> tuple[dict | None, Any, Check | None]:
    """(message, finish_reason, None) of a non-streamed chat response, or (None, None, the problem)."""
    if (p := status_problem(t)) is not None:
        return None, None, p
    doc, err = t.body_json()
    if err is not None:
        return None, None, failed("body-not-json", "a JSON body", t.body[:300].decode("utf-8", "replace"), note=err)
    ch = choices(doc)
    if not ch or not isinstance(ch[0].get("message"), dict):
        return None, None, failed("no-message", "choices[0].message", str(doc)[:300])
    return ch[0]["message"], ch[0].get("finish_reason"), None


def _fn(call: Any) -> dict[str, Any]:
    """A tool call's (or fragment's) `function` object, {} when it has none."""
    fn = call.get("function") if isinstance(call, dict) else None
    return fn if isinstance(fn, dict) else {}


def _markup(text: Any) -> bool:
    return isinstance(text, str) and any(m in text for m in MARKERS)


def _call_list(message: dict) -> list[Any]:
    """A message's tool_calls as sent: every entry, objects or not ([] when it has none or they are not a list)."""
    tcs = message.get("tool_calls")
    return tcs if isinstance(tcs, list) else []


def _arguments(raw: Any) -> tuple[Any, str | None]:
    """The parsed arguments, or why they are not a JSON object string."""
    if not isinstance(raw, str):
        return None, "arguments-not-string"
    val, err = decode_json(raw)  # bounded in depth: the value may become a check's `actual`
    if err is not None:
        return None, "arguments-not-json"
    return val, None if isinstance(val, dict) else "arguments-not-object"


def judge_message(message: dict, finish_reason: Any, calls: Calls) -> Check:
    """The non-streamed message carries exactly `calls` as tool_calls (id, type function, name, arguments a JSON
    string equal to the script's), content null or empty, finish_reason tool_calls."""
    dev = Deviations()
    tcs = [tc for tc in _call_list(message) if isinstance(tc, dict)]
    content = message.get("content")
    if not tcs:
        tag = "tool-markup-in-content" if _markup(content) else "no-tool-calls"
        return failed(tag, f"{len(calls)} tool call(s)", {"content": content, "tool_calls": message.get("tool_calls")})
    junk = [tc for tc in _call_list(message) if not isinstance(tc, dict)]
    if junk:  # a client reading tool_calls would trip over it
        dev.add("call-not-object", "each tool call an object", junk[0])
    if len(tcs) != len(calls):
        dev.add("wrong-call-count", len(calls), len(tcs))
    for i, (tc, (name, args)) in enumerate(zip(tcs, calls)):
        fn = _fn(tc)
        if not isinstance(tc.get("id"), str) or not tc.get("id"):
            dev.add("missing-id", "a non-empty id", tc.get("id"), i)
        if tc.get("type") != "function":
            dev.add("missing-type", "type function", tc.get("type"), i)
        if fn.get("name") != name:
            dev.add("wrong-name", name, fn.get("name"), i)
        val, problem = _arguments(fn.get("arguments"))
        if problem:
            dev.add(problem, "a JSON object as a string", fn.get("arguments"), i)
        elif val != args:
            dev.add("arguments-mismatch", args, val, i)
    ids = [tc.get("id") for tc in tcs if isinstance(tc.get("id"), str) and tc.get("id")]  # others: missing-id
    if len(set(ids)) != len(ids):
        dev.add("duplicate-ids", "one id per call", ids)
    if content not in (None, ""):
        blank = isinstance(content, str) and not content.strip()
        tag = "markup-in-content" if _markup(content) else "whitespace-content" if blank else "content-not-empty"
        dev.add(tag, "content null or ''", content)
    if finish_reason != "tool_calls":
        dev.add(finish_reason_tag(finish_reason), "finish_reason tool_calls", finish_reason)
    return dev.check(passed(", ".join(f"{n}({json.dumps(a)})" for n, a in calls)))


def _fragments(view: StreamView) -> list[tuple[int, Any]]:
    """(chunk n, entry) of every delta's tool_calls list, in wire order, objects or not."""
    out = []
    for n, obj in view.objects():
        for c in choices(obj):
            delta: dict[str, Any] = c["delta"] if isinstance(c.get("delta"), dict) else {}
            out += [(n, tc) for tc in _call_list(delta)]
    return out


def streamed_calls(view: StreamView) -> dict[int, list[tuple[int, dict]]]:
    """tool-call index -> [(chunk n, fragment)] in wire order."""
    out: dict[int, list[tuple[int, dict]]] = {}
    for n, tc in _fragments(view):
        if isinstance(tc, dict):
            idx = tc["index"] if isinstance(tc.get("index"), int) else -1
            out.setdefault(idx, []).append((n, tc))
    return out


def _streamed_content(view: StreamView) -> str:
    parts = []
    for _, obj in view.objects():
        for c in choices(obj):
            delta: dict[str, Any] = c["delta"] if isinstance(c.get("delta"), dict) else {}
            if isinstance(delta.get("content"), str):
                parts.append(delta["content"])
    return "".join(parts)


def judge_stream(view: StreamView, calls: Calls) -> Check:
    """The streamed delta contract: per index, the first fragment carries id, type function and the name, later ones
    only argument fragments (no other id, no name again); the fragments concatenate to the script's arguments; no
    marker text in content; exactly one finish reason, tool_calls."""
    if view.status is not None and view.status != 200:
        return failed(f"status-{view.status}", 200, view.status)
    dev = Deviations()
    per_index = streamed_calls(view)
    content = _streamed_content(view)
    if not per_index:
        tag = "tool-markup-in-content" if _markup(content) else "no-tool-call-deltas"
        return failed(tag, f"{len(calls)} streamed tool call(s)", content[:300])
    if sorted(per_index) != list(range(len(calls))):
        dev.add("wrong-indexes", list(range(len(calls))), sorted(per_index))
    junk = [(n, tc) for n, tc in _fragments(view) if not isinstance(tc, dict)]
    if junk:
        dev.add("fragment-not-object", "each tool-call fragment an object", junk[0][1], junk[0][0])
    for idx, (name, args) in enumerate(calls):
        frags = per_index.get(idx, [])
        if not frags:
            continue
        n0, first = frags[0]
        fn0 = _fn(first)
        if not isinstance(first.get("id"), str) or not first.get("id"):
            dev.add("first-delta-without-id", "id on the first fragment", first, n0)
        if first.get("type") != "function":
            dev.add("first-delta-without-type", "type function on the first fragment", first, n0)
        if fn0.get("name") != name:
            dev.add("first-delta-without-name" if not fn0.get("name") else "wrong-name", name, first, n0)
        for n, tc in frags[1:]:
            fn = _fn(tc)
            if tc.get("id") not in (None, "", first.get("id")):
                dev.add("id-changed", first.get("id"), tc.get("id"), n)
            if fn.get("name") not in (None, ""):
                dev.add("name-repeated", "only arguments after the first fragment", tc, n)
        text = "".join(
            f["function"]["arguments"]
            for _, f in frags
            if isinstance(f.get("function"), dict) and isinstance(f["function"].get("arguments"), str)
        )
        val, problem = _arguments(text)
        if problem == "arguments-not-json" or problem == "arguments-not-string":
            dev.add("fragments-not-json", f"fragments that concatenate to {json.dumps(args)}", text, frags[-1][0])
        elif problem:
            dev.add(problem, "a JSON object", text)
        elif val != args:
            dev.add("arguments-mismatch", args, val)
    if _markup(content):
        dev.add("markup-in-content", "no tool-call markup in content", content[:300])
    finish = [(n, c.get("finish_reason")) for n, obj in view.objects() for c in choices(obj) if c.get("finish_reason")]
    if not finish:
        dev.add("no-finish-reason", "one finish_reason tool_calls", None)
    elif len(finish) > 1:
        dev.add("finish-reason-repeated", "one finish_reason", [f for _, f in finish], finish[1][0])
    elif finish[0][1] != "tool_calls":
        dev.add(finish_reason_tag(finish[0][1]), "finish_reason tool_calls", finish[0][1], finish[0][0])
    return dev.check(passed(f"{len(per_index)} call(s), {sum(len(f) for f in per_index.values())} fragments"))


def _stream_arguments(view: StreamView) -> list[tuple[str, str]]:
    out = []
    for _, frags in sorted(streamed_calls(view).items()):
        fns = [_fn(f) for _, f in frags if _fn(f)]
        name = str(next((fn.get("name") for fn in fns if fn.get("name")), ""))
        out.append((name, "".join(fn.get("arguments") or "" for fn in fns if isinstance(fn.get("arguments"), str))))
    return out


def judge_stream_equals_message(view: StreamView, message: dict) -> Check:
    """The streamed calls (names, concatenated arguments) equal the non-streamed message's, argument JSON compared
    as values (a client that rebuilds a stream gets what a non-streaming client gets)."""
    streamed = _stream_arguments(view)
    whole = []
    for tc in _call_list(message):
        fn = _fn(tc)
        whole.append((fn.get("name") or "", fn.get("arguments") or ""))
    if not streamed or not whole:
        return skipped(f"no tool calls on one side (streamed {len(streamed)}, message {len(whole)})")

    def value(s: Any) -> Any:
        val, err = decode_json(s) if isinstance(s, str) else (None, "not a string")
        return ("not JSON", s) if err is not None else val

    if [(n, value(a)) for n, a in streamed] != [(n, value(a)) for n, a in whole]:
        return failed("stream-differs", whole, streamed)
    return passed(f"{len(whole)} call(s) alike")


def judge_id(message: dict) -> Check:
    """Each tool-call id fits OpenAI's 40-character limit (a conversation replayed there is refused otherwise); the
    id's form is the observation."""
    ids = [tc.get("id") if isinstance(tc, dict) else None for tc in _call_list(message)]
    if not ids:
        return skipped("no tool calls")
    if not all(isinstance(i, str) and i for i in ids):  # a client cannot answer a call it cannot name
        return failed("missing-id", "a non-empty id on every tool call", ids)
    form = _id_form(ids[0])
    long = [i for i in ids if isinstance(i, str) and len(i) > OPENAI_ID_LIMIT]
    if long:
        return failed("id-longer-than-40", f"<= {OPENAI_ID_LIMIT} characters", long[0], note=f"form {form}")
    return passed(f"form {form}", form=form)


def _id_form(i: Any) -> str:
    """A tool-call id's shape, without its random part: `chatcmpl-tool-<hex32>`, `call_<alnum24>`, `<alnum32>`."""
    if not isinstance(i, str):
        return type(i).__name__
    head, _, tail = i.rpartition("-") if "-" in i else i.rpartition("_")
    kind = "hex" if all(ch in "0123456789abcdef" for ch in tail) else "alnum" if tail.isalnum() else "text"
    sep = "-" if "-" in i else "_" if "_" in i else ""
    return f"{head}{sep}<{kind}{len(tail)}>" if head else f"<{kind}{len(tail)}>"


def judge_sdk_calls(calls_seen: list[tuple[str, str]], calls: Calls) -> Check:
    """What the OpenAI SDK's stream helper rebuilt (its final message's tool calls) equals the script's calls."""
    got = []
    for name, raw in calls_seen:
        val, problem = _arguments(raw)
        got.append((name, val if problem is None else raw))
    if not got:
        return failed("sdk-no-tool-calls", [n for n, _ in calls], [])
    if got != [(n, a) for n, a in calls]:
        return failed("sdk-calls-differ", calls, got)
    return passed(f"{len(got)} call(s) rebuilt by the SDK")


# -- the cases ----------------------------------------------------------------------------------------------------


async def _message_case(ctx, probe_name: str, script: str) -> Check:
    if (skip := needs_scripted(ctx)) is not None:
        return skip
    msg, finish, problem = message_of(await ctx.probe(probe_name))
    return problem or judge_message(msg or {}, finish, TOOL_CALLS[script])


async def _stream_case(ctx, probe_name: str, script: str) -> Check:
    if (skip := needs_scripted(ctx)) is not None:
        return skip
    return judge_stream(from_trace(await ctx.probe(probe_name)), TOOL_CALLS[script])


@case("tools.auto.message", "one offered tool: the parser returns the model's call as tool_calls, finish tool_calls")
async def auto_message(ctx) -> Check:
    return await _message_case(ctx, "tools.auto", "call")


@case("tools.auto.stream", "streamed: per index id, type and name first, then argument fragments that add up")
async def auto_stream(ctx) -> Check:
    return await _stream_case(ctx, "tools.auto.stream", "call")


@case("tools.auto.stream-equals-message", "the streamed tool calls equal the non-streamed ones")
async def auto_stream_equals(ctx) -> Check:
    if (skip := needs_scripted(ctx)) is not None:
        return skip
    msg, _, problem = message_of(await ctx.probe("tools.auto"))
    if problem is not None:
        return skipped(f"the non-streamed request failed ({problem.behaviour})")
    return judge_stream_equals_message(from_trace(await ctx.probe("tools.auto.stream")), msg or {})


@case("tools.auto.id", "a tool-call id fits OpenAI's 40 characters (a replayed conversation is refused otherwise)",
      level=Level.SHOULD)  # fmt: skip
async def auto_id(ctx) -> Check:
    if (skip := needs_scripted(ctx)) is not None:
        return skip
    msg, _, problem = message_of(await ctx.probe("tools.auto"))
    return problem or judge_id(msg or {})


@case("tools.auto.parallel", "two tools offered: both calls, in order, each with its own id")
async def auto_parallel(ctx) -> Check:
    return await _message_case(ctx, "tools.parallel", "parallel")


@case("tools.auto.parallel-stream", "two streamed calls: indexes 0 and 1, each with its own first fragment")
async def auto_parallel_stream(ctx) -> Check:
    return await _stream_case(ctx, "tools.parallel.stream", "parallel")


@case("tools.auto.parallel-false", "parallel_tool_calls false: at most one tool call")
async def auto_parallel_false(ctx) -> Check:
    if (skip := needs_scripted(ctx)) is not None:
        return skip
    t = await ctx.post(CHAT, _body(ctx, [WEATHER_TOOL, TIME_TOOL], parallel_tool_calls=False), sse=False)
    msg, _, problem = message_of(t)
    return problem or judge_parallel_false(msg or {})


def judge_parallel_false(message: dict) -> Check:
    """The answer to parallel_tool_calls false with two tools offered (the script calls both): at most one call."""
    n = len([tc for tc in _call_list(message) if isinstance(tc, dict)])
    if n > 1:
        return failed("parallel-not-honoured", "at most 1 tool call", n)
    return passed(f"{n} tool call(s)")


@case("tools.auto.direct", "thinking off, one tool: the call is parsed though no reasoning block precedes it")
async def auto_direct(ctx) -> Check:
    return await _message_case(ctx, "tools.direct", "call_direct")


@case("tools.auto.direct-stream", "thinking off, streamed: the call is streamed as tool-call deltas")
async def auto_direct_stream(ctx) -> Check:
    return await _stream_case(ctx, "tools.direct.stream", "call_direct")


@case("tools.auto.choice-none", "tool_choice none with tools present: no tool call, and no tool-call markup in content")
async def choice_none(ctx) -> Check:
    if (skip := needs_scripted(ctx)) is not None:
        return skip
    msg, _, problem = message_of(await ctx.post(CHAT, _body(ctx, [WEATHER_TOOL], tool_choice="none"), sse=False))
    return problem or judge_choice_none(msg or {})


def judge_choice_none(message: dict) -> Check:
    """The answer to tool_choice none with a tool offered: no tool call, and no tool-call markup in content."""
    if message.get("tool_calls"):
        return failed("tool-call-despite-none", "no tool_calls", message.get("tool_calls"))
    if _markup(message.get("content")):
        return failed("tool-markup-in-content", "content without tool-call markup", message.get("content"))
    return passed(repr(message.get("content"))[:80])


def _names(msg: dict) -> list[Any]:
    return [_fn(tc).get("name") for tc in _call_list(msg) if _fn(tc)]


def _malformed_call(message: dict) -> Check | None:
    """The fail for the first tool call that is not an object with a JSON object as its arguments, else None."""
    for tc in _call_list(message):
        if not isinstance(tc, dict):
            return failed("call-not-object", "each tool call an object", tc)
        raw = _fn(tc).get("arguments")
        _, bad = _arguments(raw)
        if bad:
            return failed(bad, "a JSON object as a string", raw)
    return None


@case("tools.auto.required", "tool_choice required: a tool call is enforced and well formed")
async def choice_required(ctx) -> Check:
    if (skip := needs_scripted(ctx)) is not None:
        return skip
    t = await ctx.post(CHAT, _body(ctx, [WEATHER_TOOL], tool_choice="required"), sse=False)
    msg, _, problem = message_of(t)
    return problem or judge_required(msg or {})


def judge_required(message: dict) -> Check:
    """The answer to tool_choice required: at least one tool call, each with a JSON object as its arguments."""
    names = _names(message)
    if not names:
        return failed("required-not-enforced", ">= 1 tool call", message.get("content"))
    return _malformed_call(message) or passed(f"calls {names}")


@case(
    "tools.auto.required-cut", "tool_choice required cut by max_tokens: a 200 with finish_reason length, not an error"
)
async def choice_required_cut(ctx) -> Check:
    if (skip := needs_scripted(ctx)) is not None:
        return skip
    body = {**_body(ctx, [WEATHER_TOOL], tool_choice="required"), "max_tokens": CUT_TOKENS}
    t = await ctx.post(CHAT, body, sse=False)
    msg, finish, problem = message_of(t)
    # a problem is e.g. status-400: the server blames the client for the length it asked for
    return problem or judge_required_cut(finish)


def judge_required_cut(finish_reason: Any) -> Check:
    """The answer to tool_choice required with max_tokens CUT_TOKENS (far short of the call): finish_reason length."""
    if finish_reason != "length":
        return failed(finish_reason_tag(finish_reason), "length", finish_reason, note=f"max_tokens {CUT_TOKENS}")
    return passed(f"cut at {CUT_TOKENS} tokens, finish_reason length")


@case("tools.auto.named", "a named tool_choice (get_time, while the model wants get_weather): only that tool is called")
async def choice_named(ctx) -> Check:
    if (skip := needs_scripted(ctx)) is not None:
        return skip
    named = {"type": "function", "function": {"name": "get_time"}}
    t = await ctx.post(CHAT, _body(ctx, [WEATHER_TOOL, TIME_TOOL], tool_choice=named), sse=False)
    msg, _, problem = message_of(t)
    return problem or judge_named(msg or {})


def judge_named(message: dict) -> Check:
    """The answer to tool_choice get_time with both tools offered: only get_time calls, with JSON object arguments."""
    names = _names(message)
    if not names:
        return failed("named-not-enforced", "a get_time call", message.get("content"))
    if any(n != "get_time" for n in names):
        return failed("named-not-enforced", ["get_time"], names)
    return _malformed_call(message) or passed(f"calls {names}")


@case("tools.auto.result-turn", "a second turn with the tool's result (tool message, tool_call_id): the answer")
async def result_turn(ctx) -> Check:
    if (skip := needs_scripted(ctx)) is not None:
        return skip
    msg, _, problem = message_of(await ctx.probe("tools.auto"))
    calls = _call_list(msg or {})
    if problem is None and calls and isinstance(calls[0], dict):
        call = calls[0]  # the engine's own call, replayed as a client does
    else:  # none, or one no client could replay (tools.auto.message judges it): a well-formed call instead
        call = {"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}  # fmt: skip
    history = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call.get("id"), "content": '{"temperature": 18, "unit": "celsius"}'},
    ]
    t = await ctx.post(CHAT, ctx.chat(messages=history, tools=[WEATHER_TOOL], max_tokens=MAX_TOKENS), sse=False)
    answer, finish, problem = message_of(t)
    return problem or judge_result_answer(answer or {}, finish)


def judge_result_answer(message: dict, finish_reason: Any) -> Check:
    """The answer to the turn that ends with the tool's result: the script's sentence in content, finish stop."""
    content = message.get("content")
    if message.get("tool_calls"):
        return failed("tool-call-after-result", "an answer", message.get("tool_calls"))
    if not isinstance(content, str) or content.strip() != ANSWERS["after_tool"]:
        fields = ("reasoning", "reasoning_content")
        reasoning = next((message[f] for f in fields if isinstance(message.get(f), str)), "")
        if ANSWERS["after_tool"] in reasoning:  # a reasoning parser that starts in reasoning mode took the answer
            return failed("answer-in-reasoning", {"content": ANSWERS["after_tool"]},
                          {"content": content, "reasoning": reasoning})  # fmt: skip
        return failed("answer-mismatch", ANSWERS["after_tool"], content)
    if finish_reason != "stop":
        return failed(finish_reason_tag(finish_reason), "stop", finish_reason)
    return passed(repr(content))


@case("tools.auto.sdk", "the OpenAI SDK's stream helper rebuilds the streamed tool calls (get_final_completion)")
async def sdk_stream(ctx) -> Check:
    if (skip := needs_scripted(ctx)) is not None:
        return skip
    try:
        import openai
    except ImportError:
        return skipped("openai SDK not installed")
    client = openai.AsyncOpenAI(base_url=ctx.base_url + "/v1", api_key=ctx.api_key or "none", max_retries=0,
                                http_client=ctx.new_client(ctx.api_key))  # fmt: skip
    try:
        async with client.chat.completions.stream(
            model=ctx.model,
            messages=QUESTION,  # type: ignore[arg-type]
            tools=[WEATHER_TOOL],  # type: ignore[list-item]
            max_tokens=MAX_TOKENS,
            temperature=0,  # type: ignore[arg-type]
        ) as stream:
            async for _ in stream:
                pass
            final = await stream.get_final_completion()
    except openai.OpenAIError as exc:
        return failed("sdk-error", "no SDK exception", f"{type(exc).__name__}: {exc}"[:500])
    except Exception as exc:  # noqa: BLE001 - the SDK's own parsing of what the server sent: a verdict, not a crash
        return failed("sdk-error", "no SDK exception", f"{type(exc).__name__}: {exc}"[:500])
    finally:
        await client.close()
    tcs = final.choices[0].message.tool_calls or [] if final.choices else []
    seen = [(tc.function.name, tc.function.arguments) for tc in tcs if getattr(tc, "function", None) is not None]
    return judge_sdk_calls(seen, TOOL_CALLS["call"])


_ = info
