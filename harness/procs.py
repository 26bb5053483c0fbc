"""Facts about local processes, read from /proc (Linux): alive (zombies count as dead), start time (so a reused PID
is never mistaken for ours), and the members of a process group."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["pid_alive", "process_start_time", "process_group"]


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
