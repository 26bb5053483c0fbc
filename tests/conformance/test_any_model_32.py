"""Issue 32 item 0: the tools.auto.*, reasoning.* and structured.client.* cases judge any model, not only the scripted
one. A fake OpenAI-compatible server on 127.0.0.1 answers as a model that is not the scripted one would: a call with
other (schema-valid) arguments passes the contract; a text answer is `inconclusive` with what it said; arguments that
break the tool's schema and `<tool_call>` markup in content fail. The scripted model is still held to its script."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from harness.conformance.expectations import load_expectations
from harness.conformance.model import CaseResult, Verdict
from harness.conformance.report import junit_xml
from harness.conformance.runner import new_ctx, run_suite
from tests.support.badserver import BadServer, _reply, _sse

WEATHER_OTHER = {"city": "Berlin"}  # valid for get_weather's schema; the script's is {"city": "Paris", "unit": ...}
TIME_OTHER = {"timezone": "UTC"}
MARKUP = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Berlin"}}\n</tool_call>'


class ModelServer(BadServer):
    """A chat server whose "model" behaves as `behaviour` says (other-call, text, bad-args, markup)."""

    def __init__(self, behaviour: str):
        super().__init__("ok")
        self.behaviour = behaviour

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        path = (lines[0].split(" ") + [""])[1]
        length = next((int(x.split(":", 1)[1]) for x in lines[1:] if x.lower().startswith("content-length:")), 0)
        body = json.loads(await reader.readexactly(length)) if length else {}
        self.hits[path] += 1
        if path.startswith("/v1/models"):
            writer.write(
                _reply(200, json.dumps({"object": "list", "data": [{"id": "other", "object": "model"}]}).encode())
            )
        else:
            writer.write(self._chat(body))
        await writer.drain()

    def _answer(self, body: dict) -> tuple[str | None, list[tuple[str, Any]], str, str]:
        """(content, [(tool, arguments)], reasoning, finish_reason) for one request."""
        tools = [t["function"]["name"] for t in body.get("tools") or []]
        choice = body.get("tool_choice")
        thinking = (body.get("chat_template_kwargs") or {}).get("enable_thinking", True)
        reasoning = "I think about it." if thinking and self.behaviour == "other-call" else ""
        last = body["messages"][-1]
        if not tools or choice == "none" or last.get("role") == "tool":
            return "It is mild.", [], reasoning, "stop"
        if isinstance(choice, dict):
            tools = [choice["function"]["name"]]
        elif body.get("parallel_tool_calls") is False:
            tools = tools[:1]
        if self.behaviour == "text" and choice is None:
            return "I would rather not call anything.", [], reasoning, "stop"
        if self.behaviour == "markup" and choice is None:
            return MARKUP, [], reasoning, "stop"
        if (body.get("max_tokens") or 99) < 12:  # cut inside the call
            return None, [], reasoning, "length"
        args = {"get_weather": WEATHER_OTHER, "get_time": TIME_OTHER}
        if self.behaviour == "bad-args":
            args = {"get_weather": {"city": 5}, "get_time": {"timezone": ["UTC"]}}
        return None, [(n, args[n]) for n in tools], reasoning, "tool_calls"

    def _chat(self, body: dict) -> bytes:
        content, calls, reasoning, finish = self._answer(body)
        tcs = [{"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
               for i, (n, a) in enumerate(calls)]  # fmt: skip
        rf = body.get("response_format") or {}
        if rf.get("type") == "json_schema":
            schema = rf["json_schema"]["schema"]
            doc = {"name": "bolt", "count": 2} if "count" in schema["properties"] else {
                "kind": "part", "size": {"width": 3, "unit": "mm"}, "tags": []}  # fmt: skip
            content, finish = json.dumps(doc), "stop"
        base = {"id": "chatcmpl-1", "created": 1, "model": "other"}
        usage = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
        if not body.get("stream"):
            msg = {"role": "assistant", "content": content, "tool_calls": tcs,
                   **({"reasoning_content": reasoning} if reasoning else {})}  # fmt: skip
            doc = {**base, "object": "chat.completion", "usage": usage,
                   "choices": [{"index": 0, "message": msg, "finish_reason": finish}]}  # fmt: skip
            return _reply(200, json.dumps(doc).encode())

        def chunk(delta: dict, fr: str | None = None) -> bytes:
            return _sse({**base, "object": "chat.completion.chunk",
                         "choices": [{"index": 0, "delta": delta, "finish_reason": fr}]})  # fmt: skip

        out = chunk({"role": "assistant", "content": ""})
        if reasoning:
            out += chunk({"reasoning_content": reasoning})
        if content:
            out += chunk({"content": content})
        for i, tc in enumerate(tcs):
            out += chunk({"tool_calls": [{"index": i, "id": tc["id"], "type": "function",
                                          "function": {"name": tc["function"]["name"], "arguments": ""}}]})  # fmt: skip
            text = tc["function"]["arguments"]
            for part in (text[: len(text) // 2], text[len(text) // 2 :]):
                out += chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]})
        out += chunk({}, finish) + _sse({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        return _reply(200, out + b"data: [DONE]\n\n", "text/event-stream")


def _run(behaviour: str, patterns: list[str], scripted: bool = False) -> dict[str, CaseResult]:
    async def go():
        with ModelServer(behaviour) as s:
            ctx = new_ctx(s.url, load_expectations("openai"), model="other", scripted_model=scripted)
            try:
                return await run_suite(ctx, patterns=patterns)
            finally:
                await ctx.aclose()

    return {r.id: r for r in asyncio.run(go()).results}


def test_other_schema_valid_calls_pass_the_contract():
    by = _run("other-call", ["tools.auto", "reasoning", "structured.client"])
    for cid in ("tools.auto.message", "tools.auto.stream", "tools.auto.parallel", "tools.auto.parallel-stream",
                "tools.auto.direct", "tools.auto.direct-stream", "tools.auto.stream-equals-message", "tools.auto.id",
                "tools.auto.parallel-false", "tools.auto.choice-none", "tools.auto.required", "tools.auto.named",
                "tools.auto.required-cut", "tools.auto.result-turn", "tools.auto.sdk", "reasoning.split",
                "reasoning.stream", "reasoning.disabled", "reasoning.with-tools", "structured.client.nested",
                "structured.client.sdk-parse"):  # fmt: skip
        assert by[cid].verdict == "pass", (cid, by[cid].behaviour, by[cid].note, by[cid].actual)
    assert by["reasoning.field"].verdict == "info" and by["reasoning.field"].behaviour == "reasoning_content"
    # the answer ended by itself: no count to hold completion_tokens to without the script's
    assert by["reasoning.usage"].verdict == "inconclusive" and by["reasoning.usage"].behaviour == "not-cut"


def test_the_scripted_model_is_still_held_to_its_script():
    by = _run("other-call", ["tools.auto.message", "tools.auto.stream"], scripted=True)
    assert by["tools.auto.message"].verdict == "fail" and by["tools.auto.message"].behaviour == "arguments-mismatch"
    assert by["tools.auto.stream"].verdict == "fail" and by["tools.auto.stream"].behaviour == "arguments-mismatch"


def test_a_text_answer_is_inconclusive_with_what_the_model_said():
    by = _run("text", ["tools.auto", "reasoning.split"])
    for cid in (
        "tools.auto.message",
        "tools.auto.stream",
        "tools.auto.direct",
        "tools.auto.parallel",
        "tools.auto.sdk",
    ):
        r = by[cid]
        assert r.verdict == "inconclusive" and r.behaviour == "answered-in-text", (cid, r.verdict, r.behaviour)
        assert "rather not call" in json.dumps(r.actual), cid  # the evidence: what the model did instead
    # the switches cannot be shown on a model that makes no call when allowed
    assert by["tools.auto.choice-none"].verdict == "inconclusive"
    assert by["tools.auto.id"].verdict == "inconclusive"
    # a forced call is the server's job, whatever the model: still judged
    assert by["tools.auto.required"].verdict == "pass" and by["tools.auto.named"].verdict == "pass"
    assert by["reasoning.split"].verdict == "inconclusive" and by["reasoning.split"].behaviour == "no-reasoning"


def test_arguments_that_break_the_schema_fail():
    by = _run("bad-args", ["tools.auto.message", "tools.auto.stream", "tools.auto.required", "tools.auto.named"])
    for cid, r in by.items():
        assert r.verdict == "fail" and r.behaviour == "schema-mismatch", (cid, r.verdict, r.behaviour, r.note)
    assert "get_weather: 5 is not of type 'string'" in by["tools.auto.message"].note


@pytest.mark.parametrize("cid", ["tools.auto.message", "tools.auto.stream"])
def test_markup_leaking_into_content_fails(cid):
    r = _run("markup", [cid])[cid]
    assert r.verdict == "fail" and r.behaviour == "tool-markup-in-content"
    assert "<tool_call>" in json.dumps(r.actual)


def test_inconclusive_is_never_failing_and_is_a_skipped_junit_testcase():
    r = CaseResult.from_dict({"id": "tools.auto.message", "level": "MUST", "requirement": "r", "verdict": "inconclusive",
                              "behaviour": "answered-in-text", "actual": "Hello", "note": "no call"})  # fmt: skip
    assert Verdict.INCONCLUSIVE.value not in {"fail", "error"}
    from harness.conformance.model import FAILING

    assert "inconclusive" not in FAILING
    xml = junit_xml({"expectations": "x", "counts": {"inconclusive": 1}, "duration_s": 0, "cases": [r.to_dict()]})
    assert '<skipped message="inconclusive: answered-in-text: no call; the model: Hello"' in xml
    assert 'skipped="1"' in xml and "<failure" not in xml


def test_an_upgrade_names_inconclusive_on_one_side_as_review_not_a_regression():
    from harness.upgrade.compare import conformance_changes
    from harness.upgrade.judge import conformance

    def side(v: str) -> dict:
        return {"available": True, "expectations": "e",
                "cases": {"tools.auto.message": {"verdict": v, "level": "MUST", "behaviour": "", "note": ""}}}  # fmt: skip

    for old, new in (("pass", "inconclusive"), ("inconclusive", "fail")):
        reasons = conformance({}, {}, {"conformance": conformance_changes(side(old), side(new))})
        assert [r["level"] for r in reasons] == ["review"], reasons
        assert "judged on one side only" in reasons[0]["text"] and f"{old}->{new}" in reasons[0]["text"]


def test_plain_model_entries_judge_only_another_model(tmp_path):
    from harness.errors import ManifestError

    f = tmp_path / "e.yaml"
    f.write_text("cases:\n  tools.auto.message: {quirk: whitespace-content, reason: scripted}\n"
                 "plain_model:\n  tools.auto.message: {quirk: status-400, reason: no parser}\n")  # fmt: skip
    exp = load_expectations(str(f))
    assert exp.for_model(True).quirks("tools.auto.message") == ["whitespace-content"]
    assert exp.for_model(False).quirks("tools.auto.message") == ["status-400"]
    f.write_text("plain_model:\n  tools.auto.message: {quirk: status-400}\n")
    with pytest.raises(ManifestError, match=r"plain_model\.tools\.auto\.message\.reason"):
        load_expectations(str(f))


def test_a_plain_run_is_judged_under_the_plain_model_entries(tmp_path):
    f = tmp_path / "e.yaml"
    f.write_text("plain_model:\n  tools.auto.message: {quirk: tool-markup-in-content, reason: the fake leaks it}\n")

    async def go(scripted: bool):
        with ModelServer("markup") as s:
            ctx = new_ctx(s.url, load_expectations(str(f)), model="other", scripted_model=scripted)
            try:
                return (await run_suite(ctx, patterns=["tools.auto.message"])).results[0]
            finally:
                await ctx.aclose()

    assert asyncio.run(go(False)).verdict == "quirk"
    assert asyncio.run(go(True)).verdict == "fail"  # the scripted model is judged by `cases` alone


def test_update_expectations_proposes_another_models_tool_refusal_into_plain_model():
    """A run off the scripted model (no `scripted-model` in engine.provides) must not overwrite the scripted model's
    entry: its tools.* proposal goes to `plain_model`; a case judged alike on every model still goes to `cases`."""
    from harness.conformance.update import propose

    raw = {"cases": {"tools.auto.message": {"quirk": "answer-in-reasoning", "reason": "scripted"}},
           "plain_model": {"tools.auto.stream": {"quirk": "status-400", "reason": "plain"}}}  # fmt: skip
    failed_case = {"verdict": "fail", "level": "MUST", "expected": None, "actual": None}
    results = {"engine": {"model": "tiny-llama"},
               "cases": [{**failed_case, "id": "tools.auto.message", "behaviour": "status-400", "behaviours": ["status-400"]},
                         {**failed_case, "id": "chat.stream.role-once", "behaviour": "role-on-every-chunk",
                          "behaviours": ["role-on-every-chunk"]}]}  # fmt: skip
    new, _ = propose(results, raw)
    assert new["cases"]["tools.auto.message"]["quirk"] == "answer-in-reasoning"  # the scripted entry kept
    assert new["plain_model"]["tools.auto.message"]["quirk"] == "status-400"
    assert new["cases"]["chat.stream.role-once"]["quirk"] == "role-on-every-chunk"
    scripted = {**results, "engine": {"model": "tiny-scripted", "provides": ["scripted-model"]}}
    new, _ = propose(scripted, raw)
    assert (
        new["cases"]["tools.auto.message"]["quirk"] == "status-400" and "tools.auto.message" not in new["plain_model"]
    )
