"""Local processes (Linux): facts read from /proc (alive, with zombies counted as dead; start time, so a reused PID is
never mistaken for ours; the members of a process group) and the one way the harness stops a process or a group:
SIGTERM, a grace period, then SIGKILL."""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["die_with_parent", "pid_alive", "process_start_time", "process_group", "terminate", "terminate_group"]

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A child's preexec_fn: the kernel sends it SIGTERM when the process that started it dies (even by kill -9), so
    a server the harness or a test starts never outlives it."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def _stat_fields(pid: int | str) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """True if the process exists and is not a zombie (a killed process nobody has reaped yet is dead for us)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = _stat_fields(pid)
    return fields is None or fields[0] not in ("Z", "X")


def process_start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def process_group(pgid: int) -> set[int]:
    """Live (non-zombie) members of a process group."""
    pids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat_fields(stat.parent.name)
        if fields and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            pids.add(int(stat.parent.name))
    return pids


def _term_wait_kill(send: Callable[[int], None], gone: Callable[[], bool], grace: float) -> None:
    try:
        send(signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if gone():
            return
        time.sleep(0.1)
    try:
        send(signal.SIGKILL)
    except ProcessLookupError:
        pass


def terminate(pid: int, grace: float) -> None:
    """SIGTERM one process, wait up to `grace` seconds for it to die, then SIGKILL it."""
    _term_wait_kill(lambda sig: os.kill(pid, sig), lambda: not pid_alive(pid), grace)


def terminate_group(pgid: int, grace: float) -> None:
    """SIGTERM a whole process group, wait up to `grace` seconds for it to empty, then SIGKILL what is left.

    Zombies do not count: an engine's direct child stays a zombie until its parent reaps it, and killpg(pgid, 0)
    would still succeed on it."""
    _term_wait_kill(lambda sig: os.killpg(pgid, sig), lambda: not process_group(pgid), grace)
