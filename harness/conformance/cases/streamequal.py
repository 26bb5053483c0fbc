"""Streamed and not streamed, one answer (`*.stream-equals-message`, issue 33): at temperature 0 the same request sent
both ways gives a client the same result, field by field, on every surface the scripted model's tools and
reasoning reach: chat, Responses, Messages.

What a client ends up holding (`Outcome`) is read from each side as a client's accumulator reads it:

    chat       content, reasoning (reasoning_content / reasoning), tool calls (name + arguments joined by index),
               finish_reason
    Responses  output text, reasoning text, function_call items (name + arguments), the response's status
    Messages   text blocks, thinking blocks, tool_use blocks (name + input, input_json_delta joined), stop_reason

Text is compared without surrounding whitespace (as reasoning.* does: engines differ in the newlines they keep around
a think block), arguments as JSON values. Each field that differs is its own tag: `stream-content-differs`,
`stream-reasoning-differs`, `stream-calls-differ`, `stream-finish-differs`; an error event in the stream is
`error-event`; a side that is not HTTP 200 is `message-status-NNN` / `stream-status-NNN` (a request refused one way
and taken the other is a disagreement too). Selected only with the scripted model (`Case.needs`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.client import Trace
from harness.client.sse import decode_json
from harness.conformance.case import SCRIPTED_MODEL
from harness.conformance.cases.reasoning import reasoning_of
from harness.conformance.cases.tools import MAX_TOKENS, NO_THINKING, QUESTION, TIME_TOOL, WEATHER_TOOL
from harness.conformance.model import Check, Deviations, absent_problem, failed, passed
from harness.conformance.registry import case
from harness.conformance.typedstream import TypedStream, is_error_event, typed_stream
from harness.conformance.view import StreamView, choices, from_trace
from harness.shown import shown

__all__ = [
    "Outcome",
    "chat_message_outcome",
    "chat_stream_outcome",
    "responses_outcome",
    "responses_stream_outcome",
    "messages_outcome",
    "messages_stream_outcome",
    "judge_outcomes",
    "judge_pair",
    "json_value",
]

CHAT, RESPONSES, MESSAGES = "/v1/chat/completions", "/v1/responses", "/v1/messages"
SHOWN = 300


@dataclass
class Outcome:
    """What a client holds once the answer is read: the side's text fields, its calls, how it ended."""

    content: str = ""
    reasoning: str = ""
    calls: list[tuple[Any, Any]] = field(default_factory=list)  # (name, arguments as a JSON value)
    finish: Any = None
    errors: list[tuple[int, Any]] = field(default_factory=list)  # (event n, what the error event said)


def json_value(raw: Any) -> Any:
    """Arguments as the JSON value a client parses them to; text that is not JSON stays as ("not JSON", text)."""
    if not isinstance(raw, str):
        return raw
    val, err = decode_json(raw)  # bounded in depth, as every JSON a judge parses
    return ("not JSON", raw[:SHOWN]) if err is not None else val


