"""Responses and Messages as deep as chat (issue 33): every tool_choice (OpenAI's auto / required / named / none,
Anthropic's auto / any / tool / none), tool calls parsed into `function_call` items and `tool_use` blocks (never left
as `<tool_call>` marker text), the server's own output replayed as the next turn's input, no thinking block that was
not asked for, and request errors answered as client errors (4xx), never 200 or 500.

On the scripted model (harness.models.scripted) a request with tools offered is answered with a get_weather call, a
turn that ends in a tool result with a sentence; so every verdict here is the server's. `tools.auto.*` judges chat;
`responses.tools.function-call` and `messages.tools.tool-use` judge auto. Selected only with the scripted model.
"""

from __future__ import annotations

from typing import Any

from harness.client import Trace
from harness.conformance.case import SCRIPTED_MODEL
from harness.conformance.cases.messages import post as messages_post
from harness.conformance.cases.responses import response_text
from harness.conformance.cases.streamequal import json_value, messages_outcome, responses_outcome
from harness.conformance.model import Check, Deviations, absent_problem, failed, passed
from harness.conformance.registry import case
from harness.models.families import ANSWERS, CALL_MARKUP
from harness.shown import shown

__all__ = [
    "answer_of",
    "judge_function_calls",
    "judge_tool_uses",
    "judge_no_thinking",
    "judge_client_error",
    "judge_replayed",
]

