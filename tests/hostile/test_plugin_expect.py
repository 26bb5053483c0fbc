"""The pytest plugin attached to a URL refuses without an expectation file, as `conform --url` does: a server of
unknown kind is never judged by the plain OpenAI reference silently (issue 35)."""

from __future__ import annotations

import pytest

from tests.support import netguard

pytest_plugins = ["pytester"]


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
    text = r.stderr.str()
    assert "needs --harness-expect" in text and "openai" in text
    assert netguard.ATTEMPTS == before  # refused when pytest configures: nothing was sent


def test_plugin_with_a_manifest_keeps_its_default_expectation(pytester, monkeypatch):
    # --harness-manifest still defaults to the manifest engine's file: the refusal is for a URL alone
    pytester.makepyfile("def test_nothing():\n    pass\n")
    monkeypatch.delenv("HARNESS_URL", raising=False)
    monkeypatch.delenv("HARNESS_EXPECT", raising=False)
    r = pytester.runpytest("-p", "no:cacheprovider", "--collect-only")
    assert r.ret == pytest.ExitCode.OK
    assert "needs --harness-expect" not in r.stderr.str()
