"""`harness run` golden stage: record the prompt sets against the running engine and diff with the committed recording.

The baseline is `golden/<engine>-<version>/<model-hash-12>/` for the run's manifest. The fresh recording goes to
run_dir/golden/recording/ and the diff to run_dir/golden/diff.json. No committed baseline -> a failed stage that says how
to make one (`harness golden record MANIFEST`), never a silent pass. The committed baseline may come from another
machine: the stage passes on the diff's own verdict and its summary says whether the hardware differs.
"""

from __future__ import annotations

import json
import time

from harness.outputs import atomic_write_text
from harness.stages import StageContext, StageResult

__all__ = ["run_stage"]


def run_stage(ctx: StageContext) -> StageResult:
    from harness.errors import HarnessError
    from harness.golden.diff import diff_recordings, render_text
    from harness.golden.prompts import resolve_prompt_sets
    from harness.golden.record import record_with_engine
    from harness.golden.store import default_recording_dir, load_recording

    out = ctx.run_dir / "golden"
    baseline_dir = default_recording_dir(ctx.manifest)
    if not (baseline_dir / "meta.json").is_file():
        return StageResult(
            "golden",
            False,
            f"no committed golden recording at {baseline_dir} "
            f"(make one with `harness golden record {ctx.manifest.path}`)",
            {"baseline": str(baseline_dir)},
        )
    t0 = time.perf_counter()
    try:
        baseline = load_recording(baseline_dir)
        wanted = sorted(baseline.sets)
        sets = [s for s in resolve_prompt_sets(model=ctx.manifest.model.source) if s.name in wanted]
        rec_dir = out / "recording"
        record_with_engine(ctx.engine, ctx.manifest, sets, rec_dir, force=True)
        d = diff_recordings(baseline, load_recording(rec_dir))
    except HarnessError as exc:
        return StageResult(
            "golden",
            False,
            f"golden check could not run: {exc.one_line()}",
            {"baseline": str(baseline_dir), "error": str(exc)},
        )
    atomic_write_text(out / "diff.json", json.dumps(d.to_json(), indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(out / "diff.txt", render_text(d) + "\n")
    counts = d.counts()
    hw = {
        "same": "same hardware",
        "different": "different hardware: " + ", ".join(d.hardware["differs"]),
        "unknown": "baseline hardware unknown",
    }[d.hardware["status"]]
    summary = (
        f"{len(d.prompts)} prompts vs {baseline_dir.relative_to(baseline_dir.parents[2])}: "
        + ", ".join(f"{k} {v}" for k, v in counts.items())
        + f" ({hw})"
    )
    return StageResult(
        "golden",
        d.ok,
        summary,
        {
            "baseline": str(baseline_dir),
            "recording": str(rec_dir),
            "counts": counts,
            "seconds": round(time.perf_counter() - t0, 2),
            "diff": str(out / "diff.json"),
            "hardware": d.hardware,
        },
    )