CHAT, RESPONSES, MESSAGES = "/v1/chat/completions", "/v1/responses", "/v1/messages"
MAX_TOKENS = 96
SHOWN = 300
QUESTION = "What is the weather in Paris?"
RESULT = '{"temperature": 18, "unit": "celsius"}'
_WEATHER = {"type": "object", "properties": {"city": {"type": "string"},
                                             "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}  # fmt: skip
_TIME = {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}
RESP_TOOLS = [{"type": "function", "name": "get_weather", "description": "The current weather in a city",
               "parameters": _WEATHER},
              {"type": "function", "name": "get_time", "description": "The current time in a time zone",
               "parameters": _TIME}]  # fmt: skip
ANTHROPIC_TOOLS = [
    {"name": "get_weather", "description": "The current weather in a city", "input_schema": _WEATHER},
    {"name": "get_time", "description": "The current time in a time zone", "input_schema": _TIME},
]
# a 1x1 transparent PNG: a content type a text-only model cannot take
PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
IMAGE_URL = f"data:image/png;base64,{PNG_B64}"
NO_SUCH_ENDPOINT = "harness-no-such-endpoint"


def _markup(text: Any) -> bool:
    return isinstance(text, str) and any(m in text for m in CALL_MARKUP)


def answer_of(trace: Trace) -> tuple[dict[str, Any] | None, Check | None]:
    """The JSON document of a 200, or the verdict that stands instead (absent, the status with the server's words)."""
    if (absent := absent_problem(trace)) is not None:
        return None, absent
    if trace.status != 200:
        body = trace.error or trace.body[:SHOWN].decode("utf-8", "replace")
        return None, failed(f"status-{trace.status}", 200, shown(body)[:SHOWN])
    doc, err = trace.body_json()
    if err or not isinstance(doc, dict):
        return None, failed("non-json-body", "a JSON answer", trace.body[:200].decode("utf-8", "replace"))
    return doc, None


# -- the judges (pure) ----------------------------------------------------------------------------------------------


def _resp_calls(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[Any] = doc["output"] if isinstance(doc.get("output"), list) else []
    return [i for i in out if isinstance(i, dict) and i.get("type") == "function_call"]


def judge_function_calls(doc: dict[str, Any], want: list[str] | None) -> Check:
    """A Responses answer under a tool_choice: `want` None (tool_choice none) no function_call item; else exactly
    function_call items of those names (`[]`: any one or more), with JSON object arguments. Marker text in the
    output is never a call."""
    text = response_text(doc) or ""
    calls = _resp_calls(doc)
    names = [c.get("name") for c in calls]
    dev = Deviations()
    if _markup(text):
        dev.add("tool-markup-in-text", "output text without tool-call markup", text[:SHOWN])
    if want is None:
        if calls:
            dev.add("tool-call-despite-none", "no function_call item", names)
        return dev.check(passed(f"no call; text {text[:60]!r}"))
    if not calls:
        dev.add("no-function-call", f"a function_call item ({', '.join(want) or 'any tool'})",
                [i.get("type") for i in doc.get("output") or [] if isinstance(i, dict)])  # fmt: skip
    elif want and sorted(set(map(str, names))) != sorted(want):
        dev.add("choice-not-enforced", want, names)
    for c in calls:
        if not isinstance(c.get("call_id"), str) or not c.get("call_id"):
            dev.add("no-call-id", "a call_id", c.get("call_id"))
        if not isinstance(json_value(c.get("arguments")), dict):
            dev.add("arguments-not-json", "arguments: a JSON object as a string", c.get("arguments"))
    return dev.check(passed(f"calls {names}"))


def judge_tool_uses(doc: dict[str, Any], want: list[str] | None) -> Check:
    """A Messages answer under a tool_choice: as judge_function_calls, with tool_use blocks, their object input and
    stop_reason tool_use."""
    blocks = [b for b in doc.get("content") or [] if isinstance(b, dict)]
    uses = [b for b in blocks if b.get("type") == "tool_use"]
    text = "".join(b.get("text") or "" for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str))
    names = [u.get("name") for u in uses]
    dev = Deviations()
    if _markup(text):
        dev.add("tool-markup-in-text", "text blocks without tool-call markup", text[:SHOWN])
    if want is None:
        if uses:
            dev.add("tool-use-despite-none", "no tool_use block", names)
        return dev.check(passed(f"no tool_use; text {text[:60]!r}"))
    if not uses:
        dev.add("no-tool-use", f"a tool_use block ({', '.join(want) or 'any tool'})", [b.get("type") for b in blocks])
    elif want and sorted(set(map(str, names))) != sorted(want):
        dev.add("choice-not-enforced", want, names)
    elif doc.get("stop_reason") != "tool_use":
        dev.add("not-tool-use-stop", "stop_reason tool_use", doc.get("stop_reason"))
    for u in uses:
        if not isinstance(u.get("input"), dict):
            dev.add("input-not-object", "input as an object", u.get("input"))
    return dev.check(passed(f"tool_use {names}"))


def judge_no_thinking(doc: dict[str, Any]) -> Check:
    """A Messages answer to a request that did not ask for thinking: no thinking block, no think markup in text."""
    blocks = [b for b in doc.get("content") or [] if isinstance(b, dict)]
    dev = Deviations()
    thinking = [b for b in blocks if b.get("type") in ("thinking", "redacted_thinking")]
    if thinking:
        dev.add("thinking-not-asked-for", "no thinking block (thinking was not enabled)",
                shown(thinking[0].get("thinking") or thinking[0].get("type"))[:SHOWN])  # fmt: skip
    text = "".join(b.get("text") or "" for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str))
    if "<think>" in text or "</think>" in text:
        dev.add("think-markup-in-text", "text without <think> markup", text[:SHOWN])
    return dev.check(passed(f"{[b.get('type') for b in blocks]}"))


def judge_replayed(doc: dict[str, Any], surface: str, want: str) -> Check:
    """The answer to a turn that replays the server's own output: the script's `want` text."""
    text = (
        response_text(doc)
        if surface == "responses"
        else "".join(
            b.get("text") or "" for b in doc.get("content") or [] if isinstance(b, dict) and b.get("type") == "text"
        )
    )
    if not isinstance(text, str) or text.strip() != want:
        thought = responses_outcome(doc).reasoning if surface == "responses" else messages_outcome(doc).reasoning
        if want in thought:  # a reasoning parser that starts in reasoning mode took the answer (tools.auto's tag)
            return failed("answer-in-reasoning", {"text": want}, {"text": text, "reasoning": thought})
        return failed("answer-mismatch", want, text)
    return passed(repr(text.strip()))


def judge_client_error(trace: Trace, what: str) -> Check:
    """The answer to a request the server must refuse as the client's error: any 4xx (a route the server lacks:
    404 or 405). A 200 is `accepted-<what>`, a 5xx its `status-NNN`: the server blamed itself."""
    if trace.status is None:
        return failed("no-response", "a 4xx", shown(trace.error)[:SHOWN])
    body = shown(trace.body[:SHOWN].decode("utf-8", "replace"))
    if 400 <= trace.status < 500:
        return passed(f"HTTP {trace.status} {body[:120]}")
    if trace.status == 200:
        return failed(f"accepted-{what}", "a 4xx", f"HTTP 200 {body}")
    return failed(f"status-{trace.status}", "a 4xx", body)


# -- Responses ------------------------------------------------------------------------------------------------------


def _resp(ctx: Any, **kw: Any) -> dict[str, Any]:
    return {"model": ctx.model, "input": QUESTION, "max_output_tokens": MAX_TOKENS, "temperature": 0, **kw}


async def _resp_choice(ctx: Any, choice: Any, tools: list[dict], want: list[str] | None) -> Check:
    doc, problem = answer_of(await ctx.post(RESPONSES, _resp(ctx, tools=tools, tool_choice=choice), sse=False))
    return problem or judge_function_calls(doc or {}, want)


def _scripted(case_id: str, requirement: str):
    return case(case_id, requirement, needs=(SCRIPTED_MODEL,))


@_scripted("responses.tools.choice-required", "tool_choice required: a function_call item, no markup in the text")
async def resp_required(ctx) -> Check:
    return await _resp_choice(ctx, "required", RESP_TOOLS[:1], [])


@_scripted("responses.tools.choice-named", "tool_choice {type: function, name: get_time} with two tools: only get_time")
async def resp_named(ctx) -> Check:
    return await _resp_choice(ctx, {"type": "function", "name": "get_time"}, RESP_TOOLS, ["get_time"])


@_scripted("responses.tools.choice-none", "tool_choice none with a tool offered: no function_call, no markup in text")
async def resp_none(ctx) -> Check:
    return await _resp_choice(ctx, "none", RESP_TOOLS[:1], None)


@_scripted("responses.tools.replay-own-output", "the server's own output (reasoning, function_call items) replayed "
           "with a function_call_output: the answer")  # fmt: skip
async def resp_replay_calls(ctx) -> Check:
    first, problem = answer_of(await ctx.post(RESPONSES, _resp(ctx, tools=RESP_TOOLS[:1]), sse=False))
    if problem:
        return problem
    items = [i for i in (first or {}).get("output") or [] if isinstance(i, dict)]
    calls = [i for i in items if i.get("type") == "function_call"]
    if not calls:
        return failed("no-function-call", "a function_call item to replay", [i.get("type") for i in items])
    outputs = [{"type": "function_call_output", "call_id": c.get("call_id"), "output": RESULT} for c in calls]
    body = _resp(ctx, tools=RESP_TOOLS[:1], input=[{"role": "user", "content": QUESTION}, *items, *outputs])
    doc, problem = answer_of(await ctx.post(RESPONSES, body, sse=False))
    return problem or judge_replayed(doc or {}, "responses", ANSWERS["after_tool"])


@_scripted("responses.replay-own-message", "the server's own message item (id, status, output_text) replayed as the "
           "earlier assistant turn: accepted")  # fmt: skip
async def resp_replay_message(ctx) -> Check:
    first, problem = answer_of(await ctx.post(RESPONSES, _resp(ctx, input="Say hello."), sse=False))
    if problem:
        return problem
    items = [i for i in (first or {}).get("output") or [] if isinstance(i, dict)]
    turns = [{"role": "user", "content": "Say hello."}, *items, {"role": "user", "content": "Say hello again."}]
    doc, problem = answer_of(await ctx.post(RESPONSES, _resp(ctx, input=turns), sse=False))
    return problem or passed(f"replayed {[i.get('type') for i in items]}; text {response_text(doc)!r}"[:160])


@_scripted("responses.errors.missing-model", "a Responses request without `model`: a 4xx, not 200 or 500")
async def resp_missing_model(ctx) -> Check:
    body = {k: v for k, v in _resp(ctx).items() if k != "model"}
    return judge_client_error(await ctx.post(RESPONSES, body, sse=False), "missing-model")


@_scripted("responses.errors.unknown-content-type", "an input part of a type that does not exist: a 4xx")
async def resp_unknown_part(ctx) -> Check:
    body = _resp(ctx, input=[{"role": "user", "content": [{"type": "input_bogus", "text": "Hi"}]}])
    return judge_client_error(await ctx.post(RESPONSES, body, sse=False), "unknown-content-type")


@_scripted("responses.errors.image-to-text-model", "an input_image to a text-only model: a 4xx, not 200 or 500")
async def resp_image(ctx) -> Check:
    part = {"type": "input_image", "image_url": IMAGE_URL, "detail": "auto"}
    body = _resp(ctx, input=[{"role": "user", "content": [{"type": "input_text", "text": "What is this?"}, part]}])
    return judge_client_error(await ctx.post(RESPONSES, body, sse=False), "image")


@_scripted("responses.errors.unknown-endpoint", "POST to a path under /v1/responses that no API has: a 4xx, not "
           "200 or 500")  # fmt: skip
async def resp_endpoint(ctx) -> Check:
    # not OpenAI's /v1/responses/input_tokens: llama.cpp serves that one
    body = {"model": ctx.model, "input": QUESTION}
    return judge_client_error(await ctx.post(f"{RESPONSES}/{NO_SUCH_ENDPOINT}", body, sse=False), "unknown-endpoint")


# -- Messages -------------------------------------------------------------------------------------------------------


def _msg(ctx: Any, **kw: Any) -> dict[str, Any]:
    return {"model": ctx.model, "max_tokens": MAX_TOKENS, "temperature": 0,
            "messages": [{"role": "user", "content": QUESTION}], **kw}  # fmt: skip


async def _msg_choice(ctx: Any, choice: dict, tools: list[dict], want: list[str] | None) -> Check:
    doc, problem = answer_of(await messages_post(ctx, _msg(ctx, tools=tools, tool_choice=choice), sse=False))
    return problem or judge_tool_uses(doc or {}, want)


@_scripted("messages.tools.choice-any", "tool_choice {type: any}: a tool_use block, stop_reason tool_use")
async def msg_any(ctx) -> Check:
    return await _msg_choice(ctx, {"type": "any"}, ANTHROPIC_TOOLS[:1], [])


@_scripted("messages.tools.choice-tool", "tool_choice {type: tool, name: get_time} with two tools: only get_time")
async def msg_tool(ctx) -> Check:
    return await _msg_choice(ctx, {"type": "tool", "name": "get_time"}, ANTHROPIC_TOOLS, ["get_time"])


@_scripted("messages.tools.choice-none", "tool_choice {type: none} with a tool offered: no tool_use, no markup")
async def msg_none(ctx) -> Check:
    return await _msg_choice(ctx, {"type": "none"}, ANTHROPIC_TOOLS[:1], None)


@_scripted("messages.thinking.not-asked", "no `thinking` in the request: no thinking block, no think markup in text")
async def msg_no_thinking(ctx) -> Check:
    body = _msg(ctx, messages=[{"role": "user", "content": "Hi"}])
    doc, problem = answer_of(await messages_post(ctx, body, sse=False))
    return problem or judge_no_thinking(doc or {})


@_scripted("messages.errors.missing-model", "a Messages request without `model`: a 4xx, not 200 or 500")
async def msg_missing_model(ctx) -> Check:
    body = {k: v for k, v in _msg(ctx).items() if k != "model"}
    return judge_client_error(await messages_post(ctx, body, sse=False), "missing-model")


@_scripted("messages.errors.unknown-content-type", "a content block of a type that does not exist: a 4xx")
async def msg_unknown_block(ctx) -> Check:
    body = _msg(ctx, messages=[{"role": "user", "content": [{"type": "bogus_block", "text": "Hi"}]}])
    return judge_client_error(await messages_post(ctx, body, sse=False), "unknown-content-type")


@_scripted("messages.errors.image-to-text-model", "an image block to a text-only model: a 4xx, not 200 or 500")
async def msg_image(ctx) -> Check:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}
    body = _msg(ctx, messages=[{"role": "user", "content": [image, {"type": "text", "text": "What is this?"}]}])
    return judge_client_error(await messages_post(ctx, body, sse=False), "image")


