"""launch(): verify every pin, start the engine on loopback, wait until ready, verify identity, always stop it.

with launch("manifests/vllm-0.11.0-cpu.yaml") as engine:
    engine.base_url, engine.served_name, engine.identity
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from harness.engines import IdentityProblem
from harness.errors import HarnessError, ManifestError, RefusedError, UsageError
from harness.launch.argcheck import refused_arg, refused_env, refused_loader_env
from harness.launch.base import Engine, LaunchSpec, new_run_id
from harness.launch.listening import listening_sockets, non_loopback
from harness.launch.ports import choose_port
from harness.launch.ready import verify_identity, wait_ready
from harness.manifest import Manifest, load_manifest
from harness.progress import progress
from harness.settings import REPORTS_DIR, api_key_from_env

__all__ = ["launch", "prepare", "start_verified", "reports_dir", "check_launch_inputs", "runtime_pin"]


def reports_dir() -> Path:
    return REPORTS_DIR


def _say(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def prepare(
    manifest: Manifest | str | Path,
    *,
    extra_args: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
    run_dir: Path | None = None,
    run_id: str | None = None,
    quiet: bool = False,
) -> Engine:
    """Every check that must pass before a process starts: manifest, environment, model hash, port, Docker image."""
    m = manifest if isinstance(manifest, Manifest) else load_manifest(manifest)
    check_launch_inputs(m, extra_args, extra_env or {})
    run_id = run_id or new_run_id()
    run_dir = Path(run_dir) if run_dir else reports_dir() / run_id
    from harness.models import resolve_model

    model_dir = resolve_model(m)  # refuses on a hash mismatch, before anything starts
    try:
        m.profile.model_path(model_dir)  # a single-file format (GGUF): exactly one such file, before anything starts
    except IdentityProblem as exc:
        raise ManifestError(m.path or m.name, "model.source", str(exc)) from None
    _say(f"model: verified {m.model.sha256[:12]} at {model_dir}", quiet)
    port = choose_port(m.server.host, m.server.port)  # a busy port is refused before the (slow) env check
    env_dir = binary = None
    if m.runtime.python is not None:
        from harness.envs import ensure_env

        env_dir = ensure_env(m, quiet=quiet).path
    if m.runtime.source is not None:
        binary = m.profile.build_from_source(
            m.runtime.source, m.engine.version, quiet=quiet, build_lock=m.source_build_lock
        )
        _say(f"engine: verified source build {binary}", quiet)
    refuse_unaccepted_args(m)
    spec = LaunchSpec(
        manifest=m, run_id=run_id, run_dir=run_dir, model_dir=model_dir, port=port, host=m.server.host,
        env_dir=env_dir, binary=binary, extra_args=tuple(extra_args), extra_env=dict(extra_env or {}),
    )  # fmt: skip
    if m.runtime.docker is not None:
        from harness.launch.docker import DockerEngine

        return DockerEngine(spec)
    from harness.launch.subprocess_engine import SubprocessEngine

    return SubprocessEngine(spec)


def refuse_unaccepted_args(m: Manifest) -> None:
    """A manifest flag the release's own parser would refuse (an unknown flag, a parser name the release has not
    registered: `--tool-call-parser`, `--reasoning-parser`) is refused here, before the engine starts, naming the
    flag. The surface is read from the installed environment or build (cached; no engine starts); where it cannot be
    read (a container image) the engine's own start is the check."""
    from harness.launch.surfaces import manifest_arg_problems, release_surface

    try:
        surface = release_surface(m, install=False)
    except HarnessError:  # SurfaceUnavailable included: no surface here, the engine's parser decides at start
        return
    problems = manifest_arg_problems(m, surface)
    if problems:
        raise ManifestError(m.path or m.name, "server.args", f"{problems[0]['line']}; refused before launch")


