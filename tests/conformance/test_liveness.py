"""Liveness that does not assume /health (issue 22: item 1, the no-profile skips of item 2, acceptance 3).

After a failed case the runner asks whether the server is still there. The profile of a known engine says how
(`EngineProfile.liveness`: GET /health == 200 for vLLM, TGI and llama.cpp); a server no profile describes (`--url` with
`--expect openai`) is asked the request every OpenAI-compatible server answers, GET /v1/models. Every server here is a
small fake on 127.0.0.1 (tests/support/models_only_server.py, tests/support/badserver.py).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.cli import main
from harness.conformance.expectations import load_expectations
from harness.conformance.runner import new_ctx, run_suite
from tests.support.badserver import BadServer
from tests.support.models_only_server import ModelsOnlyServer, StoppingServer

NO_PROFILE = "GET /v1/models == 200 with a JSON list (no engine profile)"
BOUNDS = ("--stream-seconds", "5")  # a fake answers in milliseconds; the bound only keeps a broken fake from hanging


def conform(capsys, url: str, out: Path, *argv: str) -> tuple[int, dict, str]:
    """`harness conform --url URL --out OUT ...` in-process: exit code, conformance.json, what the terminal showed."""
    code = main(["conform", "--url", url, "--out", str(out), *BOUNDS, *argv])
    printed = " ".join(capsys.readouterr().out.split())  # the table wraps long lines
    return code, json.loads((out / "conformance.json").read_text()), printed


def suite(url: str, exp: str, patterns: list[str] | None = None, **kw):
    return asyncio.run(run_suite(new_ctx(url, load_expectations(exp), max_stream_s=5.0, **kw), patterns=patterns))


@pytest.fixture(scope="module")
def models_only_run(tmp_path_factory):
    """One whole suite against a server that answers GET /v1/models and nothing else, attached with an API key (so
    the auth cases run too)."""
    out = tmp_path_factory.mktemp("models-only") / "out"
    with pytest.MonkeyPatch.context() as mp, ModelsOnlyServer() as server:
        mp.setenv("HARNESS_TEST_LIVENESS_KEY", "k-liveness-0123")
        code = main(["conform", "--url", server.url, "--expect", "openai", "--out", str(out), *BOUNDS,
                     "--api-key-env", "HARNESS_TEST_LIVENESS_KEY"])  # fmt: skip
    doc = json.loads((out / "conformance.json").read_text())
    return code, doc, out


def test_a_server_with_only_models_gets_a_verdict_for_every_case(models_only_run):
    """Item 1 / acceptance 3: a 404 on /health is that case's verdict, never "the server stopped answering"; every
    case is judged (none `error`), and the run exits by its verdicts."""
    code, doc, _ = models_only_run
    cases = {c["id"]: c for c in doc["cases"]}
    assert doc["aborted"] is None
    assert len(cases) > 50 and not [i for i, c in cases.items() if c["verdict"] == "error"]
    health = cases["health.health"]
    assert (health["verdict"], health["behaviour"], health["actual"]) == ("fail", "status-404", 404)
    assert "GET /v1/models" in health["note"]  # says what the run's liveness is judged by instead
    assert cases["health.models"]["verdict"] == "pass"
    assert code == 1  # by its verdicts: there are fails, and no liveness abort


def test_the_report_says_which_liveness_check_was_used(models_only_run, capsys, tmp_path):
    """Item 1: conformance.json, the terminal summary and conformance.html name the liveness check."""
    _, doc, out = models_only_run
    assert doc["liveness"] == NO_PROFILE
    assert f"liveness check after a failed case: {NO_PROFILE}" in (out / "conformance.html").read_text()
    main(["conform", "--render", str(out)])  # the saved document reads back through the model, field included
    capsys.readouterr()
    with BadServer("ok") as server:
        _, known, printed = conform(capsys, server.url, tmp_path / "vllm", "--expect", "vllm-0.11", "-k", "health")
    assert known["liveness"] == "GET /health == 200 (vLLM profile)"
    assert "liveness check: GET /health == 200 (vLLM profile)" in printed


# the cases that need a profile's knowledge, and what their skip says
PROFILE_CASES = {
    "health.version": "no engine profile",  # which identity endpoint
    "metrics.scrape": "no engine profile",  # whether there is a /metrics at all
    "auth.health-unguarded": "no engine profile",  # which endpoints stay open without a key
    "auth.metrics-unguarded": "no engine profile",
    "fields.extras.token-ids": "declares no probes.token_ids",  # the token-id extras
    "metrics.required": "no metrics contract",  # metric names
}


@pytest.mark.parametrize("case_id", sorted(PROFILE_CASES))
def test_cases_that_need_a_profile_skip_without_one(models_only_run, case_id):
    """Item 2 (the part that follows from item 1): with --url and no profile, a case that needs a profile's knowledge
    reports `skip` with the reason, not fail or error."""
    _, doc, _ = models_only_run
    case = next(c for c in doc["cases"] if c["id"] == case_id)
    assert case["verdict"] == "skip" and PROFILE_CASES[case_id] in case["note"], case


def test_a_server_that_stops_answering_halfway_is_named_with_its_case(capsys, tmp_path):
    """Acceptance 3: a server that stops answering halfway still gets "the server stopped answering", naming the case
    during which it stopped; every case before it keeps its own verdict, every case after is "not run"."""
    with StoppingServer(after=60) as server:
        code, doc, printed = conform(capsys, server.url, tmp_path / "out", "--expect", "openai")
        assert server.answered == 60  # it did stop, after answering 60 requests
    m = re.fullmatch(r"the server stopped answering during (\S+)", doc["aborted"] or "")
    assert m, doc["aborted"]
    ids = [c["id"] for c in doc["cases"]]
    at = ids.index(m.group(1))
    before, named, after = doc["cases"][:at], doc["cases"][at], doc["cases"][at + 1 :]
    assert len(before) >= 10 and not [c["id"] for c in before if c["verdict"] == "error"]
    assert named["verdict"] == "error" and named["note"].startswith(doc["aborted"])
    assert after and all(c["verdict"] == "error" and c["note"] == f"not run: {doc['aborted']}" for c in after)
    assert doc["liveness"] == NO_PROFILE
    assert f"aborted: {doc['aborted']}" in printed and code == 1


def test_an_answer_that_fails_the_check_is_not_a_server_that_stopped_answering():
    """Item 1: a server that answers the liveness request, but not as the check asks (a profile's /health answered
    404), is reported as failing its liveness check, with the answer, not as one that stopped answering."""
    with ModelsOnlyServer() as server:
        rep = suite(server.url, "vllm-0.11", ["health", "chat.stream.role-first"])
    assert rep.liveness == "GET /health == 200 (vLLM profile)"
    assert rep.aborted == ("the server failed its liveness check during health.health "
                           "(GET /health == 200 (vLLM profile): it answered HTTP 404)")  # fmt: skip


def test_a_catch_all_page_is_no_proof_of_life_without_a_profile():
    """Item 1: without a profile, GET /v1/models must answer a JSON list: a server that answers every path with
    HTTP 200 and an HTML page is not taken for a live OpenAI server."""
    with BadServer("html") as server:
        rep = suite(server.url, "openai", ["health"])
    assert rep.aborted is not None and "failed its liveness check during health.models" in rep.aborted
    assert "HTTP 200 with a body that is not a JSON object with a data list" in rep.aborted


def test_every_profile_says_how_it_shows_it_is_alive():
    """Item 1: vLLM, TGI and llama.cpp keep GET /health == 200, as data in their profiles."""
    from harness.engines import PROFILES

    assert {k: str(p.liveness) for k, p in PROFILES.items()} == {k: "GET /health == 200" for k in PROFILES}


def test_a_launched_engine_is_checked_by_its_own_profile():
    """Item 1: a launched engine's profile decides, whatever the expectation file (here the plain reference)."""
    from harness.engines import PROFILES

    engine = SimpleNamespace(spec=SimpleNamespace(profile=PROFILES["llamacpp"]), exit_status=lambda: None)
    ctx = new_ctx("http://127.0.0.1:9", load_expectations("openai"), engine=engine)
    assert ctx.liveness()[1] == "GET /health == 200 (llama.cpp profile)"
    assert new_ctx("http://127.0.0.1:9", load_expectations("openai")).liveness()[1] == NO_PROFILE
