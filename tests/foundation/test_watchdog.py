"""The one dead-man's switch (harness.launch.watchdog) and the one TERM-wait-KILL (harness.procs), without an engine:
a `sleep` process group stands in for the engine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from harness.launch.watchdog import Watchdog, main, wait_for_parent
from harness.procs import pid_alive, process_group, terminate, terminate_group
from harness.settings import REPO_ROOT


def _group() -> subprocess.Popen:
    """A shell and its two sleeps in one process group, like an engine and its workers."""
    return subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60"], start_new_session=True)


def _gone(pgid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not process_group(pgid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def group():
    proc = _group()
    deadline = time.monotonic() + 5
    while len(process_group(proc.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    yield proc
    if process_group(proc.pid):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_a_closed_pipe_kills_the_group(group):
    dog = Watchdog.spawn(["group", str(group.pid), "--grace", "1"])
    dog.release(stand_down=False, timeout=10)
    assert dog.proc.returncode == 0
    group.wait(timeout=5)
    assert _gone(group.pid, 2)


def test_a_stand_down_leaves_the_group_alone(group):
    dog = Watchdog.spawn(["group", str(group.pid)])
    dog.release(stand_down=True, timeout=10)
    assert dog.proc.returncode == 0
    assert len(process_group(group.pid)) == 3
    dog.release(stand_down=True, timeout=1)  # idempotent


HARNESS = """
import sys, time
from harness.launch.watchdog import Watchdog
Watchdog.spawn(["group", sys.argv[1], "--grace", "1"])
print("watching", flush=True)
time.sleep(60)
"""


def test_kill_9_of_the_harness_kills_the_group(group):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    harness = subprocess.Popen([sys.executable, "-c", HARNESS, str(group.pid)], stdout=subprocess.PIPE, text=True,
                               env=env)  # fmt: skip
    try:
        assert harness.stdout.readline().strip() == "watching"
        assert len(process_group(group.pid)) == 3
        harness.kill()  # SIGKILL: no cleanup code in the harness runs
        harness.wait(timeout=5)
        assert _gone(group.pid, 5), "engine group still alive 5 s after kill -9 of the harness"
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait()


def test_the_parent_pid_is_watched_too(tmp_path):
    r, w = os.pipe()
    try:
        dead = subprocess.Popen(["true"])
        dead.wait()
        t0 = time.monotonic()
        assert wait_for_parent(dead.pid, r, poll=0.05) == "dead"  # the write end is still open: the pid decided
        assert time.monotonic() - t0 < 2
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("written, why", [(b"stop\n", "stop"), (b"", "dead"), (b"garbage", "dead")])
def test_what_the_pipe_says(written, why):
    r, w = os.pipe()
    os.write(w, written)
    os.close(w)
    try:
        assert wait_for_parent(None, r) == why
    finally:
        os.close(r)


def test_containers_stand_down_touches_no_daemon(capsys):
    r, w = os.pipe()
    os.write(w, b"stop\n")
    os.close(w)
    try:
        assert main(["--pipe-fd", str(r), "containers", "--run-id", "r1"]) == 0
    finally:
        os.close(r)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    assert "cleaned up itself" in capsys.readouterr().out


def test_an_empty_run_id_is_refused(capsys):
    assert main(["--pipe-fd", "0", "containers", "--run-id", ""]) == 2
    assert "refusing an empty --run-id" in capsys.readouterr().out


def test_terminate_kills_what_ignores_sigterm():
    proc = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 60"], start_new_session=True)
    time.sleep(0.2)
    t0 = time.monotonic()
    terminate_group(proc.pid, 0.5)
    proc.wait(timeout=5)
    assert 0.4 < time.monotonic() - t0 < 3
    assert proc.returncode == -signal.SIGKILL


def test_terminate_returns_early_and_tolerates_a_dead_pid():
    proc = subprocess.Popen(["sleep", "60"])
    t0 = time.monotonic()
    terminate(proc.pid, 10)
    proc.wait(timeout=5)
    assert time.monotonic() - t0 < 2 and proc.returncode == -signal.SIGTERM
    assert not pid_alive(proc.pid)
    terminate(proc.pid, 1)  # already reaped: nothing to signal, no error