def _text(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


# -- chat ----------------------------------------------------------------------------------------------------------


def chat_message_outcome(doc: Any) -> Outcome:
    c0 = _obj((choices(doc) or [{}])[0])
    msg = _obj(c0.get("message"))
    calls = []
    for tc in _list(msg.get("tool_calls")):
        fn = _obj(_obj(tc).get("function"))
        calls.append((fn.get("name"), json_value(fn.get("arguments"))))
    return Outcome(_text(msg.get("content")), reasoning_of(msg), calls, c0.get("finish_reason"))


def chat_stream_outcome(view: StreamView) -> Outcome:
    """As a client's accumulator: choice 0's content and reasoning deltas joined, tool-call fragments joined by
    `index` (the first name seen, every arguments fragment), the last finish_reason."""
    out = Outcome()
    content: list[str] = []
    reasoning: list[str] = []
    by_index: dict[Any, list[Any]] = {}  # index -> [name, argument pieces]
    for n, obj in view.objects():
        if "error" in obj:
            out.errors.append((n, obj["error"]))
        for c in choices(obj):
            if c.get("index", 0) != 0:
                continue
            d = _obj(c.get("delta"))
            content.append(_text(d.get("content")))
            reasoning.append(reasoning_of(d))
            for tc in _list(d.get("tool_calls")):
                if not isinstance(tc, dict):
                    continue
                slot = by_index.setdefault(tc.get("index"), [None, []])
                fn = _obj(tc.get("function"))
                if slot[0] is None and fn.get("name"):
                    slot[0] = fn["name"]
                slot[1].append(_text(fn.get("arguments")))
            if c.get("finish_reason") is not None:
                out.finish = c["finish_reason"]
    out.content, out.reasoning = "".join(content), "".join(reasoning)
    out.calls = [(name, json_value("".join(pieces))) for _, (name, pieces) in
                 sorted(by_index.items(), key=lambda kv: kv[0] if isinstance(kv[0], int) else -1)]  # fmt: skip
    return out


# -- Responses ------------------------------------------------------------------------------------------------------


def _item_texts(item: dict[str, Any], kinds: tuple[str, ...], keys: tuple[str, ...] = ("content",)) -> str:
    parts = []
    for key in keys:
        for p in item.get(key) or []:
            if isinstance(p, dict) and p.get("type") in kinds and isinstance(p.get("text"), str):
                parts.append(p["text"])
    return "".join(parts)


def responses_outcome(doc: Any) -> Outcome:
    out = Outcome(finish=doc.get("status") if isinstance(doc, dict) else None)
    items = _list(_obj(doc).get("output"))
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            out.content += _item_texts(item, ("output_text",))
        elif item.get("type") == "reasoning":
            out.reasoning += _item_texts(item, ("reasoning_text", "summary_text"), ("content", "summary"))
        elif item.get("type") == "function_call":
            out.calls.append((item.get("name"), json_value(item.get("arguments"))))
    return out


def responses_stream_outcome(s: TypedStream) -> Outcome:
    """As a Responses event state machine: text and reasoning from their deltas, calls from the finished
    function_call items (output_item.done), the status of the terminal event's response."""
    out = Outcome()
    for e in s.events:
        obj = e.obj if isinstance(e.obj, dict) else {}
        kind = e.type or e.name or ""
        if is_error_event(e):
            out.errors.append((e.n, obj.get("error") or obj.get("message") or obj))
        elif kind == "response.output_text.delta":
            out.content += _text(obj.get("delta"))
        elif kind.startswith("response.reasoning") and kind.endswith(".delta"):
            out.reasoning += _text(obj.get("delta"))
        elif kind == "response.output_item.done" and isinstance(obj.get("item"), dict):
            item = obj["item"]
            if item.get("type") == "function_call":
                out.calls.append((item.get("name"), json_value(item.get("arguments"))))
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            resp = _obj(obj.get("response"))
            out.finish = resp.get("status")
    return out


# -- Messages -------------------------------------------------------------------------------------------------------


def messages_outcome(doc: Any) -> Outcome:
    out = Outcome(finish=doc.get("stop_reason") if isinstance(doc, dict) else None)
    blocks = _list(_obj(doc).get("content"))
    for b in blocks:
        if not isinstance(b, dict):
            continue
        if b.get("type") == "text":
            out.content += _text(b.get("text"))
        elif b.get("type") == "thinking":
            out.reasoning += _text(b.get("thinking"))
        elif b.get("type") == "tool_use":
            out.calls.append((b.get("name"), b.get("input")))
    return out


def messages_stream_outcome(s: TypedStream) -> Outcome:
    """As the anthropic SDK's accumulator: blocks opened by content_block_start, text and thinking deltas joined,
    a tool_use's input_json_delta pieces joined and parsed, stop_reason from message_delta."""
    out = Outcome()
    blocks: dict[Any, dict[str, Any]] = {}
    for e in s.events:
        obj = e.obj if isinstance(e.obj, dict) else {}
        kind = e.type or e.name or ""
        if is_error_event(e):
            out.errors.append((e.n, obj.get("error") or obj))
        elif kind == "content_block_start" and isinstance(obj.get("content_block"), dict):
            blocks[obj.get("index")] = {**obj["content_block"], "_json": []}
        elif kind == "content_block_delta" and isinstance(obj.get("delta"), dict):
            b = blocks.setdefault(obj.get("index"), {"type": None, "_json": []})
            d = obj["delta"]
            if d.get("type") == "text_delta":
                b["text"] = _text(b.get("text")) + _text(d.get("text"))
            elif d.get("type") == "thinking_delta":
                b["thinking"] = _text(b.get("thinking")) + _text(d.get("thinking"))
            elif d.get("type") == "input_json_delta":
                b["_json"].append(_text(d.get("partial_json")))
        elif kind == "message_delta" and isinstance(obj.get("delta"), dict):
            out.finish = obj["delta"].get("stop_reason", out.finish)
    for _, b in sorted(blocks.items(), key=lambda kv: kv[0] if isinstance(kv[0], int) else -1):
        if b.get("type") == "text":
            out.content += _text(b.get("text"))
        elif b.get("type") == "thinking":
            out.reasoning += _text(b.get("thinking"))
        elif b.get("type") == "tool_use":
            joined = "".join(b["_json"])
            out.calls.append((b.get("name"), json_value(joined) if joined else b.get("input")))
    return out


# -- the comparison -------------------------------------------------------------------------------------------------


def judge_outcomes(whole: Outcome, streamed: Outcome) -> Check:
    """Every field the streamed answer gives a client equals the non-streamed answer's."""
    dev = Deviations()
    for n, err in streamed.errors:
        dev.add("error-event", "no error event", shown(err)[:SHOWN], n)
    if whole.content.strip() != streamed.content.strip():
        dev.add("stream-content-differs", whole.content, streamed.content)
    if whole.reasoning.strip() != streamed.reasoning.strip():
        dev.add("stream-reasoning-differs", whole.reasoning, streamed.reasoning)
    if whole.calls != streamed.calls:
        dev.add("stream-calls-differ", whole.calls, streamed.calls)
    if whole.finish != streamed.finish:
        dev.add("stream-finish-differs", whole.finish, streamed.finish)
    said = f"{len(whole.calls)} call(s), reasoning {len(whole.reasoning.strip())} chars, finish {whole.finish}"
    return dev.check(passed(f"alike: {said}"))


def _side_problem(trace: Trace, side: str) -> Check | None:
    if (absent := absent_problem(trace)) is not None:
        return absent
    if trace.status != 200:
        body = trace.error or trace.body[:200].decode("utf-8", "replace")
        return failed(f"{side}-status-{trace.status}", 200, shown(body)[:SHOWN])
    return None


def judge_pair(surface: str, message: Trace, stream: Trace) -> Check:
    """The two answers to one request on `surface` (chat, responses, messages), compared."""
    problems = [p for p in (_side_problem(message, "message"), _side_problem(stream, "stream")) if p is not None]
    if problems:
        if all(p.status.value == "absent" for p in problems):
            return problems[0]
        dev = Deviations()
        for p in problems:
            if p.status.value != "absent":
                dev.merge(p)
        return dev.check()
    doc, err = message.body_json()
    if err or not isinstance(doc, dict):
        return failed("non-json-body", "a JSON answer", message.body[:200].decode("utf-8", "replace"))
    if surface == "chat":
        return judge_outcomes(chat_message_outcome(doc), chat_stream_outcome(from_trace(stream)))
    if surface == "responses":
        return judge_outcomes(responses_outcome(doc), responses_stream_outcome(typed_stream(stream)))
    return judge_outcomes(messages_outcome(doc), messages_stream_outcome(typed_stream(stream)))


# -- the cases ------------------------------------------------------------------------------------------------------

NAMED = {"type": "function", "function": {"name": "get_time"}}
_CALL = {"id": "call_0a1b2c3d4e5f", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}  # fmt: skip
AFTER_TOOL = [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [_CALL]},
              {"role": "tool", "tool_call_id": _CALL["id"], "content": '{"temperature": 18, "unit": "celsius"}'}]  # fmt: skip
