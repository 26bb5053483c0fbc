"""What an engine profile holds: everything that differs between engine kinds, in one place per kind.

A profile is a class with data attributes and a few small methods (argv, identity). Nothing outside harness/engines/
branches on an engine kind: launchers, readiness, the load cross-check, the upgrade and the recorder ask the profile.
Profiles import nothing from the rest of the harness except harness.errors, so every module may use them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "EngineProfile",
    "MetricNames",
    "Identity",
    "IdentityProblem",
    "EnvAddition",
    "LivenessCheck",
    "HEALTH_LIVENESS",
    "OPENAI_LIVENESS",
    "NO_HTTP_ANSWER",
]


class IdentityProblem(Exception):
    """The identity document does not say what the manifest pins (one line: what was expected, what was seen)."""


@dataclass(frozen=True)
class MetricNames:
    """The series the harness reads, as sample names in a default `/metrics` scrape; None = this engine has none.

    Counters are named by their sample (`..._total`). `prefix` is what a load run keeps per scrape."""

    prefix: str
    kv_usage: str | None = None  # gauge, fraction of the KV cache in use (0..1)
    running: str | None = None  # gauge, requests being decoded
    waiting: str | None = None  # gauge, requests queued
    ttft: str | None = None  # histogram, seconds to first token
    itl: str | None = None  # histogram, seconds between tokens
    queue_time: str | None = None  # histogram, seconds queued
    prompt_tokens: str | None = None  # counter (or a histogram's _sum), prompt tokens processed
    # counter, prompt tokens reused from a cache that `prompt_tokens` does NOT count (the engine's prompt total is the
    # sum of the two); None when `prompt_tokens` already counts every prompt token
    prompt_tokens_cached: str | None = None
    generation_tokens: str | None = None  # counter (or a histogram's _sum), tokens generated
    request_success: str | None = None  # counter, requests finished
    prefix_hits: str | None = None  # counter, prompt tokens found in the prefix cache
    prefix_queries: str | None = None  # counter, prompt tokens looked up in the prefix cache
    preemptions: str | None = None  # counter
    cache_config: str | None = None  # info gauge whose labels give num_gpu_blocks / block_size

    def timeline(self) -> tuple[str, ...]:
        """The gauges a load run's timeline follows (in this order: KV usage, running, waiting)."""
        return tuple(n for n in (self.kv_usage, self.running, self.waiting) if n)


@dataclass(frozen=True)
class Identity:
    """How a running engine says what it is: one GET returning a JSON object."""

    path: str  # e.g. /version
    version_field: str  # the field holding the version as reported
    version_prefix: str = ""  # dropped from the reported value before comparing (e.g. a build-number prefix)
    recorded: tuple[str, ...] = ()  # further fields kept in the run's identity
    # field -> value it must have when the model is mounted into a container at that path ("{model}" = the mount)
    container_model_field: str | None = None


NO_HTTP_ANSWER = "no HTTP answer"  # LivenessCheck.problem for a request that got no response at all


@dataclass(frozen=True)
class LivenessCheck:
    """How a running server shows it is alive: one GET answered with `status` and, with `json_list`, a JSON object
    whose `data` is a list (the shape of `GET /v1/models`, so a catch-all page or a proxy's error page is no proof)."""

    path: str
    status: int = 200
    json_list: bool = False

    def __str__(self) -> str:
        return f"GET {self.path} == {self.status}" + (" with a JSON list" if self.json_list else "")

    def problem(self, status: int | None, body: bytes) -> str:
        """What the answer lacks to prove life ("" when it proves it); `status` None means no HTTP answer at all."""
        if status is None:
            return NO_HTTP_ANSWER
        if status != self.status:
            return f"it answered HTTP {status}"
        if self.json_list and not _is_json_list(body):
            return f"it answered HTTP {status} with a body that is not a JSON object with a data list"
        return ""


def _is_json_list(body: bytes) -> bool:
    from harness.errors import HarnessError
    from harness.readers import parse_json  # the one bounded JSON reader (depth, NaN)

    try:
        doc = parse_json(body.decode("utf-8", "replace"), "liveness answer", "GET /v1/models body")
    except HarnessError:
        return False
    return isinstance(doc, dict) and isinstance(doc.get("data"), list)


HEALTH_LIVENESS = LivenessCheck("/health")  # vLLM, TGI and llama-server: 200 while ready
# a server no profile describes: the cheap request every OpenAI-compatible server answers
OPENAI_LIVENESS = LivenessCheck("/v1/models", json_list=True)


@dataclass(frozen=True)
class EnvAddition:
    """A small distribution of the harness's own added to a Python engine environment (see the profile that has one)."""

    name: str  # module / dist-info name
    version: str
    files: Mapping[str, str]  # path under site-packages -> text
    why: str


