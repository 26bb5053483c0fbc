"""Issue 33, items 1, 2 and 6 for the Python clients: a client lock that is not the pinned one is refused before
anything of it runs; a driver's output is untrusted (bounded, parsed, escaped, scrubbed of keys); a hanging driver is
killed at its bound with its children; the loopback proxy forwards through the evidence seam without the driver's
key; the judge reads each feature against the scripted model's scripts. The engine test at the end runs every driver
against the session's scripted vLLM 0.11.0 (`pytest -m engine tests/conformance/test_clients_33.py`)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import httpx
import pytest

from harness.clients import env as client_env
from harness.clients.env import ClientEnv, install_client, installed_client, verify_lock
from harness.clients.proxy import LoopbackProxy
from harness.clients.run import MAX_OUTPUT_BYTES, parse_output, run_driver
from harness.clients.spec import CLIENTS, FEATURES
from harness.conformance.cases.clients import error_tag, judge_result, run_client
from harness.conformance.evidence import EvidenceRecorder
from harness.errors import InstallError, PinMismatch

KEY = "sk-run-key-0123456789abcdef"


# -- the lock: refused before anything of it runs ------------------------------------------------------------------


def _tampered(tmp_path: Path) -> Path:
    spec = CLIENTS["anthropic"]
    copy = tmp_path / spec.lock_name
    text = spec.lock.read_text()
    copy.write_text(text.replace("anthropic==2.17.0", "anthropic==2.16.0", 1))
    return copy


def test_every_pinned_lock_matches_its_hash():
    for spec in CLIENTS.values():
        assert verify_lock(spec) == spec.lock
        assert set(spec.features) <= set(FEATURES) and spec.driver.is_file()


def test_tampered_lock_is_refused_before_install(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    built: list[object] = []
    monkeypatch.setattr(client_env, "locked_env", lambda *a, **k: built.append(a))
    with pytest.raises(PinMismatch, match=r"client anthropic lock .* sha256 mismatch.*pinned 00c730d3"):
        install_client(CLIENTS["anthropic"], _tampered(tmp_path))
    with pytest.raises(PinMismatch):
        installed_client(CLIENTS["anthropic"], _tampered(tmp_path))
    assert built == [] and not (tmp_path / "home").exists()  # no uv, no venv, no directory


def test_unhashed_lock_is_refused_even_when_its_pin_matches(tmp_path):
    lock = tmp_path / "x.txt"
    lock.write_bytes(b"anthropic==2.17.0\n")  # no --hash: uv would fetch whatever the index serves
    import hashlib

    spec = dataclasses.replace(CLIENTS["anthropic"], lock_sha256=hashlib.sha256(lock.read_bytes()).hexdigest())
    with pytest.raises(InstallError, match="not an exact, hashed lock"):
        verify_lock(spec, lock)


def test_case_with_a_tampered_lock_is_an_error_not_a_skip(monkeypatch):
    spec = dataclasses.replace(CLIENTS["litellm"], lock_sha256="0" * 64)
    chk = asyncio.run(run_client(None, spec, "chat", "client.litellm.chat"))  # refused before the ctx is touched
    assert chk.status.value == "error" and "refused" in chk.note and "mismatch" in chk.note


# -- the driver's output: untrusted ----------------------------------------------------------------------------------


def test_output_last_json_line_is_read_and_keys_scrubbed():
    out = b"warming up\n" + json.dumps({"ok": True, "text": f"key {KEY} echoed"}).encode() + b"\n\n"
    doc, problem = parse_output(out, [KEY])
    assert problem == "" and doc is not None and KEY not in json.dumps(doc) and "***" in doc["text"]


@pytest.mark.parametrize(
    ("out", "over", "want"),
    [
        (b"", False, "printed nothing"),
        (b"Traceback (most recent call last):\n  boom\x1b]0;title\x07\n", False, "not JSON"),
        (b"[1, 2]\n", False, "not an object"),
        (b'{"ok": "yes"}\n', False, "not an object"),
        (b"[" * 100 + b"]" * 100 + b"\n", False, "deeper"),
        (b'{"ok": true}\n', True, f"over {MAX_OUTPUT_BYTES} bytes"),
    ],
)
def test_hostile_output_is_a_problem_never_a_result(out, over, want):
    doc, problem = parse_output(out, [KEY], over_bound=over)
    assert doc is None and want in problem
    assert "\x1b" not in problem and "\x07" not in problem  # shown escaped


def test_non_json_output_quoting_a_key_is_scrubbed():
    doc, problem = parse_output(f"error: bad key {KEY}\n".encode(), [KEY])
    assert doc is None and KEY not in problem and KEY[:12] not in problem


def _script(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "driver.py"
    p.write_text(body)
    return p


def _run(driver: Path, timeout_s: float = 20.0):
    env = ClientEnv(Path(sys.prefix), (sys.executable, "-E", "-s", "-B"))
    return asyncio.run(run_driver(env, driver, base_url="http://127.0.0.1:9", model="m",
                                  feature="chat", timeout_s=timeout_s, secrets=[KEY], home=driver.parent))  # fmt: skip


def test_hanging_driver_is_killed_with_its_children(tmp_path):
    pidfile = tmp_path / "child.pid"
    driver = _script(tmp_path, "import subprocess, sys, time\n"
                     f"c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                     f"open({str(pidfile)!r}, 'w').write(str(c.pid))\n"
                     "time.sleep(600)\n")  # fmt: skip
    t0 = time.monotonic()
    out = _run(driver, timeout_s=2.0)
    assert out.timed_out and out.result is None and "did not finish within 2 s" in out.problem
    assert time.monotonic() - t0 < 15
    child = int(pidfile.read_text())
    for _ in range(50):  # the kill is sent; reaping by init may take a moment
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as f:
            if f.read().split(") ")[1].startswith("Z"):
                break
        time.sleep(0.1)
    else:
        pytest.fail("the driver's child outlived the driver's bound")


def test_flooding_driver_is_bounded(tmp_path):
    driver = _script(tmp_path, "import sys\nfor _ in range(64):\n    sys.stdout.write('x' * 65536)\n")
    out = _run(driver)
    assert out.result is None and f"over {MAX_OUTPUT_BYTES} bytes" in out.problem


def test_driver_result_with_escapes_and_key_is_scrubbed_and_stderr_escaped(tmp_path):
    driver = _script(tmp_path, "import json, sys\n"
                     f"sys.stderr.write('warn \\x1b[31m red {KEY}\\n')\n"
                     f"print(json.dumps({{'ok': False, 'error': {{'type': 'APIError', 'message': 'bad \\x1b[2J {KEY}'}}}}))\n")  # fmt: skip
    out = _run(driver)
    assert out.result is not None and KEY not in json.dumps(out.result)
    assert "\x1b" not in out.stderr_tail and KEY not in out.stderr_tail and "\\x1b" in out.stderr_tail
    chk = judge_result("chat", out.result)
    assert chk.behaviour == "error-APIError" and "\x1b" not in chk.note and "\x1b" not in chk.actual["message"]


def test_driver_that_exits_without_output_says_so(tmp_path):
    out = _run(_script(tmp_path, "import sys\nsys.exit(3)\n"))
    assert out.result is None and "printed nothing" in out.problem and "exit code 3" in out.problem


# -- the judge ---------------------------------------------------------------------------------------------------------

GREETING = "Hello! How can I help?"
AFTER = "The weather in Paris is 18 degrees Celsius."
WEATHER = ["get_weather", {"city": "Paris", "unit": "celsius"}]
TIME = ["get_time", {"timezone": "Europe/Paris"}]


@pytest.mark.parametrize(
    ("feature", "result"),
    [
        ("chat", {"ok": True, "text": GREETING}),
        ("messages-stream", {"ok": True, "text": " " + GREETING + "\n"}),
        ("tools", {"ok": True, "text": AFTER, "calls": [WEATHER]}),
        ("parallel", {"ok": True, "text": AFTER, "calls": [TIME, WEATHER]}),
        ("structured", {"ok": True, "parsed": {"name": "a", "count": 3}}),
    ],
)
def test_judge_passes_the_scripts(feature, result):
    assert judge_result(feature, result).status.value == "pass"


@pytest.mark.parametrize(
    ("feature", "result", "tags"),
    [
        ("chat", {"ok": True, "text": "<think>x</think>" + GREETING}, ["wrong-answer"]),
        ("tools", {"ok": True, "text": None, "calls": []}, ["wrong-tool-calls", "wrong-answer"]),
        ("parallel", {"ok": True, "text": AFTER, "calls": [WEATHER]}, ["wrong-tool-calls"]),
        ("structured", {"ok": True, "parsed": {"name": "a", "count": True}}, ["not-parsed"]),
        ("chat", {"ok": False, "error": {"type": "BadRequestError", "message": "no", "status": 400}}, ["status-400"]),
        ("chat", {"ok": False, "error": {"type": "Bad\nType; rm -rf", "message": "x"}}, ["client-error"]),
        ("chat", {"ok": False, "error": {"type": "IndexError", "message": "list index out of range"}},
         ["error-IndexError"]),
    ],
)  # fmt: skip
def test_judge_names_what_the_client_got(feature, result, tags):
    chk = judge_result(feature, result)
    assert chk.status.value == "fail" and list(chk.behaviours) == tags


def test_a_route_the_server_lacks_is_absent_and_an_unknown_model_is_not():
    gone = {"ok": False, "error": {"type": "NotFoundError", "message": "Error code: 404 - Not Found", "status": 404}}
    assert judge_result("messages", gone).status.value == "absent"
    model = {"ok": False, "error": {"type": "NotFoundError", "message": "The model `x` does not exist", "status": 404}}
    assert judge_result("messages", model).status.value == "fail"
    assert error_tag({"status": 99}) == "client-error" and error_tag({"status": 500, "type": "X"}) == "status-500"


# -- the loopback proxy ----------------------------------------------------------------------------------------------


def test_proxy_forwards_through_the_evidence_seam_without_the_drivers_key():
    seen: list[httpx.Request] = []

    async def engine(request: httpx.Request) -> httpx.Response:
        seen.append(request)

        async def sse():
            yield b"data: 1\n\n"
            yield b"data: [DONE]\n\n"

        return httpx.Response(200, content=sse(), headers={"content-type": "text/event-stream"})

    async def go() -> tuple[int, bytes, EvidenceRecorder, int]:
        rec = EvidenceRecorder(api_key=KEY)
        upstream = httpx.AsyncClient(base_url="http://127.0.0.1:1", headers={"authorization": f"Bearer {KEY}"},
                                     transport=rec.transport(httpx.MockTransport(engine)))  # fmt: skip
        async with LoopbackProxy(upstream, "client.x.chat") as proxy:
            async with httpx.AsyncClient(base_url=proxy.base_url, trust_env=False) as driver:
                r1 = await driver.post("/v1/chat/completions?a=1", json={"stream": True},
                                       headers={"authorization": "Bearer harness-client-key", "x-api-key": "k2"})  # fmt: skip
                r2 = await driver.get("/v1/models")  # the same kept-alive connection
            return r1.status_code, r1.content, rec, r2.status_code

    status, body, rec, status2 = asyncio.run(go())
    assert status == 200 and body == b"data: 1\n\ndata: [DONE]\n\n" and status2 == 200
    assert seen[0].url.path == "/v1/chat/completions" and seen[0].url.query == b"a=1"
    assert seen[0].headers["authorization"] == f"Bearer {KEY}" and "x-api-key" not in seen[0].headers
    exchanges = rec.exchanges["client.x.chat"]
    assert [e.path for e in exchanges] == ["/v1/chat/completions?a=1", "/v1/models"]
    assert bytes(exchanges[0].body) == body and "harness-client-key" not in json.dumps(exchanges[0].request_headers)


# The real engines: tests/models/test_scripted_engines.py::test_every_client_feature_has_a_verdict judges every driver
# in each scripted manifest's suite (vLLM 0.11.0, 0.32.0, llama.cpp), whose fixture installs the client envs.
