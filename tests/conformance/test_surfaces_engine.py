"""Acceptance 1 of issue 19 on the real vLLM engines: the Responses and Messages cases under each release's expectation
file give no fail and no error, every declared quirk happens exactly, both SDKs are among the clients, and what a
release does not serve is `absent` (vLLM 0.11.0 has no /v1/messages). llama.cpp: tests/llamacpp/test_surfaces_llamacpp.py.

Run one engine at a time on a small machine: `pytest -m engine tests/conformance/test_surfaces_engine.py -k 0.11`."""

from __future__ import annotations

import asyncio

import pytest

from harness.conformance.expectations import load_expectations
from harness.conformance.runner import new_ctx, run_suite
from harness.settings import REPO_ROOT

pytestmark = pytest.mark.engine

SURFACES = ["responses", "messages", "cross", "sdk.openai.responses", "sdk.anthropic"]


def judge(eng, expect: str):
    """`eng`: a launched engine, or the `live` fixture (an engine, or a URL given by hand)."""
    exp = load_expectations(expect)
    model = getattr(eng, "served_name", None) or eng.model
    ctx = new_ctx(eng.base_url, exp, model=model, api_key=eng.api_key, engine=getattr(eng, "engine", eng))
    rep = asyncio.run(run_suite(ctx, patterns=SURFACES))
    bad = [(r.id, r.verdict, r.behaviours, r.actual, r.note) for r in rep.results if r.verdict in ("fail", "error")]
    assert not bad and rep.aborted is None
    assert not rep.counts()["quirk-absent"]  # every declared quirk happened as declared
    ran = {r.id: r for r in rep.results}
    # a quirk with known intermittent outcomes (one the scripted model's run shows) may show either here; a case this
    # server is not provided for (Case.needs) is not selected
    declared = {cid for cid, e in exp.cases.items() if "quirk" in e and cid.startswith(tuple(SURFACES))
                and not e.get("intermittent") and cid in ran}  # fmt: skip
    assert {r.id for r in rep.results if r.verdict == "quirk" and not exp.cases[r.id].get("intermittent")} == declared
    return {r.id: r for r in rep.results}


def test_vllm_0_11_serves_responses_and_not_messages(live):
    res = judge(live, "vllm-0.11")
    messages = [r for cid, r in res.items() if cid.startswith(("messages.", "sdk.anthropic"))]
    assert messages and all(r.verdict in ("absent", "skip") for r in messages)
    assert res["messages.create.shape"].verdict == "absent" and "404" in res["messages.create.shape"].note
    assert res["responses.create.resource"].verdict == "pass"
    # the stream breaks at its end (no response.completed, the chunked body cut): judged, recorded, not a fail
    assert set(res["responses.stream.ends"].behaviours) == {"no-terminal-event", "stream-broken"}
    assert res["sdk.openai.responses"].verdict == "quirk" and res["cross.same-text"].verdict == "pass"


def test_vllm_0_32_serves_both(engine_factory):
    eng = engine_factory(manifest=REPO_ROOT / "manifests" / "vllm-0.32.0-cpu.yaml")
    res = judge(eng, "vllm-0.32")
    assert not [cid for cid, r in res.items() if r.verdict == "absent"]
    assert res["sdk.openai.responses"].verdict == "pass" and res["sdk.anthropic.messages"].verdict == "pass"
    assert res["messages.stop-sequences"].verdict == "pass" and res["messages.count-tokens"].verdict == "pass"
    assert res["cross.same-text"].behaviours == ["responses-template-differs"]
