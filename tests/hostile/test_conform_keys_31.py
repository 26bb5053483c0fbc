"""`conform --url` in front of an engine, `--compare-direct` and `harness run --out` under hostile input (issue 31:
findings 2, 7, 8, 10 and 24).

2: the engine's own key (`--engine-api-key-env`), echoed back by the engine, reaches no output: evidence/,
   conformance.json, conformance.html, the terminal; in gateway mode and on both sides of --compare-direct.
7: --force never writes over an input: an expectation file among the outputs, or inside evidence/, is refused; a
   --compare-direct side directory that is a symbolic link (to another run) is refused.
8: `harness run --out DIR` holding an earlier run is refused before the install and launch; --force replaces it.
10: --compare-direct keeps the comparison's own words (field names, case ids, expectation names) when a key begins
   like one of them.
24: --engine-url naming the --url by another spelling is refused; "needs" for one option.

Every server is a fake on 127.0.0.1: tests/support/echo_key_server.py as the gateway, and EchoEngine below, which
puts the Authorization header it got into every answer (its /metrics included).
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.cli import main
from tests.support.echo_key_server import EchoKeyServer

ROOT = Path(__file__).resolve().parents[2]
GATEWAY_KEY = "Wd4pGateKey-7c21e9-Rt6y"
ENGINE_KEY = "Xv9qEngKey-51be7d-Pw3r"  # nothing in a report looks like any 6 characters of either
GATEWAY_ENV, ENGINE_ENV = "HARNESS_H31_GATEWAY_KEY", "HARNESS_H31_ENGINE_KEY"
CASES = ("-k", "metrics.scrape", "-k", "health.models")
BOUNDS = ("--stream-seconds", "5", "--max-seconds", "60")


class _EngineHandler(BaseHTTPRequestHandler):
    def log_message(self, *a) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        auth = self.headers.get("authorization") or "(none)"
        if self.path.startswith("/v1/models"):
            doc = {"object": "list", "data": [{"id": "tiny", "object": "model", "owned_by": auth}]}
            self._send(200, json.dumps(doc).encode(), "application/json")
        elif self.path.startswith("/metrics"):  # the engine's own state, read with the engine's own key
            self._send(400, f"no metrics for you; you sent: {auth}".encode(), "text/plain")
        else:
            self._send(200, json.dumps({"version": "0.11.0", "you_sent": auth}).encode(), "application/json")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self._send(400, f"bad request; you sent: {self.headers.get('authorization')}".encode(), "text/plain")


class EchoEngine:
    """An engine on 127.0.0.1 that quotes the Authorization header it was sent in every answer."""

    def __init__(self) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _EngineHandler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> EchoEngine:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


def key_parts(key: str, text: str) -> list[str]:
    """The runs of 6+ characters that begin or end `key` found in `text` (the whole key included)."""
    n = len(key)
    return sorted(p for p in {key[:i] for i in range(6, n + 1)} | {key[-i:] for i in range(6, n + 1)} if p in text)


def conform_gateway(monkeypatch, *extra, gateway_key=GATEWAY_KEY, engine_key=ENGINE_KEY) -> int:
    monkeypatch.setenv(GATEWAY_ENV, gateway_key)
    monkeypatch.setenv(ENGINE_ENV, engine_key)
    with EchoKeyServer() as gw, EchoEngine() as engine:
        return main(["conform", "--url", gw.url, "--engine-url", engine.url, "--api-key-env", GATEWAY_ENV,
                     "--engine-api-key-env", ENGINE_ENV, *BOUNDS, *extra])  # fmt: skip


# -- 2: every key given to a run goes to its recorder and its scrub -----------------------------------------------


@pytest.mark.parametrize("compare", [False, True], ids=["gateway-mode", "compare-direct"])
def test_the_engine_key_echoed_by_the_engine_reaches_no_output(compare, tmp_path, capsys, monkeypatch):
    """The engine quotes its own key in its /metrics answer (read with --engine-api-key-env's key behind the
    gateway) and its model list: no file under --out and no terminal line holds it, or any 6+ character run that
    begins or ends it."""
    out = tmp_path / "out"
    code = conform_gateway(monkeypatch, "--expect", "vllm-0.11", *CASES, "--out", str(out),
                           *(["--compare-direct"] if compare else []))  # fmt: skip
    got = capsys.readouterr()
    assert code in (0, 1), got.err  # judged, not refused
    files = sorted(p for p in out.rglob("*") if p.is_file())
    gateway_dir = out / "gateway" if compare else out
    assert {"conformance.json", "conformance.html"} <= {p.name for p in gateway_dir.iterdir()}
    for p in files:
        assert key_parts(ENGINE_KEY, p.read_text()) == [], p
        assert key_parts(GATEWAY_KEY, p.read_text()) == [], p
    assert key_parts(ENGINE_KEY, got.out + got.err) == []
    # the engine did echo it, on the gateway side too: the evidence of the /metrics read holds it scrubbed
    scrape = json.loads((gateway_dir / "evidence" / "metrics.scrape.json").read_text())
    at_engine = [e for e in scrape["exchanges"] if e["path"] == "/metrics"]
    assert at_engine and all("you sent: Bearer ***" in json.dumps(e) for e in at_engine), at_engine
    assert at_engine[0]["request_headers"]["authorization"].startswith("*** (redacted")


def test_the_recorder_scrubs_every_key_it_is_given():
    """The recorder knows the run's key and the others given to it: each (and a part cut at either end) is cut."""
    from harness.conformance.evidence import EvidenceRecorder

    rec = EvidenceRecorder(api_key=GATEWAY_KEY, other_keys=(ENGINE_KEY, None))
    data = f"a {GATEWAY_KEY} b {ENGINE_KEY} c {ENGINE_KEY[:9]}".encode()
    assert rec.scrub(data) == b"a *** b *** c ***"
    assert rec._header("authorization", f"Bearer {ENGINE_KEY}") == "*** (redacted: a key given to the run)"


