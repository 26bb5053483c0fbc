"""A gateway in front of an engine (issue 22, item 3), without engines: `conform --url GATEWAY --engine-url ENGINE`
reads the engine's state (/metrics) at the engine and sends every request through the gateway; the options are
checked before any socket; the comparison of two saved conformance.json documents is a pure function.

The servers are small fakes on 127.0.0.1: the TGI stand-in as the engine (it has /metrics) and a server that answers
GET /v1/models and nothing else as the "gateway" (so anything that reached /metrics through it would get a 404).
"""

from __future__ import annotations

import json
import socket
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.cli import main
from tests.support.models_only_server import ModelsOnlyServer
from tests.support.standin_server import serve

BOUNDS = ("--stream-seconds", "5")


@pytest.fixture
def engine():
    srv = serve(0, token_delay=0.001)
    try:
        yield srv
    finally:
        srv.shutdown()


def _exchanges(out: Path, case_id: str) -> list[dict]:
    doc = json.loads((out / "evidence" / f"{case_id}.json").read_text())
    return doc["exchanges"]


def test_metrics_are_read_at_the_engine_behind_the_gateway(engine, tmp_path, capsys):
    """With --engine-url, metrics.scrape reads the engine's /metrics (its Host header is the engine's), never the
    gateway's; the report names both URLs."""
    out = tmp_path / "out"
    with ModelsOnlyServer() as gw:
        code = main(["conform", "--url", gw.url, "--engine-url", engine.base_url, "--expect", "tgi-3.3.5",
                     "-k", "metrics.scrape", "-k", "metrics.required", "--out", str(out), *BOUNDS])  # fmt: skip
        gw_host = gw.url.split("//", 1)[1]
    printed = " ".join(capsys.readouterr().out.split())
    doc = json.loads((out / "conformance.json").read_text())
    cases = {c["id"]: c for c in doc["cases"]}
    assert cases["metrics.scrape"]["verdict"] == "pass", cases["metrics.scrape"]
    assert cases["metrics.required"]["verdict"] == "pass", cases["metrics.required"]
    assert "at the engine behind the gateway" in cases["metrics.scrape"]["note"]
    engine_host = engine.base_url.split("//", 1)[1]
    assert any(e["path"] == "/metrics" for e in _exchanges(out, "metrics.scrape"))
    hosts = {e["request_headers"].get("host")
              for f in (out / "evidence").glob("*.json") if f.name != "index.json"
              for e in json.loads(f.read_text()).get("exchanges", []) if e["path"] == "/metrics"}  # fmt: skip
    assert hosts == {engine_host}, hosts
    assert doc["engine"]["url"].endswith(gw_host) and doc["engine"]["engine_url"] == engine.base_url
    assert "a gateway" in doc["liveness"]
    assert f"gateway http://{gw_host} in front of engine {engine.base_url}" in printed
    html = (out / "conformance.html").read_text()
    assert f"in front of engine {engine.base_url}" in html
    assert code == 0


def test_without_engine_url_metrics_go_to_the_server_checked(engine, tmp_path):
    """The seam changes nothing for a plain --url run: /metrics is the server's own (the gateway's 404 here)."""
    out = tmp_path / "out"
    with ModelsOnlyServer() as gw:
        main(["conform", "--url", gw.url, "--expect", "openai", "-k", "metrics.scrape", "--out", str(out), *BOUNDS])
        gw_host = gw.url.split("//", 1)[1]
    doc = json.loads((out / "conformance.json").read_text())
    assert doc["cases"][0]["verdict"] == "skip"  # no profile and a 404: the OpenAI API has no /metrics
    hosts = {e["request_headers"].get("host") for e in _exchanges(out, "metrics.scrape")}
    assert hosts == {gw_host} and "engine_url" not in doc["engine"]


@pytest.fixture
def no_socket(monkeypatch):
    """Any socket opened fails the test: a refusal must come before the first one."""

    def refuse(*a, **k):
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


