"""Issue 33's declared quirks as rows of test_exact_quirks.TABLE: (judge, the shape the engine answered with, another
shape, the tag that other shape fails with). The shapes are the runs' answers (harness conform on the three scripted
manifests), cut to what the judges read; each judge is the case's own."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

from harness.client import Trace
from harness.conformance.cases.clientrequests import judge_replay
from harness.conformance.cases.clients import judge_result
from harness.conformance.cases.streamequal import Outcome, judge_outcomes, judge_pair
from harness.conformance.cases.surfacedepth import (
    answer_of,
    judge_client_error,
    judge_function_calls,
    judge_no_thinking,
    judge_replayed,
    judge_tool_uses,
)
from harness.conformance.model import Check, passed
from harness.models.scripted import ANSWERS, REASONING, SCRIPT_TEXT, TOOL_CALLS

__all__ = ["ISSUE_33"]

Row = tuple[Callable[[Any], Check], Any, Any, str]
WEATHER = ("get_weather", {"city": "Paris", "unit": "celsius"})
TIME = ("get_time", {"timezone": "Europe/Paris"})
MARKUP = SCRIPT_TEXT["call_direct"]
GUIDED = '<tool_call>{"name": "get_weather", "arguments": ":abc"}</tool_call><tool_call>{"name": "get_'  # 0.32.0
BRACE2 = '{"city": "Paris", "unit": "celsius"}}'  # the hermes streaming parser's doubled closing brace
HARMONY = "Tool use is not supported in Responses API without Harmony"
NO_IMAGE = "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
VERCEL_RESPONSES = "ai 6.0.333 (@ai-sdk/openai 3.0.141)"
ITEM_REFERENCE = "Unsupported input item type: item_reference (parameter=input)"  # its replayed reasoning item, 0.32.0


def answer(status: int, body: Any) -> Trace:
    raw = json.dumps(body).encode()
    return Trace("POST", "http://127.0.0.1:1/v1/responses", status=status, headers={"content-type": "application/json"},
                 body=raw, ended="eof")  # fmt: skip


def err(status: int, message: str) -> Trace:
    return answer(status, {"error": {"message": message, "type": "BadRequestError", "param": None, "code": status}})


def via(judge: Callable[[dict[str, Any]], Check]) -> Callable[[Trace], Check]:
    """A surface-depth case's verdict on its answer: the status problem, else the judge on the document."""

    def run(t: Trace) -> Check:
        doc, problem = answer_of(t)
        return problem or judge(doc or {})

    return run


