"""`run_upgrade(OLD, NEW, DIR)`: each manifest loaded once, each engine launched once (old first), then compare,
judge, and write DIR/upgrade.json and DIR/upgrade.md (atomically; an existing report is not replaced without force).
Every refusal (same manifest twice, bad thresholds, an unusable DIR) comes before any engine starts, and so does the
argument check (harness.upgrade.arguments: the old server.args against the new release's own flags). When the new
manifest's own server.args are flags its release rejects, no engine is launched: the report says why (blocking)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from harness.conformance.expectations import default_expectation, load_expectations
from harness.errors import RefusedError
from harness.golden.diff import check_thresholds
from harness.golden.prompts import resolve_prompt_sets
from harness.manifest import Manifest, load_manifest
from harness.outputs import atomic_write_text, output_dir
from harness.progress import progress
from harness.upgrade.arguments import check_arguments
from harness.upgrade.collect import collect_side
from harness.upgrade.compare import compare_sides
from harness.upgrade.html import write_html
from harness.upgrade.judge import judge
from harness.upgrade.model import Report
from harness.upgrade.render import render_markdown

__all__ = ["run_upgrade", "REPORT_FORMAT"]

REPORT_FORMAT = "harness-upgrade/1"


def _not_launched(m: Manifest, why: str) -> dict[str, object]:
    return {
        "manifest": str(m.path),
        "name": m.name,
        "ok": False,
        "launched": False,
        "engine": {"kind": m.engine.kind, "version": m.engine.version},
        "error": f"not launched: {why}",
        "wall_seconds": 0.0,
    }


def run_upgrade(
    old: Manifest | str | Path,
    new: Manifest | str | Path,
    out: Path,
    *,
    prompts: list[str] | None = None,
    tolerance: float,
    margin: float,
    conformance: bool = True,
    force: bool = False,
    expect: str | None = None,
    say: Callable[[str], None] = print,
) -> Report:
    t0 = time.perf_counter()
    check_thresholds(tolerance, margin)
    old_m, new_m = (m if isinstance(m, Manifest) else load_manifest(m) for m in (old, new))
    if old_m.name == new_m.name:
        raise RefusedError(f"both manifests are named {old_m.name!r}; an upgrade compares two different manifests")
    sets = resolve_prompt_sets(prompts, model=old_m.model.source)  # default: the sets written for the old side's model
    out = Path(out)
    if (out / "upgrade.json").exists() and not force:
        raise RefusedError(f"{out}: an upgrade report is already there; pass --force to replace it")
    # a file as --out, a directory where a report file goes, a manifest as the report: OutputError before any launch
    output_dir(out, ["upgrade.json", "upgrade.md", "upgrade.html"], force=force, inputs=[old_m.path, new_m.path],
               what="--out")  # fmt: skip
    # An upgrade judges both sides by the old engine's expectations (what its clients rely on); an engine migration
    # (two kinds) judges each side by its own engine's file, side by side. Files are chosen as `conform` chooses them:
    # the exact version's, then its series'; no file is a refusal before any launch, never the reference.
    migration = old_m.engine.kind != new_m.engine.kind
    exp = expect or default_expectation(old_m.engine.kind, old_m.engine.version)
    exp_new = expect or (default_expectation(new_m.engine.kind, new_m.engine.version) if migration else exp)
    exp_path = load_expectations(exp).path or "(the OpenAI reference: --expect openai)"
    exp_new_path = load_expectations(exp_new).path or "(the OpenAI reference: --expect openai)"
    with progress("[arguments]", say=say) as stage:  # reading a release's flags may install it first
        arguments = check_arguments(old_m, new_m, say=stage.say)  # before any launch: a rejected flag is named
    sides = []
    for m, e in ((old_m, exp), (new_m, exp_new)):
        if arguments["launch_refused"]:
            say(f"[{m.name}] not launched: {arguments['launch_refused']}")
            sides.append(_not_launched(m, arguments["launch_refused"]))
            continue
        # minutes per side: install, launch, golden, metrics, conformance; each line collect_side says is the stage
        with progress(f"[{m.name}]", say=say) as stage:
            stage.say(f"[{m.name}] launching {m.engine.kind} {m.engine.version}")
            sides.append(collect_side(m, out, sets, expectations=e, conformance=conformance, say=stage.say))
        side = sides[-1]
        say(f"[{m.name}] done in {side['wall_seconds']} s" + (f": {side['error']}" if not side["ok"] else ""))
    old_side, new_side = sides
    new_side["arguments"] = arguments  # found before the launch; part of what the new side is judged by
    cmp = compare_sides(old_m, new_m, old_side, new_side, tolerance=tolerance, margin=margin)
    report = {
        "format": REPORT_FORMAT,
        "old": {k: v for k, v in old_side.items() if k != "metrics"},
        "new": {k: v for k, v in new_side.items() if k != "metrics"},
        "comparison": cmp,
        "verdict": judge(old_side, new_side, cmp),
        "settings": {
            "tolerance": tolerance,
            "margin": margin,
            "prompt_sets": [s.name for s in sets],
            "expectations": exp,
            "expectations_file": exp_path,
            "expectations_new": exp_new,
            "expectations_new_file": exp_new_path,
            "migration": migration,
        },
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_seconds": round(time.perf_counter() - t0, 1),
    }
    atomic_write_text(out / "upgrade.json", json.dumps(report, indent=2, ensure_ascii=False, default=str) + "\n")
    atomic_write_text(out / "upgrade.md", render_markdown(report))
    write_html(out, report)  # upgrade.html beside it, from the same document
    return report