REFUSED = [
    (["--url", "http://127.0.0.1:9", "--engine-url", "http://10.0.0.1:8000", "--expect", "openai"],
     "--engine-url: refusing '10.0.0.1'"),
    (["--url", "http://127.0.0.1:9", "--engine-url", "http://example.com:8000", "--expect", "openai"],
     "--engine-url: refusing 'example.com'"),
    (["--url", "http://127.0.0.1:9", "--engine-url", "ftp://127.0.0.1:8000", "--expect", "openai"],
     "--engine-url: need an http(s)://host:port URL"),
    (["--engine-url", "http://127.0.0.1:8000", "--expect", "openai"], "need --url GATEWAY"),
    (["--url", "http://127.0.0.1:9", "--engine-api-key-env", "X", "--expect", "openai"],
     "--engine-api-key-env needs --engine-url"),
    (["--url", "http://127.0.0.1:9", "--compare-direct", "--expect", "openai"], "--compare-direct needs --engine-url"),
    (["--url", "http://127.0.0.1:9", "--engine-url", "http://127.0.0.1:8", "--compare-direct", "--expect", "openai"],
     "--compare-direct needs --out"),
    (["--url", "http://127.0.0.1:9", "--engine-url", "http://127.0.0.1:9", "--expect", "openai"],
     "--engine-url is the --url itself"),
    (["--url", "http://127.0.0.1:9", "--engine-url", "http://127.0.0.1:8", "--direct-expect", "openai",
      "--expect", "openai"], "--direct-expect needs --compare-direct"),
    (["manifests/vllm-0.11.0-cpu.yaml", "--engine-url", "http://127.0.0.1:8"], "does not take --engine-url"),
    (["--url", "http://127.0.0.1:9", "--engine-url", "http://127.0.0.1:8", "--engine-api-key-env",
      "HARNESS_TEST_NOT_SET_9", "--expect", "openai"], "--engine-api-key-env HARNESS_TEST_NOT_SET_9: that environment"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "message"), REFUSED, ids=[m for _, m in REFUSED])
