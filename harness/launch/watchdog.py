"""The dead-man's switch: undo what a harness process started once that process dies, even by `kill -9`.

    python -m harness.launch.watchdog --parent-pid PID --pipe-fd FD group PGID [--grace S]
    python -m harness.launch.watchdog --parent-pid PID --pipe-fd FD containers --run-id RUN_ID [--engine-id ID]

A launcher spawns it (Watchdog.spawn) in its own session, so a terminal Ctrl-C does not reach it, before the engine
exists. It waits on the read end of a pipe whose write end only the harness holds, and polls PID once a second (in
case the write end leaked into a forked child). When the harness dies the pipe reaches EOF and the watchdog acts:
- group: SIGTERM the engine's process group, then SIGKILL after GRACE seconds;
- containers: remove every container labelled harness.managed=1 + harness.run-id=RUN_ID (+ harness.engine-id=ID),
  wait a moment and sweep once more (a container whose create request was in flight), then exit.
A harness that cleaned up itself releases it: "stop" written into the pipe means stand down (exit without acting);
a pipe closed without it means act anyway, which finds nothing left (the subprocess launcher does this, so a group
member that outlived stop() still dies).
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from harness.procs import pid_alive, terminate_group
from harness.settings import REPO_ROOT

__all__ = ["Watchdog", "wait_for_parent", "main"]

STOP = b"stop"


class Watchdog:
    """The harness's end of a running watchdog: the pipe's write end and the process."""

    def __init__(self, proc: subprocess.Popen[bytes], pipe_w: int):
        self.proc = proc
        self._pipe_w: int | None = pipe_w

    @classmethod
    def spawn(cls, action: list[str], log: Path | None = None) -> Watchdog:
        """Start `python -m harness.launch.watchdog ... ACTION` watching this process; output to `log` (else nowhere)."""
        r, w = os.pipe()  # both non-inheritable; the child gets r explicitly, only we hold w
        env = dict(os.environ)  # importable from a checkout too, whatever the caller's cwd
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        out: IO[bytes] | int = open(log, "ab") if log is not None else subprocess.DEVNULL
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "harness.launch.watchdog", "--parent-pid", str(os.getpid()),
                 "--pipe-fd", str(r), *action],
                pass_fds=(r,), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C in the terminal does not reach it; it outlives us on purpose
                env=env,
            )  # fmt: skip
        finally:
            os.close(r)
            if not isinstance(out, int):
                out.close()
        return cls(proc, w)

    def release(self, *, stand_down: bool, timeout: float) -> None:
        """Close our end (saying "stop" first when `stand_down`), wait for the watchdog to exit, kill it if it will not;
        idempotent."""
        w, self._pipe_w = self._pipe_w, None
        if w is not None:
            if stand_down:
                try:
                    os.write(w, STOP + b"\n")
                except OSError:
                    pass
            os.close(w)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- the watchdog process ------------------------------------------------------------------------------------------


def _log(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), f"watchdog[{os.getpid()}]:", msg, flush=True)


def wait_for_parent(pid: int | None, fd: int, poll: float = 1.0) -> str:
    """Block until the parent dies or closes the pipe ("dead"), or says it cleaned up itself ("stop")."""
    buf = b""
    while True:
        ready, _, _ = select.select([fd], [], [], poll)
        if ready:
            try:
                data = os.read(fd, 64)
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if not data:
                return "stop" if buf.startswith(STOP) else "dead"
            buf += data
            if buf.startswith(STOP):
                return "stop"
            continue
        if pid is not None and not pid_alive(pid):
            return "dead"


def _kill_group(a: argparse.Namespace) -> None:
    terminate_group(a.pgid, a.grace)


def _remove_containers(a: argparse.Namespace) -> None:
    from harness.launch.containers import remove_managed_containers

    target = f"run {a.run_id}" + (f" engine {a.engine_id}" if a.engine_id else "")
    _log(f"the harness (pid {a.parent_pid}) is gone: removing containers of {target}")
    for attempt in range(2):
        try:
            removed = remove_managed_containers(a.run_id, engine_id=a.engine_id, timeout=2)
            _log(f"removed {removed or 'nothing'}")
        except Exception as exc:  # daemon gone, etc.: nothing we can do but say so
            _log(f"sweep failed: {exc}")
        if attempt == 0:
            time.sleep(a.second_sweep_after)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m harness.launch.watchdog")
    ap.add_argument("--parent-pid", type=int, default=None, help="act when this process is gone, too")
    ap.add_argument("--pipe-fd", type=int, default=0, help="read end of the harness's pipe (default: stdin)")
    sub = ap.add_subparsers(dest="action", required=True)
    g = sub.add_parser("group", help="SIGTERM, then SIGKILL, an engine's process group")
    g.add_argument("pgid", type=int)
    g.add_argument("--grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL")
    g.set_defaults(act=_kill_group)
    c = sub.add_parser("containers", help="remove a run's (or one engine's) harness-managed containers")
    c.add_argument("--run-id", required=True)
    c.add_argument("--engine-id", default=None)
    c.add_argument("--second-sweep-after", type=float, default=2.0, help="seconds before the second sweep")
    c.set_defaults(act=_remove_containers)
    return ap


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    if a.action == "containers" and not a.run_id:
        _log("refusing an empty --run-id (it would match every managed container)")
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _log(f"watching pid {a.parent_pid} for {a.action}")
    if wait_for_parent(a.parent_pid, a.pipe_fd) == "stop":
        _log("the harness cleaned up itself; exiting")
        return 0
    a.act(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
