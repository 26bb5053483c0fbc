"""Tool calls through the engine's own tool-call parser (`tools.auto.*`), on the scripted model.

The scripted model (harness.models.scripted) answers a request offering `get_weather` with one hermes tool call, one
offering `get_weather` and `get_time` with two, and a conversation ending in a `tool` message with a sentence; the
engine's parser (vLLM `--enable-auto-tool-choice --tool-call-parser hermes`, llama.cpp `--jinja`) turns the markup
into `tool_calls`. So every check here compares what a client gets with what the model said, and a deviation is the
parser's or the server's. On any other model (`ctx.scripted` false) the same cases judge the contract that holds for
any model (harness.conformance.cases.toolcontract): a call's arguments parse and validate against the tool's schema,
the delta contract, no markup in content, none / required / named / parallel_tool_calls false enforced, a cut answer a
200 with finish_reason length; where the model did not do what a case needs (it answered in text), `inconclusive`.

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
from harness.conformance.cases import toolcontract
from harness.conformance.cases.callparts import (
    call_fragments,
    call_function,
    call_list,
    has_markup,
    parse_arguments,
    streamed_calls,
    streamed_content,
)
from harness.conformance.context import probe
from harness.conformance.model import (
    Check,
    Deviations,
    Level,
    Verdict,
    failed,
    finish_reason_tag,
    inconclusive,
    info,
    passed,
    skipped,
    status_problem,
)
from harness.conformance.registry import case
from harness.conformance.view import StreamView, choices, from_trace
from harness.models.scripted import ANSWERS, TOOL_CALLS

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


def judge_message(message: dict, finish_reason: Any, calls: Calls) -> Check:
    """The non-streamed message carries exactly `calls` as tool_calls (id, type function, name, arguments a JSON
    string equal to the script's), content null or empty, finish_reason tool_calls."""
    dev = Deviations()
    tcs = [tc for tc in call_list(message) if isinstance(tc, dict)]
    content = message.get("content")
    if not tcs:
        tag = "tool-markup-in-content" if has_markup(content) else "no-tool-calls"
        return failed(tag, f"{len(calls)} tool call(s)", {"content": content, "tool_calls": message.get("tool_calls")})
    junk = [tc for tc in call_list(message) if not isinstance(tc, dict)]
    if junk:  # a client reading tool_calls would trip over it
        dev.add("call-not-object", "each tool call an object", junk[0])
    if len(tcs) != len(calls):
        dev.add("wrong-call-count", len(calls), len(tcs))
    for i, (tc, (name, args)) in enumerate(zip(tcs, calls)):
        fn = call_function(tc)
        if not isinstance(tc.get("id"), str) or not tc.get("id"):
            dev.add("missing-id", "a non-empty id", tc.get("id"), i)
        if tc.get("type") != "function":
            dev.add("missing-type", "type function", tc.get("type"), i)
        if fn.get("name") != name:
            dev.add("wrong-name", name, fn.get("name"), i)
        val, problem = parse_arguments(fn.get("arguments"))
        if problem:
            dev.add(problem, "a JSON object as a string", fn.get("arguments"), i)
        elif val != args:
            dev.add("arguments-mismatch", args, val, i)
    ids = [tc.get("id") for tc in tcs if isinstance(tc.get("id"), str) and tc.get("id")]  # others: missing-id
    if len(set(ids)) != len(ids):
        dev.add("duplicate-ids", "one id per call", ids)
    if content not in (None, ""):
        blank = isinstance(content, str) and not content.strip()
        tag = "markup-in-content" if has_markup(content) else "whitespace-content" if blank else "content-not-empty"
        dev.add(tag, "content null or ''", content)
    if finish_reason != "tool_calls":
        dev.add(finish_reason_tag(finish_reason), "finish_reason tool_calls", finish_reason)
    return dev.check(passed(", ".join(f"{n}({json.dumps(a)})" for n, a in calls)))


def judge_stream(view: StreamView, calls: Calls) -> Check:
    """The streamed delta contract: per index, the first fragment carries id, type function and the name, later ones
    only argument fragments (no other id, no name again); the fragments concatenate to the script's arguments; no
    marker text in content; exactly one finish reason, tool_calls."""
    if view.status is not None and view.status != 200:
        return failed(f"status-{view.status}", 200, view.status)
    dev = Deviations()
    per_index = streamed_calls(view)
    content = streamed_content(view)
    if not per_index:
        tag = "tool-markup-in-content" if has_markup(content) else "no-tool-call-deltas"
        return failed(tag, f"{len(calls)} streamed tool call(s)", content[:300])
    if sorted(per_index) != list(range(len(calls))):
        dev.add("wrong-indexes", list(range(len(calls))), sorted(per_index))
    junk = [(n, tc) for n, tc in call_fragments(view) if not isinstance(tc, dict)]
    if junk:
        dev.add("fragment-not-object", "each tool-call fragment an object", junk[0][1], junk[0][0])
    for idx, (name, args) in enumerate(calls):
        frags = per_index.get(idx, [])
        if not frags:
            continue
        n0, first = frags[0]
        fn0 = call_function(first)
        if not isinstance(first.get("id"), str) or not first.get("id"):
            dev.add("first-delta-without-id", "id on the first fragment", first, n0)
        if first.get("type") != "function":
            dev.add("first-delta-without-type", "type function on the first fragment", first, n0)
        if fn0.get("name") != name:
            dev.add("first-delta-without-name" if not fn0.get("name") else "wrong-name", name, first, n0)
        for n, tc in frags[1:]:
            fn = call_function(tc)
            if tc.get("id") not in (None, "", first.get("id")):
                dev.add("id-changed", first.get("id"), tc.get("id"), n)
            if fn.get("name") not in (None, ""):
                dev.add("name-repeated", "only arguments after the first fragment", tc, n)
        text = "".join(
            f["function"]["arguments"]
            for _, f in frags
            if isinstance(f.get("function"), dict) and isinstance(f["function"].get("arguments"), str)
        )
        val, problem = parse_arguments(text)
        if problem == "arguments-not-json" or problem == "arguments-not-string":
            dev.add("fragments-not-json", f"fragments that concatenate to {json.dumps(args)}", text, frags[-1][0])
        elif problem:
            dev.add(problem, "a JSON object", text)
        elif val != args:
            dev.add("arguments-mismatch", args, val)
    if has_markup(content):
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
        fns = [call_function(f) for _, f in frags if call_function(f)]
        name = str(next((fn.get("name") for fn in fns if fn.get("name")), ""))
        out.append((name, "".join(fn.get("arguments") or "" for fn in fns if isinstance(fn.get("arguments"), str))))
    return out


def judge_stream_equals_message(view: StreamView, message: dict) -> Check:
    """The streamed calls (names, concatenated arguments) equal the non-streamed message's, argument JSON compared
    as values (a client that rebuilds a stream gets what a non-streaming client gets)."""
    streamed = _stream_arguments(view)
    whole = []
    for tc in call_list(message):
        fn = call_function(tc)
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
    ids = [tc.get("id") if isinstance(tc, dict) else None for tc in call_list(message)]
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
        val, problem = parse_arguments(raw)
        got.append((name, val if problem is None else raw))
    if not got:
        return failed("sdk-no-tool-calls", [n for n, _ in calls], [])
    if got != [(n, a) for n, a in calls]:
        return failed("sdk-calls-differ", calls, got)
    return passed(f"{len(got)} call(s) rebuilt by the SDK")


# -- the cases ----------------------------------------------------------------------------------------------------


def _offered(script: str) -> list[dict]:
    return [WEATHER_TOOL, TIME_TOOL] if script == "parallel" else [WEATHER_TOOL]


async def _message_case(ctx, probe_name: str, script: str) -> Check:
    msg, finish, problem = message_of(await ctx.probe(probe_name))
    if problem is not None:
        return problem
    if ctx.scripted:
        return judge_message(msg or {}, finish, TOOL_CALLS[script])
    return toolcontract.judge_calls(msg or {}, finish, _offered(script), want=len(TOOL_CALLS[script]))


async def _stream_case(ctx, probe_name: str, script: str) -> Check:
    view = from_trace(await ctx.probe(probe_name))
    if ctx.scripted:
        return judge_stream(view, TOOL_CALLS[script])
    return toolcontract.judge_call_stream(view, _offered(script), want=len(TOOL_CALLS[script]))


@case("tools.auto.message", "one offered tool: the parser returns the model's call as tool_calls, finish tool_calls")
async def auto_message(ctx) -> Check:
    return await _message_case(ctx, "tools.auto", "call")


@case("tools.auto.stream", "streamed: per index id, type and name first, then argument fragments that add up")
async def auto_stream(ctx) -> Check:
    return await _stream_case(ctx, "tools.auto.stream", "call")


@case("tools.auto.stream-equals-message", "the streamed tool calls equal the non-streamed ones")
async def auto_stream_equals(ctx) -> Check:
    msg, _, problem = message_of(await ctx.probe("tools.auto"))
    if problem is not None:
        return skipped(f"the non-streamed request failed ({problem.behaviour})")
    chk = judge_stream_equals_message(from_trace(await ctx.probe("tools.auto.stream")), msg or {})
    if chk.status is Verdict.SKIP and not ctx.scripted:  # another model made no call on a side: nothing to compare
        return inconclusive("no-call-to-compare", None, note=chk.note)
    return chk


@case("tools.auto.id", "a tool-call id fits OpenAI's 40 characters (a replayed conversation is refused otherwise)",
      level=Level.SHOULD)  # fmt: skip
async def auto_id(ctx) -> Check:
    msg, finish, problem = message_of(await ctx.probe("tools.auto"))
    if problem is not None:
        return problem
    chk = judge_id(msg or {})
    if chk.status is Verdict.SKIP and not ctx.scripted:  # another model made no call: no id to judge
        return toolcontract.without_call((msg or {}).get("content"), finish, "a tool call (whose id is judged)")
    return chk


@case("tools.auto.parallel", "two tools offered: both calls, in order, each with its own id")
async def auto_parallel(ctx) -> Check:
    return await _message_case(ctx, "tools.parallel", "parallel")


@case("tools.auto.parallel-stream", "two streamed calls: indexes 0 and 1, each with its own first fragment")
async def auto_parallel_stream(ctx) -> Check:
    return await _stream_case(ctx, "tools.parallel.stream", "parallel")


@case("tools.auto.parallel-false", "parallel_tool_calls false: at most one tool call")
async def auto_parallel_false(ctx) -> Check:
    t = await ctx.post(CHAT, _body(ctx, [WEATHER_TOOL, TIME_TOOL], parallel_tool_calls=False), sse=False)
    msg, _, problem = message_of(t)
    if problem is not None:
        return problem
    chk = judge_parallel_false(msg or {})
    if ctx.scripted or chk.status is not Verdict.PASS:
        return chk
    # another model: at most one call shows the switch only if the same model calls both tools when allowed
    allowed, _, refused = message_of(await ctx.probe("tools.parallel"))
    n = len([tc for tc in call_list(allowed or {}) if isinstance(tc, dict)])
    if refused is None and n > 1:
        return passed(f"{chk.note} with parallel_tool_calls false; {n} when allowed (tools.auto.parallel)")
    why = f"tools.auto.parallel's request failed ({refused.behaviour})" if refused else f"{n} call(s) when allowed"
    return inconclusive("parallel-not-shown", n, note=f"{chk.note} with the switch, but the model makes no parallel "
                        f"calls when allowed ({why}): nothing for the switch to stop")  # fmt: skip


def judge_parallel_false(message: dict) -> Check:
    """The answer to parallel_tool_calls false with two tools offered (the script calls both): at most one call."""
    n = len([tc for tc in call_list(message) if isinstance(tc, dict)])
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
    msg, _, problem = message_of(await ctx.post(CHAT, _body(ctx, [WEATHER_TOOL], tool_choice="none"), sse=False))
    if problem is not None:
        return problem
    chk = judge_choice_none(msg or {})
    if ctx.scripted or chk.status is not Verdict.PASS:
        return chk
    # another model: no call under none shows the switch only if the same model calls when allowed
    allowed, _, refused = message_of(await ctx.probe("tools.auto"))
    if refused is None and _names(allowed or {}):
        return passed(f"no call under none; {_names(allowed or {})} when allowed (tools.auto.message)")
    why = f"tools.auto.message's request failed ({refused.behaviour})" if refused else "no call either"
    return inconclusive("none-not-shown", (allowed or {}).get("content"),
                        note=f"no call under none, but the model makes none when allowed ({why})")  # fmt: skip


def judge_choice_none(message: dict) -> Check:
    """The answer to tool_choice none with a tool offered: no tool call, and no tool-call markup in content."""
    if message.get("tool_calls"):
        return failed("tool-call-despite-none", "no tool_calls", message.get("tool_calls"))
    if has_markup(message.get("content")):
        return failed("tool-markup-in-content", "content without tool-call markup", message.get("content"))
    return passed(repr(message.get("content"))[:80])


def _names(msg: dict) -> list[Any]:
    return [call_function(tc).get("name") for tc in call_list(msg) if call_function(tc)]


def _malformed_call(message: dict) -> Check | None:
    """The fail for the first tool call that is not an object with a JSON object as its arguments, else None."""
    for tc in call_list(message):
        if not isinstance(tc, dict):
            return failed("call-not-object", "each tool call an object", tc)
        raw = call_function(tc).get("arguments")
        _, bad = parse_arguments(raw)
        if bad:
            return failed(bad, "a JSON object as a string", raw)
    return None


@case("tools.auto.required", "tool_choice required: a tool call is enforced and well formed")
async def choice_required(ctx) -> Check:
    t = await ctx.post(CHAT, _body(ctx, [WEATHER_TOOL], tool_choice="required"), sse=False)
    msg, finish, problem = message_of(t)
    if problem is not None:
        return problem
    chk = judge_required(msg or {})
    if ctx.scripted or not _names(msg or {}):  # no call at all is the server's: the choice forces one
        return chk
    return toolcontract.judge_call_values(msg or {}, [WEATHER_TOOL], finish) or chk


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
    body = {**_body(ctx, [WEATHER_TOOL], tool_choice="required"), "max_tokens": CUT_TOKENS}
    t = await ctx.post(CHAT, body, sse=False)
    msg, finish, problem = message_of(t)
    # a problem is e.g. status-400: the server blames the client for the length it asked for
    if problem is not None:
        return problem
    doc, _ = t.body_json()
    usage = doc.get("usage") if isinstance(doc, dict) else None
    used = usage.get("completion_tokens") if isinstance(usage, dict) else None
    # another model's call fit, or a scripted family's short call did (fewer tokens billed than max_tokens)
    if finish in ("tool_calls", "stop") and (not ctx.scripted or (isinstance(used, int) and used < CUT_TOKENS)):
        return inconclusive("not-cut", finish, note=f"the answer ended within max_tokens {CUT_TOKENS} ({used} tokens)")
    return judge_required_cut(finish)


def judge_required_cut(finish_reason: Any) -> Check:
    """The answer to tool_choice required with max_tokens CUT_TOKENS (far short of the call): finish_reason length."""
    if finish_reason != "length":
        return failed(finish_reason_tag(finish_reason), "length", finish_reason, note=f"max_tokens {CUT_TOKENS}")
    return passed(f"cut at {CUT_TOKENS} tokens, finish_reason length")


@case("tools.auto.named", "a named tool_choice (get_time, while the model wants get_weather): only that tool is called")
async def choice_named(ctx) -> Check:
    named = {"type": "function", "function": {"name": "get_time"}}
    t = await ctx.post(CHAT, _body(ctx, [WEATHER_TOOL, TIME_TOOL], tool_choice=named), sse=False)
    msg, finish, problem = message_of(t)
    if problem is not None:
        return problem
    chk = judge_named(msg or {})
    if ctx.scripted or not _names(msg or {}) or any(n != "get_time" for n in _names(msg or {})):
        return chk  # no get_time call, or another tool's: the server's, whatever the model
    return toolcontract.judge_call_values(msg or {}, [TIME_TOOL], finish) or chk


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
    msg, _, problem = message_of(await ctx.probe("tools.auto"))
    calls = call_list(msg or {})
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
    if problem is not None:
        return problem
    return judge_result_answer(answer or {}, finish) if ctx.scripted else judge_any_answer(answer or {}, finish)


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


def judge_any_answer(message: dict, finish_reason: Any) -> Check:
    """Any model's answer to the turn that ends with the tool's result: the server took the turn (a 200, judged
    before) and answered in content without tool-call markup; another call or an empty answer: inconclusive."""
    content = message.get("content")
    if has_markup(content):
        return failed("tool-markup-in-content", "an answer without tool-call markup", content)
    if message.get("tool_calls"):
        return inconclusive("called-again", message.get("tool_calls"), note="the model called a tool again")
    if not (isinstance(content, str) and content.strip()):
        fields = {f: message.get(f) for f in ("content", "reasoning", "reasoning_content") if message.get(f)}
        return inconclusive("no-answer", fields, note=f"no answer in content (finish_reason {finish_reason!r})")
    return passed(f"any model: {content[:60]!r} (finish_reason {finish_reason})")


@case("tools.auto.sdk", "the OpenAI SDK's stream helper rebuilds the streamed tool calls (get_final_completion)")
async def sdk_stream(ctx) -> Check:
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
    except openai.LengthFinishReasonError as exc:  # the helper refuses an answer cut at max_tokens
        if ctx.scripted:
            return failed("sdk-error", "no SDK exception", f"{type(exc).__name__}: {exc}"[:500])
        msg = exc.completion.choices[0].message if exc.completion.choices else None
        return inconclusive("cut-before-call", msg.content if msg else None,
                            note=f"cut at max_tokens {MAX_TOKENS}: the SDK's helper rebuilds no cut answer")  # fmt: skip
    except openai.OpenAIError as exc:
        return failed("sdk-error", "no SDK exception", f"{type(exc).__name__}: {exc}"[:500])
    except Exception as exc:  # noqa: BLE001 - the SDK's own parsing of what the server sent: a verdict, not a crash
        return failed("sdk-error", "no SDK exception", f"{type(exc).__name__}: {exc}"[:500])
    finally:
        await client.close()
    tcs = final.choices[0].message.tool_calls or [] if final.choices else []
    seen = [(tc.function.name, tc.function.arguments) for tc in tcs if getattr(tc, "function", None) is not None]
    if ctx.scripted:
        return judge_sdk_calls(seen, TOOL_CALLS["call"])
    message = final.choices[0].message.model_dump() if final.choices else {}
    return toolcontract.judge_calls(message, final.choices[0].finish_reason if final.choices else None, [WEATHER_TOOL])


_ = info
