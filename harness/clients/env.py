"""A client's environment: its lock checked against the sha256 the harness pins (and for being an exact, hashed lock)
before anything of it is installed or run, then built by its runtime, never from the user's own packages: a Python
client by harness.lockedenv (uv --require-hashes into $HARNESS_HOME/tools/client-<name>-<key>), a Node client by
harness.clients.npm (npm ci against the lock's integrity hashes into the same place).

    env = install_client(CLIENTS["litellm"])      # builds once; later calls reuse it
    env = installed_client(CLIENTS["litellm"])    # None when not installed (a case skips, saying so)
    env.command                                   # what the driver is run with: (python, -E, -s, -B) or (node,)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from harness.clients.npm import NPM_PACKAGE, check_npm_lock, find_node, installed_npm_env, npm_env
from harness.clients.spec import RUNTIMES, ClientSpec
from harness.errors import InstallError, PinMismatch
from harness.lockedenv import installed_env, locked_env
from harness.manifest import LOCK_MAX_BYTES, parse_lock_text
from harness.readers import read_bytes

__all__ = ["ClientEnv", "verify_lock", "installed_client", "install_client"]


@dataclass(frozen=True)
class ClientEnv:
    """A finished client environment as its driver is run: `command`, then the driver, then its arguments. With
    `modules` (a node_modules) the driver is run from a copy beside it, so its imports resolve there and only there."""

    root: Path
    command: tuple[str, ...]
    modules: Path | None = None


def _python(python: Path | None) -> ClientEnv | None:
    return None if python is None else ClientEnv(python.parent.parent, (str(python), "-E", "-s", "-B"))


def _node(modules: Path | None) -> ClientEnv | None:
    found = find_node()
    return None if modules is None or found is None else ClientEnv(modules.parent, (found[0],), modules)


def _check_python(path: Path, data: bytes) -> None:
    parse_lock_text(data.decode("utf-8"))


def _check_node(path: Path, data: bytes) -> None:
    package = read_bytes(path / NPM_PACKAGE, "client package.json", max_bytes=LOCK_MAX_BYTES, error=InstallError)
    check_npm_lock(data.decode("utf-8"), package.decode("utf-8"))


_CHECKS = {"python": _check_python, "node": _check_node}


def verify_lock(spec: ClientSpec, lock: Path | None = None) -> Path:
    """The lock (file or directory), once its pinned file hashes to the pinned sha256 and it is exact and hashed
    throughout; PinMismatch or InstallError otherwise (one line naming the file). `lock` stands in for the spec's own
    (a copy under test)."""
    path = lock if lock is not None else spec.lock
    if spec.runtime not in RUNTIMES:
        raise InstallError(f"client {spec.name}: unknown runtime {spec.runtime!r}")
    pinned = path / RUNTIMES[spec.runtime] if RUNTIMES[spec.runtime] else path
    data = read_bytes(pinned, "client lock", max_bytes=LOCK_MAX_BYTES, error=InstallError)
    actual = hashlib.sha256(data).hexdigest()
    if actual != spec.lock_sha256:
        raise PinMismatch(f"client {spec.name} lock {path.name} sha256", spec.lock_sha256, actual, str(pinned))
    try:
        _CHECKS[spec.runtime](path, data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InstallError(f"{pinned}: not an exact, hashed lock: {exc}") from None
    return path


def installed_client(spec: ClientSpec, lock: Path | None = None) -> ClientEnv | None:
    """The client's finished environment, or None when it is not installed. The lock is verified first: a changed
    lock is refused, never mapped to an environment (its key would differ anyway)."""
    path = verify_lock(spec, lock)
    if spec.runtime == "node":
        return _node(installed_npm_env(spec.env_name, path))
    return _python(installed_env(spec.env_name, [path]))


def install_client(spec: ClientSpec, lock: Path | None = None) -> ClientEnv:
    """Build (or reuse) the client's environment from its verified lock."""
    path = verify_lock(spec, lock)
    env = _node(npm_env(spec.env_name, path)) if spec.runtime == "node" else _python(locked_env(spec.env_name, [path]))
    if env is None:
        raise InstallError(f"client {spec.name}: its environment was built but cannot be run")
    return env
