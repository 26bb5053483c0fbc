"""How long the calling thread has waited for a CPU: the kernel's own count, so a check can tell a slow server from a
client that was not scheduled.

    before = cpu_wait_s()
    ...                                   # an asyncio loop runs in this thread: this is its wait
    waited = since(before)                # None where the kernel does not say

Linux counts, per thread, the time it spent runnable on a run queue without running (`/proc/thread-self/schedstat`,
second field, ns; CONFIG_SCHED_INFO). Seen on 2 cores with a CPU hog in the client's own scheduler autogroup (the
same session): the client's event loop waited 50 s for a CPU in 49 s of wall time, while the engine answered.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["cpu_wait_s", "since"]

SCHEDSTAT = Path("/proc/thread-self/schedstat")


def cpu_wait_s() -> float | None:
    """Seconds this thread has spent waiting for a CPU since it started; None where the kernel does not count it."""
    try:
        fields = SCHEDSTAT.read_text(encoding="ascii").split()
        return int(fields[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def since(before: float | None) -> float | None:
    """The wait since `before` (a `cpu_wait_s()` reading taken in this same thread); None when either is unknown."""
    now = cpu_wait_s()
    return None if before is None or now is None else max(0.0, now - before)