# -- 10: the comparison keeps the harness's own words -------------------------------------------------------------

PREFIXED_KEYS = [("engine-Q8vz3Kd-41", "litellm-Hy27cQ-93"), ("health-Rm4tx7-08", "metrics-Pw9Zq2-55")]


@pytest.mark.parametrize(("engine_key", "gateway_key"), PREFIXED_KEYS, ids=["engine-litellm", "health-metrics"])
def test_compare_direct_keeps_its_own_words_whatever_the_keys_begin_with(engine_key, gateway_key, tmp_path,
                                                                         capsys, monkeypatch):  # fmt: skip
    """Keys beginning `engine-`, `litellm-`, `health-`, `metrics-`: the comparison's field names, case ids,
    levels, requirements and expectation names are the harness's, not scrubbed; neither key is anywhere in it."""
    from harness.conformance.suite import all_cases

    out = tmp_path / "cmp"
    code = conform_gateway(monkeypatch, "--expect", "litellm-1.108.7-vllm-0.11", "--direct-expect", "vllm-0.11",
                           *CASES, "--compare-direct", "--out", str(out), engine_key=engine_key,
                           gateway_key=gateway_key)  # fmt: skip
    got = capsys.readouterr()
    assert code in (0, 1), got.err
    text = (out / "comparison.json").read_text()
    cmp = json.loads(text)
    assert "engine_url" in cmp["gateway"] and "***" not in json.dumps(list(cmp["gateway"]))
    assert cmp["gateway"]["expectations"] == "litellm-1.108.7-vllm-0.11"
    assert cmp["direct"]["expectations"] == "vllm-0.11"
    suite = {c.id: c for c in all_cases()}
    assert sorted(r["id"] for r in cmp["cases"]) == ["health.models", "metrics.scrape"]
    for row in cmp["cases"]:
        assert (row["level"], row["requirement"]) == (suite[row["id"]].level.value, suite[row["id"]].requirement)
    assert cmp["verdict"].startswith("the gateway changes ")
    for key in (engine_key, gateway_key):  # nothing of it but the word it begins with (`engine`, `litellm-`)
        word = key.split("-")[0] + "-"
        for page in (text, (out / "comparison.html").read_text()):
            assert [p for p in key_parts(key, page) if not word.startswith(p)] == []


def test_a_key_beginning_like_a_field_name_renames_no_field():
    """scrub_report keeps the report's field names: a key beginning `engine_` leaves `engine_url` a field (it was a
    KeyError once the engine's key was scrubbed on the gateway side)."""
    from harness.conformance.report import scrub_report
    from harness.conformance.runner import SuiteReport

    key = "engine_Zr5k2Lq"
    report = SuiteReport(engine={"url": "http://127.0.0.1:1", "engine_url": f"http://127.0.0.1:2/{key}"},
                         expectations="x", started_at=0.0)  # fmt: skip
    scrub_report(report, [key])
    assert report.engine == {"url": "http://127.0.0.1:1", "engine_url": "http://127.0.0.1:2/***"}


