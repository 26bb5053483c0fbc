"""Manifests: what engine, how it runs, which model. Validated strictly (unknown fields rejected).

A manifest is YAML; paths inside it (the lock file, a local model) are relative to the manifest file.
Every validation problem becomes one ManifestError naming the file and the dotted field.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from harness.engines import PROFILES, EngineProfile, profile_for
from harness.errors import ManifestError
from harness.launch.argcheck import refused_arg, refused_env, refused_loader_env
from harness.models.catalog import EMBEDDED_MODELS
from harness.net import is_loopback_host
from harness.pkgnames import PROJECT_NAME, SDIST_FILENAME
from harness.readers import read_bytes
from harness.settings import DEFAULT_MANIFEST, ENV_NAME, harness_home
from harness.yamlfile import read_yaml_mapping, validate_as

__all__ = [
    "DockerRuntime",
    "EngineSpec",
    "Manifest",
    "ModelSpec",
    "PythonRuntime",
    "RuntimeSpec",
    "SourceRuntime",
    "ServerSpec",
    "DEFAULT_MANIFEST",
    "load_manifest",
    "is_loopback_host",
    "parse_lock_text",
    "read_lock",
    "env_dir_name",
]

# Used with fullmatch only: `$` also matches before a trailing newline, so "0.11.0\n" would pass with match().
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
PY_VERSION = re.compile(r"3\.\d+")
LOCK_MAX_BYTES = 16 << 20  # a hashed lock of a large engine is a few hundred KB


def _shown(value: object) -> str:
    """A value as one line (repr), cut short: error messages are one line and must not echo a whole file."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineSpec(_Strict):
    kind: str = Field(description="an engine profile's kind (harness/engines/)")
    version: str

    @field_validator("kind")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in PROFILES:
            raise ValueError(f"unknown engine kind {_shown(v)} (known: {', '.join(PROFILES)})")
        return v

    @field_validator("version")
    @classmethod
    def _exact(cls, v: str, info: ValidationInfo) -> str:
        kind = info.data.get("kind")  # absent when the kind itself failed: that error is reported instead
        p = profile_for(kind) if kind in PROFILES else None
        if p is not None and not re.fullmatch(p.version_pattern, v):
            raise ValueError(f"must be an exact {p.title} version like {p.version_example}, got {_shown(v)}")
        return v


class PythonRuntime(_Strict):
    version: str = Field(description="Python minor version, e.g. 3.11")
    lock: str = Field(description="lock file with exact versions and sha256 hashes, relative to the manifest")
    lock_sha256: str | None = Field(default=None, description="optional pin of the lock file's own sha256")
    platform_plugin: bool = Field(
        default=True, description="add the engine profile's own small distribution (its env_addition), if it has one"
    )

    @field_validator("version")
    @classmethod
    def _pyver(cls, v: str) -> str:
        if not PY_VERSION.fullmatch(v):
            raise ValueError(f"must be a Python minor version like 3.11, got {_shown(v)}")
        return v

    @field_validator("lock_sha256")
    @classmethod
    def _lockhash(cls, v: str | None) -> str | None:
        if v is not None and not SHA256_HEX.fullmatch(v):
            raise ValueError(f"must be 64 lowercase hex characters, got {_shown(v)}")
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
        if v is not None and not DIGEST.fullmatch(v):
            raise ValueError(f"must look like sha256:<64 hex>, got {_shown(v)}")
        return v


