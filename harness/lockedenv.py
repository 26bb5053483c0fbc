"""Virtual environments made from hashed locks with uv, for what the harness runs that is not an engine: the Python a
source build's archive is fetched with (its build backend, hashed), and the third-party servers the tests check.
Engine environments are harness.envs's (markers, verification, gc); this module stands below it and below the
engine profiles, so both can use it.

    python = locked_env("fetch-llama-cpp-python", [build_lock])          # $HARNESS_HOME/tools/<name>-<key>/bin/python

Every lock is installed with `uv pip install --require-hashes --no-config`; with `no_build_isolation_last` the last
lock is installed with --no-build-isolation, so an sdist in it is built with the earlier locks' (hashed) packages,
never with whatever an index serves at build time. A finished environment has a marker and is reused as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.errors import InstallError
from harness.outputs import atomic_write_text
from harness.settings import harness_home
from harness.shown import shown

__all__ = ["find_uv", "uv_environment", "locked_env", "installed_env", "MARKER_NAME"]

MARKER_NAME = "harness-tool.json"
_INSTALL_TIMEOUT_S = 1800


def find_uv() -> str | None:
    """The uv binary: the one the `uv` distribution ships beside this Python, else `uv` on PATH; None without it."""
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file():
        return str(beside)
    return shutil.which("uv")


def uv_environment() -> dict[str, str]:
    """The environment uv runs with: the shared cache under $HARNESS_HOME, linked by hardlinks, no pip config, and no
    uv config either (UV_NO_CONFIG: a uv.toml beside the lock or above it, a pyproject's [tool.uv] or the user's uv
    config would otherwise choose the index the lock is resolved or installed from)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    env["UV_NO_CONFIG"] = "1"
    env["UV_CACHE_DIR"] = str(harness_home() / "uv-cache")
    env["UV_LINK_MODE"] = "hardlink"
    env["UV_NO_PROGRESS"] = "1"
    return env


def _key(locks: Sequence[Path], build_env: Mapping[str, str], no_build_isolation_last: bool) -> str:
    h = hashlib.sha256()
    for lock in locks:
        h.update(hashlib.sha256(lock.read_bytes()).digest())
    h.update(json.dumps([sorted(build_env.items()), no_build_isolation_last]).encode())
    h.update(f"{sys.version_info.major}.{sys.version_info.minor}".encode())
    return h.hexdigest()[:16]


def installed_env(name: str, locks: Sequence[Path], *, build_env: Mapping[str, str] | None = None,
                  no_build_isolation_last: bool = False) -> Path | None:  # fmt: skip
    """The python of the finished environment for `locks` (its marker written), or None: nothing is built."""
    root = harness_home() / "tools" / f"{name}-{_key(locks, dict(build_env or {}), no_build_isolation_last)}"
    python = root / "bin" / "python"
    return python if (root / MARKER_NAME).is_file() and python.is_file() else None


def locked_env(name: str, locks: Sequence[Path], *, build_env: Mapping[str, str] | None = None,
               no_build_isolation_last: bool = False) -> Path:  # fmt: skip
    """The python of the environment for `locks` under $HARNESS_HOME/tools/ (built once, then reused by its marker)."""
    build_env = dict(build_env or {})
    if not locks:
        raise InstallError(f"{name}: no lock to make an environment from")
    root = harness_home() / "tools" / f"{name}-{_key(locks, build_env, no_build_isolation_last)}"
    python = root / "bin" / "python"
    if (root / MARKER_NAME).is_file() and python.is_file():
        return python
    uv = find_uv()
    if uv is None:
        raise InstallError("uv is not installed (pip install uv; the project's test extra brings it)")
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        raise InstallError(f"{root}: not a directory the harness made; refusing to replace it")
    if root.exists():
        shutil.rmtree(root)  # a half-built one (no marker): made again
    root.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, capture_output=True)
    env = {**uv_environment(), **build_env}
    (harness_home() / "uv-cache").mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    for i, lock in enumerate(locks):
        cmd = [uv, "pip", "install", "--no-config", "--python", str(python), "--require-hashes", "-r", str(lock)]
        if no_build_isolation_last and i == len(locks) - 1:
            cmd.append("--no-build-isolation")
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace",
                               timeout=_INSTALL_TIMEOUT_S)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise InstallError(f"{name}: uv pip install -r {lock.name} took over {_INSTALL_TIMEOUT_S} s") from None
        if r.returncode != 0:
            last = next((ln for ln in reversed((r.stderr or r.stdout).splitlines()) if ln.strip()), "")
            raise InstallError(f"{name}: uv pip install --require-hashes -r {lock.name} failed: {shown(last)[:300]}")
    marker = {"name": name, "locks": [p.name for p in locks], "install_seconds": round(time.monotonic() - t0, 1)}
    atomic_write_text(root / MARKER_NAME, json.dumps(marker) + "\n")
    return python