_WEATHER_FN: dict[str, Any] = _obj(WEATHER_TOOL["function"])
RESP_WEATHER = {"type": "function", **_WEATHER_FN}
ANTHROPIC_WEATHER = {"name": "get_weather", "description": _WEATHER_FN["description"],
                     "input_schema": _WEATHER_FN["parameters"]}  # fmt: skip


def _chat(ctx: Any, **kw: Any) -> dict[str, Any]:
    return ctx.chat(messages=QUESTION, max_tokens=MAX_TOKENS, **kw)


def _responses(ctx: Any, **kw: Any) -> dict[str, Any]:
    return {"model": ctx.model, "input": QUESTION[0]["content"], "max_output_tokens": MAX_TOKENS, "temperature": 0,
            **kw}  # fmt: skip


def _messages(ctx: Any, **kw: Any) -> dict[str, Any]:
    return {"model": ctx.model, "max_tokens": MAX_TOKENS, "temperature": 0, "messages": QUESTION, **kw}


# case id -> (surface, requirement, the request without `stream`)
PAIRS: dict[str, tuple[str, str, Callable[[Any], dict[str, Any]]]] = {
    "tools.auto.message.stream-equals-message": (
        "chat", "one tool, thinking on: content, reasoning, the call and finish_reason alike streamed and not",
        lambda ctx: _chat(ctx, tools=[WEATHER_TOOL])),
    "tools.auto.parallel.stream-equals-message": (
        "chat", "two tools: both calls, the reasoning and finish_reason alike streamed and not",
        lambda ctx: _chat(ctx, tools=[WEATHER_TOOL, TIME_TOOL])),
    "tools.auto.direct.stream-equals-message": (
        "chat", "thinking off, one tool: the call and finish_reason alike streamed and not",
        lambda ctx: _chat(ctx, tools=[WEATHER_TOOL], **NO_THINKING)),
    "tools.auto.required.stream-equals-message": (
        "chat", "tool_choice required, thinking on: the reasoning and the call alike streamed and not",
        lambda ctx: _chat(ctx, tools=[WEATHER_TOOL], tool_choice="required")),
    "tools.auto.named.stream-equals-message": (
        "chat", "a named tool_choice: the reasoning and the call alike streamed and not",
        lambda ctx: _chat(ctx, tools=[WEATHER_TOOL, TIME_TOOL], tool_choice=NAMED)),
    "tools.auto.result-turn.stream-equals-message": (
        "chat", "the turn after a tool result: the answer alike streamed and not",
        lambda ctx: ctx.chat(messages=AFTER_TOOL, tools=[WEATHER_TOOL], max_tokens=MAX_TOKENS)),
    "reasoning.stream-equals-message": (
        "chat", "thinking on, no tools: reasoning and content alike streamed and not",
        lambda ctx: ctx.chat(messages=[{"role": "user", "content": "Hi"}], max_tokens=MAX_TOKENS)),
    "responses.tools.stream-equals-message": (
        "responses", "Responses with a tool: reasoning, function_call items and status alike streamed and not",
        lambda ctx: _responses(ctx, tools=[RESP_WEATHER])),
    "responses.reasoning.stream-equals-message": (
        "responses", "Responses, thinking on: output text, reasoning and status alike streamed and not",
        lambda ctx: _responses(ctx, input="Hi")),
    "messages.tools.stream-equals-message": (
        "messages", "Messages with a tool: text, thinking, tool_use blocks and stop_reason alike streamed and not",
        lambda ctx: _messages(ctx, tools=[ANTHROPIC_WEATHER])),
    "messages.thinking.stream-equals-message": (
        "messages", "Messages, no tools: text, thinking and stop_reason alike streamed and not",
        lambda ctx: _messages(ctx, messages=[{"role": "user", "content": "Hi"}])),
}  # fmt: skip


async def _send(ctx: Any, surface: str, body: dict[str, Any], stream: bool) -> Trace:
    if stream:
        body = {**body, "stream": True}
        if surface == "chat":
            body["stream_options"] = {"include_usage": True}
    if surface == "messages":
        from harness.conformance.cases.messages import post

        return await post(ctx, body, sse=stream)
    return await ctx.post(CHAT if surface == "chat" else RESPONSES, body, sse=stream)


def _register(case_id: str, surface: str, requirement: str, build: Callable[[Any], dict[str, Any]]) -> None:
    async def run(ctx: Any) -> Check:
        body = build(ctx)
        message = await _send(ctx, surface, body, stream=False)
        stream = await _send(ctx, surface, body, stream=True)
        return judge_pair(surface, message, stream)

    case(case_id, requirement, needs=(SCRIPTED_MODEL,))(run)


for _id, (_surface, _req, _build) in PAIRS.items():
    _register(_id, _surface, _req, _build)
