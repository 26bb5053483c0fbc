"""Structured-output cases (issue 11, item 1): recorded-shaped answers judged by the same pure functions the live
cases use; pass, constraint-ignored (naming the field), truncated, refused; and the live wiring through a mock
transport that honours one field and ignores another (vLLM 0.32.0 with 0.11.0's guided_json)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from harness.client import Trace, TraceEvent
from harness.client.sse import parse_sse_bytes
from harness.conformance.cases.structured import (
    CONSTRAINTS,
    GRAMMAR,
    REGEX,
    SCHEMA,
    engine_ways,
    json_prefix,
    judge_constrained,
    judge_ways,
)
from harness.conformance.expectations import Expectations, load_expectations, resolve
from harness.conformance.runner import new_ctx, run_suite
from harness.conformance.suite import all_cases

CASES = {c.id: c for c in all_cases()}
GARBAGE = "ed4;Zx8G&8G}{dd_NrZw8?91od"  # what the tiny model says when nothing constrains it (vLLM 0.11.0, greedy)


def answer(status: int, body: Any) -> Trace:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Trace("POST", "http://127.0.0.1:1/v1/chat/completions", status=status, body=raw,
                 headers={"content-type": "application/json"}, ended="eof")  # fmt: skip


def chat(content: str, finish: str | None = "stop") -> Trace:
    """A vLLM-shaped non-stream chat answer."""
    return answer(200, {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "tiny-llama",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                     "finish_reason": finish}],
                        "usage": {"prompt_tokens": 9, "completion_tokens": 11, "total_tokens": 20}})  # fmt: skip


def stream(pieces: list[str], finish: str | None = "stop", extra: list[dict] | None = None) -> Trace:
    """A vLLM-shaped chat stream: role-only first delta, one chunk per piece, the finish chunk, [DONE]."""

    def ch(delta: dict, fr: str | None = None) -> dict:
        return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "tiny-llama",
                "choices": [{"index": 0, "delta": delta, "finish_reason": fr}]}  # fmt: skip

    objs = [ch({"role": "assistant", "content": ""}), *[ch({"content": p}) for p in pieces], *(extra or [])]
    objs.append(ch({"content": ""}, finish))
    blob = b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs) + b"data: [DONE]\n\n"
    t = Trace("POST", "http://127.0.0.1:1/v1/chat/completions", status=200, body=blob, sse=True, ended="eof",
              headers={"content-type": "text/event-stream"})  # fmt: skip
    t.events = [TraceEvent(0, e.kind, e.raw, e.data, e.oversized) for e in parse_sse_bytes(blob)]
    return t


VALID = '{ "a"\n :1}'  # vLLM 0.11.0's answer under guided_json / response_format json_schema


# -- judging one answer ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("trace", [chat(VALID), stream(['{ "', 'a"\n', " :", "1}"])], ids=["nonstream", "stream"])
def test_a_valid_document_ended_by_stop_passes(trace):
    chk = judge_constrained(trace, CONSTRAINTS["json"], "guided_json")
    assert chk.status.value == "pass" and "guided_json" in chk.note


@pytest.mark.parametrize("trace", [chat(GARBAGE, "length"), stream([GARBAGE[:10], GARBAGE[10:]], "length")])
def test_garbage_on_a_200_is_constraint_ignored_and_names_the_field(trace):
    chk = judge_constrained(trace, CONSTRAINTS["json"], "guided_json")
    assert chk.status.value == "fail" and chk.behaviours == ("constraint-ignored",)
    assert chk.note.startswith("guided_json: HTTP 200") and chk.extra["field"] == "guided_json"


def test_json_that_breaks_the_schema_is_constraint_ignored_even_when_it_stopped():
    chk = judge_constrained(chat('{"a": 7}'), CONSTRAINTS["json"], "response_format.json_schema")
    assert chk.behaviour == "constraint-ignored" and "violates the schema" in chk.note
    assert judge_constrained(chat("[1]"), CONSTRAINTS["json-object"], "rf").behaviour == "constraint-ignored"
    assert judge_constrained(chat("{}"), CONSTRAINTS["json-object"], "rf").status.value == "pass"
    assert judge_constrained(chat('{"a": NaN}'), CONSTRAINTS["json-object"], "rf").behaviour == "constraint-ignored"


@pytest.mark.parametrize("trace", [chat('{ "a"\n :', "length"), stream(['{ "a', '"'], "length")])
def test_a_document_cut_off_at_max_tokens_is_truncated_not_ignored(trace):
    chk = judge_constrained(trace, CONSTRAINTS["json"], "structured_outputs.json")
    assert chk.behaviours == ("truncated",) and "max_tokens" in chk.note


def test_a_prefix_that_ended_by_stop_is_not_truncated():
    assert judge_constrained(chat('{ "a"', "stop"), CONSTRAINTS["json"], "f").behaviour == "constraint-ignored"


def test_a_valid_document_that_ran_to_length_says_so():
    chk = judge_constrained(chat(VALID, "length"), CONSTRAINTS["json"], "f")
    assert chk.behaviour == "finish-reason-length"


def test_a_refusal_is_its_status_named_by_field():
    body = {"error": {"message": "unknown field", "type": "BadRequestError", "code": 400}}
    chk = judge_constrained(answer(400, body), CONSTRAINTS["regex"], "guided_regex")
    assert chk.behaviour == "status-400" and chk.note.startswith("guided_regex: refused")


def test_an_error_event_in_the_stream_fails_as_such():
    err = {"error": {"message": "grammar failed", "type": "x"}}
    chk = judge_constrained(stream(["y"], extra=[err]), CONSTRAINTS["choice"], "guided_choice")
    assert chk.behaviour == "error-event" and "guided_choice" in chk.note


def test_regex_choice_and_grammar():
    assert judge_constrained(chat("bbb-14"), CONSTRAINTS["regex"], "r").status.value == "pass"
    assert judge_constrained(chat("bbb-1", "length"), CONSTRAINTS["regex"], "r").behaviour == "truncated"
    assert judge_constrained(chat("bbbb"), CONSTRAINTS["regex"], "r").behaviour == "constraint-ignored"
    assert judge_constrained(chat("yes"), CONSTRAINTS["choice"], "c").status.value == "pass"
    assert judge_constrained(chat("maybe"), CONSTRAINTS["choice"], "c").behaviour == "constraint-ignored"
    assert judge_constrained(chat("no"), CONSTRAINTS["grammar"], "g").status.value == "pass"
    assert CONSTRAINTS["regex"].value == REGEX and CONSTRAINTS["grammar"].value == GRAMMAR


@pytest.mark.parametrize(
    "text, ok",
    [("", True), ("{", True), ('{ "a"', True), ('{"a":1', True), ('{"a":1}', True), ('{"a":-', True),
     ('{"a":tr', True), ('{"a":"x\\', True), ('{"a":[1,{"b":null}', True), ("  [1, 2", True),
     (GARBAGE, False), ('{"a":1}}', False), ('{"a" 1', False), ('{"a":01', False), ('{"a":trux', False),
     ('{a', False), ('{"a":1]', False), ('{"a":1} x', False), ('"\\q', False)],
)  # fmt: skip
def test_json_prefix(text, ok):
    assert json_prefix(text) is ok


# -- several ways of asking for one constraint --------------------------------------------------------------------


def test_judge_ways_names_each_field_that_failed_and_keeps_the_rest():
    results = [
        ("guided_json", judge_constrained(chat(GARBAGE, "length"), CONSTRAINTS["json"], "guided_json")),
        ("structured_outputs.json", judge_constrained(chat(VALID), CONSTRAINTS["json"], "structured_outputs.json")),
    ]
    chk = judge_ways(results)
    assert chk.status.value == "fail" and chk.behaviours == ("constraint-ignored",)
    assert "guided_json" in chk.note and "structured_outputs.json" not in chk.note
    assert chk.extra["fields"] == {"guided_json": "constraint-ignored", "structured_outputs.json": "pass"}
    both = judge_ways([results[1], results[1]])
    assert both.status.value == "pass" and both.extra["fields"]["structured_outputs.json"] == "pass"


def test_engine_ways_fill_the_constraint_and_refuse_bad_data():
    ways, problem = engine_ways(load_expectations("vllm-0.11").probes, "json")
    assert problem == "" and ways == {"guided_json": {"guided_json": SCHEMA},
                                      "structured_outputs.json": {"structured_outputs": {"json": SCHEMA}}}  # fmt: skip
    ways, _ = engine_ways(load_expectations("vllm-0.32").probes, "json")
    assert list(ways) == ["structured_outputs.json"]  # the guided_* fields are gone from 0.32.0's protocol
    assert engine_ways(load_expectations("llamacpp-0c1e570").probes, "regex") == ({}, "")
    assert "must be a mapping" in engine_ways({"constraint.json": {"x": {"guided_json": "no-value"}}}, "json")[1]
    assert "must map" in engine_ways({"constraint.json": ["guided_json"]}, "json")[1]


def test_the_verdicts_under_the_expectation_files():
    ignored = judge_constrained(chat(GARBAGE, "length"), CONSTRAINTS["json"], "guided_json")
    for name in ("vllm-0.11", "vllm-0.32", "openai"):
        r = resolve(CASES["structured.engine.json.nonstream"], ignored, load_expectations(name))
        assert r.verdict == "fail" and r.behaviour == "constraint-ignored"
    ok = judge_constrained(chat(VALID), CONSTRAINTS["json"], "response_format.json_schema")
    assert resolve(CASES["structured.json-schema.stream"], ok, load_expectations("vllm-0.11")).verdict == "pass"


# -- live wiring: a server that honours structured_outputs and ignores guided_json -----------------------------------


def _server(request: httpx.Request) -> httpx.Response:
    if request.method != "POST":  # what the runner asks before the cases (models, version)
        return httpx.Response(200, json={"object": "list", "data": [{"id": "tiny-llama", "object": "model"}]})
    body = json.loads(request.content)
    so = body.get("structured_outputs") or {}
    rf = body.get("response_format") or {}
    if "json" in so or rf.get("type") == "json_schema":
        text = VALID
    elif rf.get("type") == "json_object":
        text = "{}"
    elif "regex" in so:
        text = "abc-12"
    elif "choice" in so or "grammar" in so:
        text = "no"
    else:
        text = GARBAGE  # guided_* accepted and ignored, as 0.32.0 does
    fr = "stop" if text != GARBAGE else "length"
    if body.get("stream"):
        t = stream([text[:3], text[3:]], fr)
        return httpx.Response(200, content=t.body, headers={"content-type": "text/event-stream"})
    return httpx.Response(200, content=chat(text, fr).body, headers={"content-type": "application/json"})


async def _run(exp: Expectations, patterns: list[str]):
    ctx = new_ctx("http://127.0.0.1:9", exp, model="tiny-llama", transport=httpx.MockTransport(_server))
    try:
        return await run_suite(ctx, patterns=patterns)
    finally:
        await ctx.aclose()


def test_the_suite_reports_the_ignored_field_by_name():
    import asyncio

    rep = asyncio.run(_run(load_expectations("vllm-0.11"), ["structured"]))
    by = {r.id: r for r in rep.results if not r.id.startswith("structured.client.")}
    assert len(by) == 14
    # judged on any model (issue 32): this server answers SCHEMA's document to the client schemas too
    client = {r.id: (r.verdict, r.behaviour) for r in rep.results if r.id.startswith("structured.client.")}
    assert client == {"structured.client.nested": ("fail", "schema-violated"),
                      "structured.client.sdk-parse": ("fail", "sdk-error")}  # fmt: skip
    for mode in ("nonstream", "stream"):
        for kind in ("json", "regex", "choice", "grammar"):
            r = by[f"structured.engine.{kind}.{mode}"]
            assert r.verdict == "fail" and r.behaviour == "constraint-ignored", (r.id, r.note)
            assert f"guided_{kind}:" in r.note and f"structured_outputs.{kind}" not in r.note
        for name in ("json-object", "json-schema-strict", "json-schema"):
            assert by[f"structured.{name}.{mode}"].verdict == "pass"
    rep = asyncio.run(_run(load_expectations("vllm-0.32"), ["structured.engine"]))
    assert {r.verdict for r in rep.results} == {"pass"}  # under its own file: only structured_outputs is asked


def test_a_kind_without_a_probe_is_skipped():
    import asyncio

    rep = asyncio.run(
        _run(load_expectations("llamacpp-0c1e570"), ["structured.engine.regex", "structured.engine.choice"])
    )
    assert [r.verdict for r in rep.results] == ["skip"] * 4
    assert "declares no probes.constraint.regex" in rep.results[0].note
