"""Subprocess launcher: the engine's server on 127.0.0.1, run by the pinned environment's Python (runtime.python) or
as the verified binary of a pinned source build (runtime.source); the argv and environment come from its profile.

The engine gets its own session (process group). Two guarantees that it dies with the harness: a parent-death signal
(SIGTERM) on the server process, and the watchdog (harness.launch.watchdog) that kills the whole group when the
harness's end of a pipe closes, which covers kill -9 of the harness and the engine's own child processes.
"""

from __future__ import annotations

import os
import subprocess
import time

from harness.errors import LaunchError
from harness.launch import registry
from harness.launch.argcheck import code_variable
from harness.launch.base import Engine, LaunchSpec
from harness.launch.watchdog import Watchdog
from harness.procs import die_with_parent, process_group, process_start_time, terminate_group

__all__ = ["SubprocessEngine", "engine_command", "engine_environment"]

_INHERITED = frozenset({"PATH", "LD_LIBRARY_PATH"})


def engine_command(spec: LaunchSpec) -> list[str]:
    """The program, the manifest's args, then the harness's own flags: a parser that keeps the last value given lets
    nothing before them win (and harness.launch.argcheck refuses them in the manifest anyway)."""
    p = spec.profile
    if spec.binary is not None:
        program = [str(spec.binary)]
    elif spec.env_dir is not None:
        program = [str(spec.env_dir / "bin" / "python"), *p.python_entry]
    else:
        raise LaunchError(f"{spec.manifest.name}: neither an environment nor a binary to run")
    user = [*spec.manifest.server.args, *spec.extra_args]
    model = str(p.model_path(spec.model_dir))
    return [
        *program,
        *user,
        *p.defaults_for(user),
        *p.server_args(model, spec.manifest.model.served_name, spec.host, spec.port),
    ]


def engine_environment(spec: LaunchSpec) -> dict[str, str]:
    p = spec.profile
    dropped = (*p.dropped_env_prefixes, "HF_", "TRANSFORMERS_")
    # Nor does the caller's own PYTHONPATH, LD_PRELOAD, ...: they would load unverified code into an engine the harness
    # calls verified. PATH stays (the engine's scripts need it), and LD_LIBRARY_PATH, the operator's own way to the
    # host's GPU driver libraries; a manifest or spec can set neither (harness.launch.argcheck.refused_loader_env).
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(dropped) and (k in _INHERITED or not code_variable(k))
    }
    env.update(spec.manifest.server.env)
    env.update(spec.extra_env)
    # The harness's own settings last, so the manifest cannot undo them.
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(spec.run_dir / "hf-home")})
    env.update(p.fixed_env)
    env.update(p.extra_env(spec.host))  # loopback only, for the engine's internal addresses too
    key = spec.api_key()
    if key:
        env[p.api_key_env] = key  # by environment, so the key never shows in argv / ps / logs
    return env


class SubprocessEngine(Engine):
    def __init__(self, spec: LaunchSpec):
        super().__init__(spec)
        self.proc: subprocess.Popen | None = None
        self._watchdog: Watchdog | None = None

    def command(self) -> list[str]:
        return engine_command(self.spec)

    def start(self) -> None:
        if self.proc is not None:
            raise LaunchError("engine already started")
        self.spec.run_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=engine_environment(self.spec), cwd=self.spec.run_dir,
                start_new_session=True, preexec_fn=die_with_parent,
            )  # fmt: skip
        finally:
            log.close()
        self._watchdog = Watchdog.spawn(["group", str(self.proc.pid)])
        registry.register(
            self.spec.run_id,
            {
                "kind": "subprocess",
                "pid": self.proc.pid,
                "pid_start": process_start_time(self.proc.pid),
                "base_url": self.base_url,
                "manifest": str(self.spec.manifest.path),
                "log": str(self.log_path),
                "started_at": time.time(),
                **registry.current_harness(),
            },
        )

    def exit_status(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def local_pids(self) -> set[int]:
        return process_group(self.proc.pid) if self.proc is not None else set()

    def describe(self) -> dict:
        return {"kind": "subprocess", "pid": self.proc.pid if self.proc else None, "base_url": self.base_url}

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is not None:
            terminate_group(self.proc.pid, timeout)  # SIGTERM first: engines shut their workers down on it
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            # not a stand-down: the watchdog sees EOF, kills whatever of the group is left (nothing, normally), exits
            watchdog.release(stand_down=False, timeout=timeout)
        registry.unregister(self.spec.run_id)
