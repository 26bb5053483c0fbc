"""Structured-output and tool-call golden prompts (no engine): the prompt fields are checked strictly, the recorder keeps
what a client sees (tool_calls, whether the constraint held), and the diff calls a change of either a regression by
prompt even when the tokens are equivalent. Recorded data: the committed vLLM 0.11.0 and llama.cpp recordings."""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.errors import ManifestError
from harness.golden.constraints import check_output, show_calls, tool_call_view
from harness.golden.diff import diff_recordings, render_text
from harness.golden.prompts import load_prompt_set, resolve_prompt_sets
from harness.golden.record import normalize_response, record_sets
from harness.golden.store import default_recording_dir, load_recording, validate_record, write_recording
from harness.manifest import DEFAULT_MANIFEST, load_manifest
from harness.settings import REPO_ROOT

VLLM = default_recording_dir(load_manifest(DEFAULT_MANIFEST))
LLAMA = REPO_ROOT / "golden" / "llamacpp-0c1e570" / "f62248ee9698"
STRUCTURED = next(s for s in resolve_prompt_sets() if s.name == "structured")
PROMPTS = {p.id: p for p in STRUCTURED.prompts}
SCHEMA = PROMPTS["json-schema-strict"].constraint()


# --- prompt files ------------------------------------------------------------------------------------------------

HEAD = "name: x\nprompts:\n  - id: a\n    messages: [{role: user, content: hi}]\n"


@pytest.mark.parametrize(
    "extra, field, said",
    [
        ("    response_format: {type: text}\n", "prompts[0].response_format", "json_object"),
        ("    response_format: {type: json_object, x: 1}\n", "prompts[0].response_format", "no other field"),
        ("    response_format: {type: json_schema}\n", "prompts[0].response_format.json_schema", "required"),
        (
            "    response_format: {type: json_schema, json_schema: {name: n, schema: {type: nope}}}\n",
            "prompts[0].response_format.json_schema.schema",
            "not a valid JSON Schema",
        ),
        (
            "    response_format: {type: json_schema, json_schema: {name: n, schema: {$ref: 'http://127.0.0.1:9/s'}}}\n",
            "prompts[0].response_format.json_schema.schema",
            "only local references",
        ),
        (
            "    response_format: {type: json_schema, json_schema: {name: n, strict: 1, schema: {}}}\n",
            "prompts[0].response_format.json_schema.strict",
            "true or false",
        ),
        (
            "    response_format: {type: json_schema, json_schema: {name: 'a b', schema: {}}}\n",
            "prompts[0].response_format.json_schema.name",
            "[A-Za-z0-9_-]",
        ),
        ("    tool_choice: auto\n", "prompts[0].tool_choice", "needs tools"),
        ("    tools: []\n", "prompts[0].tools", "non-empty list"),
        (
            "    tools: [{type: function, function: {name: f, parameters: {}}}]\n"
            "    tool_choice: {type: function, function: {name: g}}\n",
            "prompts[0].tool_choice",
            "not one of the tools (f)",
        ),
        (
            "    tools: [{type: function, function: {name: f, parameters: {}}}, "
            "{type: function, function: {name: f, parameters: {}}}]\n",
            "prompts[0].tools[1].function.name",
            "duplicate",
        ),
        (
            "    tools: [{type: function, function: {name: f, parameters: {}}}]\n    tool_choice: sometimes\n",
            "prompts[0].tool_choice",
            "auto, none, required",
        ),
        (
            "    tools: [{type: function, function: {name: f, parameters: {}}}]\n"
            "    response_format: {type: json_object}\n",
            "prompts[0].response_format",
            "one constraint per prompt",
        ),
    ],
)
def test_malformed_constraint_fields_name_file_and_field(tmp_path, extra, field, said):
    f = tmp_path / "s.yaml"
    f.write_text(HEAD + extra)
    with pytest.raises(ManifestError) as ei:
        load_prompt_set(f)
    msg = str(ei.value)
    assert str(f) in msg and field in msg and said in msg, msg