class SourceRuntime(_Strict):
    """A pinned source build: the archive (an sdist on PyPI that vendors the engine's tree) by sha256."""

    package: str = Field(description="the PyPI project whose sdist holds the source")
    version: str = Field(description="that project's exact version")
    filename: str = Field(description="the sdist's file name")
    sha256: str = Field(description="sha256 of the sdist; checked before anything is extracted")
    subdir: str = Field(description="the engine's tree inside the archive, below its top directory")
    build_lock: str | None = Field(
        default=None,
        description="hashed lock of the sdist's build backend (relative to the manifest): pip prepares the archive's"
        " metadata with exactly these packages (--no-build-isolation), so nothing unhashed from an index is installed"
        " or run; without it only what the harness's own Python has may prepare it",
    )

    @field_validator("sha256")
    @classmethod
    def _hash(cls, v: str) -> str:
        if not SHA256_HEX.fullmatch(v):
            raise ValueError(f"must be 64 lowercase hex characters, got {_shown(v)}")
        return v

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not re.fullmatch(r"\d+(\.\d+)*", v):
            raise ValueError(f"must be an exact version like 0.3.36, got {_shown(v)}")
        return v

    @field_validator("subdir")
    @classmethod
    def _plain(cls, v: str) -> str:
        if not v or v.startswith("/") or ".." in v.split("/") or "\n" in v:
            raise ValueError(f"must be a plain relative name, got {_shown(v)}")
        return v

    # pip reads the package as a requirement line: a URL ("name @ http://..."), a marker or an option ("-r f",
    # "--index-url=...") there would make it fetch from elsewhere than the index.
    @field_validator("package")
    @classmethod
    def _project(cls, v: str) -> str:
        if not PROJECT_NAME.fullmatch(v):
            raise ValueError(
                f"must be a plain relative name that is a PyPI project name (letters, digits, '.', '_', '-'; no URL,"
                f" option or space), got {_shown(v)}"
            )
        return v

    @field_validator("filename")
    @classmethod
    def _sdist(cls, v: str) -> str:
        if not SDIST_FILENAME.fullmatch(v):
            raise ValueError(
                f"must be a plain relative name: an sdist's file name (letters, digits, '.', '_', '-', '+'; ending"
                f" in .tar.gz or .zip; no '/', no leading '-'), got {_shown(v)}"
            )
        return v


RUNTIME_KINDS = ("python", "docker", "source")


class RuntimeSpec(_Strict):
    python: PythonRuntime | None = None
    docker: DockerRuntime | None = None
    source: SourceRuntime | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> RuntimeSpec:
        if sum(getattr(self, k) is not None for k in RUNTIME_KINDS) != 1:
            raise ValueError("exactly one of runtime.python, runtime.docker or runtime.source is required")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in RUNTIME_KINDS if getattr(self, k) is not None)


