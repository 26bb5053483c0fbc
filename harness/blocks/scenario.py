"""The block simulator's scenario reader: its own format, and the load-test format `harness load` runs.

The simulator's own format (a subset of the load-test scenario format, plus an ``engine`` section)::

    name: shared-prefix-burst
    seed: 0
    requests: 40                 # or bounds.max_requests, as in loadtests/*.yaml
    arrival: {kind: constant, rate: 20}        # req/s; omit rate for "all at t=0"
    prompt_tokens: {kind: uniform, min: 100, max: 300}   # or {kind: fixed, value: 200}
    output_tokens: {kind: fixed, value: 64}
    shared_prefix: {share: 0.5, tokens: 256}   # that fraction of requests starts with the same tokens
    engine: {num_blocks: 64, block_size: 16, max_model_len: 1024, max_num_seqs: 128,
             max_num_batched_tokens: 2048, enable_prefix_caching: true, step_time_s: 0.004}

Load-test keys the simulator has no use for (``bounds.max_duration_s``, ``slo``, ``abort``, ``warmup``,
``endpoint``, ``model``, ``prompt_unit``, ``ignore_eos``, ``description``) are ignored, so a load-test scenario
with constant arrival and fixed/uniform lengths replays as is. Lengths count *tokens of the prompt as the
engine sees it* (a chat template adds tokens; the simulator does not model templates).
Every number is typed and bounded (``harness.blocks.limits``). Pure except :func:`load`, :func:`load_any` and
:func:`from_load_scenario` (given no document).

A load-test scenario (`loadtests/*.yaml`, the format `harness load` runs) replays as exactly the requests `harness
load` would send (`harness.load.scenario.plan`: same seed, arrival offsets, prompt texts, shared prefix and
max_tokens), turned into the token ids the engine sees with the embedded reference
model, whose tokenizer is byte-level (token id = byte value) and whose chat template is
`<s><|user|>\\n{content}\\n<|assistant|>\\n` (`harness.models.reference.CHAT_TEMPLATE`); completions get `<s>` + the prompt.
So a shared text prefix gives the same leading token ids, and the prefix cache sees what the engine sees.

Approximations, stated: output length = max_tokens (the scenarios set ignore_eos); a closed-loop scenario (arrival kind
`concurrency`) is replayed as every request arriving at t=0 with max_num_seqs capped at the concurrency, which holds
the same number in flight (waiting requests hold no blocks); warm-up requests are not replayed. Engine defaults are the
default manifest's engine (vLLM 0.11.0 CPU, float32, 1 GiB KV: 8192 blocks of 128, max_model_len 1024).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, field_validator, model_validator

from harness.blocks import limits as L
from harness.errors import ManifestError
from harness.yamlfile import read_yaml_mapping, validate_as

__all__ = [
    "Lengths",
    "EngineSettings",
    "SimScenario",
    "SimRequestSpec",
    "load",
    "load_any",
    "parse",
    "expand",
    "is_load_scenario",
    "from_load_scenario",
    "DEFAULT_ENGINE",
]


@dataclass(frozen=True)
class Lengths:
    kind: str = "fixed"
    value: int | None = None
    min: int | None = None
    max: int | None = None

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.value)  # type: ignore[arg-type]
        return rng.randint(int(self.min), int(self.max))  # type: ignore[arg-type]


@dataclass(frozen=True)
class EngineSettings:
    num_blocks: int = 16384  # includes the null block, as num_gpu_blocks
    block_size: int = 16
    max_model_len: int = 1024
    max_num_seqs: int = 128  # vLLM 0.11.0 CPU defaults for the API server
    max_num_batched_tokens: int = 2048
    enable_prefix_caching: bool = True
    step_time_s: float = 0.004  # simulated wall time of one engine step
    long_prefill_token_threshold: int = 0


@dataclass(frozen=True)
class SimScenario:
    name: str
    requests: int
    rate: float | None  # None = all at t=0
    prompt_tokens: Lengths
    output_tokens: Lengths
    shared_share: float = 0.0
    shared_tokens: int = 0
    seed: int = 0
    engine: EngineSettings = field(default_factory=EngineSettings)


@dataclass(frozen=True)
class SimRequestSpec:
    request_id: str
    arrival_s: float
    prompt: tuple[int, ...]
    max_tokens: int


# ---------------------------------------------------------------- the YAML schema (validation only)
# Every number has a type and a range (see harness.blocks.limits): `num_blocks: 2.5`, `requests: 1e9`, a NaN or a zero
# step time is one ManifestError naming the field, not a crash or a simulation that never ends.


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Open(BaseModel):
    """Load-test sections: keys the simulator has no use for are ignored (see the module docstring)."""

    model_config = ConfigDict(extra="ignore", frozen=True)


_Length = Annotated[StrictInt, Field(ge=1, le=L.MAX_SIM_TOKENS)]
_Rate = Annotated[StrictFloat, Field(ge=L.MIN_RATE, le=L.MAX_RATE, allow_inf_nan=False)]


class _LengthsDoc(_Closed):
    kind: Literal["fixed", "uniform"]
    value: _Length | None = None
    min: _Length | None = None
    max: _Length | None = None

    @model_validator(mode="after")
    def _shape(self) -> _LengthsDoc:
        if self.kind == "fixed" and (self.value is None or self.min is not None or self.max is not None):
            raise ValueError("need {kind: fixed, value: N>0}")
        if self.kind == "uniform" and (
            self.min is None or self.max is None or self.value is not None or self.min > self.max
        ):
            raise ValueError("need {kind: uniform, min: A, max: B}, 0<A<=B")
        return self

    def lengths(self) -> Lengths:
        return Lengths(self.kind, value=self.value, min=self.min, max=self.max)

    @property
    def longest(self) -> int:
        return self.value if self.kind == "fixed" else self.max  # type: ignore[return-value]


class _ArrivalDoc(_Open):
    kind: str = "constant"
    rate: _Rate | None = None  # None: every request at t=0

    @field_validator("kind")
    @classmethod
    def _constant(cls, v: str) -> str:
        if v != "constant":
            raise ValueError("the simulator replays only constant-rate arrival")
        return v


class _SharedPrefixDoc(_Closed):
    share: Annotated[StrictFloat, Field(ge=0, le=1, allow_inf_nan=False)] = 0.0
    tokens: Annotated[StrictInt, Field(ge=0, le=L.MAX_SIM_TOKENS)] = 0


class _EngineDoc(_Closed):
    num_blocks: Annotated[StrictInt, Field(ge=2, le=L.MAX_SIM_BLOCKS)] | None = None
    block_size: Annotated[StrictInt, Field(ge=1, le=L.MAX_BLOCK_SIZE)] | None = None
    max_model_len: Annotated[StrictInt, Field(ge=1, le=L.MAX_LENGTH)] | None = None
    max_num_seqs: Annotated[StrictInt, Field(ge=1, le=L.MAX_REQUESTS)] | None = None
    max_num_batched_tokens: Annotated[StrictInt, Field(ge=1, le=L.MAX_SIM_TOKENS)] | None = None
    enable_prefix_caching: StrictBool | None = None
    step_time_s: Annotated[StrictFloat, Field(ge=L.MIN_STEP_S, le=L.MAX_STEP_S, allow_inf_nan=False)] | None = None
    long_prefill_token_threshold: Annotated[StrictInt, Field(ge=0, le=L.MAX_SIM_TOKENS)] | None = None

    def settings(self) -> EngineSettings:
        return EngineSettings(**self.model_dump(exclude_none=True))


class _BoundsDoc(_Open):
    max_requests: Annotated[StrictInt, Field(ge=1, le=L.MAX_REQUESTS)] | None = None


class _ScenarioDoc(_Open):
    name: Annotated[str, Field(max_length=200)] | None = None
    seed: Annotated[StrictInt, Field(ge=-L.MAX_SEED, le=L.MAX_SEED)] = 0
    requests: Annotated[StrictInt, Field(ge=1, le=L.MAX_REQUESTS)] | None = None
    bounds: _BoundsDoc | None = None
    arrival: _ArrivalDoc | None = None
    prompt_tokens: _LengthsDoc
    output_tokens: _LengthsDoc
    shared_prefix: _SharedPrefixDoc | None = None
    engine: _EngineDoc | None = None

    @model_validator(mode="after")
    def _sized(self) -> _ScenarioDoc:
        n = self.count
        if n is None:
            raise ValueError("requests: a positive integer (or bounds.max_requests) is required")
        # expand() holds every prompt's token ids before the clock starts; outputs grow them during the run
        total = n * (self.prompt_tokens.longest + self.output_tokens.longest)
        if total > L.MAX_SIM_TOKENS:
            raise ValueError(
                f"requests x (longest prompt + longest output) = {total} tokens, over the simulator's "
                f"limit of {L.MAX_SIM_TOKENS}"
            )
        return self

    @property
    def count(self) -> int | None:
        return self.requests if self.requests is not None else (self.bounds.max_requests if self.bounds else None)


def parse(doc: object, path: str = "<scenario>") -> SimScenario:
    if not isinstance(doc, dict):
        raise ManifestError(path, "(top level)", "a scenario is a YAML mapping")
    d = validate_as(_ScenarioDoc, doc, path)
    sp = d.shared_prefix or _SharedPrefixDoc()
    return SimScenario(
        name=d.name or Path(path).stem,
        requests=d.count,
        rate=d.arrival.rate if d.arrival else None,  # type: ignore[arg-type]
        prompt_tokens=d.prompt_tokens.lengths(),
        output_tokens=d.output_tokens.lengths(),
        shared_share=float(sp.share),
        shared_tokens=sp.tokens,
        seed=d.seed,
        engine=d.engine.settings() if d.engine else EngineSettings(),
    )


_EXPECTED = "requests (or bounds.max_requests), prompt_tokens, output_tokens, engine"


def _read(path: str | Path) -> dict:
    """Through the shared bounded YAML reader: size, nesting, duplicate keys and .nan/.inf are refused there."""
    return read_yaml_mapping(path, "scenario", _EXPECTED)


def load(path: str | Path) -> SimScenario:
    return parse(_read(path), str(path))


# --- the load-test format: the requests `harness load` would send, as the engine's token ids ---------------

DEFAULT_ENGINE = EngineSettings(num_blocks=8192, block_size=128, max_model_len=1024)


def is_load_scenario(doc: object) -> bool:
    return isinstance(doc, dict) and "bounds" in doc and "engine" not in doc and "requests" not in doc


def _prompt_ids(text: str, endpoint: str) -> tuple[int, ...]:
    from harness.models.reference import BOS_ID

    if endpoint == "chat":
        return (BOS_ID, *f"<|user|>\n{text}\n<|assistant|>\n".encode())
    return (BOS_ID, *text.encode())


def _longest_units(lengths, listed, mix=None) -> int:
    if lengths is None:  # a prompt mix: its longest prompt, one byte-level token a byte
        return max((len(p.encode()) for p in mix or ("",)), default=0)
    if lengths.kind == "fixed":
        return lengths.value
    if lengths.kind == "uniform":
        return lengths.max
    return max(listed or (0,))


def _check_size(sc) -> None:
    """Refuse before planning: plan() builds every prompt text at once, and a unit is at least one token."""
    n = sc.bounds.max_requests
    units = n * (
        _longest_units(sc.prompt_tokens, sc.prompt_lengths_list, sc.prompts)
        + _longest_units(sc.output_tokens, sc.output_lengths_list)
    )
    if units > L.MAX_SIM_TOKENS:
        raise ManifestError(
            sc.source or "<scenario>",
            "bounds.max_requests",
            f"{n} requests x (longest prompt + longest output) = at least {units} tokens, over the "
            f"simulator's limit of {L.MAX_SIM_TOKENS}",
        )


def from_load_scenario(path: str | Path, doc: dict | None = None) -> tuple[SimScenario, list[SimRequestSpec]]:
    """`doc`: the file's YAML already read (by load_any), so it is read once."""
    from harness.load.scenario import load_scenario, parse_scenario, plan

    sc = load_scenario(path) if doc is None else parse_scenario(doc, path)
    _check_size(sc)
    planned = plan(sc)
    total = sum(len(p.prompt) + p.max_tokens for p in planned)  # prompt text is ASCII: one byte-level token a char
    if total > L.MAX_SIM_TOKENS:  # word prompts are several tokens a word
        raise ManifestError(
            path,
            "prompt_tokens",
            f"the planned requests hold {total} tokens, over the simulator's limit of {L.MAX_SIM_TOKENS}",
        )
    specs = [
        SimRequestSpec(f"req-{p.index}", p.offset_s or 0.0, _prompt_ids(p.prompt, sc.endpoint), p.max_tokens)
        for p in planned
    ]
    engine = DEFAULT_ENGINE
    if sc.arrival.kind == "concurrency":
        engine = EngineSettings(**{**engine.__dict__, "max_num_seqs": min(engine.max_num_seqs, sc.arrival.concurrency)})
    sim = SimScenario(
        name=sc.name,
        requests=len(specs),
        rate=None,
        prompt_tokens=Lengths(),
        output_tokens=Lengths(),
        seed=sc.seed,
        engine=engine,
    )
    return sim, specs


def load_any(path: str | Path) -> tuple[SimScenario, list[SimRequestSpec] | None]:
    """A load-test scenario (loadtests/*.yaml: the requests `harness load` would send) or the simulator's own format."""
    doc = _read(path)
    if is_load_scenario(doc):
        return from_load_scenario(path, doc)
    return parse(doc, str(path)), None


def expand(sc: SimScenario) -> list[SimRequestSpec]:
    """Deterministic requests: shared-prefix token ids 0..P-1, every other token unique (no accidental hits)."""
    rng = random.Random(sc.seed)
    prefix = tuple(range(sc.shared_tokens))
    next_tok = 1_000_000
    out = []
    for i in range(sc.requests):
        plen = sc.prompt_tokens.draw(rng)
        olen = sc.output_tokens.draw(rng)
        shared = prefix[:plen] if sc.shared_share and rng.random() < sc.shared_share else ()
        rest = tuple(range(next_tok, next_tok + plen - len(shared)))
        next_tok += len(rest)
        t = 0.0 if sc.rate is None else i / sc.rate
        out.append(SimRequestSpec(f"req-{i}", t, shared + rest, olen))
    return out
