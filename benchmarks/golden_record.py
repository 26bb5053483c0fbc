"""Benchmark: golden record time per prompt set on the tiny model, and (optionally) the whole `harness upgrade` wall time.

    .venv/bin/python benchmarks/golden_record.py [--manifest M] [--repeat 3] [--upgrade NEW_MANIFEST] [--json OUT]

Launches MANIFEST once, records every prompt set `--repeat` times (fresh httpx client, sequential requests), and prints
the median / min seconds per set and per prompt. The first pass warms the engine (the first request after start-up is
much slower on vLLM 0.32.0); it is reported separately. With --upgrade, also times
`harness upgrade MANIFEST NEW --out <tmp>` end to end (both engines launched in turn, conformance included).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.golden.prompts import resolve_prompt_sets  # noqa: E402
from harness.golden.record import record_sets  # noqa: E402
from harness.launch.session import launch  # noqa: E402
from harness.manifest import DEFAULT_MANIFEST, load_manifest  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--manifest", default=str(DEFAULT_MANIFEST))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--upgrade", metavar="NEW_MANIFEST")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    m = load_manifest(a.manifest)
    sets = resolve_prompt_sets()
    out: dict = {"manifest": m.name, "repeat": a.repeat, "sets": {}}
    t0 = time.perf_counter()
    with launch(m, quiet=True) as eng:
        out["ready_s"] = round(time.perf_counter() - t0, 1)
        runs: dict[str, list[float]] = {s.name: [] for s in sets}
        first: dict[str, float] = {}
        for i in range(a.repeat + 1):
            _, timing = record_sets(eng.base_url, m.model.served_name, sets, api_key=eng.spec.api_key())
            for k, v in timing.items():
                (runs[k].append(v) if i else first.__setitem__(k, v))
    for s in sets:
        t = runs[s.name]
        out["sets"][s.name] = {
            "prompts": len(s.prompts),
            "first_pass_s": first[s.name],
            "median_s": round(statistics.median(t), 3),
            "min_s": round(min(t), 3),
            "median_per_prompt_s": round(statistics.median(t) / len(s.prompts), 4),
        }
        print(
            f"{m.name} {s.name}: {len(s.prompts)} prompts, median {statistics.median(t):.2f} s "
            f"({statistics.median(t) / len(s.prompts) * 1000:.0f} ms/prompt), first pass {first[s.name]:.2f} s"
        )
    if a.upgrade:
        with tempfile.TemporaryDirectory() as td:
            t = time.perf_counter()
            rc = subprocess.run(
                [sys.executable, "-m", "harness", "upgrade", a.manifest, a.upgrade, "--out", td], cwd=ROOT
            ).returncode
            out["upgrade"] = {"wall_s": round(time.perf_counter() - t, 1), "exit": rc}
            print(f"harness upgrade {m.name} -> {Path(a.upgrade).stem}: {out['upgrade']['wall_s']} s (exit {rc})")
    if a.json:
        a.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
