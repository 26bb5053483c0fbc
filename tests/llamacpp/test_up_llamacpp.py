"""`harness up` / `ps` / `down` on the llama.cpp manifest (its API-key variant), as tests/foundation/test_up_engine.py
does for vLLM: loopback only, the pinned commit on /props, Ctrl-C / SIGTERM / kill -9 / `down` leave nothing behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from harness.launch import registry
from harness.launch.listening import listening_sockets, non_loopback
from harness.procs import process_group
from tests.conftest import unavailable
from tests.llamacpp.conftest import API_KEY, COMMIT

pytestmark = pytest.mark.engine

HARNESS = [sys.executable, "-m", "harness"]


def start_up(manifest: Path, tmp_path: Path) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # holds the key's variable (the llamacpp_key fixture sets it)
    proc = subprocess.Popen(
        [*HARNESS, "up", str(manifest)], stdout=subprocess.PIPE, stderr=open(tmp_path / "up.err", "wb"), text=True,
        env=env,
    )  # fmt: skip
    line = proc.stdout.readline()  # blocks until ready (or the harness exits)
    if not line.startswith("ready: "):
        proc.wait(timeout=30)
        unavailable(f"harness up did not become ready: {(tmp_path / 'up.err').read_text()[-2000:]}")
    return proc, line.split("ready: ", 1)[1].strip()


def entry_for(url: str) -> dict:
    for e in registry.entries():
        if e.get("base_url") == url:
            return e
    raise AssertionError(f"no registry entry for {url}")


def wait_gone(pgid: int, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not process_group(pgid):
            return []
        time.sleep(0.1)
    return sorted(process_group(pgid))


@pytest.fixture
def keyed(llamacpp_key):
    return llamacpp_key[0]


def test_up_is_loopback_only_serves_the_pinned_commit_and_ctrl_c_leaves_nothing(keyed, tmp_path):
    proc, url = start_up(keyed, tmp_path)
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url)
        port = int(url.rsplit(":", 1)[1])
        with httpx.Client(base_url=url, trust_env=False, timeout=10) as c:
            assert c.get("/health").status_code == 200
            assert c.get("/props").status_code == 401  # the key from the manifest's api_key_env is enforced
            props = c.get("/props", headers={"Authorization": f"Bearer {API_KEY}"}).json()
        assert props["build_info"] == f"b0-{COMMIT}"
        e = entry_for(url)
        assert e["kind"] == "subprocess" and e["manifest"] == str(keyed)
        pgid = e["pid"]
        members = process_group(pgid)
        assert members, "engine process group is empty while ready"
        assert Path(f"/proc/{pgid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"/llama-server")
        sockets = listening_sockets(members)
        assert ("127.0.0.1", port) in sockets and non_loopback(sockets) == [], sockets
        ss = subprocess.run(["ss", "-Htln"], capture_output=True, text=True, check=True).stdout
        assert not [line for line in ss.splitlines() if f":{port} " in line and "127.0.0.1:" not in line]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert wait_gone(pgid, 10) == []
        assert all(x.get("base_url") != url for x in registry.entries())
        assert API_KEY not in (tmp_path / "up.err").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigterm_stops_llama_server(keyed, tmp_path):
    proc, url = start_up(keyed, tmp_path)
    try:
        pgid = entry_for(url)["pid"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert wait_gone(pgid, 10) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_kill_9_of_the_harness_kills_llama_server_within_10s(keyed, tmp_path):
    proc, url = start_up(keyed, tmp_path)
    e = entry_for(url)
    pgid = e["pid"]
    assert process_group(pgid)
    proc.kill()  # SIGKILL: no cleanup code in the harness runs; the watchdog and the parent-death signal do
    proc.wait(timeout=10)
    assert wait_gone(pgid, 10) == [], "llama-server survived kill -9 of the harness"
    # the killed harness could not unregister: `down RUN_ID` clears the stale entry (and stops nothing else)
    assert any(x.get("run_id") == e["run_id"] for x in registry.entries())
    subprocess.run([*HARNESS, "down", e["run_id"]], capture_output=True, text=True, check=True)
    assert all(x.get("run_id") != e["run_id"] for x in registry.entries())


def test_ps_lists_and_down_stops(keyed, tmp_path):
    proc, url = start_up(keyed, tmp_path)
    try:
        out = subprocess.run([*HARNESS, "ps"], capture_output=True, text=True, check=True).stdout
        assert url in out and API_KEY not in out
        e = entry_for(url)
        pgid, run_id = e["pid"], e["run_id"]
        assert run_id in out
        # by run id: `down --all` would also stop every other engine on the machine (this session's fixtures too)
        out = subprocess.run([*HARNESS, "down", run_id], capture_output=True, text=True, check=True).stdout
        assert f"stopped {run_id}" in out
        assert wait_gone(pgid, 10) == []
        assert all(x.get("base_url") != url for x in registry.entries())
        proc.wait(timeout=30)  # the harness sees its engine exit and stops with an error
        assert proc.returncode == 1
    finally:
        if proc.poll() is None:
            proc.kill()
