"""Dead-man's switch for a subprocess engine.

Started by the launcher with its stdin connected to a pipe whose only write end the harness holds. When the harness
exits for any reason (including kill -9), the pipe closes, this process reads EOF and kills the engine's whole process
group: SIGTERM, then SIGKILL after a grace period. It lives in its own session so a terminal Ctrl-C does not kill it early.

    python -m harness.launch.watchdog PGID [GRACE_SECONDS]
"""

from __future__ import annotations

import os
import signal
import sys
import time

from harness.procs import process_group


def kill_group(pgid: int, grace: float) -> None:
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        # Zombies do not count: the engine's direct child stays a zombie until its parent (the harness) reaps it,
        # and killpg(pgid, 0) would still succeed on it.
        if not process_group(pgid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main() -> None:
    pgid = int(sys.argv[1])
    grace = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while True:
        try:
            data = os.read(0, 4096)
        except InterruptedError:
            continue
        if not data:  # the harness is gone (or stopped us on purpose after a clean stop)
            break
    kill_group(pgid, grace)


if __name__ == "__main__":
    main()