def test_gateway_options_are_refused_before_any_socket(argv, message, no_socket, capsys, monkeypatch):
    """--engine-url goes through the one loopback rule; --engine-url (and its companions) without --url, or a
    companion without --engine-url, is a usage error; each is one line and exit 2, before any socket."""
    monkeypatch.delenv("HARNESS_TEST_NOT_SET_9", raising=False)
    code = main(["conform", *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def _doc(verdicts: dict[str, str], url: str = "http://127.0.0.1:1", **engine) -> dict:
    cases = [{"id": cid, "level": "SHOULD" if cid.startswith("s.") else "MUST", "requirement": f"req {cid}",
              "verdict": v, "behaviour": "tag-" + cid if v in ("fail", "quirk") else "",
              "behaviours": [], "expected": None, "actual": "got <b>x</b>" if v == "fail" else None, "chunk": None,
              "note": "", "quirk_reason": "", "unexpected_pass": False, "duration_s": 0.1, "extra": {}}
             for cid, v in verdicts.items()]  # fmt: skip
    counts: dict[str, int] = {}
    for v in verdicts.values():
        counts[v] = counts.get(v, 0) + 1
    return {"format": 1, "engine": {"url": url, **engine}, "expectations": "x", "started_at": 0.0, "duration_s": 1.0,
            "aborted": None, "counts": counts, "unexpected_passes": [], "cases": cases}  # fmt: skip


DIRECT = {"a.same": "pass", "a.worse": "pass", "a.quirk": "pass", "a.better": "fail", "s.worse": "pass",
          "a.skip": "skip", "a.only-direct": "pass", "a.fail-both": "fail"}  # fmt: skip
GATEWAY = {"a.same": "pass", "a.worse": "fail", "a.quirk": "quirk", "a.better": "pass", "s.worse": "error",
           "a.skip": "pass", "a.only-gateway": "fail", "a.fail-both": "fail"}  # fmt: skip


def test_the_comparison_names_exactly_the_changed_cases(tmp_path):
    """compare() over two saved documents: changed = the cases both ran whose verdict differs; worse MUST cases make
    it fail; cases one run lacks are listed apart. The JUnit file has one failing testcase per changed case; the
    HTML escapes what the server said."""
    from harness.conformance.compare import compare, write_comparison
    from harness.conformance.model import SuiteDocument

    direct = SuiteDocument.from_dict(_doc(DIRECT)).to_dict()
    gateway = SuiteDocument.from_dict(
        _doc(GATEWAY, "http://u:p@127.0.0.1:2", engine_url="http://127.0.0.1:1")
    ).to_dict()
    cmp = compare(direct, gateway)
    both = set(DIRECT) & set(GATEWAY)
    assert set(cmp["changed"]) == {c for c in both if DIRECT[c] != GATEWAY[c]}
    assert set(cmp["worse_must"]) == {"a.worse", "a.quirk"} and set(cmp["worse"]) == {"a.worse", "a.quirk", "s.worse"}
    assert set(cmp["better"]) == {"a.better"} and cmp["one_sided"] == ["a.skip"]
    assert cmp["only_direct"] == ["a.only-direct"] and cmp["only_gateway"] == ["a.only-gateway"]
    assert cmp["ok"] is False and cmp["verdict"].startswith(
        "the gateway changes 5 cases for clients: 3 worse (2 MUST), 1 better, 1 judged"
    )
    assert cmp["gateway"]["url"] == "http://***@127.0.0.1:2"
    assert compare(direct, direct)["changed"] == [] and compare(direct, direct)["ok"] is True
    write_comparison(cmp, tmp_path)
    suite = ET.parse(tmp_path / "comparison.xml").getroot().find("testsuite")
    assert suite is not None
    assert {tc.get("name") for tc in suite.iter("testcase")} == set(cmp["changed"])
    assert all(tc.find("failure") is not None for tc in suite.iter("testcase"))
    page = (tmp_path / "comparison.html").read_text()
    assert "got &lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    assert json.loads((tmp_path / "comparison.json").read_text())["changed"] == cmp["changed"]


def test_compare_direct_writes_both_runs_and_the_comparison(engine, tmp_path, capsys):
    """--compare-direct: the suite at the engine (DIR/direct/) and through the gateway (DIR/gateway/), and the
    comparison beside them; its list is the set difference of the two runs' verdicts; an existing DIR refuses
    without --force before any request."""
    out = tmp_path / "cmp"
    argv = ["conform", "--expect", "tgi-3.3.5", "-k", "metrics.scrape", "-k", "health.models", "--compare-direct",
            "--out", str(out), *BOUNDS]  # fmt: skip
    with ModelsOnlyServer() as gw:
        code = main([*argv[:1], "--url", gw.url, "--engine-url", engine.base_url, *argv[1:]])
        again = main([*argv[:1], "--url", gw.url, "--engine-url", engine.base_url, *argv[1:]])
    printed = capsys.readouterr()
    d = json.loads((out / "direct" / "conformance.json").read_text())
    g = json.loads((out / "gateway" / "conformance.json").read_text())
    cmp = json.loads((out / "comparison.json").read_text())
    dv, gv = ({c["id"]: c["verdict"] for c in x["cases"]} for x in (d, g))
    assert set(cmp["changed"]) == {c for c in dv if dv[c] != gv.get(c)}
    assert d["engine"]["url"] == engine.base_url and g["engine"]["engine_url"] == engine.base_url
    assert (out / "comparison.xml").is_file() and (out / "comparison.html").is_file()
    assert (out / "gateway" / "evidence" / "index.json").is_file()
    assert "comparison: the gateway changes" in printed.out
    assert code == (1 if cmp["worse_must"] else 0)
    assert again == 2 and "pass --force" in printed.err
