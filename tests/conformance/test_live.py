"""Acceptance 1 and the API-key cases against the real engine."""

import asyncio

import pytest

from harness.conformance.expectations import load_expectations
from harness.conformance.runner import new_ctx, run_suite

pytestmark = pytest.mark.engine


def test_full_suite_against_vllm(live):
    rep = asyncio.run(
        run_suite(
            new_ctx(
                live.base_url,
                load_expectations("vllm-0.11"),
                model=live.model,
                api_key=live.api_key,
                engine=live.engine,
            )
        )
    )
    bad = [(r.id, r.behaviour, r.actual, r.note) for r in rep.results if r.verdict in ("fail", "error")]
    assert not bad
    assert sum(r.verdict not in ("skip",) for r in rep.results) >= 35
    # every declared quirk of vllm-0.11 but the auth ones (this engine runs without a key) happens, nothing else: the
    # engine's own, and off the scripted model the plain_model ones (no tool parser: tool_choice auto is refused)
    exp = load_expectations("vllm-0.11")
    assert {r.id for r in rep.results if r.verdict == "quirk"} == {
        "completions.stream.no-extra-fields",
        "integrity.tool-call-length",
        "tools.auto.required-cut",  # a forced call cut at max_tokens: 400 on any model
        # /v1/responses (issue 19): tests/conformance/test_surfaces_engine.py says what each one is
        "responses.create.schema",
        "responses.stream.ends",
        "responses.max-output-tokens",
        "responses.store",
        "sdk.openai.responses",
    } | set(exp.plain_model)
    # a declared outcome that follows the model served (no reasoning item on the reference model)
    assert {r.id: r.verdict for r in rep.results}["responses.stream.ids"] in ("quirk", "expected-intermittent")


def test_api_key_cases(engine_factory):
    eng = engine_factory(api_key="conformance-test-key")
    rep = asyncio.run(
        run_suite(
            new_ctx(eng.base_url, load_expectations("vllm-0.11"), model=eng.served_name, api_key=eng.api_key),
            patterns=["auth", "health.health"],
        )
    )
    assert {r.id: r.verdict for r in rep.results} == {
        "health.health": "pass",
        "auth.missing-key": "quirk",
        "auth.wrong-key": "quirk",
        "auth.health-unguarded": "pass",
        "auth.metrics-unguarded": "pass",
    }


def test_api_key_never_reaches_logs_or_reports(engine_factory, tmp_path):
    import subprocess

    from harness.conformance.report import write_outputs

    key = "conformance-test-key"
    eng = engine_factory(api_key=key)
    rep = asyncio.run(
        run_suite(
            new_ctx(eng.base_url, load_expectations("vllm-0.11"), model=eng.served_name, api_key=eng.api_key),
            patterns=["auth", "chat.nonstream"],
        )
    )
    write_outputs(rep.to_dict(), tmp_path)
    for f in [eng.log_path, *tmp_path.iterdir()]:
        assert key not in f.read_text(errors="replace"), f
    # the key goes to the engine by environment, never on its command line
    cmdline = subprocess.run(["ps", "-o", "args=", "-p", str(eng.proc.pid)], capture_output=True, text=True).stdout
    assert cmdline and key not in cmdline
