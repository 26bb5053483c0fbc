"""Issue 32: each parser family's scripted model on the real engines with that family's real parsers (vLLM 0.11.0 and
0.32.0 with the family's --tool-call-parser, llama-server picking its parser from the chat template), one launch per
family and engine, stopped before the next:

- greedy output is the family's script, token for token (vLLM returns the token ids; llama-server its tokens);
- the tool, reasoning and structured cases (and the requests real clients send) have no fail and no error under the
  engine's expectation file with the family's own entries, and the tool cases really ran on the family's format.

The hermes family (scripted-tiny) is tests/models/test_scripted_engines.py's."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from harness.conformance.expectations import default_expectation, load_expectations
from harness.conformance.runner import new_ctx, run_suite
from harness.conformance.suite import all_cases
from harness.manifest import load_manifest
from harness.models import scripted
from harness.models.families import FAMILIES, HERMES, family_of_source
from harness.settings import REPO_ROOT
from tests.models.test_scripted_engines import _chat_body
from tests.models.test_scripted_model import REQUESTS, render

pytestmark = pytest.mark.engine

# every family but hermes, on each engine: manifests/<engine>-cpu-scripted-<family>.yaml
MANIFESTS = sorted(
    p for p in (REPO_ROOT / "manifests").glob("*-cpu-scripted-*.yaml")
    if (fam := family_of_source(load_manifest(p).model.source)) is not None and fam is not HERMES
)  # fmt: skip
JUDGED = ("tools.", "reasoning.", "structured.client.", "responses.tools", "messages.tools", "chat.tools.", "requests.")
MUST_RUN = ("tools.auto.message", "tools.auto.stream", "tools.auto.parallel", "tools.auto.result-turn")


def test_every_family_has_a_manifest_on_each_engine():
    names = {p.name for p in MANIFESTS}
    for fam in FAMILIES.values():
        if fam is HERMES:
            continue
        slug = fam.source.removeprefix("scripted-")
        for engine in ("vllm-0.11.0", "vllm-0.32.0", "llamacpp-0c1e570"):
            assert f"{engine}-cpu-scripted-{slug}.yaml" in names, (fam.name, engine)


@pytest.fixture(scope="module", params=MANIFESTS, ids=lambda p: p.stem)
def family_engine(request, tmp_path_factory):
    """The family's engine, launched for this manifest's tests and stopped after them (the families do not stay up
    together: one vLLM at a time on this machine)."""
    from harness.launch.session import prepare, start_verified
    from tests.conftest import unavailable

    m = load_manifest(request.param)
    try:
        eng = prepare(m, run_dir=tmp_path_factory.mktemp("family-engine"), quiet=True)
        start_verified(eng, quiet=True)
    except Exception as exc:  # noqa: BLE001 - reported as the reason the engine is unavailable (a failure in CI)
        unavailable(f"{request.param.name}: engine could not be started: {type(exc).__name__}: {exc}")
    try:
        yield m, family_of_source(m.model.source), eng
    finally:
        eng.stop()


def _greedy_ids(m, fam, eng, script: str) -> list[int]:
    if m.engine.kind == "llamacpp":  # the rendered prompt, completed raw: the tokens llama-server sampled
        body = {"prompt": render(fam, **REQUESTS[script]), "temperature": 0, "n_predict": 64, "return_tokens": True,
                "cache_prompt": False}  # fmt: skip
        r = httpx.post(f"{eng.base_url}/completion", json=body, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()["tokens"]
    body = {**_chat_body(eng.served_name, script), "return_token_ids": True}
    r = httpx.post(f"{eng.base_url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["token_ids"]


def test_greedy_output_is_the_familys_script_token_for_token(family_engine):
    m, fam, eng = family_engine
    wrong = {}
    for script in REQUESTS:
        got, want = _greedy_ids(m, fam, eng, script), scripted.encode_script(script, fam)
        if got != want:
            wrong[script] = (scripted.decode(got, fam), scripted.decode(want, fam))
    assert not wrong, (m.path.name, wrong)


def test_the_tool_and_reasoning_cases_have_no_fail_and_no_error(family_engine):
    m, fam, eng = family_engine
    exp = load_expectations(default_expectation(m.engine.kind, m.engine.version))
    ctx = new_ctx(eng.base_url, exp, model=eng.served_name, api_key=eng.api_key, engine=eng)
    assert ctx.family is fam
    ids = [c.id for c in all_cases() if c.id.startswith(JUDGED)]
    rep = asyncio.run(run_suite(ctx, engine_info={"kind": m.engine.kind, "url": eng.base_url}, ids=ids))
    assert rep.aborted is None
    assert rep.engine.get("scripted_family") == fam.name
    bad = [(r.id, r.verdict, r.behaviours, r.actual, r.note) for r in rep.results if r.verdict in ("fail", "error")]
    assert not bad, (m.path.name, bad)
    got = {r.id: r.verdict for r in rep.results}
    assert all(got[c] in ("pass", "quirk", "expected-intermittent") for c in MUST_RUN), {c: got[c] for c in MUST_RUN}
