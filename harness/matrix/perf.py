"""The performance stage of a matrix cell, and the noise-band rule its rows and `bisect --perf` use.

A cell's engine, once its other stages are done, takes a fixed small load (PERF_SCENARIO: 8 chat requests of 32
prompt letters, closed loop of 2, exactly 32 output tokens by ignore_eos) in PERF_ROUNDS rounds with the load
generator (harness.load). Per round: output tokens/s, TTFT p50 and p99, ITL p50. A figure is the median of its rounds,
and the spread between the rounds (low..high) is the cell's noise band for it. The time to ready (one launch, one
sample) is a figure too, with a band of its single value.

Two cells differ in a figure only when each one's median lies outside the other's band and the medians are more
than `threshold_pct` apart (`differs`): three rounds on a shared machine understate the noise, so a change must also
be large to be called. The cell shape (kept exactly; the page draws it):
  cell["perf"] = {"scenario": {...}, "ready_s": float, "rounds": [{FIGURE: float, ...}, ...],
                  "figures": {NAME: {"median", "low", "high"}}}
plus "host" (CPUs, 1-minute load average before and after the rounds, and how long the load generator waited for a
CPU over all rounds: a figure measured by a client that was not scheduled says more of the machine than of the
release) and "error" when a round failed. Each round keeps its own `client_cpu_wait_s` beside its figures.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "PERF_SCENARIO",
    "PERF_ROUNDS",
    "ROUND_FIGURES",
    "FIGURES",
    "DEFAULT_THRESHOLD_PCT",
    "scenario_doc",
    "figures_of",
    "differs",
    "run_perf",
]

PERF_ROUNDS = 3
DEFAULT_THRESHOLD_PCT = 10.0
# The scenario every cell runs, whatever the release: a change here is a change of every cell's config hash.
PERF_SCENARIO: dict[str, Any] = {
    "name": "matrix-perf",
    "description": "the matrix cell's fixed load: 8 chat requests, closed loop of 2, exactly 32 output tokens",
    "endpoint": "chat",
    "prompt_unit": "char",  # the reference tiny model's tokenizer is byte-level: one letter, one token
    "ignore_eos": True,
    "seed": 0,
    "bounds": {"max_requests": 8, "max_duration_s": 120},
    "arrival": {"kind": "concurrency", "concurrency": 2},
    "prompt_tokens": {"kind": "fixed", "value": 32},
    "output_tokens": {"kind": "fixed", "value": 32},
    "warmup": {"requests": 1},
    "request_timeout_s": 60,
    "scrape_interval_s": None,  # no /metrics polling during the measurement
    "abort": {"max_consecutive_failures": 3, "min_requests": 4, "max_error_rate": 0.5},
}
# (figure name, where in the load summary's metrics, unit is in the name)
ROUND_FIGURES: dict[str, tuple[str, str]] = {
    "output_tokens_per_s": ("throughput", "output_tokens_per_s"),
    "ttft_p50_ms": ("ttft_ms", "p50"),
    "ttft_p99_ms": ("ttft_ms", "p99"),
    "itl_p50_ms": ("itl_ms", "p50"),
}
FIGURES = ("ready_s", *ROUND_FIGURES)


def scenario_doc() -> dict[str, Any]:
    """What a cell's perf stage is: the scenario and the number of rounds (in the cell, and in its config hash)."""
    return {**PERF_SCENARIO, "rounds": PERF_ROUNDS}


def figures_of(rounds: list[dict[str, Any]], ready_s: float | None) -> dict[str, dict[str, float]]:
    """{figure: {"median", "low", "high"}} over the rounds that measured it; ready_s is its own band."""
    out: dict[str, dict[str, float]] = {}
    if isinstance(ready_s, (int, float)):
        out["ready_s"] = {"median": float(ready_s), "low": float(ready_s), "high": float(ready_s)}
    for name in ROUND_FIGURES:
        values = [float(r[name]) for r in rounds if isinstance(r.get(name), (int, float))]
        if values:
            out[name] = {"median": statistics.median(values), "low": min(values), "high": max(values)}
    return out


