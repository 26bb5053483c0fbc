"""Settings in one place: where the harness keeps things, where the repository is, and every environment variable
the harness itself reads (the README's table is this list).

| variable          | meaning                                                                 | default                 |
|-------------------|-------------------------------------------------------------------------|-------------------------|
| HARNESS_HOME      | engine environments, builds, models, the run registry, dockerd's log    | ~/.cache/harness        |
| HARNESS_API_KEY   | API key the conformance suite / plugin use when no --api-key-env is given | unset (no key)        |
| HARNESS_URL       | pytest plugin: attach to this loopback URL                              | unset                   |
| HARNESS_EXPECT    | pytest plugin: expectation name for --harness-url                       | unset                   |
| HARNESS_MANIFEST  | pytest plugin: launch this manifest                                     | unset                   |
| DOCKER_HOST       | the Docker daemon to talk to                                            | unix:///var/run/docker.sock |
| CI                | `true`: tests that cannot get an engine, Docker or Chromium fail, never skip | unset              |
Engine variables (VLLM_*, LLAMA_ARG_*, ...) are set per engine by the launcher and the manifest's `server.env`; the
harness's own environment never leaks them into an engine.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from harness.errors import UsageError

__all__ = [
    "REPO_ROOT",
    "DEFAULT_MANIFEST",
    "EXPECTATIONS_DIR",
    "REPORTS_DIR",
    "GOLDEN_ROOT",
    "LOADTESTS_DIR",
    "DEFAULT_API_KEY_ENV",
    "harness_home",
    "api_key_from_env",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MANIFEST = REPO_ROOT / "manifests" / "vllm-0.11.0-cpu.yaml"
EXPECTATIONS_DIR = REPO_ROOT / "manifests" / "expectations"
REPORTS_DIR = REPO_ROOT / "reports"
GOLDEN_ROOT = REPO_ROOT / "golden"
LOADTESTS_DIR = REPO_ROOT / "loadtests"
DEFAULT_API_KEY_ENV = "HARNESS_API_KEY"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def harness_home() -> Path:
    return Path(os.environ.get("HARNESS_HOME", Path.home() / ".cache" / "harness")).expanduser()


def api_key_from_env(name: str | None) -> str | None:
    """The API key from the environment variable `name`. Without a name, HARNESS_API_KEY if set (else no key);
    a name given on purpose must be a variable name and must be set, or the run would quietly go without a key."""
    if name is None:
        return os.environ.get(DEFAULT_API_KEY_ENV) or None
    if not ENV_NAME.fullmatch(name):
        # never echo it: what was given may be the key itself
        raise UsageError("--api-key-env takes the NAME of an environment variable that holds the key, not the key"
                         " itself (the value given is not a variable name)")  # fmt: skip
    value = os.environ.get(name)
    if value is None:
        raise UsageError(f"--api-key-env {name}: that environment variable is not set")
    if not value.strip():
        raise UsageError(f"--api-key-env {name}: that environment variable is empty")
    return value
