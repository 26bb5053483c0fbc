"""Manifests: what engine, how it runs, which model. Validated strictly (unknown fields rejected).

A manifest is YAML; paths inside it (the lock file, a local model) are relative to the manifest file.
Every validation problem becomes one ManifestError naming the file and the dotted field.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.errors import ManifestError
from harness.net import is_loopback_host
from harness.yamlfile import read_yaml_mapping, validate_as

__all__ = [
    "DockerRuntime",
    "EngineSpec",
    "Manifest",
    "ModelSpec",
    "PythonRuntime",
    "RuntimeSpec",
    "ServerSpec",
    "DEFAULT_MANIFEST",
    "load_manifest",
    "is_loopback_host",
]

SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
VERSION = re.compile(r"^\d+\.\d+\.\d+$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MANIFEST = REPO_ROOT / "manifests" / "vllm-0.11.0-cpu.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineSpec(_Strict):
    kind: Literal["vllm", "tgi"]
    version: str

    @field_validator("version")
    @classmethod
    def _exact(cls, v: str) -> str:
        if not VERSION.match(v):
            raise ValueError(f"must be an exact version like 0.11.0, got {v!r}")
        return v


class PythonRuntime(_Strict):
    version: str = Field(description="Python minor version, e.g. 3.11")
    lock: str = Field(description="lock file with exact versions and sha256 hashes, relative to the manifest")
    lock_sha256: str | None = Field(default=None, description="optional pin of the lock file's own sha256")
    platform_plugin: bool = Field(
        default=True, description="add the vllm.platform_plugins entry point that selects the CPU platform"
    )

    @field_validator("version")
    @classmethod
    def _pyver(cls, v: str) -> str:
        if not re.match(r"^3\.\d+$", v):
            raise ValueError(f"must be a Python minor version like 3.11, got {v!r}")
        return v

    @field_validator("lock_sha256")
    @classmethod
    def _lockhash(cls, v: str | None) -> str | None:
        if v is not None and not SHA256_HEX.match(v):
            raise ValueError("must be 64 lowercase hex characters")
        return v


class DockerRuntime(_Strict):
    image: str = Field(description="repository:tag, for humans; never pulled by tag")
    digest: str | None = Field(default=None, description="sha256:... that the local image's RepoDigests must contain")
    container_port: int = 80
    gpus: bool = False
    shm_size: str | None = None

    @field_validator("digest")
    @classmethod
    def _digest(cls, v: str | None) -> str | None:
        if v is not None and not DIGEST.match(v):
            raise ValueError(f"must look like sha256:<64 hex>, got {v!r}")
        return v


class RuntimeSpec(_Strict):
    python: PythonRuntime | None = None
    docker: DockerRuntime | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "RuntimeSpec":
        if (self.python is None) == (self.docker is None):
            raise ValueError("exactly one of runtime.python or runtime.docker is required")
        return self


class ModelSpec(_Strict):
    source: str = Field(description="'reference-tiny' (built by the harness) or a local directory path")
    sha256: str = Field(description="content hash of the model directory (see harness.hashing.tree_hash)")
    served_name: str

    @field_validator("sha256")
    @classmethod
    def _hash(cls, v: str) -> str:
        if not SHA256_HEX.match(v):
            raise ValueError("must be 64 lowercase hex characters (the model content hash)")
        return v


class ServerSpec(_Strict):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 0
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    api_key_env: str | None = Field(default=None, description="name of the environment variable holding the key")
    startup_timeout_s: Annotated[float, Field(gt=0)] = 300.0

    @field_validator("host")
    @classmethod
    def _loopback(cls, v: str) -> str:
        if not is_loopback_host(v):
            raise ValueError(f"engines bind loopback only; {v!r} is not a loopback address")
        return v

    @field_validator("api_key_env")
    @classmethod
    def _envname(cls, v: str | None) -> str | None:
        if v is not None and not ENV_NAME.match(v):
            raise ValueError("must be an environment variable *name*, not a key")
        return v

    @field_validator("args")
    @classmethod
    def _no_host_args(cls, v: list[str]) -> list[str]:
        for a in v:
            if a.split("=")[0] in ("--host", "--hostname", "--port", "--api-key"):
                raise ValueError(f"{a.split('=')[0]} is set by the harness (server.host/port/api_key_env), not in args")
        return v


class Manifest(_Strict):
    engine: EngineSpec
    runtime: RuntimeSpec
    model: ModelSpec
    server: ServerSpec = Field(default_factory=ServerSpec)

    # Set by load_manifest: where the manifest file lives (paths inside are relative to it).
    path: Path | None = Field(default=None, exclude=True)

    @property
    def name(self) -> str:
        return self.path.stem if self.path else f"{self.engine.kind}-{self.engine.version}"

    def resolve(self, rel: str) -> Path:
        base = self.path.parent if self.path else Path.cwd()
        p = Path(rel).expanduser()
        return p if p.is_absolute() else (base / p).resolve()

    @property
    def lock_path(self) -> Path | None:
        return self.resolve(self.runtime.python.lock) if self.runtime.python else None

    @property
    def model_is_reference(self) -> bool:
        return self.model.source == "reference-tiny"

    def file_sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest() if self.path else ""


def load_manifest(path: str | Path, *, require_digest: bool = True) -> Manifest:
    """Load and validate a manifest; every problem is a ManifestError naming the file and the field."""
    p = Path(path)
    raw = read_yaml_mapping(p, "manifest", "engine, runtime, model, server")
    m = validate_as(Manifest, raw, p)
    m = m.model_copy(update={"path": p.resolve()})
    if m.runtime.docker is not None and m.runtime.docker.digest is None and require_digest:
        raise ManifestError(
            p, "runtime.docker.digest", "missing: an image is pinned by sha256 digest (run `harness pin` where the image is present)"
        )
    if m.runtime.python is not None:
        lock = m.lock_path
        if not lock.is_file():
            raise ManifestError(p, "runtime.python.lock", f"lock file not found: {lock}")
        if m.runtime.python.lock_sha256:
            actual = hashlib.sha256(lock.read_bytes()).hexdigest()
            if actual != m.runtime.python.lock_sha256:
                raise ManifestError(
                    p, "runtime.python.lock_sha256", f"pinned {m.runtime.python.lock_sha256}, lock file has {actual}"
                )
    if not m.model_is_reference and not m.resolve(m.model.source).is_dir():
        raise ManifestError(p, "model.source", f"not 'reference-tiny' and not a directory: {m.model.source}")
    return m