def check_launch_inputs(m: Manifest, extra_args: tuple[str, ...] = (), extra_env: dict[str, str] | None = None) -> None:
    """The one check of what reaches the engine's command line and environment besides the harness's own settings:
    the manifest's server.args/env (again: a Manifest may be built without load_manifest) and the extra arguments
    (`conform --extra-arg`, tests), read as the engine reads them (harness.launch.argcheck). Also refuses a manifest
    whose api_key_env names an unset variable: the engine would quietly run without the key it is meant to require."""
    kind = m.engine.kind
    where = m.path or m.name
    problem = refused_arg(kind, m.server.args)
    if problem:
        raise ManifestError(where, "server.args", problem)
    problem = refused_env(kind, m.server.env)
    if problem:
        raise ManifestError(where, "server.env", problem)
    problem = refused_arg(kind, extra_args)
    if problem:
        raise UsageError(f"extra engine argument (--extra-arg): {problem}")
    problem = refused_env(kind, extra_env or {}) or refused_loader_env(extra_env or {}, env_dirs=())
    if problem:
        raise UsageError(f"extra engine environment: {problem}")
    name = m.server.api_key_env
    if name:
        try:
            api_key_from_env(name)  # the one lookup LaunchSpec.api_key() uses too
        except UsageError:
            raise RefusedError(
                f"{where}: server.api_key_env: ${name} is not set (or empty); "
                "set it, or remove api_key_env to run without a key"
            ) from None


def start_verified(engine: Engine, *, quiet: bool = False) -> dict:
    """Start, wait until ready, verify identity. On any failure the engine is stopped before the error propagates."""
    m = engine.spec.manifest
    try:
        engine.start()
        _say(f"engine: starting {m.engine.kind} {m.engine.version} (log: {engine.log_path})", quiet)
        # 30-110 s by release: the wait says what it waits for and for how long (harness.progress)
        with progress(f"waiting for {m.engine.kind} {m.engine.version} to be ready", enabled=not quiet) as stage:
            waited = wait_ready(engine, m.server.startup_timeout_s, stage=stage)
        identity = verify_identity(engine)
        exposed = non_loopback(listening_sockets(engine.local_pids()))
        if exposed:
            where = ", ".join(f"{a}:{p}" for a, p in exposed)
            raise RefusedError(f"engine listens on a non-loopback address ({where}); stopped it")
    except BaseException:
        engine.stop()
        raise
    identity.update(
        {
            "model_hash": m.model.sha256,
            "served_name": m.model.served_name,
            "base_url": engine.base_url,
            "ready_seconds": round(waited, 1),
            "run_id": engine.spec.run_id,
        }
    )
    if m.runtime.python is not None:
        from harness.envs import lock_sha256

        identity["lock_sha256"] = lock_sha256(m.lock_path)
    elif m.runtime.source is not None:
        identity["source_sha256"] = m.runtime.source.sha256
        identity["build_key"] = engine.spec.binary.parent.parent.name if engine.spec.binary else None
    else:
        identity["image_digest"] = m.runtime.docker.digest
    engine.identity = identity
    return identity


def runtime_pin(identity: dict, short: bool = False) -> str:
    """How the runtime was pinned, for one line of output: the lock, the source archive or the image digest."""
    for key, what in (("lock_sha256", "lock"), ("source_sha256", "source"), ("image_digest", "image")):
        if identity.get(key):
            value = str(identity[key])
            return f"{what} {value[:12] if short else value}"
    return "runtime unpinned"


@contextlib.contextmanager
def launch(manifest: Manifest | str | Path, **kwargs) -> Iterator[Engine]:
    quiet = kwargs.get("quiet", False)
    with progress("preparing the engine (model, environment, build)", enabled=not quiet):
        engine = prepare(manifest, **kwargs)
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if in_main else None
    if in_main and previous in (signal.SIG_DFL, None):
        # SIGTERM should unwind through the finally below, like Ctrl-C, so the engine is stopped.
        signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        start_verified(engine, quiet=quiet)
        yield engine
    finally:
        engine.stop()
        if in_main and previous in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
