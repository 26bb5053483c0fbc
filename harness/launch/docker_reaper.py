"""Dead-man's switch for Docker engines: remove a harness process's containers when that process dies.

    python -m harness.launch.docker_reaper --parent-pid PID --run-id RUN_ID [--engine-id ID] [--pipe-fd FD]

DockerEngine.start() spawns this in its own session before it creates the container. It waits on the read end of a
pipe (FD) whose write end only the harness process holds, and also polls PID once a second (in case the write end
leaked into a forked child). When the harness dies (even by SIGKILL) the pipe reaches EOF: the reaper removes every
container labelled harness.managed=1 + harness.run-id=RUN_ID (+ harness.engine-id=ID when given), waits a moment and
sweeps once more (a container whose create request was in flight), then exits. When stop() ran normally the harness
writes "stop" into the pipe first and the reaper exits without touching anything.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import time

from harness.procs import pid_alive


def _log(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), f"reaper[{os.getpid()}]:", msg, flush=True)


def wait_for_parent(pid: int, fd: int | None, poll: float = 1.0) -> str:
    """Block until the parent dies ("dead") or says it stopped its engine itself ("stop")."""
    buf = b""
    while True:
        if fd is not None:
            ready, _, _ = select.select([fd], [], [], poll)
            if ready:
                try:
                    data = os.read(fd, 64)
                except OSError:
                    data = b""
                if not data:
                    return "stop" if buf.startswith(b"stop") else "dead"
                buf += data
                if buf.startswith(b"stop"):
                    return "stop"
                continue
        else:
            time.sleep(poll)
        if not pid_alive(pid):
            return "dead"


def sweep(run_id: str, engine_id: str | None) -> list[str]:
    from harness.launch.docker import remove_managed_containers

    return remove_managed_containers(run_id, engine_id=engine_id, timeout=2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.launch.docker_reaper")
    ap.add_argument("--parent-pid", type=int, required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--engine-id", default=None)
    ap.add_argument("--pipe-fd", type=int, default=None)
    ap.add_argument("--grace", type=float, default=2.0, help="seconds before the second sweep")
    a = ap.parse_args(argv)
    if not a.run_id:
        _log("refusing an empty --run-id (it would match every managed container)")
        return 2
    target = f"run {a.run_id}" + (f" engine {a.engine_id}" if a.engine_id else "")
    _log(f"watching pid {a.parent_pid} for {target}")
    why = wait_for_parent(a.parent_pid, a.pipe_fd)
    if why == "stop":
        _log("harness stopped its engine itself; exiting")
        return 0
    _log(f"pid {a.parent_pid} is gone: removing containers of {target}")
    for attempt in range(2):
        try:
            removed = sweep(a.run_id, a.engine_id)
            _log(f"removed {removed or 'nothing'}")
        except Exception as exc:  # daemon gone, etc.: nothing we can do but say so
            _log(f"sweep failed: {exc}")
        if attempt == 0:
            time.sleep(a.grace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
