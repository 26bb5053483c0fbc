"""A client's environment: its lock checked against the sha256 the harness pins (and for being an exact, hashed lock)
before anything of it is installed or run, then built by harness.lockedenv (uv --require-hashes into
$HARNESS_HOME/tools/client-<name>-<key>), never from the user's site-packages.

    python = install_client(CLIENTS["litellm"])      # builds once; later calls reuse it
    python = client_python(CLIENTS["litellm"])       # None when not installed (a case skips, saying so)
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from harness.clients.spec import ClientSpec
from harness.errors import InstallError, PinMismatch
from harness.lockedenv import installed_env, locked_env
from harness.manifest import LOCK_MAX_BYTES, parse_lock_text
from harness.readers import read_bytes

__all__ = ["verify_lock", "client_python", "install_client"]


def verify_lock(spec: ClientSpec, lock: Path | None = None) -> Path:
    """The lock file, once its bytes hash to the pinned sha256 and every line is an exact hashed pin; PinMismatch or
    InstallError otherwise (one line naming the file). `lock` stands in for the spec's own (a copy under test)."""
    path = lock if lock is not None else spec.lock
    data = read_bytes(path, "client lock", max_bytes=LOCK_MAX_BYTES, error=InstallError)
    actual = hashlib.sha256(data).hexdigest()
    if actual != spec.lock_sha256:
        raise PinMismatch(f"client {spec.name} lock {path.name} sha256", spec.lock_sha256, actual, str(path))
    try:
        parse_lock_text(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InstallError(f"{path}: not an exact, hashed lock: {exc}") from None
    return path


def client_python(spec: ClientSpec, lock: Path | None = None) -> Path | None:
    """The interpreter of the client's finished environment, or None when it is not installed. The lock is verified
    first: a changed lock is refused, never mapped to an environment (its key would differ anyway)."""
    return installed_env(spec.env_name, [verify_lock(spec, lock)])


def install_client(spec: ClientSpec, lock: Path | None = None) -> Path:
    """Build (or reuse) the client's environment from its verified lock; the interpreter's path."""
    return locked_env(spec.env_name, [verify_lock(spec, lock)])
