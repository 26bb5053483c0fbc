"""The tools.auto and reasoning judges on streams broken on purpose: each breakage fails with its own tag, and the
streams the engines really send (as the scripted model makes them) pass."""

from __future__ import annotations

import json

import pytest

from harness.conformance.cases.reasoning import judge_reasoning_stream, judge_split
from harness.conformance.cases.tools import judge_id, judge_message, judge_stream, judge_stream_equals_message
from harness.conformance.model import Verdict
from harness.conformance.view import from_chunks
from harness.models.scripted import ANSWERS, REASONING, TOOL_CALLS

CALL = TOOL_CALLS["call"]
ARGS = ['{"city": ', '"Paris", ', '"unit": ', '"celsius"}']


def chunk(delta: dict | None = None, finish: str | None = None, index: int = 0) -> dict:
    choice = {"index": index, "delta": delta or {}, "finish_reason": finish}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}


def tool_frag(i: int, *, id: str | None = None, name: str | None = None, args: str | None = None) -> dict:
    fn = {k: v for k, v in (("name", name), ("arguments", args)) if v is not None}
    frag: dict = {"index": i, "function": fn}
    if id is not None:
        frag.update(id=id, type="function")
    return frag


def good_stream() -> list[dict]:
    out = [chunk({"role": "assistant", "content": ""})]
    out.append(chunk({"tool_calls": [tool_frag(0, id="call_a", name="get_weather")]}))
    out += [chunk({"tool_calls": [tool_frag(0, args=a)]}) for a in ARGS]
    out.append(chunk({}, finish="tool_calls"))
    return out


def test_the_real_shape_passes():
    assert judge_stream(from_chunks(good_stream()), CALL).status is Verdict.PASS


def _broken(kind: str) -> list[dict]:
    s = good_stream()
    if kind == "id-changed":
        s[3]["choices"][0]["delta"]["tool_calls"][0].update(id="call_b", type="function")
    elif kind == "fragments-not-json":
        s[4]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] = '"Par'  # a fragment lost a quote
    elif kind == "markup-in-content":
        s.insert(1, chunk({"content": "<tool_call>"}))
    elif kind == "no-finish-reason":
        s[-1]["choices"][0]["finish_reason"] = None
    elif kind == "name-repeated":
        s[3]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] = "get_weather"
    elif kind == "first-delta-without-name":
        del s[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"]
    elif kind == "finish-reason-repeated":
        s.append(chunk({}, finish="tool_calls"))
    elif kind == "tool-markup-in-content":  # the parser never ran: the markup streamed as content
        s = [chunk({"role": "assistant", "content": ""}), chunk({"content": "<tool_call>\n{...}\n</tool_call>"}),
             chunk({}, finish="stop")]  # fmt: skip
    return s


@pytest.mark.parametrize("tag", ["id-changed", "fragments-not-json", "markup-in-content", "no-finish-reason",
                                 "name-repeated", "first-delta-without-name", "finish-reason-repeated",
                                 "tool-markup-in-content"])  # fmt: skip
def test_each_breakage_fails_with_its_own_tag(tag):
    chk = judge_stream(from_chunks(_broken(tag)), CALL)
    assert chk.status is Verdict.FAIL
    assert chk.behaviour == tag, chk.behaviours


def test_the_non_streamed_message_is_judged_field_by_field():
    good = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(CALL[0][1])}}]}  # fmt: skip
    assert judge_message(good, "tool_calls", CALL).status is Verdict.PASS
    assert judge_message({**good, "content": "\n\n"}, "tool_calls", CALL).behaviour == "whitespace-content"
    assert judge_message(good, "stop", CALL).behaviour == "finish-reason-stop"
    bad_args = json.loads(json.dumps(good))
    bad_args["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}  # an object, not a JSON string
    assert judge_message(bad_args, "tool_calls", CALL).behaviour == "arguments-not-string"
    markup = {"role": "assistant", "content": "<tool_call>\n{}\n</tool_call>", "tool_calls": []}
    assert judge_message(markup, "stop", CALL).behaviour == "tool-markup-in-content"


def test_streamed_and_whole_calls_are_compared_as_values():
    msg = {"tool_calls": [{"function": {"name": "get_weather", "arguments": '{"unit": "celsius", "city": "Paris"}'}}]}
    assert judge_stream_equals_message(from_chunks(good_stream()), msg).status is Verdict.PASS
    msg["tool_calls"][0]["function"]["arguments"] = '{"city": "Lyon"}'
    assert judge_stream_equals_message(from_chunks(good_stream()), msg).behaviour == "stream-differs"


def test_an_id_over_openais_limit_is_named_with_its_form():
    long_id = "chatcmpl-tool-" + "a" * 32
    chk = judge_id({"tool_calls": [{"id": long_id}]})
    assert chk.behaviour == "id-longer-than-40" and "chatcmpl-tool-<hex32>" in chk.note
    assert judge_id({"tool_calls": [{"id": "FiaW5Hoxe8D1zkj8pWgY5C7pnr5jvZJz"}]}).status is Verdict.PASS


def reasoning_stream(order: str) -> list[dict]:
    r = [chunk({"reasoning_content": "\nThe user says hello."}), chunk({"reasoning_content": " I greet them back.\n"})]
    c = [chunk({"content": "\n\nHello! "}), chunk({"content": "How can I help?"})]
    head, tail = [chunk({"role": "assistant", "content": ""})], [chunk({}, finish="stop")]
    return head + (r + c if order == "reasoning-first" else c + r) + tail


def test_reasoning_then_content_passes_and_the_reverse_fails():
    args = (REASONING["think"], ANSWERS["think"])
    assert judge_reasoning_stream(from_chunks(reasoning_stream("reasoning-first")), *args).status is Verdict.PASS
    chk = judge_reasoning_stream(from_chunks(reasoning_stream("content-first")), *args)
    assert chk.behaviour == "content-before-reasoning" and "reasoning-after-content" in chk.behaviours


def test_reasoning_left_in_content_fails_with_its_tag():
    leaked = [chunk({"role": "assistant", "content": ""}),
              chunk({"content": f"<think>\n{REASONING['think']}\n</think>\n\n{ANSWERS['think']}"}), chunk({}, finish="stop")]  # fmt: skip
    assert judge_reasoning_stream(from_chunks(leaked), REASONING["think"], ANSWERS["think"]).behaviour == (
        "reasoning-in-content"
    )
    msg = {"content": f"<think>\n{REASONING['think']}\n</think>\n\n{ANSWERS['think']}"}
    assert judge_split(msg, REASONING["think"], ANSWERS["think"]).behaviour == "reasoning-in-content"


def test_the_answer_landing_in_reasoning_is_named():
    msg = {"content": None, "reasoning": f"{REASONING['think']} {ANSWERS['think']}"}
    assert judge_split(msg, REASONING["think"], ANSWERS["think"]).behaviour == "answer-in-reasoning"
    ok = {"content": "\n\nHello! How can I help?", "reasoning": "\nThe user says hello. I greet them back.\n"}
    assert judge_split(ok, REASONING["think"], ANSWERS["think"]).status is Verdict.PASS
