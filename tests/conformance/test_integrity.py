"""Stream integrity: the pure judges over recorded-shaped streams (vLLM's, llama.cpp's and TGI's shapes), the live
cases' registration (in the default suite, right after the stream family), and the opt-in fault cases kept out of it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.client import Trace, TraceEvent
from harness.client.sse import parse_sse_bytes
from harness.conformance.cases.integrity import (
    TOOL_CUT_TOKENS,
    judge_after_error,
    judge_length_cut,
    judge_refusable,
    judge_tool_call_cut,
)
from harness.conformance.expectations import load_expectations, resolve
from harness.conformance.model import Verdict
from harness.conformance.registry import select_faults
from harness.conformance.suite import FAMILIES, all_cases, fault_cases
from harness.conformance.view import StreamView, from_chunks, from_trace

TGI_TOOLS = (
    Path(__file__).resolve().parents[1] / "fixtures" / "tgi-3.3.5" / "test_flash_llama_grammar_tools_openai.json"
)


def chat(content: str | None = "tok", *, role: str | None = None, finish: str | None = None, index: int = 0,
         tool_calls: list | None = None) -> dict:  # fmt: skip
    delta: dict[str, Any] = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}]}  # fmt: skip


def text(t: str = "tok", finish: str | None = None) -> dict:
    return {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "text": t, "logprobs": None, "finish_reason": finish}]}  # fmt: skip


def usage(completion_tokens: int) -> dict:
    u = {"prompt_tokens": 3, "completion_tokens": completion_tokens, "total_tokens": 3 + completion_tokens}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
            "usage": u}  # fmt: skip


def sse(*events: Any, done: bool = True, ended: str = "eof") -> StreamView:
    """A framed stream as the trace client records it: each event a JSON object, or raw SSE bytes as sent."""
    blob = b"".join(e if isinstance(e, bytes) else b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    blob += b"data: [DONE]\n\n" if done else b""
    t = Trace("POST", "http://127.0.0.1:1/v1/chat/completions", status=200, body=blob, sse=True, ended=ended,
              headers={"content-type": "text/event-stream"})  # fmt: skip
    t.events = [TraceEvent(0, e.kind, e.raw, e.data, e.oversized) for e in parse_sse_bytes(blob)]
    t.events.append(TraceEvent(0, ended))
    return from_trace(t)


def cut_chat(finish: str | None = "length", made: int = 4, **kw: Any) -> StreamView:
    """vLLM's shape: a role-only first delta, one token per chunk, finish_reason on the last, a usage chunk."""
    toks = [chat(f"t{i}", finish=finish if i == made - 1 else None) for i in range(made)]
    return sse(chat("", role="assistant"), *toks, usage(made), **kw)


def args(fragments: list[str], finish: str | None) -> StreamView:
    out = [chat("", role="assistant")]
    for i, a in enumerate(fragments):
        fn = {"name": "record_the_cut", "arguments": a} if i == 0 else {"arguments": a}
        tc = {"index": 0, "function": fn, **({"id": "call_1", "type": "function"} if i == 0 else {})}
        out.append(chat(None, tool_calls=[tc], finish=finish if i == len(fragments) - 1 else None))
    return sse(*out)


# -- text cut short by max_tokens -----------------------------------------------------------------------------------


def test_a_cut_chat_stream_that_says_length_passes():
    chk = judge_length_cut(cut_chat("length"), 4)
    assert chk.status is Verdict.PASS, chk
    assert "finish_reason length" in chk.note


def test_a_cut_stream_that_says_stop_fails_with_the_value_it_said():
    chk = judge_length_cut(cut_chat("stop"), 4)
    assert chk.status is Verdict.FAIL and chk.behaviours == ("finish-reason-stop",)


def test_a_generation_that_ended_by_itself_before_the_bound_is_not_judged():
    chk = judge_length_cut(cut_chat("stop", made=2), 4)
    assert chk.status is Verdict.SKIP and "2 of 4" in chk.note


def test_the_end_of_stream_rules_are_the_shape_cases_own_tags():
    # no [DONE]: done-present's tag; two finish_reasons: one-finish-reason's
    no_done = judge_length_cut(cut_chat("length", done=False), 4)
    assert no_done.status is Verdict.FAIL and no_done.behaviours == ("no-done",)
    twice = sse(chat("", role="assistant"), chat("a", finish="length"), chat("b", finish="length"), usage(4))
    assert judge_length_cut(twice, 4).behaviours == ("multiple-finish-reasons",)