def _band(value: Any) -> tuple[float, float, float] | None:
    if not isinstance(value, dict):
        return None
    try:
        m, lo, hi = (float(value[k]) for k in ("median", "low", "high"))
    except (KeyError, TypeError, ValueError):
        return None
    return m, min(lo, m), max(hi, m)


def differs(a: Any, b: Any, threshold_pct: float = DEFAULT_THRESHOLD_PCT) -> bool:
    """True when b's median lies outside a's band, a's outside b's, and the medians are more than threshold_pct
    (of a's median) apart. Anything that is not a band never differs (it is not an observation)."""
    ba, bb = _band(a), _band(b)
    if ba is None or bb is None:
        return False
    (ma, la, ha), (mb, lb, hb) = ba, bb
    outside_both = not (la <= mb <= ha) and not (lb <= ma <= hb)
    apart = abs(mb - ma) > abs(ma) * threshold_pct / 100.0
    return outside_both and apart


def _round_figures(summary: dict[str, Any]) -> dict[str, float | None]:
    metrics = summary.get("metrics") or {}
    out: dict[str, float | None] = {}
    for name, (group, key) in ROUND_FIGURES.items():
        value = (metrics.get(group) or {}).get(key)
        out[name] = round(float(value), 3) if isinstance(value, (int, float)) else None
    return out


def _client_wait(summary: dict[str, Any]) -> dict[str, float]:
    """{"client_cpu_wait_s": s} of a round where the kernel counted it (harness.cpuwait), else nothing."""
    wait = (summary.get("client") or {}).get("client_cpu_wait_s")
    return {"client_cpu_wait_s": round(float(wait), 3)} if isinstance(wait, (int, float)) else {}


def run_perf(engine: Any, out: Path, *, ready_s: float | None, say: Callable[[str], None] = print) -> dict[str, Any]:
    """The perf stage against a running engine: PERF_ROUNDS rounds of the scenario, each into out/round-N (the
    cell's own working directory, replaced each run). Never raises for the engine: a round that fails (a request
    not answered, the run aborted) ends the stage with "error", and the rounds before it are kept."""
    from harness.errors import HarnessError
    from harness.load.report import build_summary
    from harness.load.runner import Target, run_scenario
    from harness.load.scenario import parse_scenario

    sc = parse_scenario({k: v for k, v in PERF_SCENARIO.items()}, "<matrix perf scenario>")
    doc: dict[str, Any] = {"scenario": scenario_doc(), "ready_s": ready_s, "rounds": [], "figures": {}}
    # the band is the spread within this cell; the host's load says how far another cell's figures compare
    doc["host"] = {"cpus": os.cpu_count(), "load_1m_before": _load_1m()}
    for n in range(1, PERF_ROUNDS + 1):
        say(f"[perf] round {n} of {PERF_ROUNDS}")
        target = Target(
            engine.base_url,
            model=getattr(engine, "served_name", None) or None,
            api_key=getattr(engine, "api_key", None),
            engine=engine.spec.manifest.engine.kind,
            engine_source="manifest",
        )
        try:
            run_scenario(sc, target, Path(out) / f"round-{n}", progress=False, force=True)
            summary = build_summary(Path(out) / f"round-{n}")
        except Exception as exc:  # noqa: BLE001 - a load that fails is the stage's finding, never the cell's crash
            msg = exc.one_line() if isinstance(exc, HarnessError) else f"{type(exc).__name__}: {str(exc)[:300]}"
            doc["error"] = f"round {n}: {msg}"
            break
        requests = (summary.get("metrics") or {}).get("requests") or {}
        if summary.get("stop_reason") != "max_requests" or requests.get("ok") != requests.get("total"):
            doc["error"] = (
                f"round {n}: {requests.get('ok')} of {requests.get('total')} requests ok, "
                f"stopped by {summary.get('stop_reason')}"
            )
            break
        doc["rounds"].append({**_round_figures(summary), **_client_wait(summary)})
    doc["host"]["load_1m_after"] = _load_1m()
    waits = [r["client_cpu_wait_s"] for r in doc["rounds"] if isinstance(r.get("client_cpu_wait_s"), (int, float))]
    if waits:
        doc["host"]["client_cpu_wait_s"] = round(sum(waits), 3)
    doc["figures"] = figures_of(doc["rounds"], ready_s)
    return doc


def _load_1m() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None