# -- 7: --force never writes over an input ------------------------------------------------------------------------

EXPECTATION = (ROOT / "manifests" / "expectations" / "vllm-0.11.yaml").read_text()


def _plant(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(EXPECTATION)
    return str(path)


@pytest.mark.parametrize("where", ["conformance.json", "junit.xml", "evidence/exp.yaml"])
def test_an_expectation_file_among_the_outputs_is_never_replaced(where, tmp_path, capsys, monkeypatch):
    """`conform --url ... --expect OUT/conformance.json --out OUT --force`: the expectation file is an input."""
    out = tmp_path / "out"
    exp = _plant(out / where)
    with EchoKeyServer() as s:
        code = main(["conform", "--url", s.url, "--expect", exp, "-k", "health.models", "--out", str(out),
                     "--force", *BOUNDS])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert "input of this command" in err and len(err.strip().splitlines()) == 1, err
    assert Path(exp).read_text() == EXPECTATION


@pytest.mark.parametrize(("flag", "where"), [("--expect", "comparison.json"), ("--direct-expect", "comparison.xml"),
                                             ("--expect", "direct/conformance.json"),
                                             ("--direct-expect", "gateway/evidence/exp.yaml")])  # fmt: skip
def test_compare_direct_never_replaces_an_expectation_file(flag, where, tmp_path, capsys, monkeypatch):
    out = tmp_path / "cmp"
    exp = _plant(out / where)
    given = {"--expect": "vllm-0.11", "--direct-expect": "vllm-0.11", flag: exp}
    code = conform_gateway(monkeypatch, *CASES, "--compare-direct", "--out", str(out), "--force",
                           *(x for kv in given.items() for x in kv))  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert "input of this command" in err and len(err.strip().splitlines()) == 1, err
    assert Path(exp).read_text() == EXPECTATION


@pytest.mark.parametrize("side", ["direct", "gateway"])
def test_compare_direct_never_writes_through_a_symlinked_side(side, tmp_path, capsys, monkeypatch):
    """OUT/direct (or OUT/gateway) a symbolic link to another run: refused, --force or not; that run is untouched."""
    other = tmp_path / "other-run"
    other.mkdir()
    (other / "conformance.json").write_text('{"mine": true}\n')
    (other / "evidence").mkdir()
    (other / "evidence" / "index.json").write_text("{}\n")
    out = tmp_path / "cmp"
    out.mkdir()
    (out / side).symlink_to(other, target_is_directory=True)
    code = conform_gateway(monkeypatch, "--expect", "vllm-0.11", *CASES, "--compare-direct", "--out", str(out),
                           "--force")  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{side} is a symbolic link" in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in other.rglob("*")) == ["conformance.json", "evidence", "index.json"]
    assert (other / "conformance.json").read_text() == '{"mine": true}\n'


# -- 8: `harness run --out` with an earlier run -------------------------------------------------------------------

MANIFEST = str(ROOT / "manifests" / "vllm-0.11.0-cpu.yaml")


class Launched(Exception):
    """The fake launch was reached: every check before the install and launch passed."""


@pytest.fixture
def launches(monkeypatch):
    calls: list[object] = []

    def fake_launch(manifest, **kw):
        calls.append(kw.get("run_dir"))
        raise Launched

    monkeypatch.setattr("harness.run.launch", fake_launch)
    return calls


def _earlier_run(d: Path) -> None:
    (d / "conformance").mkdir(parents=True)
    (d / "run.json").write_text('{"run_id": "earlier"}\n')
    (d / "conformance" / "conformance.json").write_text("{}\n")


@pytest.mark.parametrize("held", ["run.json", "conformance/", "load/", "engine.log"])
def test_run_out_with_an_earlier_run_is_refused_before_the_launch(held, tmp_path, launches, capsys):
    d = tmp_path / "run"
    d.mkdir()
    (d / held.rstrip("/")).mkdir() if held.endswith("/") else (d / held).write_text("earlier\n")
    code = main(["run", MANIFEST, "--out", str(d)])
    err = capsys.readouterr().err
    assert launches == [], "launched before the output directory was checked"
    assert code == 2, err
    assert "already holds an earlier run" in err and held in err and "--force" in err
    assert len(err.strip().splitlines()) == 1, err


def test_run_out_force_replaces_the_earlier_run_and_a_new_dir_needs_none(tmp_path, launches):
    d = tmp_path / "run"
    _earlier_run(d)
    with pytest.raises(Launched):
        main(["run", MANIFEST, "--out", str(d), "--force"])
    with pytest.raises(Launched):
        main(["run", MANIFEST, "--out", str(tmp_path / "new")])
    assert launches == [d, tmp_path / "new"]


@pytest.mark.parametrize("stage", ["conformance", "golden", "load"])
def test_run_out_never_writes_through_a_symlinked_stage_dir(stage, tmp_path, launches, capsys):
    other = tmp_path / "other"
    other.mkdir()
    d = tmp_path / "run"
    d.mkdir()
    (d / stage).symlink_to(other, target_is_directory=True)
    code = main(["run", MANIFEST, "--out", str(d), "--force"])
    err = capsys.readouterr().err
    assert launches == [] and code == 2, err
    assert f"{stage} is a symbolic link" in err


def test_run_force_without_out_is_refused(launches, capsys):
    code = main(["run", MANIFEST, "--force"])
    err = capsys.readouterr().err
    assert launches == [] and code == 2 and "--force" in err and "--out" in err, err


def test_the_load_stage_replaces_an_earlier_result_with_force(tmp_path, monkeypatch):
    """With --force the stages replace what the earlier run left (the load stage refused it as a failed stage)."""
    from harness.load import stage
    from harness.stages import StageContext

    seen = {}

    def fake_run_scenario(sc, target, out, progress, force=False):
        seen["force"] = force
        raise Launched

    monkeypatch.setattr(stage, "run_scenario", fake_run_scenario)
    engine = type("E", (), {"base_url": "http://127.0.0.1:9", "served_name": "tiny", "api_key": None})()
    manifest = type("M", (), {"engine": type("K", (), {"kind": "vllm"})()})()
    ctx = StageContext(engine=engine, manifest=manifest, run_dir=tmp_path, identity={}, force=True)  # type: ignore[arg-type]
    with pytest.raises(Launched):
        stage.run_stage(ctx)
    assert seen == {"force": True}


# -- 24: one server by two spellings ------------------------------------------------------------------------------


@pytest.fixture
def no_socket(monkeypatch):
    """Any socket opened fails the test: a refusal must come before the first one."""

    def refuse(*a, **k):
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


SAME = [
    ("http://127.0.0.1:8000", "http://localhost:8000"),
    ("http://LOCALHOST:8000/", "http://127.0.0.1:8000"),
    ("http://localhost:8000", "http://[::1]:8000"),
    ("http://[::1]:8000", "http://[0:0:0:0:0:0:0:1]:8000/"),
    ("http://127.0.0.1:80", "http://127.0.0.1"),
    ("https://127.0.0.1", "https://127.0.0.1:443/"),
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000//"),
    ("http://127.0.0.1:8000", "http://user:pw@127.0.0.1:8000"),
]


@pytest.mark.parametrize(("gateway", "engine"), SAME, ids=[f"{a}={b}" for a, b in SAME])
def test_engine_url_naming_the_url_by_another_spelling_is_refused(gateway, engine, no_socket, capsys):
    code = main(["conform", "--url", gateway, "--engine-url", engine, "--expect", "openai"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--engine-url is the --url itself" in err and len(err.strip().splitlines()) == 1, err


def test_other_servers_stay_apart():
    """Another port, another path, or another loopback address (a listener can bind each) is another server."""
    from harness.net import same_loopback_server

    base = "http://127.0.0.1:8000"
    for other in ("http://127.0.0.1:8001", "http://127.0.0.1:8000/gw", "http://127.0.0.2:8000", "http://[::1]:8000"):
        assert not same_loopback_server(base, other), other
    assert same_loopback_server("http://localhost:8000", "http://127.0.0.1:8000/")


def test_one_option_without_engine_url_needs_it(no_socket, capsys, monkeypatch):
    monkeypatch.setenv(ENGINE_ENV, ENGINE_KEY)
    code = main(["conform", "--url", "http://127.0.0.1:9", "--engine-api-key-env", ENGINE_ENV, "--expect", "openai"])
    err = capsys.readouterr().err
    assert code == 2 and "--engine-api-key-env needs --engine-url" in err, err
    code = main(["conform", "--url", "http://127.0.0.1:9", "--engine-api-key-env", ENGINE_ENV, "--compare-direct",
                 "--expect", "openai"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "--engine-api-key-env, --compare-direct need --engine-url" in err, err