def test_constraint_fields_are_chat_only(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("name: x\nprompts:\n  - {id: a, prompt: hi, response_format: {type: json_object}}\n")
    with pytest.raises(ManifestError, match=r"prompts\[0\]\.response_format.*only prompts with messages"):
        load_prompt_set(f)


def test_committed_structured_prompts_ask_what_the_issue_names():
    assert SCHEMA is not None and SCHEMA["kind"] == "json_schema" and SCHEMA["strict"] is True
    assert SCHEMA["schema"]["type"] == "object" and SCHEMA["schema"]["additionalProperties"] is False
    assert PROMPTS["json-object"].body()["response_format"] == {"type": "json_object"}
    forced = PROMPTS["tool-call-forced"].constraint()
    assert forced is not None and forced["kind"] == "tool_choice" and forced["choice"] == "pick_unit"
    assert all(p.body()["temperature"] == 0.0 for p in STRUCTURED.prompts)


# --- constraint checks (pure) ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, finish, held, said",
    [
        ('{"unit": "celsius", "ok": true}', "stop", True, ""),
        ('{ \t"unit":"fahrenheit"\n, "ok" :\nfalse}', "stop", True, ""),
        ('{"unit": "kelvin", "ok": true}', "stop", False, "at /unit: 'kelvin' is not one of"),
        ('{"unit": "celsius"}', "stop", False, "'ok' is a required property"),
        ('{"unit": "celsius", "ok": true, "x": 1}', "stop", False, "Additional properties"),
        ('{"unit": "cel', "length", False, "not JSON"),
        ('{"unit": NaN}', "stop", False, "NaN is not JSON"),
        ("", "stop", False, "not JSON"),
    ],
)
def test_json_schema_check(text, finish, held, said):
    r = check_output(SCHEMA, text, [], finish)
    assert r["kind"] == "json_schema" and r["held"] is held and said in r["detail"], r
    if not held and finish == "length":
        assert r["detail"].endswith("(finish_reason length)")


def test_json_object_check():
    c = {"kind": "json_object"}
    assert check_output(c, "{ }", [], "stop")["held"] is True
    r = check_output(c, "[1, 2]", [], "stop")
    assert r["held"] is False and "not an object (list)" in r["detail"]


def test_schema_never_fetches_a_reference():
    """A remote $ref is unresolvable (jsonschema's default registry would fetch it): a verdict, not a request."""
    r = check_output({"kind": "json_schema", "schema": {"$ref": "http://127.0.0.1:9/s.json"}}, "1", [], "stop")
    assert r["held"] is False and "could not be applied" in r["detail"] and "Unresolvable" in r["detail"]


FORCED = PROMPTS["tool-call-forced"].constraint()


def _call(name="pick_unit", args='{"unit": "celsius"}'):
    return tool_call_view(
        [{"id": "chatcmpl-tool-1", "type": "function", "function": {"name": name, "arguments": args}}]
    )


@pytest.mark.parametrize(
    "calls, text, held, said",
    [
        (_call(), "", True, ""),
        ([], "#%/~ plain", False, "no tool call; plain text instead: '#%/~ plain'"),
        ([], "", False, "no tool call and no text"),
        (_call(name="other"), "", False, "no call of 'pick_unit' (calls: other("),
        (_call(args='{"unit": "kelvin"}'), "", False, "pick_unit arguments at /unit"),
        (_call(args='{"unit": '), "", False, "pick_unit arguments not JSON"),
    ],
)
def test_forced_tool_call_check(calls, text, held, said):
    r = check_output(FORCED, text, calls, "stop")
    assert r["held"] is held and said in r["detail"], r


def test_tool_call_view_keeps_what_a_client_sees():
    raw = [
        {"id": "x1", "type": "function", "function": {"name": "f", "arguments": '{"a":\n1}'}},
        {"id": "x2", "type": "function", "function": {"name": "g", "arguments": {"a": 1}}},
        "junk",
    ]
    v = tool_call_view(raw)
    assert v[0] == {"type": "function", "name": "f", "arguments": '{"a":\n1}'}  # no volatile id, text as sent
    assert v[1]["arguments"] == '{"a":1}' and v[1]["arguments_type"] == "dict"
    assert v[2] == {"type": None, "name": None, "arguments": "null", "arguments_type": "NoneType"}
    assert tool_call_view(None) == [] and tool_call_view({"a": 1}) == []
    r = check_output({"kind": "tool_choice", "choice": "required", "tools": {"g": {}}}, "", v[1:2], "stop")
    assert r["held"] is False and "arguments sent as dict" in r["detail"]
    assert show_calls(v[:1]) == 'f({\\"a\\":\\n1})' and show_calls([]) == "none"  # one line


# --- the recorder ------------------------------------------------------------------------------------------------


