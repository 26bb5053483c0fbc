"""Load scenarios (`loadtests/*.yaml`): schema, validation and the pure planning step.

A scenario is validated like a manifest: unknown fields are rejected and every problem becomes one ManifestError naming
the file and the dotted field. `plan(scenario)` turns it into a deterministic list of `PlannedRequest`s (arrival offsets,
prompt text, max_tokens) from the scenario's seed; nothing here touches a clock or a socket. `iter_plan` builds the
same requests one at a time (the runner holds only those in flight), and a scenario whose prompts could add up to more
than `MAX_PLANNED_PROMPT_BYTES` is refused when it is read, naming the field.

A scenario's prompts are either made up (`prompt_tokens`: that many random words or letters; with `ignore_eos` every answer
runs to max_tokens) or a prompt mix (`prompts`: real questions sent in turn, whose answers end on their own, so
`output_tokens` is a cap and the output lengths are the model's).

Every number has a range: rates in [0.001, 1e6] req/s (a near-zero rate would put the next request centuries away and
overflow the clock), gamma burstiness in [0.01, 100], lengths up to 1,000,000 units, durations up to a day.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.errors import ManifestError
from harness.readers import read_text
from harness.yamlfile import read_yaml_mapping, validate_as

__all__ = [
    "Scenario",
    "PlannedRequest",
    "load_scenario",
    "parse_scenario",
    "plan",
    "iter_plan",
    "planned_prompt_bytes",
    "MAX_PLANNED_PROMPT_BYTES",
    "arrival_offsets",
    "prompt_text",
    "PERCENTILE_KEYS",
]

PERCENTILE_KEYS = ("p50", "p90", "p95", "p99")
MAX_PLANNED_PROMPT_BYTES = 256 << 20  # all prompt text a scenario may send (measured + warm-up), worst case
MAX_UNITS = 1_000_000  # prompt/output length of one request
MIN_RATE, MAX_RATE = 0.001, 1e6  # req/s
MAX_MIX_PROMPTS, MAX_MIX_PROMPT_CHARS = 1000, 10_000  # a prompt mix: how many prompts, how long each


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Bounds(_Strict):
    """Both are required: the run stops at whichever comes first. max_duration_s is a hard wall-clock bound on the whole
    run from its start: model discovery, /metrics scrapes and warm-up included (only the closing scrape may add up to
    `CLOSING_ALLOWANCE_S` of harness.load.runner). Requests in flight at the deadline are cancelled and recorded as
    `cancelled` (error `max_duration`); the end record says which step the deadline hit (`bound_step`)."""

    max_requests: int = Field(gt=0, le=100_000)
    max_duration_s: float = Field(gt=0, le=24 * 3600)


class Arrival(_Strict):
    kind: Literal["constant", "poisson", "gamma", "concurrency", "ramp"]
    rate: float | None = Field(default=None, ge=MIN_RATE, le=MAX_RATE)  # req/s for constant, poisson, gamma
    burstiness: float | None = Field(default=None, ge=0.01, le=100)  # gamma shape k; 1 = Poisson, <1 burstier
    concurrency: int | None = Field(default=None, gt=0, le=4096)  # closed loop
    start_rate: float | None = Field(default=None, ge=MIN_RATE, le=MAX_RATE)  # ramp: start_rate to end_rate over ramp_s
    end_rate: float | None = Field(default=None, ge=MIN_RATE, le=MAX_RATE)
    ramp_s: float | None = Field(default=None, gt=0, le=24 * 3600)
    max_concurrency: int | None = Field(default=None, gt=0, le=4096)  # optional cap for open-loop kinds

    @model_validator(mode="after")
    def _needs(self) -> Arrival:
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
    value: int | None = Field(default=None, gt=0, le=MAX_UNITS)
    min: int | None = Field(default=None, gt=0, le=MAX_UNITS)
    max: int | None = Field(default=None, gt=0, le=MAX_UNITS)
    path: str | None = Field(default=None, min_length=1, max_length=4096)

    @model_validator(mode="after")
    def _needs(self) -> Lengths:
        if self.kind == "fixed" and (self.value is None or self.min is not None or self.max is not None or self.path):
            raise ValueError("kind 'fixed' takes exactly 'value'")
        if self.kind == "uniform":
            if self.min is None or self.max is None or self.value is not None or self.path:
                raise ValueError("kind 'uniform' takes exactly 'min' and 'max'")
            if self.min > self.max:
                raise ValueError(f"min {self.min} > max {self.max}")
        if self.kind == "file" and (
            not self.path or self.value is not None or self.min is not None or self.max is not None
        ):
            raise ValueError("kind 'file' takes exactly 'path'")
        return self


class SharedPrefix(_Strict):
    """A fraction `share` of the requests start with the same `tokens`-unit prefix (counted inside their prompt length)."""

    share: float = Field(ge=0, le=1)
    tokens: int = Field(gt=0, le=MAX_UNITS)


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
    # How many measured requests may fail (any outcome but ok and cancelled) and the run still pass. Without it (and
    # without max_error_rate) a single failed request fails the run; a run with no ok request never passes.
    max_failed_requests: int | None = Field(default=None, ge=0, le=100_000)


class Abort(_Strict):
    """Checked after every finished request; tripping one stops the run early (data so far is kept)."""

    max_error_rate: float | None = Field(default=None, gt=0, le=1)
    min_requests: int = Field(
        default=10, gt=0, le=100_000
    )  # error rate is only judged after this many finished requests
    max_consecutive_failures: int | None = Field(default=None, gt=0, le=100_000)
    max_send_lag_ms: float | None = Field(default=None, gt=0, le=3_600_000)  # median send lag over the last 20 sends


class Warmup(_Strict):
    requests: int = Field(default=0, ge=0, le=1000)  # sent one at a time before the measured phase, not counted


class Scenario(_Strict):
    name: str = Field(min_length=1, max_length=100)
    description: str = Field(default="", max_length=10_000)
    endpoint: Literal["chat", "completions"] = "chat"
    model: str | None = Field(
        default=None, min_length=1, max_length=512
    )  # default: the engine's served name (or /v1/models)
    seed: int = Field(default=0, ge=-(2**63), le=2**63 - 1)
    bounds: Bounds
    arrival: Arrival
    prompt_tokens: Lengths | None = None  # made-up prompts of these lengths; or `prompts`, never both
    # a prompt mix: request i sends prompts[i % len] as the user turn (or the completion prompt)
    prompts: tuple[str, ...] | None = Field(default=None, min_length=1, max_length=MAX_MIX_PROMPTS)
    output_tokens: Lengths  # max_tokens of each request (with a prompt mix: the cap an answer may end before)
    prompt_unit: Literal["char", "word"] = "word"  # char: 1 ASCII letter per unit (1 token on byte-level tokenizers)
    shared_prefix: SharedPrefix | None = None
    ignore_eos: bool = False  # vLLM extension: generate exactly max_tokens
    temperature: float = Field(default=0.0, ge=0, le=2)
    request_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    scrape_interval_s: float | None = Field(default=1.0, ge=0.05, le=3600)  # /metrics during the run; null = off
    warmup: Warmup = Warmup()
    slo: Slo = Slo()
    abort: Abort = Abort()
    # set by the loader, not by YAML authors
    source: str | None = Field(default=None, exclude=True)
    prompt_lengths_list: tuple[int, ...] | None = Field(default=None, exclude=True)
    output_lengths_list: tuple[int, ...] | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _one_prompt_source(self) -> Scenario:
        if (self.prompt_tokens is None) == (self.prompts is None):
            raise ValueError("exactly one of 'prompt_tokens' (made-up prompts) or 'prompts' (a prompt mix) is required")
        if self.prompts is not None:
            if self.shared_prefix is not None:
                raise ValueError("'shared_prefix' applies to made-up prompts (prompt_tokens), not to a prompt mix")
            for i, text in enumerate(self.prompts):
                if not text.strip() or len(text) > MAX_MIX_PROMPT_CHARS:
                    raise ValueError(
                        f"prompts[{i}]: must be non-blank text of at most {MAX_MIX_PROMPT_CHARS} characters"
                    )
        return self


def _read_lengths(scenario_path: Path, field: str, rel: str) -> tuple[int, ...]:
    p = (scenario_path.parent / rel) if not Path(rel).is_absolute() else Path(rel)
    if not p.exists():
        raise ManifestError(scenario_path, f"{field}.path", f"lengths file not found: {p}")
    values = []
    for n, line in enumerate(read_text(p, "lengths").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            v = int(line)
        except ValueError:
            raise ManifestError(p, f"line {n}", f"not an integer: {line!r}") from None
        if not 0 < v <= MAX_UNITS:
            raise ManifestError(p, f"line {n}", f"must be between 1 and {MAX_UNITS}, got {v}")
        values.append(v)
    if not values:
        raise ManifestError(scenario_path, f"{field}.path", f"lengths file is empty: {p}")
    return tuple(values)


def parse_scenario(raw: object, path: str | Path = "<scenario>") -> Scenario:
    path = Path(path)
    if not isinstance(raw, dict):
        raise ManifestError(
            path, "(top level)", "must be a mapping with name, bounds, arrival, prompt_tokens or prompts, output_tokens"
        )
    for k in ("source", "prompt_lengths_list", "output_lengths_list"):
        if k in raw:
            raise ManifestError(path, k, "Extra inputs are not permitted")
    sc = validate_as(Scenario, raw, path)
    upd: dict = {"source": str(path)}
    if sc.prompt_tokens is not None and sc.prompt_tokens.kind == "file":
        upd["prompt_lengths_list"] = _read_lengths(path, "prompt_tokens", sc.prompt_tokens.path)
    if sc.output_tokens.kind == "file":
        upd["output_lengths_list"] = _read_lengths(path, "output_tokens", sc.output_tokens.path)
    sc = sc.model_copy(update=upd)
    total = planned_prompt_bytes(sc)
    if total > MAX_PLANNED_PROMPT_BYTES:
        n = sc.bounds.max_requests + sc.warmup.requests
        raise ManifestError(path, "bounds.max_requests",
                            f"{n} requests (warm-up included) of up to {_max_prompt_units(sc)} {sc.prompt_unit} units could "
                            f"send {total:,} bytes of prompt text, over the limit of {MAX_PLANNED_PROMPT_BYTES:,}; lower "
                            "bounds.max_requests, warmup.requests or prompt_tokens")  # fmt: skip
    return sc


def _max_prompt_units(sc: Scenario) -> int:
    spec = sc.prompt_tokens
    if spec is None:  # a prompt mix: its longest prompt, counted in bytes (one unit each)
        return max(len(p.encode()) for p in sc.prompts or ("",))
    most = {"fixed": spec.value, "uniform": spec.max}.get(spec.kind) or max(sc.prompt_lengths_list or (0,))
    return max(most, sc.shared_prefix.tokens if sc.shared_prefix else 0)  # a prefixed prompt is at least the prefix


def planned_prompt_bytes(sc: Scenario) -> int:
    """The most prompt text (bytes) the scenario can send, measured and warm-up requests together."""
    per_unit = 1 if sc.prompt_unit == "char" or sc.prompts is not None else _MAX_WORD_BYTES
    return (sc.bounds.max_requests + sc.warmup.requests) * _max_prompt_units(sc) * per_unit


def load_scenario(path: str | Path) -> Scenario:
    p = Path(path)
    return parse_scenario(
        read_yaml_mapping(p, "scenario", "name, bounds, arrival, prompt_tokens or prompts, output_tokens"), p
    )


# ---------------------------------------------------------------- planning (pure, seeded)


@dataclass(frozen=True)
class PlannedRequest:
    index: int
    offset_s: (
        float | None
    )  # intended send time after the measured phase starts; None = closed loop (sent when a slot frees)
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
        if not math.isfinite(t):  # cannot happen within the validated ranges; never let it reach the clock
            raise ValueError(f"arrival offset {t!r} for request {i}")
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
_MAX_WORD_BYTES = max(len(w) for w in _WORDS) + 1  # with its separating space


def plan(sc: Scenario, n: int | None = None) -> list[PlannedRequest]:
    """The measured requests (n defaults to bounds.max_requests), deterministic for a given seed."""
    return list(iter_plan(sc, n))


def iter_plan(sc: Scenario, n: int | None = None) -> Iterator[PlannedRequest]:
    """The same requests as `plan`, built one at a time as they are taken (only the prompts in use exist at once)."""
    n = sc.bounds.max_requests if n is None else n
    rng = random.Random(sc.seed)
    offsets = arrival_offsets(sc.arrival, n, random.Random(sc.seed + 1))
    olens = _lengths(sc.output_tokens, sc.output_lengths_list, n, random.Random(sc.seed + 3))
    if sc.prompts is not None:  # a prompt mix, in turn; prompt_units is then the prompt's length in characters
        for i in range(n):
            text = sc.prompts[i % len(sc.prompts)]
            yield PlannedRequest(i, offsets[i], text, len(text), olens[i], False)
        return
    assert sc.prompt_tokens is not None  # the validator's rule: one of the two
    plens = _lengths(sc.prompt_tokens, sc.prompt_lengths_list, n, random.Random(sc.seed + 2))
    prefix, pre_n = "", 0
    if sc.shared_prefix:
        pre_n = sc.shared_prefix.tokens
        prefix = prompt_text(pre_n, sc.prompt_unit, random.Random(sc.seed + 4))
    sep = "" if sc.prompt_unit == "char" else " "
    for i in range(n):
        prefixed = bool(sc.shared_prefix) and rng.random() < sc.shared_prefix.share
        if prefixed:
            rest = max(plens[i] - pre_n, 0)
            text = prefix + (sep + prompt_text(rest, sc.prompt_unit, rng) if rest else "")
        else:
            text = prompt_text(plens[i], sc.prompt_unit, rng)
        yield PlannedRequest(i, offsets[i], text, plens[i], olens[i], prefixed)
