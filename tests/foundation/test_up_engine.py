"""`harness up` against the real engine: loopback only, /version, Ctrl-C / SIGTERM / kill -9 leave nothing behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from harness.launch.listening import listening_sockets, non_loopback
from harness.procs import process_group
from tests.conftest import unavailable

pytestmark = pytest.mark.engine

HARNESS = [sys.executable, "-m", "harness"]


def group_members(pgid: int) -> list[int]:
    return sorted(process_group(pgid))


def start_up(tmp_path) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        HARNESS + ["up"], stdout=subprocess.PIPE, stderr=open(tmp_path / "up.err", "wb"), text=True, env=env,
    )  # fmt: skip
    line = proc.stdout.readline()  # blocks until ready (or the harness exits)
    if not line.startswith("ready: "):
        proc.wait(timeout=30)
        unavailable(f"harness up did not become ready: {(tmp_path / 'up.err').read_text()[-2000:]}")
    return proc, line.split("ready: ", 1)[1].strip()


def registry_entry(url: str) -> dict:
    from harness.launch import registry

    for e in registry.entries():
        if e.get("base_url") == url:
            return e
    raise AssertionError(f"no registry entry for {url}")


def engine_pid_for(url: str) -> int:
    return registry_entry(url)["pid"]


def wait_gone(pgid: int, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = group_members(pgid)
        if not left:
            return []
        time.sleep(0.2)
    return group_members(pgid)


def test_up_is_loopback_only_and_ctrl_c_leaves_nothing(tmp_path):
    proc, url = start_up(tmp_path)
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url)
        assert httpx.get(f"{url}/version", timeout=10).json() == {"version": "0.11.0"}
        pgid = engine_pid_for(url)
        members = set(group_members(pgid))
        assert members, "engine process group is empty while ready"
        sockets = listening_sockets(members)
        assert ("127.0.0.1", int(url.rsplit(":", 1)[1])) in sockets
        assert non_loopback(sockets) == [], sockets
        ss = subprocess.run(["ss", "-Htln"], capture_output=True, text=True, check=True).stdout
        assert not [
            line for line in ss.splitlines() if f":{url.rsplit(':', 1)[1]} " in line and "127.0.0.1:" not in line
        ]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert wait_gone(pgid, 10) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigterm_stops_the_engine(tmp_path):
    proc, url = start_up(tmp_path)
    try:
        pgid = engine_pid_for(url)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert wait_gone(pgid, 10) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_kill_9_of_the_harness_kills_the_engine_within_10s(tmp_path):
    proc, url = start_up(tmp_path)
    pgid = engine_pid_for(url)
    assert group_members(pgid)
    proc.kill()  # SIGKILL: no cleanup code in the harness runs
    proc.wait(timeout=10)
    assert wait_gone(pgid, 10) == [], "engine survived kill -9 of the harness"


def test_ps_lists_and_down_stops(tmp_path):
    from harness.launch import registry

    proc, url = start_up(tmp_path)
    try:
        out = subprocess.run(HARNESS + ["ps"], capture_output=True, text=True, check=True).stdout
        assert url in out
        pgid = engine_pid_for(url)
        run_id = registry_entry(url)["run_id"]
        # by run id: `down --all` would also stop every other engine on the machine (this session's fixtures too)
        out = subprocess.run(HARNESS + ["down", run_id], capture_output=True, text=True, check=True).stdout
        assert f"stopped {run_id}" in out
        assert wait_gone(pgid, 10) == []
        assert all(e.get("base_url") != url for e in registry.entries())
        proc.wait(timeout=30)  # the harness sees its engine exit and stops with an error
        assert proc.returncode == 1
    finally:
        if proc.poll() is None:
            proc.kill()