@dataclass(frozen=True)
class EngineProfile:
    kind: str  # the manifest's engine.kind
    title: str  # how reports name it
    runtimes: frozenset[str]  # which manifest runtime sections it runs under: python, docker, source
    version_pattern: str  # regex (fullmatch) for engine.version
    version_example: str
    api_key_env: str  # the variable the engine reads its API key from (never argv: ps would show it)
    identity: Identity
    metrics: MetricNames
    liveness: LivenessCheck  # what the conformance runner asks after a failed case: is the server still there?
    forbidden_args: Mapping[str, str]  # flag -> why a manifest may not set it (read as the engine reads flags)
    forbidden_env: Mapping[str, str]
    harmless_env: frozenset[str] = frozenset()  # engine variables whose values reports may show
    fixed_env: Mapping[str, str] = field(default_factory=dict)  # always set (telemetry off, ...)
    container_env: Mapping[str, str] = field(default_factory=dict)  # set in a container only
    dropped_env_prefixes: tuple[str, ...] = ()  # inherited variables of the engine's own not passed on
    python_entry: tuple[str, ...] = ()  # python runtime: argv after the env's python
    model_format: str = "safetensors"  # safetensors (a directory) | gguf (one file in the directory)
    key_packages: tuple[str, ...] = ()  # lock entries an upgrade summary names
    source_package_dirs: tuple[str, ...] = ()  # site-packages dirs where metric names hidden from /metrics live
    env_addition: EnvAddition | None = None
    series_digits: int = 2  # expectation series: version cut to this many dotted parts (0 = exact only)
    default_args: tuple[tuple[str, str], ...] = ()  # (flag, value) added unless the manifest gives the flag
    notes: Mapping[str, str] = field(default_factory=dict)  # what does not apply to this engine, and why
    # The process doing the engine's work, which the engine-death fault case kills: a regex searched in the command
    # line (the process title, for a process that sets one) of each of the engine's processes but the server's.
    # None: the server process does the work itself (it is the one killed).
    worker_match: str | None = None

    # -- launch ----------------------------------------------------------------------------------------------------

    def server_args(self, model: str, served_name: str, host: str, port: int) -> list[str]:
        """The harness's own flags (model, name, address, port); they come after the manifest's."""
        raise NotImplementedError

    def extra_env(self, host: str) -> dict[str, str]:
        """Variables that keep the engine's internal addresses on `host` (loopback)."""
        return {}

    def model_path(self, model_dir: Path) -> Path:
        """What the engine is given as its model: the directory, or the one file in it for a single-file format."""
        if self.model_format == "safetensors":
            return model_dir
        files = sorted(model_dir.glob(f"*.{self.model_format}"))
        if len(files) != 1:
            raise IdentityProblem(f"{model_dir}: expected one .{self.model_format} file, found {len(files)}")
        return files[0]

    def defaults_for(self, user_args: Sequence[str]) -> list[str]:
        given = {a.split("=", 1)[0] for a in user_args}
        return [x for flag, value in self.default_args if flag not in given for x in (flag, value)]

    def surface_revision(self) -> str:
        """A short digest of the code that captures the argument surface ("" when it never changed)."""
        return ""

    def build_from_source(self, source: Any, version: str, *, quiet: bool = False,
                          build_lock: Path | None = None) -> Path:  # fmt: skip
        """runtime.source: the verified server binary of the pinned source build (built once, then verified)."""
        raise NotImplementedError(f"{self.title} has no source build")

    def built_binary(self, source: Any, version: str) -> Path | None:
        """runtime.source: the verified binary of a finished build, or None when there is none yet (builds nothing)."""
        return None

    # -- argument surface ------------------------------------------------------------------------------------------

    def argument_surface(self, runtime: Path, release: str) -> dict[str, Any]:
        """Every flag this release's own parser accepts, with defaults (harness.launch.argsurface's surface), read
        from `runtime` (a Python engine environment's directory, or a source build's binary) without starting the
        engine; SurfaceUnavailable saying why when this engine's cannot be read here (notes["argument_surface"])."""
        from harness.launch.argsurface import SurfaceUnavailable

        why = self.notes.get("argument_surface") or f"the {self.title} profile has no way to read its flags"
        raise SurfaceUnavailable(f"argument surface of {self.title} {release} not captured: {why}")

    def capture_env(self) -> dict[str, str]:
        """The environment a surface capture runs with: the harness's own minus the engine's variables, plus its
        fixed ones (telemetry off) and no network for model hubs."""
        import os

        dropped = (*self.dropped_env_prefixes, "HF_", "TRANSFORMERS_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
        return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **self.fixed_env}

    # -- identity --------------------------------------------------------------------------------------------------

    def read_identity(self, doc: Mapping[str, Any], pinned: str, model_mount: str | None = None) -> dict[str, Any]:
        """{engine, version, ...recorded fields} from the identity document; IdentityProblem when it disagrees."""
        ident = self.identity
        raw = doc.get(ident.version_field)
        reported = (
            raw[len(ident.version_prefix) :] if isinstance(raw, str) and raw.startswith(ident.version_prefix) else raw
        )
        if ident.container_model_field and model_mount is not None:
            seen = doc.get(ident.container_model_field)
            if seen != model_mount:
                raise IdentityProblem(
                    f"{ident.path} {ident.container_model_field} is {seen!r}, expected {model_mount!r}"
                )
        if reported != pinned:
            raise IdentityProblem(
                f"engine reports version {raw!r} ({ident.path} {ident.version_field}), manifest pins {pinned!r}"
            )
        return {"engine": self.kind, "version": reported, **{k: doc.get(k) for k in ident.recorded}}

    def reported_version(self, doc: object) -> str | None:
        """The version an identity document reports (None when it says none), without judging it."""
        raw = doc.get(self.identity.version_field) if isinstance(doc, dict) else None
        if not isinstance(raw, str):
            return None
        return raw[len(self.identity.version_prefix) :] if raw.startswith(self.identity.version_prefix) else raw

    # -- expectations ----------------------------------------------------------------------------------------------

    def expectation_names(self, version: str) -> list[str]:
        """Expectation files to look for, most specific first: the exact version, then its series."""
        names = [f"{self.kind}-{version}"]
        if self.series_digits:
            series = ".".join(version.split(".")[: self.series_digits])
            if series != version:
                names.append(f"{self.kind}-{series}")
        return names
