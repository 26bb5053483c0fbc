"""The one launcher interface. Subprocess and Docker implement it; readiness and identity are shared.

Declare first, side effects only in start(); stop() is idempotent and always safe; the context manager stops the engine
even when start or readiness fails.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from harness.engines import EngineProfile
from harness.manifest import Manifest
from harness.settings import api_key_from_env

__all__ = ["LaunchSpec", "Engine", "new_run_id"]


def new_run_id() -> str:
    import time

    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


@dataclass(frozen=True)
class LaunchSpec:
    manifest: Manifest
    run_id: str
    run_dir: Path  # reports/<run-id>/ : engine.log lives here
    model_dir: Path  # verified model directory
    port: int  # concrete loopback port (already checked free)
    host: str = "127.0.0.1"
    env_dir: Path | None = None  # python runtime: the verified engine environment
    binary: Path | None = None  # source runtime: the verified server binary
    extra_args: tuple[str, ...] = ()  # added after the manifest's args (tests use this for variants)
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.run_dir / "engine.log"

    @property
    def profile(self) -> EngineProfile:
        return self.manifest.profile

    def api_key(self) -> str | None:
        name = self.manifest.server.api_key_env
        return api_key_from_env(name) if name else None  # no api_key_env: the engine runs without a key


class Engine(ABC):
    """A running (or not yet started) engine."""

    def __init__(self, spec: LaunchSpec):
        self.spec = spec
        self.identity: dict = {}  # filled by harness.launch.session.start_verified

    @property
    def served_name(self) -> str:
        return self.spec.manifest.model.served_name

    @property
    def api_key(self) -> str | None:
        return self.spec.api_key()

    @property
    def base_url(self) -> str:
        return self.spec.base_url

    @property
    def log_path(self) -> Path:
        return self.spec.log_path

    @abstractmethod
    def start(self) -> None:
        """Start the engine (no waiting). Registers it in the run registry."""

    @abstractmethod
    def exit_status(self) -> int | None:
        """None while running; the exit code once it has exited."""

    @abstractmethod
    def stop(self, timeout: float = 20.0) -> None:
        """Stop gracefully, then forcefully; idempotent; unregisters."""

    @abstractmethod
    def describe(self) -> dict:
        """What identifies this engine for `harness ps` (pid, container id, ...)."""

    def local_pids(self) -> set[int]:
        """Host processes of this engine (for the loopback-only check); containers answer with none."""
        return set()

    def log_tail(self, lines: int = 40) -> str:
        try:
            data = self.log_path.read_bytes()[-64 * 1024 :]
        except OSError:
            return ""
        return "\n".join(data.decode(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