def test_every_choice_is_judged():
    both = sse(chat("a", index=0, finish="length"), chat("b", index=1, finish="stop"), usage(8))
    chk = judge_length_cut(both, 4)
    assert chk.status is Verdict.FAIL and chk.behaviours == ("finish-reason-stop",)
    assert "choice 1" in str(chk.expected)


def test_a_completions_stream_without_usage_counts_the_tokens_streamed():
    ok = sse(*(text(f"t{i}", finish="length" if i == 3 else None) for i in range(4)))
    assert judge_length_cut(ok, 4).status is Verdict.PASS
    # llama.cpp's completions shape: finish_reason on a chunk of its own, after the four tokens
    lc = sse(*(text(f"t{i}") for i in range(4)), text("", finish="length"))
    assert judge_length_cut(lc, 4).status is Verdict.PASS
    stopped = sse(*(text(f"t{i}", finish="stop" if i == 3 else None) for i in range(4)))
    assert judge_length_cut(stopped, 4).behaviours == ("finish-reason-stop",)


def test_a_stream_with_no_choices_fails():
    chk = judge_length_cut(sse(usage(0)), 4)
    assert chk.status is Verdict.FAIL and chk.behaviour == "no-choices"


# -- a tool call cut short ------------------------------------------------------------------------------------------


def test_cut_tool_arguments_reported_as_length_pass():
    chk = judge_tool_call_cut(args(['{"a_deli', "berately"], "length"), TOOL_CUT_TOKENS)
    assert chk.status is Verdict.PASS and "reported as length" in chk.note


def test_cut_tool_arguments_reported_as_a_finished_call_fail():
    for finish in ("tool_calls", "stop"):
        chk = judge_tool_call_cut(args(['{"a_deli', "berately"], finish), TOOL_CUT_TOKENS)
        assert chk.status is Verdict.FAIL and chk.behaviours == ("truncated-tool-call-not-length",), finish
        assert chk.actual["finish_reason"] == finish and chk.actual["arguments"] == '{"a_deliberately'


def test_arguments_that_parse_pass_whatever_the_finish_reason():
    chk = judge_tool_call_cut(args(['{"a": ', '"b"}'], "tool_calls"), TOOL_CUT_TOKENS)
    assert chk.status is Verdict.PASS and "arguments parse" in chk.note


def test_a_tool_call_cut_with_no_finish_reason_at_all_fails_twice():
    chk = judge_tool_call_cut(args(['{"a_deli'], None), TOOL_CUT_TOKENS)
    assert chk.behaviours == ("truncated-tool-call-not-length", "no-finish-reason-after-tool-call")


def test_no_tool_call_is_not_judged():
    assert judge_tool_call_cut(cut_chat("length"), TOOL_CUT_TOKENS).status is Verdict.SKIP


def test_tgi_recorded_tool_stream():
    # TGI's own recording: the arguments parse, but no chunk carries a finish_reason
    chk = judge_tool_call_cut(from_chunks(json.loads(TGI_TOOLS.read_text())), TOOL_CUT_TOKENS)
    assert chk.status is Verdict.FAIL and chk.behaviours == ("no-finish-reason-after-tool-call",)


# -- after an error event -------------------------------------------------------------------------------------------

ERROR = {"error": {"message": "token id out of range", "type": "BadRequestError", "code": 400}}


def test_an_error_event_then_done_passes():
    chk = judge_after_error(sse(text("a"), ERROR))
    assert chk.status is Verdict.PASS and "[DONE]" in chk.note


def test_an_error_event_at_the_end_of_a_closed_stream_passes():
    assert judge_after_error(sse(ERROR, done=False)).status is Verdict.PASS


def test_data_after_the_error_event_fails():
    chk = judge_after_error(sse(ERROR, text("more")))
    assert chk.status is Verdict.FAIL and chk.behaviours == ("data-after-error",)
    assert chk.chunk == 1 and chk.actual == text("more")
    # a payload that is not even JSON is still data after the error
    raw = judge_after_error(sse(ERROR, b"data: not json\n\n"))
    assert raw.behaviours == ("data-after-error",)


