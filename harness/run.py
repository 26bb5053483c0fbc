"""`harness run`: the main job. Verify pins, launch, verify identity, run each stage, write run.json, stop.

Stages are modules with run_stage(StageContext) -> StageResult (see harness.stages); their order is fixed here.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness import __version__
from harness.errors import OutputError, UsageError
from harness.launch.base import new_run_id
from harness.launch.session import launch, reports_dir, runtime_pin
from harness.manifest import load_manifest
from harness.outputs import atomic_write_text, output_dir
from harness.progress import progress
from harness.shown import shown
from harness.stages import StageContext, StageResult

__all__ = ["run_main", "STAGES"]

STAGES = (
    ("conformance", "harness.conformance.stage"),
    ("golden", "harness.golden.stage"),
    ("load", "harness.load.stage"),
)
# what a run leaves in its directory: an earlier run's, in --out, is replaced only with --force
RUN_FILES = ("run.json", "engine.log")
RUN_DIRS = tuple(name for name, _ in STAGES)


def _shown_summary(result: StageResult) -> str:
    """A stage's summary for the rich console: it may quote the engine (an abort reason, an error body), so its
    controls are escaped and its brackets are text, not markup."""
    return escape(shown(result.summary))


def _run_stage(name: str, module: str, ctx: StageContext) -> StageResult:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return StageResult(name, True, "not available in this build", {"skipped": True})
    t0 = time.monotonic()
    result = mod.run_stage(ctx)
    result.data.setdefault("seconds", round(time.monotonic() - t0, 1))
    return result


def check_run_dir(out: str | Path, *, force: bool, inputs: tuple[Path | None, ...] = ()) -> Path:
    """Before the install and launch: --out may take this run. An earlier run there (run.json, engine.log or a
    stage's directory) is replaced only with --force; a stage directory that is a symbolic link never (its files
    would land wherever it points: another run); an input of the run (the manifest) is never written over."""
    d = Path(out)
    for name in RUN_DIRS:
        p = d / name
        if p.is_symlink():
            raise OutputError(f"--out {d}: {name} is a symbolic link; refusing to write through it")
        if p.exists() and not p.is_dir():
            raise OutputError(f"--out {d}: {name} exists and is not a directory; refusing to replace it")
    earlier = [n for n in RUN_FILES if (d / n).exists() or (d / n).is_symlink()]
    earlier += [f"{n}/" for n in RUN_DIRS if (d / n).is_dir()]
    if earlier and not force:
        raise OutputError(f"--out {d}: already holds an earlier run ({', '.join(earlier)}); pass --force to replace"
                          " it, or choose another directory")  # fmt: skip
    return output_dir(d, RUN_FILES, force=force, inputs=inputs)


def run_main(manifest_path: str, *, out: str | None = None, skip: set[str] = frozenset(), force: bool = False) -> int:
    console = Console(stderr=True)
    if force and not out:
        raise UsageError("--force replaces an earlier run in --out DIR; without --out each run has a directory of its"
                         " own (reports/<run-id>)")  # fmt: skip
    manifest = load_manifest(manifest_path)
    if "conformance" not in skip:
        from harness.conformance.expectations import default_expectation

        # a missing expectation file is refused before the (slow) launch, not after it; `run` has no --expect, so
        # the hint names what this command takes
        try:
            default_expectation(manifest.engine.kind, manifest.engine.version)
        except UsageError as exc:
            text = str(exc)
            hint = "pass --expect openai"
            raise UsageError(
                text.replace(hint, "run with --skip conformance (or `harness conform MANIFEST --expect openai`)")
            ) from None
    run_id = new_run_id()
    # checked before the install and launch (minutes): an earlier run in --out is not learnt of after them
    run_dir = check_run_dir(out, force=force, inputs=(manifest.path,)) if out else reports_dir() / run_id
    record: dict = {
        "run_id": run_id,
        "harness_version": __version__,
        "manifest": str(manifest.path),
        "manifest_sha256": manifest.file_sha256(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "stages": {},
    }
    results: list[StageResult] = []
    with launch(manifest, run_dir=run_dir, run_id=run_id) as engine:
        identity = engine.identity
        record["identity"] = identity
        pin = runtime_pin(identity)
        print(
            f"identity: {identity['engine']} {identity['version']} | model sha256 {identity['model_hash']} | {pin}",
            flush=True,
        )
        ctx = StageContext(engine=engine, manifest=manifest, run_dir=run_dir, identity=identity, force=force)
        for name, module in STAGES:
            if name in skip:
                results.append(StageResult(name, True, "skipped (--skip)", {"skipped": True}))
                continue
            console.print(f"[bold]stage {name}[/bold] ...")
            with progress(f"stage {name}"):  # a minute or more: its elapsed time is shown meanwhile
                res = _run_stage(name, module, ctx)
            results.append(res)
            console.print(f"  {name}: {'ok' if res.ok else 'FAILED'}: {_shown_summary(res)}")
            if engine.exit_status() is not None:
                results.append(StageResult("engine", False, f"engine exited ({engine.exit_status()}) during {name}"))
                break
    for r in results:
        record["stages"][r.name] = {"ok": r.ok, "summary": r.summary, **r.data}
    ok = all(r.ok for r in results)
    record["ok"] = ok
    record["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    atomic_write_text(run_dir / "run.json", json.dumps(record, indent=2, default=str) + "\n")
    table = Table(title=f"harness run {run_id}")
    table.add_column("stage")
    table.add_column("result")
    table.add_column("summary")
    for r in results:
        table.add_row(r.name, "[green]ok[/green]" if r.ok else "[red]FAILED[/red]", _shown_summary(r))
    console.print(table)
    print(f"{'ok' if ok else 'FAILED'}: report in {run_dir}/run.json", flush=True)
    sys.stdout.flush()
    return 0 if ok else 1
