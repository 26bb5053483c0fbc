"""vLLM 0.11.0 and llama.cpp on the same model, side by side in one run: ready time, conformance wall time, and one load
scenario alternated between the two engines (both stay up; only one is loaded at a time).

    .venv/bin/python benchmarks/engines_side_by_side.py [--rounds 3] [--scenario loadtests/concurrency.yaml]

Prints each figure and the ratios llama.cpp / vLLM of output tok/s and TTFT p50 (median over rounds). The machine is
shared and noisy: compare the ratios of one run, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness.conformance.expectations import default_expectation, load_expectations
from harness.conformance.runner import new_ctx, run_suite_sync
from harness.launch.session import launch
from harness.load.report import build_summary
from harness.load.runner import Target, run_scenario
from harness.load.scenario import load_scenario

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = {"vllm": REPO / "manifests/vllm-0.11.0-cpu.yaml", "llamacpp": REPO / "manifests/llamacpp-0c1e570-cpu.yaml"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scenario", default=str(REPO / "loadtests/concurrency.yaml"))
    args = ap.parse_args()
    scenario = load_scenario(args.scenario)
    figures: dict[str, dict] = {k: {"tok_s": [], "ttft_p50_ms": []} for k in MANIFESTS}
    with (
        tempfile.TemporaryDirectory() as tmp,
        launch(MANIFESTS["vllm"], quiet=True) as v,
        launch(MANIFESTS["llamacpp"], quiet=True) as lc,
    ):
        engines = {"vllm": v, "llamacpp": lc}
        for kind, eng in engines.items():
            figures[kind]["ready_s"] = eng.identity["ready_seconds"]
            m = eng.spec.manifest
            exp = load_expectations(default_expectation(m.engine.kind, m.engine.version))
            t0 = time.perf_counter()
            report = run_suite_sync(new_ctx(eng.base_url, exp, api_key=eng.api_key, model=eng.served_name, engine=eng))
            figures[kind]["conformance_s"] = round(time.perf_counter() - t0, 2)
            figures[kind]["conformance"] = report.counts()
            figures[kind]["not_passing"] = [(r.id, r.verdict, r.behaviour) for r in report.results
                                            if r.verdict in ("fail", "error")]  # fmt: skip
        for r in range(args.rounds):
            for kind in ("vllm", "llamacpp") if r % 2 == 0 else ("llamacpp", "vllm"):
                eng = engines[kind]
                out = Path(tmp) / f"{kind}-{r}"
                target = Target(eng.base_url, model=eng.served_name, api_key=eng.api_key, engine=kind)
                run_scenario(scenario, target, out, progress=False)
                agg = build_summary(out)["metrics"]
                tok_s = agg["tokens"]["output"] / agg["duration_s"] if agg.get("duration_s") else None
                ttft = agg["ttft_ms"]["p50"]
                figures[kind]["tok_s"].append(tok_s)
                figures[kind]["ttft_p50_ms"].append(ttft)
                print(f"round {r} {kind}: {tok_s} out tok/s, TTFT p50 {ttft} ms", flush=True)

    def med(xs: list) -> float:
        xs = [x for x in xs if isinstance(x, (int, float))]
        return statistics.median(xs) if xs else float("nan")

    print(json.dumps(figures, indent=2, default=str))
    v_tok, l_tok = med(figures["vllm"]["tok_s"]), med(figures["llamacpp"]["tok_s"])
    v_ttft, l_ttft = med(figures["vllm"]["ttft_p50_ms"]), med(figures["llamacpp"]["ttft_p50_ms"])
    print(f"output tok/s llama.cpp/vLLM = {l_tok / v_tok:.2f}   TTFT p50 llama.cpp/vLLM = {l_ttft / v_ttft:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
