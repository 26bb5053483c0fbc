"""The pytest plugin attached to a URL refuses without an expectation file, as `conform --url` does: a server of
unknown kind is never judged by the plain OpenAI reference silently (issue 35)."""

from __future__ import annotations

import pytest

from tests.support import netguard

pytest_plugins = ["pytester"]


def refusal(option: str, target: str) -> str:
    return f"{option} NAME is required with {target} (`{option} openai` judges by the plain OpenAI reference)"


@pytest.mark.parametrize("via", ["option", "env"])
def test_plugin_with_a_url_and_no_expectation_refuses_before_any_socket(pytester, monkeypatch, via):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    monkeypatch.delenv("HARNESS_EXPECT", raising=False)
    before = list(netguard.ATTEMPTS)
    if via == "env":
        monkeypatch.setenv("HARNESS_URL", "http://127.0.0.1:9")
        r = pytester.runpytest("-p", "no:cacheprovider")
    else:
        monkeypatch.delenv("HARNESS_URL", raising=False)
        r = pytester.runpytest("--harness-url", "http://127.0.0.1:9", "-p", "no:cacheprovider")
    assert r.ret == pytest.ExitCode.USAGE_ERROR, r.stdout.str() + r.stderr.str()
    source = "HARNESS_URL" if via == "env" else "--harness-url"
    line = f"ERROR: harness: {refusal('--harness-expect', source)}"
    assert [x for x in r.stderr.lines if "harness:" in x] == [line]  # one clear line
    assert netguard.ATTEMPTS == before  # refused when pytest configures: nothing was sent


def test_conform_with_a_url_and_no_expectation_refuses_by_the_same_rule(capsys):
    # the plugin's refusal above is this one (harness.conformance.expectations.required_expectation), in its spellings
    from harness.cli import main

    before = list(netguard.ATTEMPTS)
    assert main(["conform", "--url", "http://127.0.0.1:9"]) == 2
    assert capsys.readouterr().err == f"harness: error: {refusal('--expect', '--url')}\n"
    assert netguard.ATTEMPTS == before


def test_plugin_with_a_url_and_an_expectation_is_configured(pytester, monkeypatch):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    monkeypatch.delenv("HARNESS_URL", raising=False)
    monkeypatch.setenv("HARNESS_EXPECT", "openai")
    r = pytester.runpytest("--harness-url", "http://127.0.0.1:9", "-p", "no:cacheprovider", "--collect-only", "-q")
    assert r.ret == pytest.ExitCode.OK, r.stdout.str() + r.stderr.str()
    assert "is required with" not in r.stderr.str()


def test_plugin_with_a_manifest_keeps_its_default_expectation(pytester, monkeypatch):
    # --harness-manifest still defaults to the manifest engine's file: the refusal is for a URL alone
    pytester.makepyfile("def test_nothing():\n    pass\n")
    monkeypatch.delenv("HARNESS_URL", raising=False)
    monkeypatch.delenv("HARNESS_EXPECT", raising=False)
    r = pytester.runpytest("-p", "no:cacheprovider", "--collect-only")
    assert r.ret == pytest.ExitCode.OK
    assert "needs --harness-expect" not in r.stderr.str()
