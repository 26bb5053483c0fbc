"""Hostile answers to the conformance judges and `check-stream` (issue 31: findings 4, 11, 13, 18 and 20).

Every network case runs against a fake server on 127.0.0.1 (tests/support/models_only_server.py's thread server)
whose answers are built to break a judge: tool-call arguments and structured output nested 520 levels deep (18),
a response id with a control character, an `item_id` that is a list, `tool_calls: ["junk", {...}]` and a call with
no id (20), a finish_reason that tries to be a tag (11), a `/v1/models` past 1 MiB (13).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.conformance.cases import responses, tools
from harness.conformance.cases.clientschemas import NESTED_SCHEMA, judge_document
from harness.conformance.suite import all_cases
from harness.conformance.typedstream import typed_stream
from harness.conformance.view import from_chunks
from harness.models.scripted import TOOL_CALLS
from tests.support.models_only_server import _ThreadServer

DEEP_TEXT = "[" * 520 + "]" * 520  # valid JSON, deeper than Python's repr/asdict can take once wrapped in a report
SPOOF = "length\nquirk: [spoofed]"
MODEL = "tiny-scripted"


def _reply(status: int, body: bytes, ctype: str = "application/json") -> bytes:
    head = (f"HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n"
            f"connection: close\r\n\r\n")  # fmt: skip
    return head.encode() + body


def _sse(events: list[tuple[str | None, Any]]) -> bytes:
    out = b""
    for name, data in events:
        out += (f"event: {name}\n" if name else "").encode() + b"data: " + json.dumps(data).encode() + b"\n\n"
    return out


class HostileServer(_ThreadServer):
    """An OpenAI-shaped server whose every answer carries `mode`'s poison:
    deep      tool-call arguments, message content, Responses output and function-call arguments 520 levels deep
    raise     a response id with a control character, item_id a list, tool_calls ["junk", {a call without an id}]
    spoof     finish_reason "length\\nquirk: [spoofed]" everywhere
    """

    def __init__(self, mode: str, models: bytes | None = None) -> None:
        super().__init__()
        self.mode = mode
        self.models = models or json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()

    # -- what each answer holds ---------------------------------------------------------------------------------
    def _finish(self, normal: str) -> str:
        return SPOOF if self.mode == "spoof" else normal

    def _calls(self) -> list[Any]:
        if self.mode == "deep":
            return [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": DEEP_TEXT}}]
        if self.mode == "raise":
            return ["junk", {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]
        return [{"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]  # fmt: skip

    def _content(self) -> str:
        return DEEP_TEXT if self.mode == "deep" else '{"a": 1}'

    def _chat(self, req: dict) -> bytes:
        message = {"role": "assistant", "content": self._content(), "tool_calls": self._calls()}
        if not req.get("stream"):
            doc = {"id": "c1", "object": "chat.completion", "created": 1, "model": MODEL,
                   "choices": [{"index": 0, "message": message, "finish_reason": self._finish("tool_calls")}],
                   "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}  # fmt: skip
            return _reply(200, json.dumps(doc).encode())
        chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": MODEL}
        deltas = [{"role": "assistant", "content": self._content()},
                  {"tool_calls": [{"index": 0, **c} if isinstance(c, dict) else c for c in self._calls()]}]  # fmt: skip
        events: list[tuple[str | None, Any]] = [
            (None, {**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": None}]}) for d in deltas
        ]
        events.append((None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": self._finish("stop")}]}))
        events.append((None, {**chunk, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                                                                 "total_tokens": 5}}))  # fmt: skip
        return _reply(200, _sse(events) + b"data: [DONE]\n\n", "text/event-stream")

    def _response(self) -> dict:
        rid = "resp_\x01x" if self.mode == "raise" else "resp_1"
        text = self._content()
        call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
                "arguments": DEEP_TEXT if self.mode == "deep" else '{"city": "Paris"}', "status": "completed"}  # fmt: skip
        msg = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip
        return {"id": rid, "object": "response", "created_at": 1, "model": MODEL, "status": "completed",
                "output": [call, msg], "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}  # fmt: skip

    def _responses(self, req: dict) -> bytes:
        resp = self._response()
        if not req.get("stream"):
            return _reply(200, json.dumps(resp).encode())
        item_id: Any = ["msg_1"] if self.mode == "raise" else "msg_1"
        text = resp["output"][1]["content"][0]["text"]
        seq = iter(range(100))
        kinds = [
            ("response.created", {"response": {**resp, "status": "in_progress", "output": []}}),
            ("response.output_item.added", {"output_index": 0, "item": {**resp["output"][1], "content": []}}),
            ("response.content_part.added", {"output_index": 0, "item_id": item_id, "content_index": 0,
                                             "part": {"type": "output_text", "text": "", "annotations": []}}),
            ("response.output_text.delta", {"output_index": 0, "item_id": item_id, "content_index": 0, "delta": text}),
            ("response.output_text.done", {"output_index": 0, "item_id": item_id, "content_index": 0, "text": text}),
            ("response.content_part.done", {"output_index": 0, "item_id": item_id, "content_index": 0,
                                            "part": {"type": "output_text", "text": text, "annotations": []}}),
            ("response.output_item.done", {"output_index": 0, "item": resp["output"][1]}),
            ("response.completed", {"response": {**resp, "output": [resp["output"][1]]}}),
        ]  # fmt: skip
        events = [(k, {"type": k, "sequence_number": next(seq), **d}) for k, d in kinds]
        return _reply(200, _sse(events), "text/event-stream")  # type: ignore[arg-type]

    def answer(self, method: str, path: str, body: bytes) -> bytes | None:
        path = path.split("?")[0]
        try:
            req = json.loads(body) if body else {}
        except ValueError:
            req = {}
        req = req if isinstance(req, dict) else {}
        if path == "/v1/models":
            return _reply(200, self.models)
        if path == "/health":
            return _reply(200, b"")
        if path == "/v1/chat/completions":
            return self._chat(req)
        if path == "/v1/completions":
            doc = {"id": "c2", "object": "text_completion", "created": 1, "model": MODEL,
                   "choices": [{"index": 0, "text": "hi", "finish_reason": self._finish("length")}]}  # fmt: skip
            return _reply(200, json.dumps(doc).encode())
        if path.startswith("/v1/responses/"):  # a stored response, read back or cancelled
            return _reply(200, json.dumps(self._response()).encode())
        if path == "/v1/responses":
            return self._responses(req)
        err = {"error": {"message": f"no route {path}", "type": "not_found_error", "param": None, "code": 404}}
        return _reply(404, json.dumps(err).encode())


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# Every case but the client.* ones, which run the pinned client libraries in their own processes (a few seconds each
# to start): their judge of a hostile answer is the library's exception, tested in tests/conformance/test_clients_33.py.
NOT_CLIENTS = [a for fam in sorted({c.id.split(".")[0] for c in all_cases()} - {"client"}) for a in ("-k", fam)]


def conform(capsys, server: HostileServer, out: Path, *extra: str, max_seconds: float = 40) -> tuple[dict, str, float]:
    """`harness conform --url` at the server (the scripted model's cases included): the report it wrote, its stderr,
    and how long it took."""
    t0 = time.monotonic()
    code, _, err = run_cli(capsys, "conform", "--url", server.url, "--expect", "openai", "--scripted", "--out", out,
                           "--max-seconds", max_seconds, "--stream-seconds", "2", *([] if "-k" in extra else NOT_CLIENTS), *extra)  # fmt: skip
    dt = time.monotonic() - t0
    assert code in (0, 1), err
    assert "Traceback" not in err
    return json.loads((out / "conformance.json").read_text()), err, dt


def harness_errors(doc: dict) -> dict[str, str]:
    return {c["id"]: c["note"] for c in doc["cases"] if c["verdict"] == "error"}


# -- 18: JSON nested 520 levels deep in tool-call arguments and structured output ------------------------------


def test_conform_against_deep_json_writes_its_report(tmp_path, capsys):
    with HostileServer("deep") as s:
        doc, _, dt = conform(capsys, s, tmp_path / "out")
    assert dt < 40 + 5, dt
    assert not doc["aborted"], doc["aborted"]
    assert harness_errors(doc) == {}
    assert (tmp_path / "out" / "junit.xml").is_file() and (tmp_path / "out" / "conformance.html").is_file()
    by_id = {c["id"]: c for c in doc["cases"]}
    assert by_id["tools.auto.message"]["verdict"] == "fail"  # the arguments, parsed bounded, are not the script's
    assert by_id["structured.client.nested"]["verdict"] == "fail"
    assert by_id["tools.auto.required"]["verdict"] == "fail"


def test_judges_never_keep_a_value_deeper_than_the_bound():
    deep_call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": DEEP_TEXT}}
    checks = [
        tools.judge_message(
            {"role": "assistant", "content": None, "tool_calls": [deep_call]}, "tool_calls", TOOL_CALLS["call"]
        ),
        tools.judge_required({"tool_calls": [deep_call]}),
        tools.judge_sdk_calls([("get_weather", DEEP_TEXT)], TOOL_CALLS["call"]),
        judge_document(DEEP_TEXT, "stop", NESTED_SCHEMA),
    ]
    for chk in checks:
        assert chk.status.value == "fail", chk
        json.dumps([chk.actual, chk.expected, chk.extra])  # nothing a report cannot hold
    assert checks[0].behaviours[0] == "arguments-not-json" and checks[0].actual == DEEP_TEXT  # `actual` stays text


# -- 20: judges that raised give a tag -------------------------------------------------------------------------


def test_conform_against_judge_breaking_answers_gives_tags_not_errors(tmp_path, capsys):
    with HostileServer("raise") as s:
        doc, _, dt = conform(capsys, s, tmp_path / "out")
    assert dt < 40 + 5, dt
    assert not doc["aborted"], doc["aborted"]
    assert harness_errors(doc) == {}
    by_id = {c["id"]: c for c in doc["cases"]}
    want = {
        "responses.store": "id-not-url-safe",  # a response id with a control character
        "responses.stream.deltas": "item-id-not-text",  # an item_id that is a list
        "tools.auto.required": "call-not-object",  # tool_calls: ["junk", {...}]
        "tools.auto.message": "call-not-object",
        "tools.auto.id": "missing-id",  # its one call has no id
    }
    for case_id, tag in want.items():
        assert by_id[case_id]["verdict"] == "fail" and tag in by_id[case_id]["behaviours"], by_id[case_id]
    assert by_id["tools.auto.result-turn"]["verdict"] not in ("pass", "error")


def test_record_never_raises_on_a_path_made_of_server_text():
    import asyncio

    import httpx

    from harness.client import record

    async def go():  # port 9 is never dialled: the URL is refused before any connection
        async with httpx.AsyncClient(base_url="http://127.0.0.1:9") as client:
            return await record(client, "GET", "/v1/responses/resp_\x01x")

    t = asyncio.run(go())
    assert t.status is None and t.ended == "error" and "InvalidURL" in (t.error or "")


def test_judge_id_fails_a_call_without_an_id():
    assert tools.judge_id({"tool_calls": [{"type": "function", "function": {"name": "get_weather"}}]}).behaviour == (
        "missing-id")  # fmt: skip
    assert tools.judge_id({"tool_calls": ["junk"]}).behaviour == "missing-id"
    assert tools.judge_id({"tool_calls": [{"id": "call_1"}]}).status.value == "pass"


@pytest.mark.parametrize("tool_calls", [["junk", {"id": "c", "function": {"arguments": "{}"}}], 7, "junk",
                                        [{"id": ["a"], "function": "x"}, {"id": ["a"]}]])  # fmt: skip
def test_tool_judges_take_any_tool_calls(tool_calls):
    message = {"role": "assistant", "content": ["not", "text"], "tool_calls": tool_calls}
    for judge in (tools.judge_required, tools.judge_named, tools.judge_parallel_false, tools.judge_choice_none,
                  tools.judge_id, lambda m: tools.judge_message(m, "tool_calls", TOOL_CALLS["call"]),
                  lambda m: tools.judge_stream_equals_message(from_chunks([]), m)):  # fmt: skip
        assert judge(message).status.value in ("fail", "skip", "pass")  # a verdict, never an exception
    chunk = {"choices": [{"index": 0, "delta": {"tool_calls": tool_calls}, "finish_reason": None}]}
    assert tools.judge_stream(from_chunks([chunk]), TOOL_CALLS["call"]).status.value == "fail"


def test_responses_deltas_take_a_list_item_id():
    from harness.client import Trace

    text = "hi"
    events = [
        ("response.content_part.added", {"item_id": ["m"], "content_index": [0]}),
        ("response.output_text.delta", {"item_id": ["m"], "content_index": [0], "delta": text}),
        ("response.output_text.done", {"item_id": ["m"], "content_index": [0], "text": text}),
        ("response.content_part.done", {"item_id": ["m"], "content_index": [0], "part": {"type": "output_text"}}),
        ("response.content_part.done", {"item_id": {"m": 1}, "content_index": 0, "part": {"type": "output_text"}}),
    ]
    body = _sse([(k, {"type": k, **d}) for k, d in events])
    s = typed_stream(Trace("POST", "http://127.0.0.1:1/v1/responses", status=200, body=body, sse=True, ended="eof"))
    chk = responses.judge_deltas(s)
    assert chk.status.value == "fail" and "item-id-not-text" in chk.behaviours


# -- 11: a tag is the harness's word, never the server's text ---------------------------------------------------


@pytest.mark.parametrize(
    "value,tag",
    [(SPOOF, "finish-reason-other"), ("x" * (1 << 20), "finish-reason-other"), ("stop_sequence",
     "finish-reason-stop_sequence"), ("eos_token", "finish-reason-eos_token"), (None, "no-finish-reason"),
     ("", "no-finish-reason"), (["length"], "finish-reason-not-a-string"), (7, "finish-reason-not-a-string")],
)  # fmt: skip
def test_finish_reason_tags_come_from_a_fixed_set(value, tag):
    from harness.conformance.model import finish_reason_tag

    assert finish_reason_tag(value) == tag


def test_a_spoofed_finish_reason_is_no_tag_and_the_report_updates(tmp_path, capsys):
    with HostileServer("spoof") as s:
        doc, _, _ = conform(capsys, s, tmp_path / "out")
    tags = [t for c in doc["cases"] for t in c["behaviours"]]
    assert tags and all(t.isprintable() and len(t) < 120 for t in tags), [t for t in tags if not t.isprintable()]
    assert "finish-reason-other" in tags
    spoofed = [c for c in doc["cases"] if c["actual"] == SPOOF or SPOOF in json.dumps(c["actual"])]
    assert spoofed  # the server's value is kept, as `actual`
    code, _, err = run_cli(capsys, "update-expectations", tmp_path / "out" / "conformance.json", "--expect",
                           "openai", "--out", tmp_path / "proposed.yaml")  # fmt: skip
    assert code == 0, err
    assert "finish-reason-other" in (tmp_path / "proposed.yaml").read_text()


def test_a_schema_tag_names_an_open_map_key_as_star():
    chk = responses.judge_schema({"id": "r", "object": "response", "metadata": {"evil\nquirk: [x]": 5}})
    assert "schema:metadata.*:type" in chk.behaviours
    assert all("\n" not in t and "evil" not in t for t in chk.behaviours)


# -- 13: a /v1/models past the old 1 MiB bound ------------------------------------------------------------------


def _models(n: int) -> bytes:
    data = [{"id": MODEL if i == 0 else f"org-{i:06d}/model-with-a-long-name-{'x' * 150}", "object": "model",
             "owned_by": "gateway"} for i in range(n)]  # fmt: skip
    return json.dumps({"object": "list", "data": data}).encode()


def test_a_gateway_with_thousands_of_models_is_not_a_dead_server(tmp_path, capsys):
    models = _models(15_000)
    assert 2 << 20 < len(models) < 16 << 20
    with HostileServer("spoof", models=models) as s:
        doc, _, _ = conform(capsys, s, tmp_path / "out", "-k", "health", "-k", "chat.length", "-k", "tools.auto")
    assert not doc["aborted"], doc["aborted"]  # failed cases, then a liveness check that reads the whole list
    assert doc["engine"]["model"] == MODEL
    by_id = {c["id"]: c for c in doc["cases"]}
    assert by_id["health.models"]["verdict"] == "pass" and "14992 more" in by_id["health.models"]["note"]


def test_a_models_list_past_the_bound_says_so(tmp_path, capsys):
    models = _models(95_000)
    assert len(models) > 16 << 20
    with HostileServer("spoof", models=models) as s:
        doc, _, _ = conform(capsys, s, tmp_path / "out", "-k", "health", "-k", "chat.length")
    assert not doc["aborted"], doc["aborted"]
    assert "went past the harness's bound of 16 MiB" in doc["engine"]["model_note"]
    models_case = next(c for c in doc["cases"] if c["id"] == "health.models")
    assert models_case["verdict"] == "skip" and "bound of 16 MiB" in models_case["note"]


# -- 4: check-stream --json shows no raw control character -------------------------------------------------------

_RAW_CONTROLS = "\x7f\x85\x9b\u2028\u202e\u2066"


def test_check_stream_json_escapes_every_control_shown_escapes(tmp_path, capsys):
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunks = [
        {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": None}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "x" + _RAW_CONTROLS + "[31m\x1b]0;t\x07"}]},
    ]
    f = tmp_path / "s.sse"
    f.write_text("".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n")
    code, out, _ = run_cli(capsys, "check-stream", f, "--json")
    assert code == 1
    assert not any(ch in out for ch in _RAW_CONTROLS + "\x1b\x07"), repr(out)
    doc = json.loads(out)  # still JSON, and the same values
    actual = [c["actual"] for c in doc[str(f)]["cases"] if c["id"] == "chat.stream.finish-reason-values"]
    assert actual == ["x" + _RAW_CONTROLS + "[31m\x1b]0;t\x07"]
