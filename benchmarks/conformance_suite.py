"""Benchmark: the whole conformance suite against the tiny model, measured from engine-ready to report.

    .venv/bin/python benchmarks/conformance_suite.py [MANIFEST] [--url URL --expect NAME] [--out DIR]

Prints the suite time (ready -> report written), the verdict counts and the slowest five cases. Target: < 60 s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.conformance.expectations import load_expectations  # noqa: E402
from harness.conformance.report import write_outputs  # noqa: E402
from harness.conformance.runner import new_ctx, run_suite_sync  # noqa: E402
from harness.net import loopback_url  # noqa: E402


def measure(ctx, out: Path) -> dict:
    t0 = time.monotonic()
    rep = run_suite_sync(ctx)
    doc = rep.to_dict()
    write_outputs(doc, out)
    total = time.monotonic() - t0
    slow = sorted(doc["cases"], key=lambda r: -r["duration_s"])[:5]
    return {
        "ready_to_report_s": round(total, 2),
        "cases": len(doc["cases"]),
        "counts": doc["counts"],
        "slowest": [(r["id"], r["duration_s"]) for r in slow],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("manifest", nargs="?", default="manifests/vllm-0.11.0-cpu.yaml")
    ap.add_argument("--url")
    ap.add_argument("--expect", default="vllm-0.11")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = Path(a.out or tempfile.mkdtemp(prefix="conformance-bench-"))
    if a.url:
        res = measure(
            new_ctx(loopback_url(a.url), load_expectations(a.expect)), out
        )  # loopback only, before any socket
    else:
        from harness.launch.session import launch
        from harness.manifest import load_manifest

        m = load_manifest(a.manifest)
        with launch(m) as eng:
            ctx = new_ctx(
                eng.base_url, load_expectations(a.expect), api_key=eng.api_key, model=eng.served_name, engine=eng
            )
            res = measure(ctx, out)
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
