"""The matrix spec (`matrix/<name>.yaml`): a manifest template, the releases, the baseline; and rendering one
release's manifest from the template.

Every problem is one ManifestError naming the file and the field. Releases are exact versions (`X.Y.Z`, optionally
`.postN`), unique, in ascending order; the baseline is one of them. A release may name a committed lock (relative to
the spec); otherwise `harness matrix` locks it into DIR/locks/ (once: a lock there is reused, never re-resolved).

Everything a spec could turn against the machine is refused when it is read, before any lock: a committed lock must
lie (symlinks resolved) under the spec's directory, the harness's own manifests/locks/ or the matrix directory, and
hold only hashed pins (a problem names the line, never its text); `overrides`/`extra` are plain requirements (no URL,
`@`, option or marker); `env` sets no variable the engine's profile forbids.

A release the matrix locks is locked as of its release (`lock_as_of: release`, dated by `release_dated_by`'s upload
of the same version when the requirement is a repackaging); a committed lock is kept as it is. `drift: [V, ...]`
adds a cell `V+drift` per release: the same release with a lock as of today (DIR/locks/<stem>-drift.txt, or the
entry's committed `lock`), outside the release sequence, so what differs from V's cell reads as dependency drift.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.errors import ManifestError, UsageError
from harness.manifest import Manifest, load_manifest
from harness.matrix.lock import lock_text_problem, requirement_problem
from harness.outputs import atomic_write_text
from harness.readers import read_yaml
from harness.yamlfile import read_yaml_mapping, validate_as

__all__ = ["Release", "Resources", "Drift", "MatrixSpec", "load_spec", "select_releases", "render_manifest",
           "version_key", "PLACEHOLDERS", "DRIFT", "base_version", "is_drift"]  # fmt: skip

VERSION = re.compile(r"\d{1,4}\.\d{1,4}(?:\.\d{1,4}){0,2}(?:\.post\d{1,4})?")
PLACEHOLDERS = ("version", "lock", "lock_sha256", "python", "platform_plugin", "startup_timeout_s")
_PKG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
MATRIX_API_KEY_ENV = "HARNESS_MATRIX_API_KEY"  # the variable a cell's engine takes its key from (spec api_key)
DRIFT = "+drift"  # the cell id of a release locked as of today: "0.11.0+drift"


def base_version(cell_id: str) -> str:
    return cell_id.removesuffix(DRIFT)


def is_drift(cell_id: str) -> bool:
    return cell_id.endswith(DRIFT)


def version_key(v: str) -> tuple[int, ...]:
    parts = v.replace(".post", ".").split(".")
    nums = [int(p) for p in parts]
    base, post = (nums[:-1], nums[-1]) if ".post" in v else (nums, -1)
    return (*base, *([0] * (4 - len(base))), post)


def _version(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f'must be a quoted version string like "0.20.0", got {type(v).__name__} {str(v)[:40]!r}')
    if not VERSION.fullmatch(v):
        raise ValueError(f"not an exact release version (X.Y.Z): {v[:60]!r}")
    return v


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")


def _env(v: dict[str, str] | None) -> dict[str, str] | None:
    for name, value in (v or {}).items():
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"not an environment variable name: {name[:60]!r}")
        if not isinstance(value, str) or len(value) > 1000:
            raise ValueError(f"{name}: a string of at most 1000 characters")
        unknown = set(re.findall(r"\{(\w+)\}", value)) - {"env_dir"}
        if unknown:
            raise ValueError(f"{name}: unknown placeholder {{{sorted(unknown)[0]}}} (env values know only {{env_dir}})")
    return v


def _requirements(v: list[str] | None) -> list[str] | None:
    for entry in v or []:
        problem = requirement_problem(entry)
        if problem:
            raise ValueError(problem)
    return v


_RESOURCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,99}")


class Resources(_Strict):
    """What one cell asks of the machine that runs it: a Ray task's num_cpus/num_gpus/resources, a Kubernetes pod's
    requests. `custom` names resources a cluster defines (an accelerator type: Ray `accelerator_type:A100`, or a
    Kubernetes extended resource `vendor.com/name`). Where a cell runs is not part of its key."""

    CPU: float = Field(default=1, ge=0, le=1024)
    GPU: float = Field(default=0, ge=0, le=64)
    custom: dict[str, float] = Field(default_factory=dict, max_length=20)

    @field_validator("custom")
    @classmethod
    def _names(cls, v: dict[str, float]) -> dict[str, float]:
        for name, amount in v.items():
            if not _RESOURCE.fullmatch(name) or name in ("CPU", "GPU", "memory", "object_store_memory"):
                raise ValueError(f"not a custom resource name: {name[:60]!r}")
            if not 0 < amount <= 1e6:
                raise ValueError(f"{name}: an amount above 0 and at most 1000000, got {amount}")
        return v


class Defaults(_Strict):
    platform_plugin: bool = False
    resources: Resources = Field(default_factory=Resources)
    startup_timeout_s: float = Field(default=600.0, gt=0, le=7200)
    no_emit: list[str] = Field(default_factory=list, max_length=50)
    overrides: list[str] = Field(default_factory=list, max_length=50)
    extra: list[str] = Field(default_factory=list, max_length=50)
    env: dict[str, str] = Field(default_factory=dict, max_length=20)

    _e = field_validator("env")(classmethod(lambda cls, v: _env(v)))
    _r = field_validator("overrides", "extra")(classmethod(lambda cls, v: _requirements(v)))

    @field_validator("no_emit")
    @classmethod
    def _pkgs(cls, v: list[str]) -> list[str]:
        for p in v:
            if not _PKG.fullmatch(p):
                raise ValueError(f"not a package name: {p[:60]!r}")
        return v


class Release(_Strict):
    version: str
    lock: str | None = Field(default=None, max_length=500)
    platform_plugin: bool | None = None
    startup_timeout_s: float | None = Field(default=None, gt=0, le=7200)
    no_emit: list[str] | None = Field(default=None, max_length=50)
    overrides: list[str] | None = Field(default=None, max_length=50)
    # requirements locked beside the release (`harness lock --extra`), and variables added to the template's
    # server.env; a value may name {env_dir}, the release's Python environment (e.g. a library it must LD_PRELOAD)
    extra: list[str] | None = Field(default=None, max_length=50)
    env: dict[str, str] | None = Field(default=None, max_length=20)
    resources: Resources | None = None
    note: str | None = Field(default=None, max_length=500)

    _v = field_validator("version", mode="before")(classmethod(lambda cls, v: _version(v)))
    _e = field_validator("env")(classmethod(lambda cls, v: _env(v)))
    _r = field_validator("overrides", "extra")(classmethod(lambda cls, v: _requirements(v)))


class Drift(_Strict):
    version: str
    lock: str | None = Field(default=None, max_length=500)  # a committed lock as of today; default: made in DIR/locks

    _v = field_validator("version", mode="before")(classmethod(lambda cls, v: _version(v)))


_FLAG = re.compile(r"--[a-z0-9][a-z0-9-]{0,60}")
_FLAG_VALUE = re.compile(r"[A-Za-z0-9_.-]{1,60}")


class Scripted(_Strict):
    """The scripted stage of every cell (harness.matrix.scripted): a second launch with the embedded scripted model,
    pinned by hash, and per parser flag the values to try in order ([] for a switch); a release gets the first value
    its own argument surface offers."""

    model_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    served_name: str = Field(default="tiny-scripted", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    flags: dict[str, list[str]] = Field(default_factory=dict, max_length=10)
    prompt_sets: list[str] = Field(default_factory=lambda: ["agentic"], max_length=10)

    @field_validator("flags")
    @classmethod
    def _flags(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for flag, values in v.items():
            if not _FLAG.fullmatch(flag):
                raise ValueError(f"not a long option: {flag[:60]!r}")
            for value in values:
                if not _FLAG_VALUE.fullmatch(value):
                    raise ValueError(f"{flag}: not a parser name: {value[:60]!r}")
            if len(values) > 10:
                raise ValueError(f"{flag}: at most 10 values to try")
        return v


def _drift_entries(v: Any) -> Any:
    return [{"version": e} if isinstance(e, str) else e for e in v] if isinstance(v, list) else v


class MatrixSpec(_Strict):
    format: int
    name: str = Field(max_length=100)
    template: str = Field(max_length=500)
    manifest_name: str = Field(default="{version}", max_length=100)
    requirement: str = Field(max_length=200)
    baseline: str
    expectations: str = Field(max_length=100)
    python: str = "3.11"
    python_platform: str = Field(default="x86_64-manylinux_2_28", max_length=100)
    defaults: Defaults = Field(default_factory=Defaults)
    releases: list[Release] = Field(min_length=1, max_length=500)
    lock_as_of: Literal["release"] | None = "release"  # null: lock as of the day the matrix runs
    release_dated_by: str | None = Field(default=None, max_length=100)  # the project whose upload dates a release
    drift: list[Drift] = Field(default_factory=list, max_length=100)
    # a bounded load in rounds after the other stages (harness.matrix.perf); false keeps cells made before it valid
    perf: bool = True
    # every cell's engine runs with a key (server.api_key_env MATRIX_API_KEY_ENV), so the auth.* rows say how each
    # release guards /v1, /health and /metrics; false keeps cells made without one valid
    api_key: bool = True
    # a second launch per cell with the scripted model and the release's parsers (null: none)
    scripted: Scripted | None = None
    path: Path | None = Field(default=None, exclude=True)

    _d = field_validator("drift", mode="before")(classmethod(lambda cls, v: _drift_entries(v)))

    _b = field_validator("baseline", mode="before")(classmethod(lambda cls, v: _version(v)))

    @field_validator("format")
    @classmethod
    def _format(cls, v: int) -> int:
        if v != 1:
            raise ValueError(f"unknown spec format {v} (this harness reads format 1)")
        return v

    @field_validator("name", "expectations", "release_dated_by")
    @classmethod
    def _plain(cls, v: str | None) -> str | None:
        if v is not None and not _PKG.fullmatch(v):
            raise ValueError(f"letters, digits, '.', '_' and '-' only: {v[:60]!r}")
        return v

    @field_validator("manifest_name", "requirement")
    @classmethod
    def _has_version(cls, v: str) -> str:
        if "{version}" not in v or not re.fullmatch(r"[A-Za-z0-9._={}-]+", v):
            raise ValueError(f"must contain {{version}} and only letters, digits, '.', '_', '-', '=': {v[:60]!r}")
        return v

    @model_validator(mode="after")
    def _ordered(self) -> MatrixSpec:
        vs = [r.version for r in self.releases]
        dup = sorted({v for v in vs if vs.count(v) > 1})
        if dup:
            raise ValueError(f"release {dup[0]} is listed twice")
        if vs != sorted(vs, key=version_key):
            raise ValueError("releases must be listed in ascending version order")
        if self.baseline not in vs:
            raise ValueError(f"baseline {self.baseline} is not one of the releases")
        drifts = [d.version for d in self.drift]
        for d in drifts:
            if d not in vs or drifts.count(d) > 1:
                raise ValueError(f"drift: {d} is {'listed twice' if d in vs else 'not one of the releases'}")
        return self

    @property
    def versions(self) -> list[str]:
        return [r.version for r in self.releases]

    @property
    def drift_ids(self) -> list[str]:
        """The drift cells, in release order ("0.11.0+drift")."""
        return [v + DRIFT for v in self.versions if v in {d.version for d in self.drift}]

    def release(self, version: str) -> Release:
        """The release of a cell id (a drift cell's is its release's: the same settings)."""
        version = base_version(version)
        for r in self.releases:
            if r.version == version:
                return r
        raise UsageError(f"{self.path}: no release {version} in the spec (releases: {', '.join(self.versions)})")

    def resolve(self, rel: str) -> Path:
        base = self.path.parent if self.path else Path.cwd()
        p = Path(rel)
        return p if p.is_absolute() else (base / p).resolve()

    def committed_lock(self, version: str) -> Path | None:
        if is_drift(version):
            d = next((d for d in self.drift if d.version == base_version(version)), None)
            return self.resolve(d.lock) if d is not None and d.lock else None
        r = self.release(version)
        return self.resolve(r.lock) if r.lock else None

    def lock_as_of_for(self, version: str) -> str | None:
        """What a lock the matrix makes for this cell is as of: its release, or (a drift cell, or lock_as_of null)
        the day it is made."""
        return None if is_drift(version) else self.lock_as_of

    def setting(self, version: str, name: str) -> Any:
        own = getattr(self.release(version), name)
        return getattr(self.defaults, name) if own is None else own

    def manifest_stem(self, version: str) -> str:
        stem = self.manifest_name.replace("{version}", base_version(version))
        return stem + "-drift" if is_drift(version) else stem

    def requirement_for(self, version: str) -> str:
        return self.requirement.replace("{version}", base_version(version))


def load_spec(path: str | Path, *, out: str | Path | None = None) -> MatrixSpec:
    """The spec at `path`, every field checked; `out` (the matrix directory) is one more place its locks may lie."""
    p = Path(path)
    raw = read_yaml_mapping(p, "matrix spec", "format, name, template, requirement, baseline, releases")
    spec = validate_as(MatrixSpec, raw, p)
    spec = spec.model_copy(update={"path": p.resolve()})
    template = spec.resolve(spec.template)
    if not template.is_file():
        raise ManifestError(p, "template", f"no template file at {template}")
    _check_env(spec, p, _template_kind(template))
    roots = _lock_roots(spec, out)
    for r in spec.releases:
        if r.lock is not None:
            _check_committed_lock(spec.resolve(r.lock), roots, p, f"releases.{r.version}.lock")
    for d in spec.drift:
        if d.lock is not None:
            _check_committed_lock(spec.resolve(d.lock), roots, p, f"drift.{d.version}.lock")
    return spec


def _template_kind(template: Path) -> str | None:
    raw = read_yaml(template, "manifest template")
    engine = raw.get("engine") if isinstance(raw, dict) else None
    kind = engine.get("kind") if isinstance(engine, dict) else None
    return kind if isinstance(kind, str) else None


def _check_env(spec: MatrixSpec, p: Path, kind: str | None) -> None:
    """The engine profile's forbidden variables and the loader/interpreter rule (the same rules as a manifest's
    server.env; an LD_PRELOAD entry outside {env_dir} by its form only, its package when rendered), named by field."""
    from harness.launch.argcheck import refused_env, refused_loader_env

    sources = [("defaults.env", spec.defaults.env)] + [(f"releases.{r.version}.env", r.env) for r in spec.releases]
    for field, env in sources:
        problem = refused_env(kind, env or {}) or refused_loader_env(env or {}, check_system_files=False)
        if problem:
            raise ManifestError(p, field, problem)


def _lock_roots(spec: MatrixSpec, out: str | Path | None) -> list[Path]:
    from harness.settings import REPO_ROOT

    roots = [Path(str(spec.path)).parent, REPO_ROOT / "manifests" / "locks"]
    return [r.resolve() for r in (*roots, *([Path(out)] if out is not None else []))]


def _check_committed_lock(lock: Path, roots: list[Path], p: Path, field: str) -> None:
    """Under one of `roots` after symlinks, a bounded regular file of hashed pins; never quoting what it holds."""
    from harness.manifest import LOCK_MAX_BYTES
    from harness.readers import read_text

    if not lock.is_file():
        raise ManifestError(p, field, f"no lock file at {lock}")
    real = lock.resolve()
    if not any(real.is_relative_to(root) for root in roots):
        where = ", ".join(str(r) for r in roots)
        raise ManifestError(p, field, f"{lock} lies outside the places a spec's locks may be ({where})")
    try:
        text = read_text(real, "lock", max_bytes=LOCK_MAX_BYTES)
    except ManifestError as exc:
        raise ManifestError(p, field, f"{lock}: {exc.message}") from None
    problem = lock_text_problem(text)
    if problem:
        raise ManifestError(p, field, f"{lock}: {problem}")


def select_releases(spec: MatrixSpec, text: str | None) -> list[str]:
    """`A..B` (inclusive; either end may be left out), a comma list `A,B,C`, or None for all; UsageError otherwise."""
    vs = spec.versions
    if text is None or text.strip() == "":
        return vs
    if ".." in text:
        a, _, b = text.partition("..")
        a, b = a.strip() or vs[0], b.strip() or vs[-1]
        for x in (a, b):
            if x not in vs:
                raise UsageError(f"--releases: {x[:40]!r} is not a release of {spec.path} ({vs[0]} ... {vs[-1]})")
        i, j = vs.index(a), vs.index(b)
        if i > j:
            raise UsageError(f"--releases: {a} comes after {b}")
        return vs[i : j + 1]
    picked = [x.strip() for x in text.split(",") if x.strip()]
    for x in picked:
        if x not in vs:
            raise UsageError(f"--releases: {x[:40]!r} is not a release of {spec.path}")
    return [v for v in vs if v in picked]


def _fill(node: Any, values: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        return {k: _fill(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [_fill(v, values) for v in node]
    if isinstance(node, str):
        whole = re.fullmatch(r"\{(\w+)\}", node)
        if whole and whole.group(1) in values:
            return values[whole.group(1)]
        return re.sub(r"\{(\w+)\}", lambda m: str(values.get(m.group(1), m.group(0))), node)
    return node


def render_manifest(spec: MatrixSpec, version: str, lock: Path, lock_sha256: str, out_dir: Path) -> Manifest:
    """Write DIR/manifests/<stem>.yaml from the template and load it (the full manifest validation applies)."""
    template = spec.resolve(spec.template)
    raw = read_yaml(template, "manifest template")
    if not isinstance(raw, dict):
        raise ManifestError(template, "(top level)", "must be a mapping (a manifest with placeholders)")
    target = Path(out_dir) / f"{spec.manifest_stem(version)}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    values: dict[str, Any] = {
        "version": base_version(version),
        "lock": os.path.relpath(Path(lock).resolve(), target.parent.resolve()),
        "lock_sha256": lock_sha256,
        "python": spec.python,
        "platform_plugin": spec.setting(version, "platform_plugin"),
        "startup_timeout_s": spec.setting(version, "startup_timeout_s"),
    }
    filled = _fill(raw, values)
    if spec.api_key:  # the variable is named, never the key (harness.matrix.apikey sets a fresh one per cell)
        filled.setdefault("server", {})["api_key_env"] = MATRIX_API_KEY_ENV
    head = f"# Rendered by `harness matrix` from {template.name} for release {version}; do not edit.\n"
    atomic_write_text(target, head + yaml.safe_dump(filled, sort_keys=False))
    manifest = load_manifest(target)
    additions = spec.setting(version, "env")
    if not additions:
        return manifest
    # {env_dir} is where the release's environment is installed: known once the manifest (its lock) is
    from harness.envs import env_for

    env_dir = str(env_for(manifest).path)
    server = filled.setdefault("server", {})
    server["env"] = {**(server.get("env") or {}), **{k: v.replace("{env_dir}", env_dir) for k, v in additions.items()}}
    atomic_write_text(target, head + yaml.safe_dump(filled, sort_keys=False))
    return load_manifest(target)
