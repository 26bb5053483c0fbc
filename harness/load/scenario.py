"""Load scenarios (`loadtests/*.yaml`): schema, validation and the pure planning step.

A scenario is validated like a manifest: unknown fields are rejected and every problem becomes one ManifestError naming
the file and the dotted field. `plan(scenario)` turns it into a deterministic list of `PlannedRequest`s (arrival offsets,
prompt text, max_tokens) from the scenario's seed; nothing here touches a clock or a socket.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.errors import ManifestError
from harness.yamlfile import read_yaml_mapping, validate_as

__all__ = [
    "Scenario",
    "PlannedRequest",
    "load_scenario",
    "parse_scenario",
    "plan",
    "arrival_offsets",
    "prompt_text",
    "PERCENTILE_KEYS",
]

PERCENTILE_KEYS = ("p50", "p90", "p95", "p99")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Bounds(_Strict):
    """Both are required: the run stops at whichever comes first. max_duration_s is a hard wall-clock bound (warm-up
    excluded); requests still in flight at the deadline are cancelled and recorded as `cancelled` (reason `bound`)."""

    max_requests: int = Field(gt=0, le=100_000)
    max_duration_s: float = Field(gt=0, le=24 * 3600)


class Arrival(_Strict):
    kind: Literal["constant", "poisson", "gamma", "concurrency", "ramp"]
    rate: float | None = Field(default=None, gt=0)  # req/s for constant, poisson, gamma
    burstiness: float | None = Field(default=None, gt=0)  # gamma shape k; 1 = Poisson, <1 burstier
    concurrency: int | None = Field(default=None, gt=0, le=4096)  # closed loop
    start_rate: float | None = Field(default=None, gt=0)  # ramp: linear from start_rate to end_rate over ramp_s
    end_rate: float | None = Field(default=None, gt=0)
    ramp_s: float | None = Field(default=None, gt=0)
    max_concurrency: int | None = Field(default=None, gt=0, le=4096)  # optional cap for open-loop kinds

    @model_validator(mode="after")
    def _needs(self) -> "Arrival":
        need = {
            "constant": ("rate",),
            "poisson": ("rate",),
            "gamma": ("rate", "burstiness"),
            "concurrency": ("concurrency",),
            "ramp": ("start_rate", "end_rate", "ramp_s"),
        }[self.kind]
        for name in need:
            if getattr(self, name) is None:
                raise ValueError(f"arrival kind {self.kind!r} needs {name!r}")
        allowed = set(need) | ({"max_concurrency"} if self.kind != "concurrency" else set())
        for name in ("rate", "burstiness", "concurrency", "start_rate", "end_rate", "ramp_s", "max_concurrency"):
            if getattr(self, name) is not None and name not in allowed:
                raise ValueError(f"{name!r} does not apply to arrival kind {self.kind!r}")
        return self


class Lengths(_Strict):
    """fixed: `value`; uniform: integers in [min, max]; file: one positive integer per line (cycled in order)."""

    kind: Literal["fixed", "uniform", "file"]
    value: int | None = Field(default=None, gt=0, le=1_000_000)
    min: int | None = Field(default=None, gt=0, le=1_000_000)
    max: int | None = Field(default=None, gt=0, le=1_000_000)
    path: str | None = None

    @model_validator(mode="after")
    def _needs(self) -> "Lengths":
        if self.kind == "fixed" and (self.value is None or self.min is not None or self.max is not None or self.path):
            raise ValueError("kind 'fixed' takes exactly 'value'")
        if self.kind == "uniform":
            if self.min is None or self.max is None or self.value is not None or self.path:
                raise ValueError("kind 'uniform' takes exactly 'min' and 'max'")
            if self.min > self.max:
                raise ValueError(f"min {self.min} > max {self.max}")
        if self.kind == "file" and (not self.path or self.value is not None or self.min is not None or self.max is not None):
            raise ValueError("kind 'file' takes exactly 'path'")
        return self


class SharedPrefix(_Strict):
    """A fraction `share` of the requests start with the same `tokens`-unit prefix (counted inside their prompt length)."""

    share: float = Field(ge=0, le=1)
    tokens: int = Field(gt=0, le=1_000_000)


class Percentiles(_Strict):
    p50: float | None = Field(default=None, gt=0)
    p90: float | None = Field(default=None, gt=0)
    p95: float | None = Field(default=None, gt=0)
    p99: float | None = Field(default=None, gt=0)


class GoodputCriteria(_Strict):
    """Per-request criteria (ms); a request is `good` when it succeeded and meets every one given."""

    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    e2e_ms: float | None = Field(default=None, gt=0)


class Slo(_Strict):
    ttft_ms: Percentiles | None = None
    itl_ms: Percentiles | None = None
    tpot_ms: Percentiles | None = None
    e2e_ms: Percentiles | None = None
    goodput: GoodputCriteria | None = None
    min_goodput_fraction: float | None = Field(default=None, ge=0, le=1)
    max_error_rate: float | None = Field(default=None, ge=0, le=1)


class Abort(_Strict):
    """Checked after every finished request; tripping one stops the run early (data so far is kept)."""

    max_error_rate: float | None = Field(default=None, gt=0, le=1)
    min_requests: int = Field(default=10, gt=0)  # error rate is only judged after this many finished requests
    max_consecutive_failures: int | None = Field(default=None, gt=0)
    max_send_lag_ms: float | None = Field(default=None, gt=0)  # median send lag over the last 20 sends


class Warmup(_Strict):
    requests: int = Field(default=0, ge=0, le=1000)  # sent one at a time before the measured phase, not counted


class Scenario(_Strict):
    name: str = Field(min_length=1, max_length=100)
    description: str = ""
    endpoint: Literal["chat", "completions"] = "chat"
    model: str | None = None  # default: the engine's served name (or the first id from /v1/models)
    seed: int = 0
    bounds: Bounds
    arrival: Arrival
    prompt_tokens: Lengths
    output_tokens: Lengths
    prompt_unit: Literal["char", "word"] = "word"  # char: 1 ASCII letter per unit (1 token on byte-level tokenizers)
    shared_prefix: SharedPrefix | None = None
    ignore_eos: bool = False  # vLLM extension: generate exactly max_tokens
    temperature: float = Field(default=0.0, ge=0, le=2)
    request_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    scrape_interval_s: float | None = Field(default=1.0, gt=0)  # /metrics during the run (KV usage over time); null = off
    warmup: Warmup = Warmup()
    slo: Slo = Slo()
    abort: Abort = Abort()
    # set by the loader, not by YAML authors
    source: str | None = Field(default=None, exclude=True)
    prompt_lengths_list: tuple[int, ...] | None = Field(default=None, exclude=True)
    output_lengths_list: tuple[int, ...] | None = Field(default=None, exclude=True)


def _read_lengths(scenario_path: Path, field: str, rel: str) -> tuple[int, ...]:
    p = (scenario_path.parent / rel) if not Path(rel).is_absolute() else Path(rel)
    if not p.is_file():
        raise ManifestError(scenario_path, f"{field}.path", f"lengths file not found: {p}")
    values = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            v = int(line)
        except ValueError:
            raise ManifestError(p, f"line {n}", f"not an integer: {line!r}") from None
        if v <= 0:
            raise ManifestError(p, f"line {n}", f"must be positive, got {v}")
        values.append(v)
    if not values:
        raise ManifestError(scenario_path, f"{field}.path", f"lengths file is empty: {p}")
    return tuple(values)


def parse_scenario(raw: object, path: str | Path = "<scenario>") -> Scenario:
    path = Path(path)
    if not isinstance(raw, dict):
        raise ManifestError(path, "(top level)", "must be a mapping with name, bounds, arrival, prompt_tokens, output_tokens")
    for k in ("source", "prompt_lengths_list", "output_lengths_list"):
        if k in raw:
            raise ManifestError(path, k, "Extra inputs are not permitted")
    sc = validate_as(Scenario, raw, path)
    upd: dict = {"source": str(path)}
    if sc.prompt_tokens.kind == "file":
        upd["prompt_lengths_list"] = _read_lengths(path, "prompt_tokens", sc.prompt_tokens.path)
    if sc.output_tokens.kind == "file":
        upd["output_lengths_list"] = _read_lengths(path, "output_tokens", sc.output_tokens.path)
    return sc.model_copy(update=upd)


def load_scenario(path: str | Path) -> Scenario:
    p = Path(path)
    return parse_scenario(read_yaml_mapping(p, "scenario", "name, bounds, arrival, prompt_tokens, output_tokens"), p)


# ---------------------------------------------------------------- planning (pure, seeded)


@dataclass(frozen=True)
class PlannedRequest:
    index: int
    offset_s: float | None  # intended send time after the measured phase starts; None = closed loop (sent when a slot frees)
    prompt: str
    prompt_units: int
    max_tokens: int
    prefixed: bool


def arrival_offsets(arrival: Arrival, n: int, rng: random.Random) -> list[float | None]:
    """Intended send offsets (seconds) of n requests. Poisson = exponential gaps; gamma gaps have shape k=burstiness
    and mean 1/rate (k<1 burstier); ramp rate grows linearly from start_rate to end_rate over ramp_s, then stays."""
    if arrival.kind == "concurrency":
        return [None] * n
    out, t = [], 0.0
    for i in range(n):
        if arrival.kind == "constant":
            t = i / arrival.rate
        elif arrival.kind == "poisson":
            t += rng.expovariate(arrival.rate) if i else 0.0
        elif arrival.kind == "gamma":
            k = arrival.burstiness
            t += rng.gammavariate(k, 1.0 / (k * arrival.rate)) if i else 0.0
        else:  # ramp: invert the cumulative rate integral Λ(t) so that request i is due when Λ(t) = i
            a, b, T = arrival.start_rate, arrival.end_rate, arrival.ramp_s
            slope = (b - a) / T
            full = a * T + slope * T * T / 2
            if i <= full:
                t = (i / a) if slope == 0 else (-a + math.sqrt(a * a + 2 * slope * i)) / slope
            else:
                t = T + (i - full) / b
        out.append(t)
    return out


def _lengths(spec: Lengths, listed: tuple[int, ...] | None, n: int, rng: random.Random) -> list[int]:
    if spec.kind == "fixed":
        return [spec.value] * n
    if spec.kind == "uniform":
        return [rng.randint(spec.min, spec.max) for _ in range(n)]
    return [listed[i % len(listed)] for i in range(n)]


_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def prompt_text(units: int, unit: str, rng: random.Random) -> str:
    if unit == "char":
        return "".join(rng.choice(_LETTERS) for _ in range(units))
    return " ".join(rng.choice(_WORDS) for _ in range(units))


_WORDS = (
    "time year people way day man thing woman life child world school state family student group country problem hand "
    "part place case week company system program question work government number night point home water room mother area "
    "money story fact month lot right study book eye job word business issue side kind head house service friend father"
).split()


def plan(sc: Scenario, n: int | None = None) -> list[PlannedRequest]:
    """The measured requests (n defaults to bounds.max_requests), deterministic for a given seed."""
    n = sc.bounds.max_requests if n is None else n
    rng = random.Random(sc.seed)
    offsets = arrival_offsets(sc.arrival, n, random.Random(sc.seed + 1))
    plens = _lengths(sc.prompt_tokens, sc.prompt_lengths_list, n, random.Random(sc.seed + 2))
    olens = _lengths(sc.output_tokens, sc.output_lengths_list, n, random.Random(sc.seed + 3))
    prefix, pre_n = "", 0
    if sc.shared_prefix:
        pre_n = sc.shared_prefix.tokens
        prefix = prompt_text(pre_n, sc.prompt_unit, random.Random(sc.seed + 4))
    sep = "" if sc.prompt_unit == "char" else " "
    out = []
    for i in range(n):
        prefixed = bool(sc.shared_prefix) and rng.random() < sc.shared_prefix.share
        if prefixed:
            rest = max(plens[i] - pre_n, 0)
            text = prefix + (sep + prompt_text(rest, sc.prompt_unit, rng) if rest else "")
        else:
            text = prompt_text(plens[i], sc.prompt_unit, rng)
        out.append(PlannedRequest(i, offsets[i], text, plens[i], olens[i], prefixed))
    return out
