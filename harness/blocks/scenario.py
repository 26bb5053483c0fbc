"""A minimal scenario reader for the block simulator.

Accepted YAML (a subset of the load-test scenario format, plus an ``engine`` section)::

    name: shared-prefix-burst
    seed: 0
    requests: 40                 # or bounds.max_requests, as in loadtests/*.yaml
    arrival: {kind: constant, rate: 20}        # req/s; omit rate (or rate: .inf) for "all at t=0"
    prompt_tokens: {kind: uniform, min: 100, max: 300}   # or {kind: fixed, value: 200}
    output_tokens: {kind: fixed, value: 64}
    shared_prefix: {share: 0.5, tokens: 256}   # that fraction of requests starts with the same tokens
    engine: {num_blocks: 64, block_size: 16, max_model_len: 1024, max_num_seqs: 128,
             max_num_batched_tokens: 2048, enable_prefix_caching: true, step_time_s: 0.004}

Load-test keys the simulator has no use for (``bounds.max_duration_s``, ``slo``, ``abort``, ``warmup``,
``endpoint``, ``model``, ``prompt_unit``, ``ignore_eos``, ``description``) are ignored, so a load-test scenario
with constant arrival and fixed/uniform lengths replays as is. Lengths count *tokens of the prompt as the
engine sees it* (a chat template adds tokens; the simulator does not model templates).
Pure except :func:`load`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

from harness.errors import ManifestError

__all__ = ["Lengths", "EngineSettings", "SimScenario", "SimRequestSpec", "load", "load_any", "parse", "expand"]


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


def _lengths(doc: dict, key: str, path: str) -> Lengths:
    d = doc.get(key)
    if not isinstance(d, dict):
        raise ManifestError(path, key, "required mapping {kind: fixed|uniform, ...}")
    kind = d.get("kind")
    if kind == "fixed" and isinstance(d.get("value"), int) and d["value"] > 0:
        return Lengths("fixed", value=d["value"])
    if kind == "uniform" and all(isinstance(d.get(k), int) for k in ("min", "max")) and 0 < d["min"] <= d["max"]:
        return Lengths("uniform", min=d["min"], max=d["max"])
    raise ManifestError(path, key, "need {kind: fixed, value: N>0} or {kind: uniform, min: A, max: B}, 0<A<=B")


def parse(doc: object, path: str = "<scenario>") -> SimScenario:
    if not isinstance(doc, dict):
        raise ManifestError(path, "<root>", "a scenario is a YAML mapping")
    n = doc.get("requests", (doc.get("bounds") or {}).get("max_requests"))
    if not isinstance(n, int) or n < 1:
        raise ManifestError(path, "requests", "a positive integer (or bounds.max_requests) is required")
    arrival = doc.get("arrival") or {"kind": "constant"}
    if not isinstance(arrival, dict) or arrival.get("kind", "constant") != "constant":
        raise ManifestError(path, "arrival.kind", "the simulator replays only constant-rate arrival")
    rate = arrival.get("rate")
    if rate is not None and (not isinstance(rate, (int, float)) or rate <= 0):
        raise ManifestError(path, "arrival.rate", "a positive number (req/s)")
    if rate is not None and math.isinf(rate):
        rate = None
    sp = doc.get("shared_prefix") or {}
    share, tokens = sp.get("share", 0.0), sp.get("tokens", 0)
    if not isinstance(share, (int, float)) or not 0 <= share <= 1 or not isinstance(tokens, int) or tokens < 0:
        raise ManifestError(path, "shared_prefix", "share in [0, 1] and tokens >= 0")
    eng = doc.get("engine") or {}
    known = {f.name: f.type for f in fields(EngineSettings)}
    for k, v in eng.items():
        if k not in known:
            raise ManifestError(path, f"engine.{k}", f"unknown field (known: {', '.join(known)})")
        if isinstance(v, bool) != (k == "enable_prefix_caching") or not isinstance(v, (int, float)) or v < 0:
            raise ManifestError(path, f"engine.{k}", f"bad value {v!r}")
    engine = EngineSettings(**eng)
    if engine.num_blocks < 2 or engine.block_size < 1 or engine.max_num_seqs < 1 or engine.max_num_batched_tokens < 1:
        raise ManifestError(path, "engine", "num_blocks >= 2, block_size/max_num_seqs/max_num_batched_tokens >= 1")
    seed = doc.get("seed", 0)
    if not isinstance(seed, int):
        raise ManifestError(path, "seed", "an integer")
    return SimScenario(
        name=str(doc.get("name") or Path(path).stem), requests=n, rate=rate,
        prompt_tokens=_lengths(doc, "prompt_tokens", path), output_tokens=_lengths(doc, "output_tokens", path),
        shared_share=float(share), shared_tokens=tokens, seed=seed, engine=engine,
    )


def _read(path: str | Path) -> object:
    p = Path(path)
    try:
        return yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise ManifestError(p, "<file>", "no such file") from None
    except yaml.YAMLError as exc:
        raise ManifestError(p, "<yaml>", str(exc).splitlines()[0]) from None


def load(path: str | Path) -> SimScenario:
    return parse(_read(path), str(path))


def load_any(path: str | Path) -> tuple[SimScenario, list[SimRequestSpec] | None]:
    """A load-test scenario (loadtests/*.yaml: the requests `harness load` would send) or the simulator's own format."""
    from harness.blocks.from_load import from_load_scenario, is_load_scenario

    doc = _read(path)
    if is_load_scenario(doc):
        return from_load_scenario(path)
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