@_scripted("messages.errors.unknown-endpoint", "POST /v1/messages/batches (Anthropic's, which an engine may lack): "
           "a 4xx, not 200 or 500")  # fmt: skip
async def msg_endpoint(ctx) -> Check:
    body = {"requests": [{"custom_id": "one", "params": _msg(ctx)}]}
    return judge_client_error(await messages_post(ctx, body, f"{MESSAGES}/batches", sse=False), "unknown-endpoint")


# -- chat: the request errors it lacked -----------------------------------------------------------------------------


@_scripted("errors.missing-model", "a chat request without `model`: a 4xx, not 200 or 500")
async def chat_missing_model(ctx) -> Check:
    body = {k: v for k, v in ctx.chat(max_tokens=4).items() if k != "model"}
    return judge_client_error(await ctx.post(CHAT, body, sse=False), "missing-model")


@_scripted("errors.unknown-content-type", "a chat content part of a type that does not exist: a 4xx")
async def chat_unknown_part(ctx) -> Check:
    body = ctx.chat(max_tokens=4, messages=[{"role": "user", "content": [{"type": "bogus_part", "text": "Hi"}]}])
    return judge_client_error(await ctx.post(CHAT, body, sse=False), "unknown-content-type")


@_scripted("errors.image-to-text-model", "an image_url part to a text-only model: a 4xx, not 200 or 500")
async def chat_image(ctx) -> Check:
    parts = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": IMAGE_URL}}]
    body = ctx.chat(max_tokens=4, messages=[{"role": "user", "content": parts}])
    return judge_client_error(await ctx.post(CHAT, body, sse=False), "image")
