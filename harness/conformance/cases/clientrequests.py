"""The request bodies real clients send, replayed as they are (`requests.<client>.<shape>`, issue 33): a refusal
(4xx, 5xx) of a body a client sends is named even where that client is not installed.

Each body is the shape the client's own source writes (cited beside it), filled with the scripted model's question
and tools (harness.models.scripted), so an engine that takes the body answers with the script. The verdict is the
server's: HTTP 200 with a JSON answer (or a stream without an error event) passes; any other status fails with
`status-NNN` and the server's own error message as evidence; a route the release does not serve is `absent`.
Selected only with the scripted model (`Case.needs`): outside its scripts a forced or replayed turn proves nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.client import Trace
from harness.conformance.case import SCRIPTED_MODEL
from harness.conformance.model import Check, Deviations, absent_problem, failed, passed
from harness.conformance.registry import case
from harness.conformance.typedstream import is_error_event, typed_stream
from harness.shown import shown

__all__ = ["REPLAYS", "Replay", "judge_replay", "server_error"]

CHAT, RESPONSES, MESSAGES = "/v1/chat/completions", "/v1/responses", "/v1/messages"
MAX_TOKENS = 96  # the longest script (two calls after a think block) is 24 tokens
PARALLEL_TOKENS = 40  # two strict tools fill most of a 1024-token context (vLLM 0.11.0 scripted): room for 24
ERROR_SHOWN = 400
QUESTION = "What is the weather in Paris?"
RESULT = "18 degrees Celsius in Paris"
ARGS = '{"city": "Paris", "unit": "celsius"}'
_WEATHER_PROPS = {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}
# a strict tool's schema as the SDKs derive it from a typed function: every property required, nothing else allowed
STRICT_WEATHER = {"type": "object", "properties": _WEATHER_PROPS, "required": ["city", "unit"],
                  "additionalProperties": False}  # fmt: skip
STRICT_TIME = {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"],
               "additionalProperties": False}  # fmt: skip
ITEM_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "count": {"type": "integer"}},
               "required": ["name", "count"], "additionalProperties": False}  # fmt: skip


@dataclass(frozen=True)
class Replay:
    id: str  # requests.<client>.<shape>
    requirement: str
    path: str
    body: Callable[[str], dict[str, Any]]  # the served model's name -> the body
    stream: bool = False


def _chat_tool(name: str, description: str, schema: dict[str, Any], strict: bool = True) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": name, "description": description, "parameters": schema}
    if strict:
        fn["strict"] = True
    return {"type": "function", "function": fn}


def _resp_tool(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "name": name, "description": description, "parameters": schema, "strict": True}


WEATHER_CHAT = _chat_tool("get_weather", "Get the current weather in a city.", STRICT_WEATHER)
TIME_CHAT = _chat_tool("get_time", "Get the current time in a timezone.", STRICT_TIME)
WEATHER_RESP = _resp_tool("get_weather", "Get the current weather in a city.", STRICT_WEATHER)
WEATHER_ANTHROPIC = {"name": "get_weather", "description": "Get the current weather in a city.",
                     "input_schema": {"type": "object", "properties": _WEATHER_PROPS, "required": ["city"]}}  # fmt: skip
_CALL = {"id": "call_0a1b2c3d4e5f", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}


def _user(text: str = QUESTION) -> dict[str, Any]:
    return {"role": "user", "content": text}


# -- pydantic-ai (pydantic_ai/models/openai/_chat_model.py: _completions_create, _map_tool_definition,
#    _map_json_schema, _get_stream_options; tools carry `strict`, a stream asks stream_options.include_usage) --------


def _pydantic_tools(model: str) -> dict[str, Any]:
    return {"model": model, "messages": [_user()], "temperature": 0, "max_tokens": MAX_TOKENS,
            "tools": [WEATHER_CHAT], "tool_choice": "auto"}  # fmt: skip


def _pydantic_stream(model: str) -> dict[str, Any]:
    return {**_pydantic_tools(model), "stream": True, "stream_options": {"include_usage": True}}


def _pydantic_replay(model: str) -> dict[str, Any]:
    # _map_messages: an assistant turn of only tool calls has no `content` key at all; the result a `tool` message
    history = [_user(), {"role": "assistant", "tool_calls": [_CALL]},
               {"role": "tool", "tool_call_id": _CALL["id"], "content": RESULT}]  # fmt: skip
    return {**_pydantic_tools(model), "messages": history}


def _pydantic_json_schema(model: str) -> dict[str, Any]:
    rf = {"type": "json_schema", "json_schema": {"name": "final_result", "schema": ITEM_SCHEMA, "strict": True}}
    return {"model": model, "messages": [_user("Describe an item as JSON.")], "temperature": 0,
            "max_tokens": 128, "response_format": rf}  # fmt: skip


# -- the Vercel AI SDK (vercel/ai packages/openai-compatible/src/chat/openai-compatible-chat-language-model.ts
#    getArgs: response_format json_object without a schema (or without structuredOutputs); provider options such as
#    parallel_tool_calls passed through; doStream: stream_options.include_usage when the provider sets includeUsage) --


def _vercel_json_object(model: str) -> dict[str, Any]:
    return {"model": model, "messages": [_user("Describe an item as JSON.")], "temperature": 0, "max_tokens": 128,
            "response_format": {"type": "json_object"}}  # fmt: skip


def _vercel_parallel(model: str) -> dict[str, Any]:
    return {"model": model, "messages": [_user("What is the weather and the time in Paris?")], "temperature": 0,
            "max_tokens": PARALLEL_TOKENS, "tools": [_chat_tool("get_weather", "Get the current weather in a city.",
                                                           STRICT_WEATHER, strict=False), TIME_CHAT],
            "tool_choice": "auto", "parallel_tool_calls": True, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip


# -- the OpenAI Agents SDK (agents/models/openai_responses.py _fetch_response's create_kwargs: input items, tools with
#    `strict`, `include`, `parallel_tool_calls`, `text`; agents/items.py _output_item_to_input_item replays the
#    server's own output items as they came, id and status included; agents/models/chatcmpl_converter.py
#    tool_to_openai for its Chat Completions model) -----------------------------------------------------------------


def _agents_responses_tools(model: str) -> dict[str, Any]:
    return {"model": model, "input": [{"content": QUESTION, "role": "user"}], "include": [], "tools": [WEATHER_RESP],
            "temperature": 0, "max_output_tokens": MAX_TOKENS, "parallel_tool_calls": False}  # fmt: skip


def _agents_responses_tool_replay(model: str) -> dict[str, Any]:
    call = {"arguments": ARGS, "call_id": "call_0a1b2c3d4e5f", "name": "get_weather", "type": "function_call",
            "id": "fc_0a1b2c3d4e5f", "status": "completed"}  # fmt: skip
    out = {"call_id": "call_0a1b2c3d4e5f", "output": RESULT, "type": "function_call_output"}
    return {**_agents_responses_tools(model), "input": [{"content": QUESTION, "role": "user"}, call, out]}


def _agents_responses_message_replay(model: str) -> dict[str, Any]:
    said = {"id": "msg_0a1b2c3d4e5f", "content": [{"annotations": [], "text": "Hello! How can I help?",
                                                   "type": "output_text", "logprobs": []}],
            "role": "assistant", "status": "completed", "type": "message"}  # fmt: skip
    turns = [{"content": "Say hello.", "role": "user"}, said, {"content": "Say hello again.", "role": "user"}]
    return {"model": model, "input": turns, "include": [], "temperature": 0, "max_output_tokens": MAX_TOKENS}


def _agents_responses_json_schema(model: str) -> dict[str, Any]:
    fmt = {"format": {"type": "json_schema", "name": "final_output", "schema": ITEM_SCHEMA, "strict": True}}
    return {"model": model, "input": [{"content": "Describe an item as JSON.", "role": "user"}], "include": [],
            "temperature": 0, "max_output_tokens": 128, "text": fmt}  # fmt: skip


def _agents_responses_stream(model: str) -> dict[str, Any]:
    return {**_agents_responses_tools(model), "stream": True}


def _agents_chat_tools(model: str) -> dict[str, Any]:
    return {"model": model, "messages": [_user()], "temperature": 0, "max_tokens": MAX_TOKENS,
            "tools": [WEATHER_CHAT], "parallel_tool_calls": False, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip


# -- the Vercel AI SDK on Responses (vercel/ai packages/openai/src/responses/openai-responses-language-model.ts:
#    `text.format` json_object when no schema is given) and a framework's replayed assistant turn: chat-history
#    converters write the earlier answer as a `message` item with output_text parts and no id or status
#    (microsoft/vscode-copilot-chat src/platform/endpoint/node/responsesApi.ts rawContentToResponsesOutputContent:
#    output_text with `annotations: []`; the example is this shape verbatim) -----------------------------------


def _vercel_responses_json_object(model: str) -> dict[str, Any]:
    return {"model": model, "input": [{"role": "user", "content": [{"type": "input_text",
                                                                   "text": "Describe an item as JSON."}]}],
            "temperature": 0, "max_output_tokens": 128, "text": {"format": {"type": "json_object"}}}  # fmt: skip


def _framework_assistant_replay(model: str) -> dict[str, Any]:
    said = {"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": "hello", "annotations": []}]}  # fmt: skip
    turns = [{"role": "user", "content": "Say hello."}, said, {"role": "user", "content": "Say hello again."}]
    return {"model": model, "input": turns, "temperature": 0, "max_output_tokens": MAX_TOKENS}


# -- the anthropic SDK (anthropic/lib/tools/_beta_runner.py: the tool runner appends the assistant's content blocks
#    as the SDK parsed them and a user turn of tool_result blocks; anthropic/types/tool_use_block.py) -----------------


def _anthropic_tool_replay(model: str) -> dict[str, Any]:
    use = {"id": "toolu_01A2b3C4d5E6f7G8h9I0j1K2", "input": {"city": "Paris", "unit": "celsius"},
           "name": "get_weather", "type": "tool_use"}  # fmt: skip
    result = {"type": "tool_result", "tool_use_id": use["id"], "content": [{"type": "text", "text": RESULT}]}
    turns = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": [use]},
             {"role": "user", "content": [result]}]  # fmt: skip
    return {"model": model, "max_tokens": MAX_TOKENS, "messages": turns, "tools": [WEATHER_ANTHROPIC],
            "temperature": 0}  # fmt: skip


def _anthropic_stream_tools(model: str) -> dict[str, Any]:
    return {"model": model, "max_tokens": MAX_TOKENS, "messages": [{"role": "user", "content": QUESTION}],
            "tools": [WEATHER_ANTHROPIC], "tool_choice": {"type": "auto"}, "stream": True, "temperature": 0}  # fmt: skip


REPLAYS: tuple[Replay, ...] = (
    Replay("requests.pydantic-ai.chat-tools-strict", "pydantic-ai's chat body: a tool with strict, tool_choice auto",
           CHAT, _pydantic_tools),
    Replay("requests.pydantic-ai.chat-stream-options", "pydantic-ai's streamed chat body: strict tool, "
           "stream_options.include_usage", CHAT, _pydantic_stream, stream=True),
    Replay("requests.pydantic-ai.chat-tool-replay", "pydantic-ai's second turn: an assistant turn of tool_calls with "
           "no content key, then the tool result", CHAT, _pydantic_replay),
    Replay("requests.pydantic-ai.chat-json-schema", "pydantic-ai's structured output: response_format json_schema "
           "named final_result, strict", CHAT, _pydantic_json_schema),
    Replay("requests.vercel-ai.chat-json-object", "the Vercel AI SDK's JSON mode without a schema: response_format "
           "json_object", CHAT, _vercel_json_object),
    Replay("requests.vercel-ai.chat-parallel-stream", "the Vercel AI SDK's streamed body: two tools (one not strict), "
           "parallel_tool_calls true, stream_options", CHAT, _vercel_parallel, stream=True),
    Replay("requests.openai-agents.chat-tools-stream", "the Agents SDK's Chat Completions model: a strict tool, "
           "parallel_tool_calls false, streamed with stream_options", CHAT, _agents_chat_tools, stream=True),
    Replay("requests.openai-agents.responses-tools", "the Agents SDK's Responses body: input items, a strict "
           "function tool, include [], parallel_tool_calls false", RESPONSES, _agents_responses_tools),
    Replay("requests.openai-agents.responses-tools-stream", "the same Responses body streamed", RESPONSES,
           _agents_responses_stream, stream=True),
    Replay("requests.openai-agents.responses-tool-replay", "the Agents SDK's second turn: its function_call item "
           "replayed (id, status) and a function_call_output", RESPONSES, _agents_responses_tool_replay),
    Replay("requests.openai-agents.responses-message-replay", "the Agents SDK's next turn: the assistant message "
           "item replayed as it came (id, status, annotations, logprobs)", RESPONSES, _agents_responses_message_replay),
    Replay("requests.openai-agents.responses-json-schema", "the Agents SDK's structured output on Responses: "
           "text.format json_schema, strict", RESPONSES, _agents_responses_json_schema),
    Replay("requests.vercel-ai.responses-json-object", "the Vercel AI SDK's JSON mode on Responses: text.format "
           "json_object", RESPONSES, _vercel_responses_json_object),
    Replay("requests.framework.responses-assistant-replay", "a replayed assistant turn as frameworks write it: a "
           "message item of output_text with annotations [], no id, no status", RESPONSES,
           _framework_assistant_replay),
    Replay("requests.anthropic.messages-tool-replay", "the anthropic tool runner's second turn: the tool_use block "
           "replayed, then a tool_result of text blocks", MESSAGES, _anthropic_tool_replay),
    Replay("requests.anthropic.messages-tools-stream", "the anthropic SDK's streamed body with a tool and "
           "tool_choice auto", MESSAGES, _anthropic_stream_tools, stream=True),
)  # fmt: skip


def server_error(trace: Trace) -> str:
    """What the server said when it refused: its error message, else the start of the body (shown escaped)."""
    doc, _ = trace.body_json()
    err = doc.get("error") if isinstance(doc, dict) else None
    msg = err.get("message") if isinstance(err, dict) else err if isinstance(err, str) else None
    if msg is None and isinstance(doc, dict):
        msg = doc.get("detail") or doc.get("message")
    text = msg if isinstance(msg, str) else trace.error or trace.body[:ERROR_SHOWN].decode("utf-8", "replace")
    return shown(text)[:ERROR_SHOWN]


def judge_replay(trace: Trace, stream: bool) -> Check:
    """The answer to a body a client sends: a 200 the client can read (a JSON body; a stream without an error event),
    else the server's refusal as `status-NNN` with its message."""
    if (absent := absent_problem(trace)) is not None:
        return absent
    if trace.status != 200:
        return failed(
            f"status-{trace.status}", 200, server_error(trace), note="the server refused a body a client sends"
        )
    if not stream:
        doc, err = trace.body_json()
        if err or not isinstance(doc, dict):
            return failed("non-json-body", "a JSON answer", trace.body[:200].decode("utf-8", "replace"))
        return passed("HTTP 200")
    dev = Deviations()
    events = typed_stream(trace).events
    for e in events:
        if is_error_event(e):
            dev.add("error-event", "no error event", shown(e.obj)[:ERROR_SHOWN], e.n)
    if not events:
        dev.add("empty-stream", "streamed events", trace.body[:200].decode("utf-8", "replace"))
    return dev.check(passed(f"HTTP 200, {len(events)} events"))


async def _send(ctx: Any, r: Replay) -> Trace:
    body = r.body(ctx.model)
    if r.path == MESSAGES:  # as an Anthropic client sends it: its version header, the key in x-api-key
        from harness.conformance.cases.messages import post

        return await post(ctx, body, sse=r.stream)
    return await ctx.post(r.path, body, sse=r.stream)


def _register(r: Replay) -> None:
    async def run(ctx: Any) -> Check:
        return judge_replay(await _send(ctx, r), r.stream)

    case(r.id, r.requirement + ": accepted (HTTP 200)", needs=(SCRIPTED_MODEL,))(run)


for _r in REPLAYS:
    _register(_r)
