"""Environments for the third-party servers the tests run (llama-cpp-python's server, LiteLLM's proxy): built from
hashed locks by the product's own harness.lockedenv (uv --require-hashes into $HARNESS_HOME/tools/<name>-<key>).

    python = tool_env("litellm-proxy", LOCKS / "litellm-proxy-1.108.7.txt")          # the venv's python
    python = tool_env("llama-cpp-python-server", lock, build_env={"CMAKE_ARGS": "..."}, build_locks=[build_lock])

`build_locks` are installed first; the main lock is then installed with --no-build-isolation, so an sdist in it is
built with hashed build dependencies rather than whatever an index serves at build time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.lockedenv import locked_env

__all__ = ["tool_env"]


def tool_env(name: str, lock: Path, *, build_env: Mapping[str, str] | None = None,
             build_locks: Sequence[Path] = ()) -> Path:  # fmt: skip
    """The python of the environment for `lock` (built once, then reused by its marker)."""
    return locked_env(name, [*build_locks, lock], build_env=build_env, no_build_isolation_last=bool(build_locks))