def message(text: str) -> dict[str, Any]:
    return {"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]}


def calls(*named: tuple[str, str]) -> dict[str, Any]:
    return {"output": [{"type": "function_call", "name": n, "call_id": f"call_{i}", "arguments": a}
                       for i, (n, a) in enumerate(named)]}  # fmt: skip


def blocks(*content: dict[str, Any], stop: str = "end_turn") -> dict[str, Any]:
    return {"content": list(content), "stop_reason": stop}


def use(name: str, args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_1", "name": name, "input": args}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


WEATHER_ARGS = json.dumps(WEATHER[1])
THINKING = {"type": "thinking", "thinking": "\nThe user says hello. I greet them back.\n", "signature": ""}
ANSWERED = answer(200, {"id": "resp_1", "object": "response", "output": []})


def compare(pair: tuple[Outcome, Outcome]) -> Check:
    return judge_outcomes(*pair)


def _status_row(judge: Callable[[Trace], Check], status: int, said: str, other: int = 422) -> Row:
    return (judge, err(status, said), err(other, "another refusal"), f"status-{other}")


def _accepted(what: str) -> Row:
    return (lambda t: judge_client_error(t, what), ANSWERED, err(500, "boom"), "status-500")


_ONE_CALL, _TWO_CALLS = TOOL_CALLS["call"], TOOL_CALLS["parallel"]


def _client_row(feature: str, client: str, error: dict | None, calls: list = _ONE_CALL) -> Row:
    """A client feature's declared failure: its exception (`error`), or an empty final answer (None); another shape
    is a client error the engine's status carries."""
    judge = partial(judge_result, feature)
    seen = (
        {"ok": False, "client": client, "error": error}
        if error
        else {"ok": True, "client": client, "text": "", "calls": [list(c) for c in calls]}
    )
    other = {"ok": False, "client": client, "error": {"type": "APIStatusError", "status": 503, "message": "x"}}
    return (judge, seen, other, "status-503")


def _replay(status: int, said: str) -> Row:
    return _status_row(lambda t: judge_replay(t, stream=False), status, said)


VLLM_011: dict[str, Row] = {
    # example (b): the streamed answer to tool_choice required loses its reasoning and says tool_calls; a streamed
    # call with other arguments is another shape
    "tools.auto.required.stream-equals-message": (
        compare, (Outcome("", REASONING["call"], [WEATHER], "stop"), Outcome("", "", [WEATHER], "tool_calls")),
        (Outcome("", REASONING["call"], [WEATHER], "stop"), Outcome("", REASONING["call"], [("get_weather", {})],
                                                                     "stop")), "stream-calls-differ"),
    # the known intermittent outcomes (issue 34): the doubled closing brace of coalesced deltas, the coalesced <think>
    "tools.auto.message.stream-equals-message": (
        compare, (Outcome("", REASONING["call"], [WEATHER], "tool_calls"),
                  Outcome("", REASONING["call"], [("get_weather", ["not JSON", BRACE2])], "tool_calls")),
        (Outcome("", REASONING["call"], [WEATHER], "tool_calls"), Outcome("", REASONING["call"], [WEATHER], "stop")),
        "stream-finish-differs"),
    "tools.auto.direct.stream-equals-message": (
        compare, (Outcome("", "", [WEATHER], "tool_calls"),
                  Outcome("", "", [("get_weather", ["not JSON", BRACE2])], "tool_calls")),
        (Outcome("", "", [WEATHER], "tool_calls"), Outcome("x", "", [WEATHER], "tool_calls")),
        "stream-content-differs"),
    "tools.auto.stream-equals-message": (
        compare, (Outcome("", REASONING["call"], [WEATHER], "tool_calls"),
                  Outcome("", REASONING["call"], [("get_weather", ["not JSON", BRACE2])], "tool_calls")),
        (Outcome("", REASONING["call"], [WEATHER], "tool_calls"), Outcome("", "", [WEATHER], "tool_calls")),
        "stream-reasoning-differs"),
    "tools.auto.parallel.stream-equals-message": (
        compare, (Outcome("", REASONING["parallel"], [WEATHER, TIME], "tool_calls"),
                  Outcome("", REASONING["parallel"], [WEATHER, ("get_time", ["not JSON", '{"timezone": "Europe/Paris"}}'])],
                          "tool_calls")),
        (Outcome("", REASONING["parallel"], [WEATHER, TIME], "tool_calls"),
         Outcome("", REASONING["parallel"], [WEATHER, TIME], "stop")), "stream-finish-differs"),
    "reasoning.stream-equals-message": (
        compare, (Outcome(ANSWERS["think"], REASONING["think"], [], "stop"),
                  Outcome(ANSWERS["think"], "<think>" + REASONING["think"], [], "stop")),
        (Outcome(ANSWERS["think"], REASONING["think"], [], "stop"), Outcome("", REASONING["think"], [], "stop")),
        "stream-content-differs"),
    "tools.auto.named.stream-equals-message": (
        compare, (Outcome("", REASONING["parallel"], [TIME], "stop"), Outcome("", REASONING["parallel"], [TIME],
                                                                              "tool_calls")),
        (Outcome("", REASONING["parallel"], [TIME], "stop"), Outcome("x", REASONING["parallel"], [TIME], "stop")),
        "stream-content-differs"),
    "responses.tools.stream-equals-message": (
        lambda p: judge_pair("responses", *p), (err(400, HARMONY), err(400, HARMONY)),
        (err(400, HARMONY), err(500, "boom")), "stream-status-500"),
    "responses.reasoning.stream-equals-message": (
        compare, (Outcome(ANSWERS["think"], REASONING["think"], [], "completed"),
                  Outcome(ANSWERS["think"], REASONING["think"], [], None)),
        (Outcome(ANSWERS["think"], REASONING["think"], [], "completed"),
         Outcome(ANSWERS["think"], "", [], "completed")), "stream-reasoning-differs"),
    "responses.tools.choice-required": _status_row(via(lambda d: judge_function_calls(d, [])), 400, HARMONY),
    "responses.tools.choice-named": _status_row(via(lambda d: judge_function_calls(d, ["get_time"])), 400, HARMONY),
    "responses.tools.choice-none": _status_row(via(lambda d: judge_function_calls(d, None)), 400, HARMONY),
    "responses.tools.replay-own-output": _status_row(via(lambda d: judge_replayed(d, "responses", ANSWERS["after_tool"])),
                                                     400, HARMONY),
    "responses.replay-own-message": _status_row(via(lambda d: passed()), 400,
                                                "'ResponseReasoningItem' object is not subscriptable"),
    "responses.errors.missing-model": _accepted("missing-model"),
    "errors.missing-model": _accepted("missing-model"),
    "requests.openai-agents.responses-tools": _replay(400, HARMONY),
    "requests.openai-agents.responses-tools-stream": _replay(400, HARMONY),
    "requests.openai-agents.responses-tool-replay": _replay(400, HARMONY),
    "requests.openai-agents.responses-message-replay": _replay(400, "Unknown part type: output_text"),
    "requests.vercel-ai.responses-json-object": _replay(500, "json_object is not supported"),  # example (a)
    "requests.framework.responses-assistant-replay": _replay(400, "124 validation errors"),  # example (c)
    "client.openai-agents.responses-tools": (
        lambda r: judge_result("responses-tools", r),
        {"ok": False, "client": "openai-agents 0.24.0", "error": {"type": "BadRequestError", "status": 400,
                                                                   "message": f"Error code: 400 - {HARMONY}"}},
        {"ok": True, "client": "openai-agents 0.24.0", "text": ANSWERS["after_tool"], "calls": []},
        "wrong-tool-calls"),
    "client.vercel-ai.responses-tools": _client_row("responses-tools", VERCEL_RESPONSES,
                                                    {"type": "APICallError", "status": 400, "message": HARMONY}),
}  # fmt: skip

VLLM_032: dict[str, Row] = {
    "client.openai-agents.parallel": _client_row("parallel", "openai-agents 0.24.0", None, _TWO_CALLS),
    "client.litellm.parallel": _client_row("parallel", "litellm 1.110.2", None, _TWO_CALLS),
    "client.anthropic.messages-parallel": _client_row("messages-parallel", "anthropic 2.17.0", None, _TWO_CALLS),
    "client.pydantic-ai.parallel": _client_row(
        "parallel", "pydantic-ai-slim 2.78.0", {"type": "UsageLimitExceeded", "message": "request_limit of 3"}
    ),
    "client.openai-agents.tools": _client_row("tools", "openai-agents 0.24.0", None),
    "client.openai-agents.responses-tools": _client_row("responses-tools", "openai-agents 0.24.0", None),
    "client.litellm.tools": _client_row("tools", "litellm 1.110.2", None),
    "client.anthropic.messages-tools": _client_row("messages-tools", "anthropic 2.17.0", None),
    "client.pydantic-ai.tools": _client_row("tools", "pydantic-ai-slim 2.78.0", {"type": "UsageLimitExceeded", "message": "The next request would exceed the request_limit of 3"}),
    "client.instructor.structured": _client_row("structured", "instructor 1.17.0", {"type": "InstructorRetryException", "message": "Input should be an object"}),
    "client.pydantic-ai.structured": _client_row("structured", "pydantic-ai-slim 2.78.0", {"type": "OutputTokenLimitExceeded", "message": "Model token limit (128) exceeded"}),
    "client.vercel-ai.tools": _client_row("tools", "ai 6.0.333 (@ai-sdk/openai-compatible 2.0.92)", None),
    "client.vercel-ai.parallel": _client_row("parallel", "ai 6.0.333 (@ai-sdk/openai-compatible 2.0.92)", None,
                                             _TWO_CALLS),
    "client.vercel-ai.messages-tools": _client_row("messages-tools", "ai 6.0.333 (@ai-sdk/anthropic 3.0.140)", None),
    "client.vercel-ai.responses-tools": _client_row("responses-tools", VERCEL_RESPONSES,
                                                    {"type": "APICallError", "status": 400, "message": ITEM_REFERENCE}),
    # tool_choice required unparsed when not streamed, a call when streamed; a finish_reason apart is another shape
    "tools.auto.required.stream-equals-message": (
        compare, (Outcome(GUIDED, REASONING["call"], [], "length"),
                  Outcome("", REASONING["call"], [("get_weather", ":abc")], "length")),
        (Outcome(GUIDED, REASONING["call"], [], "length"), Outcome(GUIDED, REASONING["call"], [], "stop")),
        "stream-finish-differs"),
    "responses.tools.choice-required": (via(lambda d: judge_function_calls(d, [])), answer(200, message(GUIDED)),
                                        answer(200, calls(("get_weather", "{"))), "arguments-not-json"),
    "responses.tools.choice-named": (via(lambda d: judge_function_calls(d, ["get_time"])),
                                     answer(200, calls(("get_time", '":abc"'))),
                                     answer(200, calls(("get_weather", WEATHER_ARGS))), "choice-not-enforced"),
    "responses.tools.choice-none": (via(lambda d: judge_function_calls(d, None)), answer(200, message("\n\n" + MARKUP)),
                                    answer(200, calls(("get_weather", WEATHER_ARGS))), "tool-call-despite-none"),
    "responses.tools.replay-own-output": (
        via(lambda d: judge_replayed(d, "responses", ANSWERS["after_tool"])),
        answer(200, {"output": [{"type": "reasoning", "summary": [],
                                 "content": [{"type": "reasoning_text", "text": ANSWERS["after_tool"]}]}]}),
        answer(200, message("Hi")), "answer-mismatch"),
    "responses.errors.missing-model": _accepted("missing-model"),
    "errors.missing-model": _accepted("missing-model"),
    "messages.tools.choice-any": (via(lambda d: judge_tool_uses(d, [])), answer(200, blocks(text(GUIDED))),
                                  answer(200, blocks(use("get_weather", ":abc"), stop="tool_use")),
                                  "input-not-object"),
    "messages.tools.choice-tool": _status_row(via(lambda d: judge_tool_uses(d, ["get_time"])), 400,
                                              "1 validation error for AnthropicContentBlock"),
    "messages.tools.choice-none": (via(lambda d: judge_tool_uses(d, None)), answer(200, blocks(text("\n\n" + MARKUP))),
                                   answer(200, blocks(use(*WEATHER), stop="tool_use")), "tool-use-despite-none"),
    "messages.thinking.not-asked": (via(judge_no_thinking), answer(200, blocks(THINKING, text(ANSWERS["think"]))),
                                    answer(200, blocks(text("<think>x</think>Hi"))), "think-markup-in-text"),
}  # fmt: skip

LLAMACPP: dict[str, Row] = {
    "client.vercel-ai.responses-tools": (
        lambda r: judge_result("responses-tools", r),
        {"ok": False, "client": VERCEL_RESPONSES, "error": {"type": "APICallError", "status": 400,
                                                            "message": "Cannot determine type of 'item'"}},
        {"ok": True, "client": VERCEL_RESPONSES, "text": "", "calls": [list(WEATHER)]}, "wrong-answer"),
    "client.instructor.structured": (
        lambda r: judge_result("structured", r),
        {"ok": False, "client": "instructor 1.17.0", "error": {"type": "InstructorRetryException", "status": 500,
                                                               "message": "Unexpected empty grammar stack"}},
        {"ok": True, "client": "instructor 1.17.0", "parsed": {"name": "x"}}, "not-parsed"),
    "client.pydantic-ai.structured": (
        lambda r: judge_result("structured", r),
        {"ok": False, "client": "pydantic-ai-slim 2.78.0",
         "error": {"type": "OutputTokenLimitExceeded", "message": "Model token limit (128) exceeded"}},
        {"ok": False, "client": "pydantic-ai-slim 2.78.0",
         "error": {"type": "ModelHTTPError", "status": 500, "message": "boom"}}, "status-500"),
    "responses.tools.choice-named": (via(lambda d: judge_function_calls(d, ["get_time"])),
                                     answer(200, calls(("get_weather", WEATHER_ARGS), ("get_time", json.dumps(TIME[1])))),
                                     answer(200, calls(("get_time", "{"))), "arguments-not-json"),
    "responses.tools.choice-none": (via(lambda d: judge_function_calls(d, None)), answer(200, message(MARKUP)),
                                    answer(200, calls(("get_weather", WEATHER_ARGS))), "tool-call-despite-none"),
    "responses.errors.missing-model": _accepted("missing-model"),
    "responses.errors.image-to-text-model": (lambda t: judge_client_error(t, "image"), err(500, NO_IMAGE), ANSWERED,
                                             "accepted-image"),
    "messages.tools.choice-tool": (via(lambda d: judge_tool_uses(d, ["get_time"])),
                                   answer(200, blocks(use(*WEATHER), use(*TIME), stop="tool_use")),
                                   answer(200, blocks(use("get_time", "x"), stop="tool_use")), "input-not-object"),
    "messages.tools.choice-none": (via(lambda d: judge_tool_uses(d, None)),
                                   answer(200, blocks(use(*WEATHER), stop="tool_use")),
                                   answer(200, blocks(text(MARKUP))), "tool-markup-in-text"),
    "messages.thinking.not-asked": (via(judge_no_thinking), answer(200, blocks(THINKING, text(ANSWERS["think"]))),
                                    answer(200, blocks(text("<think>x</think>Hi"))), "think-markup-in-text"),
    "messages.errors.missing-model": _accepted("missing-model"),
    "messages.errors.unknown-content-type": (lambda t: judge_client_error(t, "unknown-content-type"), ANSWERED,
                                             err(500, "boom"), "status-500"),
    "messages.errors.image-to-text-model": (lambda t: judge_client_error(t, "image"), err(500, NO_IMAGE), ANSWERED,
                                            "accepted-image"),
    "errors.missing-model": _accepted("missing-model"),
    "errors.image-to-text-model": (lambda t: judge_client_error(t, "image"), err(500, NO_IMAGE), ANSWERED,
                                   "accepted-image"),
}  # fmt: skip

ISSUE_33: dict[tuple[str, str], Row] = {
    **{("vllm-0.11", k): v for k, v in VLLM_011.items()},
    **{("vllm-0.32", k): v for k, v in VLLM_032.items()},
    **{("llamacpp-0c1e570", k): v for k, v in LLAMACPP.items()},
}