class ModelSpec(_Strict):
    source: str = Field(
        description="'reference-tiny', 'scripted-tiny' (or a parser family's scripted-*, harness.models.families), "
        "'smollm2-135m' (built by the harness) or a local directory path"
    )
    sha256: str = Field(description="content hash of the model directory (see harness.hashing.tree_hash)")
    served_name: str

    @field_validator("sha256")
    @classmethod
    def _hash(cls, v: str) -> str:
        if not SHA256_HEX.fullmatch(v):
            raise ValueError(f"must be 64 lowercase hex characters (the model content hash), got {_shown(v)}")
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
            raise ValueError(f"engines bind loopback only; {_shown(v)} is not a loopback address")
        return v

    @field_validator("api_key_env")
    @classmethod
    def _envname(cls, v: str | None) -> str | None:
        if v is not None and not ENV_NAME.fullmatch(v):
            # the value is not shown: it may be a key
            raise ValueError("must be an environment variable *name*, not a key")
        return v

    # The engine kind comes from the validation context (load_manifest passes it); without it every kind's rules apply.
    @field_validator("args")
    @classmethod
    def _no_harness_args(cls, v: list[str], info: ValidationInfo) -> list[str]:
        problem = refused_arg((info.context or {}).get("engine_kind"), v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("env")
    @classmethod
    def _no_harness_env(cls, v: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        context = info.context or {}
        problem = refused_env(context.get("engine_kind"), v)
        # load_manifest checks LD_PRELOAD itself once the engine's environment directory is known
        checked = {k: x for k, x in v.items() if k != "LD_PRELOAD"} if context.get("preload_checked_later") else v
        problem = problem or refused_loader_env(checked, env_dirs=())
        if problem:
            raise ValueError(problem)
        return v


class Manifest(_Strict):
    engine: EngineSpec
    runtime: RuntimeSpec
    model: ModelSpec
    server: ServerSpec = Field(default_factory=ServerSpec)

    # Set by load_manifest: where the manifest file lives (paths inside are relative to it).
    path: Path | None = Field(default=None, exclude=True)

    @field_validator("runtime")
    @classmethod
    def _runtime_fits_engine(cls, v: RuntimeSpec, info: ValidationInfo) -> RuntimeSpec:
        engine = info.data.get("engine")
        p = profile_for(engine.kind) if isinstance(engine, EngineSpec) else None
        if p is not None and v.kind not in p.runtimes:
            runs = " or ".join(f"runtime.{k}" for k in sorted(p.runtimes))
            raise ValueError(f"{p.title} runs under {runs}, not runtime.{v.kind}")
        return v

    @property
    def profile(self) -> EngineProfile:
        return profile_for(self.engine.kind)

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
    def source_build_lock(self) -> Path | None:
        src = self.runtime.source
        return self.resolve(src.build_lock) if src is not None and src.build_lock else None

    @property
    def model_is_reference(self) -> bool:
        return self.model.source == "reference-tiny"

    @property
    def model_is_embedded(self) -> bool:
        """An embedded model (harness.models.catalog), built by the harness, not a directory."""
        return self.model.source in EMBEDDED_MODELS

    def file_sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest() if self.path else ""


# pip requirement-file options a hashed lock may carry on a line of their own (where to find the pinned files).
_LOCK_OPTIONS = {"--index-url", "-i", "--extra-index-url", "--find-links", "-f", "--no-index", "--only-binary",
                 "--no-binary", "--prefer-binary", "--require-hashes", "--pre"}  # fmt: skip
_REQUIREMENT = re.compile(
    r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[[A-Za-z0-9._,\s-]*\])?"
    r"\s*==\s*(?P<version>[A-Za-z0-9](?:[A-Za-z0-9.+!_-]*[A-Za-z0-9])?)\s*(?:;\s*\S.*)?"
)
_LOCK_HASH = re.compile(r"sha256:[0-9a-f]{64}")
_COMMENT = re.compile(r"(^|\s+)#.*$")  # pip's rule: '#' at the start or after whitespace starts a comment


def _logical_lines(text: str):
    """(first physical line number, joined line) as pip reads a requirements file: a trailing backslash continues
    the line, a comment line ends it."""
    start, parts = 0, []
    for n, line in enumerate(text.splitlines(), 1):
        if line.endswith("\\") and not _COMMENT.match(line):
            start = start or n
            parts.append(line.strip("\\"))
            continue
        if parts:
            yield start, "".join(parts) + (" " + line if _COMMENT.match(line) else line)
            start, parts = 0, []
        else:
            yield n, line
    if parts:
        yield start, "".join(parts)


def parse_lock_text(text: str) -> dict[str, str]:
    """{name: exact version} of a hashed lock; ValueError('line N: ...') for the first line that is not
    `name==exact-version` with `--hash=sha256:<64 hex>` (or an index/binary option line)."""
    pins: dict[str, str] = {}
    for n, line in _logical_lines(text):
        line = _COMMENT.sub("", line).strip()
        if not line:
            continue
        tokens = line.split()
        if tokens[0].startswith("-"):
            option = tokens[0].split("=", 1)[0]
            if option not in _LOCK_OPTIONS:
                raise ValueError(f"line {n}: option {_shown(option)} does not belong in a hashed lock")
            continue
        split = next((i for i, t in enumerate(tokens) if t.startswith("-")), len(tokens))
        requirement, options = " ".join(tokens[:split]), " ".join(tokens[split:])
        m = _REQUIREMENT.fullmatch(requirement)
        if not m:
            # the line is never quoted: a lock named by a hostile manifest or spec may be any file (a netrc, a key)
            raise ValueError(f"line {n}: not name==exact-version with --hash=sha256 options")
        try:
            words = shlex.split(options)
        except ValueError as exc:
            raise ValueError(f"line {n}: cannot read its options ({exc})") from None
        hashes = []
        while words:
            word = words.pop(0)
            if word == "--hash" and words:
                word = "--hash=" + words.pop(0)
            if not word.startswith("--hash="):
                raise ValueError(f"line {n}: {m['name']}: option {_shown(word.split('=', 1)[0])} is not --hash")
            if not _LOCK_HASH.fullmatch(word[len("--hash=") :]):
                raise ValueError(f"line {n}: {m['name']}: a --hash that is not sha256:<64 hex>")
            hashes.append(word)
        if not hashes:
            raise ValueError(f"line {n}: {m['name']}=={m['version']} has no --hash=sha256:...")
        pins[m["name"]] = m["version"]
    if not pins:
        raise ValueError("no name==version requirements")
    return pins


def read_lock(manifest_path: Path, lock: Path, pinned_sha256: str | None = None,
              field: str = "runtime.python.lock") -> bytes:  # fmt: skip
    """The lock file's bytes, bounded, checked against its pin and for its contents; ManifestError on any problem."""
    try:
        data = read_bytes(lock, "lock", max_bytes=LOCK_MAX_BYTES)
    except ManifestError as exc:
        raise ManifestError(manifest_path, field, f"{_shown(str(lock))}: {exc.message}") from None
    if pinned_sha256:
        actual = hashlib.sha256(data).hexdigest()
        if actual != pinned_sha256:
            raise ManifestError(
                manifest_path, "runtime.python.lock_sha256", f"pinned {pinned_sha256}, lock file has {actual}"
            )
    try:
        parse_lock_text(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ManifestError(manifest_path, field, f"{_shown(str(lock))}: not UTF-8 text (byte {exc.start})") from None
    except ValueError as exc:
        raise ManifestError(manifest_path, field, f"{_shown(str(lock))} {exc}") from None
    return data


def env_dir_name(kind: str, version: str, lock_sha256: str, python_version: str) -> str:
    """The directory name of a python runtime's environment under $HARNESS_HOME/envs/ (the name harness.envs.env_for
    gives it): the engine, its version and a key of the lock's sha256 and the Python version."""
    key = hashlib.sha256(f"{lock_sha256}\0{python_version}".encode()).hexdigest()[:16]
    return f"{kind}-{version}-{key}"


def _check_preload(path: Path, m: Manifest, lock: bytes | None) -> None:
    """server.env's LD_PRELOAD: each entry a system package's file, or a normalised path inside this manifest's own
    engine environment (a matrix release renders {env_dir} as that directory)."""
    if "LD_PRELOAD" not in m.server.env:
        return
    env_dirs: tuple[str, ...] = ()
    if m.runtime.python is not None and lock is not None:
        name = env_dir_name(m.engine.kind, m.engine.version, hashlib.sha256(lock).hexdigest(), m.runtime.python.version)
        env_dirs = (str(harness_home() / "envs" / name),)
    problem = refused_loader_env({"LD_PRELOAD": m.server.env["LD_PRELOAD"]}, env_dirs=env_dirs)
    if problem:
        raise ManifestError(path, "server.env", problem)


def load_manifest(path: str | Path, *, require_digest: bool = True) -> Manifest:
    """Load and validate a manifest; every problem is a ManifestError naming the file and the field."""
    p = Path(path)
    raw = read_yaml_mapping(p, "manifest", "engine, runtime, model, server")
    engine = raw.get("engine")
    kind = engine.get("kind") if isinstance(engine, dict) else None
    context = {"engine_kind": kind if isinstance(kind, str) else None, "preload_checked_later": True}
    m = validate_as(Manifest, raw, p, context=context)
    m = m.model_copy(update={"path": p.resolve()})
    if m.runtime.docker is not None and m.runtime.docker.digest is None and require_digest:
        raise ManifestError(
            p,
            "runtime.docker.digest",
            "missing: an image is pinned by sha256 digest (run `harness pin` where the image is present)",
        )
    lock = read_lock(p, m.lock_path, m.runtime.python.lock_sha256) if m.runtime.python is not None else None
    if m.source_build_lock is not None:
        read_lock(p, m.source_build_lock, field="runtime.source.build_lock")
    _check_preload(p, m, lock)
    if not m.model_is_embedded and not m.resolve(m.model.source).is_dir():
        names = " or ".join(f"'{n}'" for n in EMBEDDED_MODELS)
        raise ManifestError(p, "model.source", f"not {names} and not a directory: {_shown(m.model.source)}")
    return m
