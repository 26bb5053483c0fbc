"""Find the Docker daemon the environment points at (DOCKER_HOST, else the default socket). The harness never starts
one: tests and CI do (tests/support/dockerd.py, .ci/docker-setup.sh).

- docker_client(): a docker SDK client whose daemon answers a ping, or DockerUnavailable with one line saying how to
  start one.
- connect(client): the client a caller handed in, else docker_client() (every Docker call takes an optional client).
"""

from __future__ import annotations

import os
from typing import Any

from harness.errors import DockerUnavailable

__all__ = ["DEFAULT_SOCKET", "START_HINT", "docker_host", "docker_client", "connect"]

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
START_HINT = "start it with `sudo dockerd --storage-driver=vfs &` or `.ci/docker-setup.sh`"


def docker_host() -> str:
    return os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET


def docker_client(timeout: float = 60.0) -> Any:
    """A docker SDK client whose daemon answers a ping, else DockerUnavailable (one line)."""
    try:
        import docker
    except ImportError:  # pragma: no cover - docker is a dependency
        raise DockerUnavailable("the Python docker SDK is not installed (pip install 'docker>=7')") from None
    host = docker_host()
    try:
        client = docker.DockerClient(base_url=host, timeout=int(timeout))
        client.ping()
    except Exception as exc:  # DockerException, requests ConnectionError, FileNotFoundError ...
        reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise DockerUnavailable(f"no Docker daemon answers at {host}; {START_HINT} ({reason})") from None
    return client


def connect(client: Any = None) -> Any:
    """`client` if one was given (tests hand in their own), else a fresh docker_client()."""
    return client if client is not None else docker_client()
