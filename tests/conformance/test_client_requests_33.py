"""Issue 33's request cases (`requests.<client>.*`, `*.stream-equals-message`, the Responses / Messages depth cases)
against a scripted stand-in on 127.0.0.1 (tests/support/surface_server.py's shapes, answering as the scripted model
does): a server that takes every body and answers alike streamed and not passes them all; each of the issue's three
examples, reproduced in the stand-in, is a non-pass verdict of the case that names it; the pure judges fail each
broken shape with its own tag."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from harness.client import Trace
from harness.conformance.cases.clientrequests import REPLAYS, judge_replay
from harness.conformance.cases.streamequal import PAIRS, Outcome, judge_outcomes
from harness.conformance.cases.surfacedepth import (
    judge_client_error,
    judge_function_calls,
    judge_no_thinking,
    judge_tool_uses,
)
from harness.conformance.expectations import load_expectations
from harness.conformance.model import Verdict
from harness.conformance.runner import new_ctx, run_suite
from harness.models.scripted import ANSWERS, REASONING
from tests.support import surface_server as ss

WEATHER_ARGS = {"city": "Paris", "unit": "celsius"}
TIME_ARGS = {"timezone": "Europe/Paris"}
DEPTH = ["responses.tools.choice-*", "responses.tools.replay-own-output", "responses.replay-own-message",
         "responses.errors.missing-model", "responses.errors.unknown-content-type",
         "responses.errors.image-to-text-model", "responses.errors.unknown-endpoint", "messages.tools.choice-*",
         "messages.thinking.not-asked", "messages.errors.missing-model", "messages.errors.unknown-content-type",
         "messages.errors.image-to-text-model", "messages.errors.unknown-endpoint", "errors.missing-model",
         "errors.unknown-content-type", "errors.image-to-text-model"]  # fmt: skip
PATTERNS = ["requests.*", *PAIRS, *DEPTH]


def _script(tools: list[str], choice: Any, last_role: str, thinking: bool) -> tuple[str, str, list]:
    """(reasoning, content, [(name, args)]) as the scripted model answers (harness.models.scripted)."""
    if last_role == "tool":
        return "", ANSWERS["after_tool"], []
    if not tools or choice == "none" or (isinstance(choice, dict) and choice.get("type") == "none"):
        return (REASONING["think"] if thinking else ""), ANSWERS["think"], []
    named = choice.get("name") or (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    if named:
        calls = [(named, TIME_ARGS if named == "get_time" else WEATHER_ARGS)]
    elif len(tools) > 1:
        calls = [("get_weather", WEATHER_ARGS), ("get_time", TIME_ARGS)]
    else:
        calls = [("get_weather", WEATHER_ARGS)]
    return (REASONING["call"] if thinking else ""), "", calls


def _names(tools: Any) -> list[str]:
    out = []
    for t in tools or []:
        fn = t.get("function") if isinstance(t.get("function"), dict) else t
        out.append(fn.get("name"))
    return out


def _error(status: int, message: str) -> bytes:
    return ss._json(status, {"error": {"message": message, "type": "invalid_request_error", "param": None,
                                       "code": status}})  # fmt: skip


def _sse(objs: list[Any]) -> list[bytes]:
    return [f"data: {json.dumps(o)}\n\n".encode() for o in objs] + [b"data: [DONE]\n\n"]


class ScriptedStandin(ss.SurfaceServer):
    """Chat, Responses and Messages answered as the scripted model would be, through parsers that work; `fault`
    reproduces one of issue 33's examples: json-object-500, required-stream-drops-reasoning, replay-no-id-400."""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        path = (lines[0].split(" ") + ["", ""])[1].split("?")[0]
        length = next((int(x.split(":", 1)[1]) for x in lines[1:] if x.lower().startswith("content-length:")), 0)
        body = json.loads(await reader.readexactly(length)) if length else {}
        out = self._route(path, body if isinstance(body, dict) else {})
        if isinstance(out, bytes):
            writer.write(out)
        else:
            writer.write(ss._head(200, "text/event-stream"))
            for chunk in out:
                writer.write(chunk)
        await writer.drain()

    def _route(self, path: str, body: dict) -> bytes | list[bytes]:
        if path == "/v1/models":
            return ss._json(200, {"object": "list", "data": [{"id": ss.MODEL, "object": "model"}]})
        if path not in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
            return ss._json(404, {"detail": "Not Found"})
        if "model" not in body:
            return _error(400, "model: Field required")
        if _bad_part(body):
            return _error(400, "unsupported content part")
        if path == "/v1/chat/completions":
            return self._answer_chat(body)
        if path == "/v1/responses":
            return self._answer_responses(body)
        return self._answer_messages(body)

    def _answer_chat(self, body: dict) -> bytes | list[bytes]:
        msgs = body.get("messages") or [{}]
        thinking = (body.get("chat_template_kwargs") or {}).get("enable_thinking", True)
        reasoning, content, calls = _script(_names(body.get("tools")), body.get("tool_choice"),
                                            msgs[-1].get("role"), thinking)  # fmt: skip
        finish = "tool_calls" if calls else "stop"
        tcs: list[dict[str, Any]] = [{"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
               for i, (n, a) in enumerate(calls)]  # fmt: skip
        if not body.get("stream"):
            msg = {"role": "assistant", "content": content or None, "reasoning_content": reasoning or None,
                   "tool_calls": tcs}  # fmt: skip
            return ss._json(200, {"id": "c", "object": "chat.completion", "model": ss.MODEL,
                                  "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                                  "usage": {"prompt_tokens": 9, "completion_tokens": 9, "total_tokens": 18}})  # fmt: skip
        if self.fault == "required-stream-drops-reasoning" and body.get("tool_choice") == "required":
            reasoning = ""  # issue 33's example (b): the forced call streams without its reasoning

        def chunk(delta: dict, fr: str | None = None) -> dict:
            return {"id": "c", "object": "chat.completion.chunk", "model": ss.MODEL,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": fr}]}  # fmt: skip

        out = [chunk({"role": "assistant", "content": ""})]
        out += [chunk({"reasoning_content": p}) for p in _halves(reasoning)]
        out += [chunk({"content": p}) for p in _halves(content)]
        for i, tc in enumerate(tcs):
            out.append(chunk({"tool_calls": [{"index": i, "id": tc["id"], "type": "function",
                                              "function": {"name": tc["function"]["name"], "arguments": ""}}]}))  # fmt: skip
            out += [chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
                    for p in _halves(tc["function"]["arguments"])]  # fmt: skip
        out.append(chunk({}, finish))
        return _sse(out)

    def _answer_responses(self, body: dict) -> bytes | list[bytes]:
        fmt = ((body.get("text") or {}).get("format") or {}).get("type")
        if self.fault == "json-object-500" and fmt == "json_object":
            return _error(500, "json_object is not supported")  # issue 33's example (a)
        items: list[Any] = body["input"] if isinstance(body.get("input"), list) else []
        replay = [
            i for i in items if isinstance(i, dict) and i.get("role") == "assistant" and i.get("type") == "message"
        ]
        if self.fault == "replay-no-id-400" and any("id" not in i or "status" not in i for i in replay):
            return _error(400, "124 validation errors for ResponsesRequest")  # issue 33's example (c)
        last = items[-1].get("type") if items and isinstance(items[-1], dict) else None
        reasoning, content, calls = _script(_names(body.get("tools")), body.get("tool_choice"),
                                            "tool" if last == "function_call_output" else "user", True)  # fmt: skip
        output: list[dict] = [{"id": "rs_1", "type": "reasoning", "summary": [],
                               "content": [{"type": "reasoning_text", "text": reasoning}]}] if reasoning else []  # fmt: skip
        if content:
            output.append({"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": content, "annotations": []}]})  # fmt: skip
        output += [{"id": f"fc_{i}", "type": "function_call", "call_id": f"call_{i}", "name": n,
                    "arguments": json.dumps(a), "status": "completed"} for i, (n, a) in enumerate(calls)]  # fmt: skip
        resource = {**ss.response_resource({"max_output_tokens": 100}), "output": output}
        if not body.get("stream"):
            return ss._json(200, resource)
        events: list[tuple[str, dict]] = [("response.created", {"response": {**resource, "status": "in_progress"}})]
        events += [("response.reasoning_text.delta", {"delta": p}) for p in _halves(reasoning)]
        events += [("response.output_text.delta", {"delta": p}) for p in _halves(content)]
        events += [("response.output_item.done", {"item": item}) for item in output]
        events.append(("response.completed", {"response": resource}))
        return [ss._event(n, {"type": n, "sequence_number": k, **d}) for k, (n, d) in enumerate(events)]

    def _answer_messages(self, body: dict) -> bytes | list[bytes]:
        msgs = body.get("messages") or [{}]
        last = msgs[-1].get("content")
        after = isinstance(last, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in last)
        _, content, calls = _script(_names(body.get("tools")), body.get("tool_choice"),
                                    "tool" if after else "user", False)  # fmt: skip
        blocks: list[dict] = [{"type": "text", "text": content}] if content else []
        blocks += [{"type": "tool_use", "id": f"toolu_{i}", "name": n, "input": a} for i, (n, a) in enumerate(calls)]
        msg = {**ss.message({"max_tokens": 100}), "content": blocks, "stop_reason": "tool_use" if calls else "end_turn"}
        if not body.get("stream"):
            return ss._json(200, msg)
        events: list[tuple[str, dict]] = [("message_start", {"message": {**msg, "content": [], "stop_reason": None}})]
        for i, b in enumerate(blocks):
            start = {**b, "input": {}} if b["type"] == "tool_use" else {"type": "text", "text": ""}
            events.append(("content_block_start", {"index": i, "content_block": start}))
            if b["type"] == "text":
                events += [("content_block_delta", {"index": i, "delta": {"type": "text_delta", "text": p}})
                           for p in _halves(b["text"])]  # fmt: skip
            else:
                events += [("content_block_delta", {"index": i, "delta": {"type": "input_json_delta",
                                                                           "partial_json": p}})
                           for p in _halves(json.dumps(b["input"]))]  # fmt: skip
            events.append(("content_block_stop", {"index": i}))
        events += [("message_delta", {"delta": {"stop_reason": msg["stop_reason"]}, "usage": {"output_tokens": 9}}),
                   ("message_stop", {})]  # fmt: skip
        return [ss._event(n, {"type": n, **d}) for n, d in events]


def _halves(text: str) -> list[str]:
    return [p for p in (text[: len(text) // 2], text[len(text) // 2 :]) if p]


def _bad_part(body: dict) -> bool:
    """A content part of a type that does not exist, or an image (the stand-in's model is text-only)."""
    turns: list[Any] = body.get("messages") or (body["input"] if isinstance(body.get("input"), list) else [])
    for t in turns:
        parts: list[Any] = t["content"] if isinstance(t, dict) and isinstance(t.get("content"), list) else []
        for p in parts:
            kind = p.get("type") if isinstance(p, dict) else None
            if kind in ("bogus_part", "bogus_block", "input_bogus", "image", "image_url", "input_image"):
                return True
    return False


def _run(url: str) -> dict[str, Any]:
    ctx = new_ctx(url, load_expectations("openai"), scripted_model=True, max_stream_s=5.0)
    rep = asyncio.run(run_suite(ctx, patterns=PATTERNS))
    return {r.id: r for r in rep.results}


@pytest.fixture(scope="module")
def good() -> dict[str, Any]:
    with ScriptedStandin() as s:
        return _run(s.url)


def test_a_server_that_takes_every_client_body_and_answers_alike_passes_them_all(good):
    expected = {r.id for r in REPLAYS} | set(PAIRS)
    assert expected <= set(good)
    assert len([i for i in good if i.startswith("requests.")]) == len(REPLAYS) >= 16
    bad = {i: (r.verdict, r.behaviours, r.note) for i, r in good.items() if r.verdict != "pass"}
    assert not bad


@pytest.mark.parametrize(
    ("fault", "case_id", "tag"),
    [
        ("json-object-500", "requests.vercel-ai.responses-json-object", "status-500"),
        ("required-stream-drops-reasoning", "tools.auto.required.stream-equals-message", "stream-reasoning-differs"),
        ("replay-no-id-400", "requests.framework.responses-assistant-replay", "status-400"),
    ],
)
def test_each_of_the_issues_three_examples_is_a_non_pass_of_its_case(fault, case_id, tag):
    with ScriptedStandin(fault=fault) as s:
        res = _run(s.url)
    r = res[case_id]
    assert r.verdict == "fail" and r.behaviours == [tag], (r.verdict, r.behaviours, r.note)
    # only that case (and none of the others) sees the example
    assert [i for i, x in res.items() if x.verdict != "pass"] == [case_id]
    if fault != "required-stream-drops-reasoning":  # the server's own words are the evidence
        assert "json_object is not supported" in str(r.actual) or "124 validation errors" in str(r.actual)
    else:
        assert r.expected == REASONING["call"] and r.actual == ""


def _trace(status: int, doc: Any) -> Trace:
    t = Trace("POST", "http://127.0.0.1:1/v1/responses", sse=False)
    t.status, t.body, t.ended = status, json.dumps(doc).encode(), "eof"
    return t


def test_judge_replay_names_the_refusal_with_the_servers_message():
    chk = judge_replay(_trace(422, {"detail": [{"msg": "Field required"}]}), stream=False)
    assert chk.status is Verdict.FAIL and chk.behaviour == "status-422" and "Field required" in str(chk.actual)
    assert judge_replay(_trace(200, {"id": "x"}), stream=False).status is Verdict.PASS


def test_judge_outcomes_tags_each_field_that_differs():
    whole = Outcome("Hi", "think", [("get_weather", WEATHER_ARGS)], "tool_calls")
    assert judge_outcomes(whole, Outcome("Hi\n", " think ", [("get_weather", WEATHER_ARGS)], "tool_calls")).status \
        is Verdict.PASS  # fmt: skip
    broken = Outcome("Hello", "", [("get_weather", ("not JSON", '{"city": "Paris"}}'))], "stop", [(3, "boom")])
    chk = judge_outcomes(whole, broken)
    assert chk.behaviours == ("error-event", "stream-content-differs", "stream-reasoning-differs",
                              "stream-calls-differ", "stream-finish-differs")  # fmt: skip


def test_depth_judges_fail_markup_wrong_choice_thinking_and_server_blame():
    markup = {"output": [{"type": "message", "content": [{"type": "output_text", "text": "<tool_call>{}"}]}]}
    assert judge_function_calls(markup, []).behaviours == ("tool-markup-in-text", "no-function-call")
    other = {"output": [{"type": "function_call", "name": "get_weather", "call_id": "c", "arguments": "{}"}]}
    assert judge_function_calls(other, ["get_time"]).behaviour == "choice-not-enforced"
    assert judge_function_calls(other, None).behaviour == "tool-call-despite-none"
    uses = {"content": [{"type": "tool_use", "name": "get_weather", "input": "x"}], "stop_reason": "end_turn"}
    assert judge_tool_uses(uses, []).behaviours == ("not-tool-use-stop", "input-not-object")
    thinking = {"content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "Hi"}]}
    assert judge_no_thinking(thinking).behaviour == "thinking-not-asked-for"
    assert judge_client_error(_trace(200, {}), "missing-model").behaviour == "accepted-missing-model"
    assert judge_client_error(_trace(500, {}), "image").behaviour == "status-500"
    assert judge_client_error(_trace(404, {"detail": "Not Found"}), "unknown-endpoint").status is Verdict.PASS
