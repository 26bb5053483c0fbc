"""The scripted model on the real engines, with their real parsers (vLLM 0.11.0 and 0.32.0: hermes and qwen3;
llama-server: --jinja and --reasoning-format deepseek), each started once per session:

- greedy output is the script, token for token (vLLM returns the token ids; llama-server the pieces' text);
- the whole suite, tools.* and reasoning.* included, has no fail and no error under the engine's expectation file,
  and the scripted cases really ran (none skipped for want of the model)."""

from __future__ import annotations

import asyncio
import copy
import json

import httpx
import pytest

from harness.conformance.expectations import default_expectation, load_expectations
from harness.conformance.runner import new_ctx, run_suite
from harness.manifest import load_manifest
from harness.models import scripted
from harness.settings import REPO_ROOT
from tests.models.test_scripted_model import REQUESTS

pytestmark = pytest.mark.engine

MANIFESTS = {name: REPO_ROOT / "manifests" / f"{name}.yaml" for name in
             ("vllm-0.11.0-cpu-scripted", "vllm-0.32.0-cpu-scripted", "llamacpp-0c1e570-cpu-scripted")}  # fmt: skip
MUST_RUN = ("tools.auto.message", "tools.auto.stream", "tools.auto.parallel", "tools.auto.result-turn",
            "reasoning.split", "reasoning.stream", "reasoning.field")  # fmt: skip


def _chat_body(model: str, name: str) -> dict:
    """The chat request of a script as a client sends it (REQUESTS is shared: copied, never changed in place)."""
    req = copy.deepcopy(REQUESTS[name])
    body: dict = {"model": model, "messages": req.pop("messages"), "temperature": 0, "max_tokens": 64}
    if "tools" in req:
        body["tools"] = req.pop("tools")
    if "enable_thinking" in req:
        body["chat_template_kwargs"] = {"enable_thinking": req.pop("enable_thinking")}
    for m in body["messages"]:  # as a client sends them: arguments a JSON string
        for tc in m.get("tool_calls") or []:
            if isinstance(tc["function"]["arguments"], dict):
                tc["function"] = {**tc["function"], "arguments": json.dumps(tc["function"]["arguments"])}
    return body


@pytest.fixture(scope="module", params=list(MANIFESTS))
def scripted_engine(request, engine_factory):
    return request.param, engine_factory(manifest=load_manifest(MANIFESTS[request.param]))


@pytest.mark.parametrize("script", list(REQUESTS))
def test_vllm_greedy_output_is_the_script_token_for_token(engine_factory, script):
    eng = engine_factory(manifest=load_manifest(MANIFESTS["vllm-0.11.0-cpu-scripted"]))
    body = {**_chat_body(eng.served_name, script), "return_token_ids": True}
    r = httpx.post(f"{eng.base_url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["token_ids"] == scripted.encode_script(script)


@pytest.mark.parametrize("script", list(REQUESTS))
def test_llama_server_greedy_output_is_the_script_token_for_token(engine_factory, script):
    eng = engine_factory(manifest=load_manifest(MANIFESTS["llamacpp-0c1e570-cpu-scripted"]))
    from tests.models.test_scripted_model import render

    prompt = render(**REQUESTS[script])
    body = {"prompt": prompt, "temperature": 0, "n_predict": 64, "return_tokens": True, "cache_prompt": False}
    r = httpx.post(f"{eng.base_url}/completion", json=body, timeout=60)
    assert r.status_code == 200, r.text
    doc = r.json()
    want = scripted.encode_script(script)
    assert doc["tokens"] == want  # the end-of-turn token included
    assert doc["stop_type"] == "eos"


@pytest.fixture(scope="module")
def suites(scripted_engine):
    name, eng = scripted_engine
    _install_clients()  # the client.* cases run the pinned client libraries: never a silent skip under CI=true
    m = load_manifest(MANIFESTS[name])
    exp = load_expectations(default_expectation(m.engine.kind, m.engine.version))
    ctx = new_ctx(eng.base_url, exp, model=eng.served_name, api_key=eng.api_key, engine=eng)
    assert ctx.scripted
    return name, asyncio.run(run_suite(ctx, engine_info={"kind": m.engine.kind, "url": eng.base_url}))


def test_no_fail_and_no_error_and_the_scripted_cases_ran(suites):
    name, rep = suites
    assert rep.aborted is None
    bad = [(r.id, r.verdict, r.behaviours, r.actual, r.note) for r in rep.results if r.verdict in ("fail", "error")]
    assert not bad, (name, bad)
    got = {r.id: r.verdict for r in rep.results}
    assert all(got[c] in ("pass", "quirk", "info") for c in MUST_RUN), (name, {c: got[c] for c in MUST_RUN})


def _install_clients() -> None:
    from harness.clients.env import install_client
    from harness.clients.spec import CLIENTS
    from tests.conftest import unavailable

    for spec in CLIENTS.values():
        try:
            install_client(spec)
        except Exception as exc:  # noqa: BLE001 - an index that cannot be reached (or no node/npm for a Node client)
            unavailable(f"client {spec.name} cannot be installed: {exc}")  # is a skip here, a failure in CI


def test_every_client_feature_has_a_verdict(suites):
    """Issue 33: every pinned client's every feature ran in the scripted suite (not skipped), and each declared
    client failure says what the client raised."""
    from harness.clients.spec import CLIENTS

    name, rep = suites
    exp = load_expectations(default_expectation(*_engine_of(name)))
    want = {f"client.{s.name}.{f}" for s in CLIENTS.values() for f in s.features}
    got = {r.id: r for r in rep.results if r.id.startswith("client.")}
    assert set(got) == want
    assert not [(i, r.verdict, r.note) for i, r in got.items() if r.verdict in ("skip", "fail", "error")], name
    assert all(exp.cases[i].get("reason") for i, r in got.items() if r.verdict == "quirk")
    assert sum(r.verdict == "pass" for r in got.values()) >= len(want) // 2, name


def _engine_of(name: str) -> tuple[str, str]:
    m = load_manifest(MANIFESTS[name])
    return m.engine.kind, m.engine.version