def test_other_events_after_the_error_fail_but_keepalives_do_not():
    assert judge_after_error(sse(ERROR, b": ping\n\n")).status is Verdict.PASS
    other = judge_after_error(sse(ERROR, b"id: 7\n\n"))
    assert other.status is Verdict.FAIL and other.behaviours == ("events-after-error",)
    twice = judge_after_error(sse(ERROR, b"data: [DONE]\n\n"))
    assert twice.behaviours == ("events-after-error",) and "2 x [DONE]" in str(twice.actual)


def test_unframed_recordings_judge_data_only():
    assert judge_after_error(from_chunks([text("a"), ERROR])).status is Verdict.PASS
    assert judge_after_error(from_chunks([ERROR, text("b")])).behaviours == ("data-after-error",)


def test_no_error_event_is_not_judged():
    assert judge_after_error(cut_chat("length")).status is Verdict.SKIP


# -- refusals ------------------------------------------------------------------------------------------------------


def _answer(status: int | None, body: dict | None = None, error: str | None = None) -> Trace:
    return Trace("POST", "http://127.0.0.1:1/v1/chat/completions", status=status, error=error,
                 body=json.dumps(body or {}).encode(), headers={"content-type": "application/json"})  # fmt: skip


def test_a_refused_request_is_left_to_the_case_that_judges_refusals():
    # vLLM 0.32.0 refuses a named tool_choice without a tool parser: chat.tools.present judges that, not this case
    refused = _answer(400, {"error": {"message": "no tool parser", "type": "BadRequestError", "code": 400}})
    chk = judge_refusable(refused, lambda v: judge_tool_call_cut(v, TOOL_CUT_TOKENS), "chat.tools.present")
    assert chk.status is Verdict.SKIP and "HTTP 400" in chk.note and "chat.tools.present" in chk.note
    # without such a case a refusal is a failure, and so is a 5xx or no answer at all, whoever judges refusals
    assert judge_refusable(refused, judge_after_error).behaviour == "status-400"
    assert judge_refusable(_answer(500), judge_after_error, "errors.in-stream").behaviour == "status-500"
    assert judge_refusable(_answer(None, error="ConnectError"), judge_after_error, "x").behaviour == "status-None"


# -- registration ---------------------------------------------------------------------------------------------------

INTEGRITY = ["integrity.chat-length", "integrity.completions-length", "integrity.tool-call-length",
             "integrity.after-error"]  # fmt: skip


def test_the_integrity_cases_run_right_after_the_stream_family():
    names = [f.__name__.rsplit(".", 1)[-1] for f in FAMILIES]
    assert names.index("integrity") == names.index("stream") + 1
    # the suite's order as a fresh process sees it (in this session a test may have imported a family first)
    code = "from harness.conformance.suite import all_cases; print(' '.join(c.id for c in all_cases()))"
    ids = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert [i for i in ids if i.startswith("integrity.")] == INTEGRITY
    first = ids.index(INTEGRITY[0])
    assert ids[first : first + len(INTEGRITY)] == INTEGRITY
    assert ids[first - 1].startswith(("chat.stream.", "completions.stream."))


def test_fault_cases_are_never_in_the_default_suite():
    ids = [c.id for c in all_cases()]
    assert not [i for i in ids if i.startswith("fault")]
    assert [c.id for c in fault_cases(["fault"])] == ["fault.engine-death"]
    assert [c.id for c in fault_cases(["fault.engine-death"])] == ["fault.engine-death"]
    for broad in (None, [], ["*"], ["chat"], ["*death*"], ["integrity"]):
        assert select_faults(broad) == [], broad


@pytest.mark.parametrize("name", ["openai", "vllm-0.11", "llamacpp-0c1e570"])
def test_a_cut_stream_is_judged_the_same_under_every_expectation_file(name):
    # no expectation file declares a quirk for these cases: an engine that says stop for a cut stream fails
    exp = load_expectations(name)
    case = next(c for c in all_cases() if c.id == "integrity.chat-length")
    assert resolve(case, judge_length_cut(cut_chat("length"), 4), exp).verdict == "pass"
    assert resolve(case, judge_length_cut(cut_chat("stop"), 4), exp).verdict == "fail"