def _answer(text="", calls=None, finish="stop", tokens=None):
    ids = list(tokens if tokens is not None else (text or (calls or [{}])[0].get("arguments", "")).encode())
    content = [
        {"token": f"token_id:{t}", "logprob": -0.5, "top_logprobs": [{"token": f"token_id:{t}", "logprob": -0.5}]}
        for t in ids
    ]
    msg = {"role": "assistant", "content": text, "tool_calls": calls or []}
    return {
        "id": "chatcmpl-1",
        "created": 1,
        "model": "tiny",
        "choices": [
            {"index": 0, "message": msg, "finish_reason": finish, "logprobs": {"content": content}, "token_ids": ids}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": len(ids), "total_tokens": 3 + len(ids)},
    }


def test_record_keeps_tool_calls_and_the_constraint_verdict():
    args = '{"unit": "celsius"}'
    raw = [{"id": "chatcmpl-tool-9", "type": "function", "function": {"name": "pick_unit", "arguments": args}}]
    rec = normalize_response(PROMPTS["tool-call-forced"], "structured", _answer(calls=raw))
    ch = rec["choices"][0]
    assert ch["tool_calls"] == [{"type": "function", "name": "pick_unit", "arguments": args}]
    assert ch["constraint"] == {"kind": "tool_choice", "held": True, "detail": ""}
    assert "chatcmpl-tool-9" not in json.dumps(rec) and validate_record(rec) is None
    bad = normalize_response(PROMPTS["json-schema-strict"], "structured", _answer('{"unit": "kelvin"', finish="length"))
    c = bad["choices"][0]["constraint"]
    assert c["held"] is False and "not JSON" in c["detail"] and "finish_reason length" in c["detail"]
    assert "tool_calls" not in bad["choices"][0]  # no tools asked, none sent: the record keeps its old shape


def test_unconstrained_records_keep_their_shape():
    chat = next(s for s in resolve_prompt_sets() if s.name == "chat").prompts[0]
    rec = normalize_response(chat, "chat", _answer("hello"))
    assert set(rec["choices"][0]) == {"index", "text", "token_ids", "finish_reason", "stop_reason", "logprobs"}
    # an engine that starts sending tool calls for a plain prompt: kept, so the diff sees it
    raw = [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]
    assert normalize_response(chat, "chat", _answer("hi", calls=raw))["choices"][0]["tool_calls"][0]["name"] == "f"


@pytest.mark.parametrize(
    "edit, said",
    [
        (lambda c: c.update(tool_calls="x"), "tool_calls must be a list"),
        (lambda c: c.update(tool_calls=[{"name": "f"}]), "tool_calls[0] must be"),
        (lambda c: c.update(tool_calls=[{"name": 5, "arguments": "{}"}]), "tool_calls[0] must be"),
        (lambda c: c.update(constraint={"kind": "json_object", "held": "yes"}), "constraint must be"),
        (lambda c: c.update(constraint=[]), "constraint must be"),
    ],
)
def test_malformed_client_view_fields_refused(edit, said):
    rec = copy.deepcopy(load_recording(VLLM).sets["structured"]["tool-call-forced"])
    edit(rec["choices"][0])
    assert said in (validate_record(rec) or ""), validate_record(rec)


class _Engine(BaseHTTPRequestHandler):
    """Answers json_schema with a 400 refusal, a forced tool call with a call, json_object with an object."""

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        rf = (body.get("response_format") or {}).get("type")
        if rf == "json_schema":
            status, doc = 400, {"error": {"type": "BadRequestError", "message": "json_schema is not supported"}}
        elif body.get("tools"):
            call = {
                "id": "c1",
                "type": "function",
                "function": {"name": "pick_unit", "arguments": '{"unit":"celsius"}'},
            }
            status, doc = 200, _answer(calls=[call])
        else:
            status, doc = 200, _answer("{ }")
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_record_sets_over_http_records_a_refusal_as_the_outcome():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        records, _ = record_sets(f"http://127.0.0.1:{srv.server_address[1]}", "tiny", [STRUCTURED], timeout=10)
    finally:
        srv.shutdown()
        srv.server_close()
    by_id = {r["id"]: r for r in records["structured"]}
    assert by_id["json-schema-strict"]["error"]["status"] == 400 and by_id["json-schema-strict"]["choices"] == []
    assert by_id["json-object"]["choices"][0]["constraint"]["held"] is True
    assert by_id["tool-call-forced"]["choices"][0]["tool_calls"][0]["name"] == "pick_unit"
    assert all(validate_record(r) is None for r in records["structured"])


# --- the committed recordings and the diff -----------------------------------------------------------------------


def test_committed_recordings_say_what_each_engine_did():
    v, ll = load_recording(VLLM).sets["structured"], load_recording(LLAMA).sets["structured"]
    assert set(v) == set(ll) == set(PROMPTS)
    for pid in PROMPTS:  # vLLM 0.11.0 holds every constraint
        assert v[pid]["choices"][0]["constraint"]["held"] is True, (pid, v[pid]["choices"][0]["constraint"])
    assert v["tool-call-forced"]["choices"][0]["tool_calls"][0]["name"] == "pick_unit"
    json.loads(v["tool-call-forced"]["choices"][0]["tool_calls"][0]["arguments"])
    json.loads(v["json-schema-strict"]["choices"][0]["text"])
    # llama.cpp: response_format held; the forced tool call is answered in plain text (its expectation file says so)
    assert ll["json-schema-strict"]["choices"][0]["constraint"]["held"] is True
    lt = ll["tool-call-forced"]["choices"][0]
    assert lt["tool_calls"] == [] and lt["constraint"]["held"] is False and "plain text" in lt["constraint"]["detail"]


def _edited(tmp_path, name, edit, src=VLLM):
    base = load_recording(src)
    sets = {s: [copy.deepcopy(r) for r in recs.values()] for s, recs in base.sets.items()}
    for r in sets["structured"]:
        edit(r)
    return load_recording(write_recording(tmp_path / name, base.meta, sets))


def _shift(r, delta):
    for ch in r["choices"]:
        for row in ch["logprobs"]:
            row[1] += delta


def test_constraint_verdict_change_is_a_regression_even_when_tokens_are_equivalent(tmp_path):
    def edit(r):
        _shift(r, 1e-4)
        if r["id"] == "json-schema-strict":
            r["choices"][0]["constraint"] = {"kind": "json_schema", "held": False, "detail": "at /unit: 'x' bad"}

    d = diff_recordings(load_recording(VLLM), _edited(tmp_path, "b", edit))
    st = {p.id: p for p in d.prompts if p.set == "structured"}
    p = st["json-schema-strict"]
    assert p.status == "regression" and not d.ok, p
    assert p.reason.startswith("constraint json_schema held on A, did not hold on B: at /unit: 'x' bad")
    assert "tokens equivalent" in p.reason and p.constraint["changed"] is True
    assert p.constraint["a"] is True and p.constraint["b"] is False
    # the others drifted within tolerance only: equivalent, and their constraint record says held on both
    assert st["json-object"].status == "equivalent" and st["json-object"].constraint["changed"] is False
    assert "structured/json-schema-strict" in render_text(d)


def test_tool_calls_change_is_a_regression_with_identical_tokens(tmp_path):
    def edit(r):
        if r["id"] == "tool-call-forced":
            r["choices"][0]["tool_calls"][0]["arguments"] = '{"unit":"fahrenheit"}'  # a parser change, same tokens

    d = diff_recordings(load_recording(VLLM), _edited(tmp_path, "b", edit))
    p = next(p for p in d.prompts if p.id == "tool-call-forced")
    assert p.status == "regression" and p.reason.startswith("tool_calls changed: A pick_unit(")
    assert 'B pick_unit({\\"unit\\":\\"fahrenheit\\"})' in p.reason and "tokens identical" in p.reason
    assert p.tool_calls["changed"] is True and p.constraint["changed"] is False
    text = render_text(d)
    assert "tool_calls A: pick_unit(" in text and "tool_calls B: pick_unit(" in text
    assert all(q.status == "identical" for q in d.prompts if q.id != "tool-call-forced")


def test_refusal_of_a_constrained_prompt_says_the_constraint(tmp_path):
    def edit(r):
        if r["id"] == "json-schema-strict":
            r["choices"] = []
            r["error"] = {"status": 400, "type": "BadRequestError", "message": "json_schema unsupported"}

    d = diff_recordings(load_recording(VLLM), _edited(tmp_path, "b", edit))
    p = next(p for p in d.prompts if p.id == "json-schema-strict")
    assert p.status == "regression" and p.constraint["a"] is True and p.constraint["b"] is None
    assert p.reason.startswith("constraint json_schema held on A, refused on B (A gave an answer; B gave HTTP 400")
    assert p.reason.count("json_schema unsupported") == 1 and "refused: HTTP 400" in p.constraint["b_detail"]
    back = diff_recordings(_edited(tmp_path, "c", edit), _edited(tmp_path, "d", edit))
    assert next(p for p in back.prompts if p.id == "json-schema-strict").status == "identical"  # refused on both


def test_engine_migration_diff_names_the_lost_tool_call():
    """vLLM 0.11.0 -> llama.cpp on the committed recordings: the forced tool call held on one side only."""
    d = diff_recordings(load_recording(VLLM), load_recording(LLAMA))
    p = next(p for p in d.prompts if p.id == "tool-call-forced")
    assert p.status == "regression" and p.reason.startswith("constraint tool_choice held on A, did not hold on B")
    assert p.tool_calls["changed"] and p.tool_calls["b"] == [[]]
    assert "no tool call; plain text instead" in p.reason
    js = next(p for p in d.prompts if p.id == "json-schema-strict")
    assert js.constraint["a"] is js.constraint["b"] is True and not js.constraint["changed"]  # held on both


def test_upgrade_judge_gives_the_change_its_own_line():
    from harness.upgrade.judge import golden

    g = diff_recordings(load_recording(VLLM), load_recording(LLAMA)).to_json()
    lines = [r["text"] for r in golden({"ok": True}, {"ok": True}, {"golden": g}) if r["level"] == "blocking"]
    mine = [ln for ln in lines if "structured/tool-call-forced" in ln and "constraint" in ln]
    assert len(mine) == 1 and "constraint tool_choice held on old, did not hold on new (no tool call" in mine[0]
    assert not any("structured/json-schema-strict: constraint" in ln for ln in lines)  # held on both: no line


# --- the agentic set: reasoning kept, and a change of where it goes is a regression ---------------------------------


def test_the_agentic_set_is_recorded_only_when_asked_for():
    assert "agentic" not in {s.name for s in resolve_prompt_sets()}
    (agentic,) = resolve_prompt_sets(["agentic"])
    assert agentic.model == "scripted-tiny" and agentic.ids() == ["tool-call", "parallel-calls", "tool-result",
                                                                   "reasoning"]  # fmt: skip
    turn = next(p for p in agentic.prompts if p.id == "tool-result").body()["messages"]
    assert [m["role"] for m in turn] == ["user", "assistant", "tool"] and turn[1]["content"] is None


def test_a_set_naming_a_model_the_harness_does_not_embed_is_refused(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("name: x\nmodel: some-model\n" + HEAD.split("\n", 1)[1])
    with pytest.raises(ManifestError) as err:
        load_prompt_set(p)
    assert err.value.field == "model"


def test_the_recorder_keeps_the_reasoning_field_and_text():
    (agentic,) = resolve_prompt_sets(["agentic"])
    prompt = next(p for p in agentic.prompts if p.id == "reasoning")
    msg = {"role": "assistant", "content": "Hello!", "reasoning_content": "\nThe user says hello.\n"}
    resp = {"choices": [{"index": 0, "message": msg, "finish_reason": "stop", "token_ids": [1, 2]}]}
    rec = normalize_response(prompt, "agentic", resp)
    assert rec["choices"][0]["reasoning"] == {"field": "reasoning_content", "text": "\nThe user says hello.\n"}
    assert validate_record(rec) is None
    plain = normalize_response(prompt, "agentic", {"choices": [{**resp["choices"][0],
                                                              "message": {"role": "assistant", "content": "x"}}]})  # fmt: skip
    assert "reasoning" not in plain["choices"][0]  # older records keep their shape


def test_reasoning_that_moves_is_a_regression_with_identical_tokens(tmp_path):
    from tests.golden.helpers import choice, record, write

    a = choice([72, 105], finish="stop")
    a["reasoning"] = {"field": "reasoning_content", "text": "The user says hello."}
    b = copy.deepcopy(a)
    b["reasoning"] = {"field": "reasoning", "text": "The user says hello."}  # renamed: a client reading the old field
    da = write(tmp_path / "a", {"agentic": [record("reasoning", [a], "agentic")]})
    db = write(tmp_path / "b", {"agentic": [record("reasoning", [b], "agentic")]})
    d = diff_recordings(load_recording(da), load_recording(db))
    (p,) = d.prompts
    assert p.status == "regression" and p.reason.startswith("reasoning changed: A reasoning_content=")
    assert "B reasoning=" in p.reason and "tokens identical" in p.reason
