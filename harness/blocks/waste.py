"""Fragmentation arithmetic: paged allocation vs a max-length reservation.

Three different "utilisation" numbers are easy to confuse, so every figure names which one it is:

* ``ratio_of_expectations`` = E[T] / E[alloc] over the exact length distribution;
* ``sample_aggregate``      = sum(T_i) / sum(alloc_i) over one concrete sample of requests;
* ``mean_of_ratios``        = E[T / alloc] (average of per-request utilisations).

For an exhaustive sample (every length once, as in the seed's loop over 200..2000) the sample aggregate
equals the ratio of expectations of the uniform distribution; a random sample differs from both.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from harness.blocks.limits import MAX_RESERVES, MAX_SAMPLE, MAX_WASTE_LENGTH

__all__ = ["Utilisation", "WasteReport", "waste_report", "uniform_lengths", "sample_uniform", "slots"]


def slots(length: int, block_size: int) -> int:
    """Slots a request of ``length`` tokens occupies: b * ceil(T / b)."""
    return -(-length // block_size) * block_size


@dataclass(frozen=True)
class Utilisation:
    ratio_of_expectations: float
    sample_aggregate: float
    mean_of_ratios: float


@dataclass(frozen=True)
class WasteReport:
    min_len: int
    max_len: int
    block_size: int
    requests: int  # population size (exact distribution) or sample size
    mean_length: float
    mean_allocated: float
    mean_waste: float
    max_waste: int
    paged: Utilisation
    reserves: dict[int, Utilisation] = field(default_factory=dict)
    sample_size: int = 0
    sample_seed: int | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["reserves"] = {str(k): asdict(v) for k, v in self.reserves.items()}
        return d


def uniform_lengths(lo: int, hi: int) -> list[int]:
    """The uniform distribution over the integers lo..hi, as its exhaustive population."""
    return list(range(lo, hi + 1))


def sample_uniform(lo: int, hi: int, n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(lo, hi) for _ in range(n)]


def _util(population: Sequence[int], sample: Sequence[int], alloc) -> Utilisation:
    pop_used = sum(population)
    pop_alloc = sum(alloc(t) for t in population)
    s_used = sum(sample)
    s_alloc = sum(alloc(t) for t in sample)
    return Utilisation(
        ratio_of_expectations=pop_used / pop_alloc,
        sample_aggregate=s_used / s_alloc,
        mean_of_ratios=sum(t / alloc(t) for t in population) / len(population),
    )


def waste_report(
    lo: int,
    hi: int,
    block_size: int,
    reserves: Sequence[int] = (),
    *,
    sample_size: int = 0,
    seed: int = 0,
) -> WasteReport:
    """Exact figures for lengths uniform over lo..hi. ``sample_size`` > 0 draws that many lengths (seeded)
    for the sample aggregate; 0 uses the exhaustive population (so it equals the ratio of expectations)."""
    if not (1 <= lo <= hi) or block_size < 1:
        raise ValueError("need 1 <= min <= max and block size >= 1")
    # every length lo..hi is enumerated, and every sampled one: bound both so the report stays seconds, not hours
    if hi > MAX_WASTE_LENGTH:
        raise ValueError(f"--max {hi} is over the limit of {MAX_WASTE_LENGTH} (every length min..max is enumerated)")
    if not 0 <= sample_size <= MAX_SAMPLE:
        raise ValueError(f"--sample must be between 0 and {MAX_SAMPLE}, got {sample_size}")
    if len(reserves) > MAX_RESERVES:
        raise ValueError(f"at most {MAX_RESERVES} --reserve values, got {len(reserves)}")
    for r in reserves:
        if r < hi:
            raise ValueError(f"reservation {r} is shorter than the longest request {hi}")
    population = uniform_lengths(lo, hi)
    sample = sample_uniform(lo, hi, sample_size, seed) if sample_size else population
    n = len(population)
    used = sum(population)
    allocated = sum(slots(t, block_size) for t in population)
    return WasteReport(
        min_len=lo,
        max_len=hi,
        block_size=block_size,
        requests=n,
        mean_length=used / n,
        mean_allocated=allocated / n,
        mean_waste=(allocated - used) / n,
        max_waste=max(slots(t, block_size) - t for t in population),
        paged=_util(population, sample, lambda t: slots(t, block_size)),
        reserves={r: _util(population, sample, lambda t, r=r: r) for r in reserves},
        sample_size=sample_size,
        sample_seed=seed if sample_size else None,
    )


def render(rep: WasteReport) -> str:
    lines = [
        f"lengths uniform over {rep.min_len}..{rep.max_len} ({rep.requests} values), block size {rep.block_size}",
        f"mean length {rep.mean_length:g}  mean allocated {rep.mean_allocated:g}  "
        f"mean waste {rep.mean_waste:g} slots (max {rep.max_waste})",
        "utilisation (used / allocated):            ratio of expectations   sample aggregate   mean of per-request ratios",
    ]
    sample = f"n={rep.sample_size}, seed={rep.sample_seed}" if rep.sample_size else "exhaustive"

    def row(label, u):
        return (
            f"  {label:<40} {u.ratio_of_expectations:>10.4%}        {u.sample_aggregate:>10.4%}"
            f"         {u.mean_of_ratios:>10.4%}"
        )

    lines.append(row("paged", rep.paged))
    for r, u in rep.reserves.items():
        lines.append(row(f"reservation of {r} slots", u))
    lines.append(f"(sample aggregate over: {sample})")
    return "\n".join(lines)


__all__.append("render")
