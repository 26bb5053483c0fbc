"""`harness matrix --executor ray` on a real Ray cluster: a head and further nodes on this machine, every one bound to
127.0.0.1 (Ray's own multi-node test cluster, ray.cluster_utils.Cluster, no dashboard), started and stopped here.

Real cells: 0.11.0 and 0.32.0 (their environments are the pinned manifests', cached: verified, not installed) run as
Ray tasks pinned to two nodes by a custom resource each, and equal the committed cells of a local run (key, metric
surface, wire keys, flags, cases; golden with no regression). A node killed while its engine starts: that cell is a
failed cell naming Ray's reason, the other cell ran, and no process of the killed node's engine survives. The driver
interrupted: nothing the cell started is left on any node. The driver is `python -m harness` in a subprocess, as a
user runs it. Each engine starts once per test; the two cells of a test run side by side.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.procs import pid_alive, process_group
from tests.conftest import unavailable
from tests.matrix.helpers import REPO, assert_cell_equals_committed

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.ray]

LOCKS = REPO / "manifests" / "locks"
DRIVER_BOUND_S = 2400  # two cells side by side on two shared cores, each a few minutes; a hang fails the test


def _spec(tmp: Path, placement: dict[str, str], name: str = "spec.yaml") -> Path:
    """The CI spec's two pinned releases (same template, locks and settings, so the same keys as the committed
    cells), each pinned to a node by the custom resource named in `placement`."""
    rows = {
        "0.11.0": f"lock: {LOCKS / 'vllm-0.11.0-cpu.txt'}, startup_timeout_s: 300",
        "0.32.0": f"lock: {LOCKS / 'vllm-0.32.0-cpu.txt'}, platform_plugin: false, startup_timeout_s: 420",
    }
    releases = "\n".join(
        f"  - {{version: {v}, {rows[v]}, resources: {{custom: {{{res}: 1}}}}}}" for v, res in placement.items()
    )
    text = (
        "format: 1\nname: vllm-cpu-ray\n"
        f"template: {REPO / 'matrix' / 'vllm-cpu.template.yaml'}\n"
        'manifest_name: "vllm-{version}-cpu"\nrequirement: "vllm-cpu=={version}"\n'
        'baseline: 0.11.0\nexpectations: vllm-0.11\npython: "3.11"\npython_platform: x86_64-manylinux_2_28\n'
        "defaults:\n  platform_plugin: true\n  startup_timeout_s: 600\n"
        "  no_emit: [torchvision, torchaudio, torchcodec]\n"
        f"releases:\n{releases}\n"
    )
    p = tmp / name
    p.write_text(text)
    return p


class _Cluster:
    """The session's Ray cluster: the head (resource node_a) and nodes added by name."""

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(
            initialize_head=True,
            connect=False,
            head_node_args={
                "num_cpus": 1,
                "include_dashboard": False,
                "node_ip_address": "127.0.0.1",
                "resources": {"node_a": 1},
            },
        )
        self.nodes = {"node_a": self.cluster.head_node}

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def add(self, name: str):
        self.nodes[name] = self.cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1", resources={name: 1})
        self.cluster.wait_for_nodes()
        return self.nodes[name]

    def raylet_pid(self, name: str) -> int:
        return int(self.nodes[name].all_processes["raylet"][0].process.pid)

    def pids(self) -> set[int]:
        return {
            int(info.process.pid)
            for node in self.nodes.values()
            for infos in node.all_processes.values()
            for info in infos
            if info.process is not None
        }


@pytest.fixture(scope="session")
def ray_cluster():
    # read by Ray when imported, in this process and the cluster's: every node takes 127.0.0.1 as its address
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    try:
        import ray.cluster_utils  # noqa: F401
    except ImportError:
        unavailable("ray is not installed (pip install 'harness[ray]')")
    c = _Cluster()
    c.add("node_b")
    pids = c.pids()
    try:
        yield c
    finally:
        c.cluster.shutdown()
        deadline = time.monotonic() + 60
        while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not [p for p in pids if pid_alive(p)], "Ray processes of the test cluster left running"


def _driver(spec: Path, out: Path, address: str, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "harness", "matrix", str(spec), "--out", str(out), "--executor", "ray",
           "--ray-address", address, *extra]  # fmt: skip
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=DRIVER_BOUND_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the driver did not finish within {DRIVER_BOUND_S} s: {err[-3000:]}")
    return proc.returncode, out, err


def _ancestors(pid: int) -> set[int]:
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            break
        pid = int(stat[1])
    return seen


def _engines_under(raylet: int) -> list[dict]:
    """Live registry entries of engines started by a harness process that descends from this raylet (a worker)."""
    from harness.launch import registry

    return [e for e in registry.entries() if registry.alive(e) and raylet in _ancestors(int(e.get("harness_pid") or 0))]


def _wait_for_engine(raylet: int, proc: subprocess.Popen, bound_s: float = 900) -> dict:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        found = _engines_under(raylet)
        if found:
            return found[0]
        if proc.poll() is not None:
            pytest.fail(f"the driver ended before the cell's engine started: {proc.stderr.read()[-3000:]}")
        time.sleep(1)
    pytest.fail(f"no engine started on the node within {bound_s} s")


def _wait_gone(pids: set[int], bound_s: float = 120) -> set[int]:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.5)
    return {p for p in pids if pid_alive(p)}


def _cell(out: Path, v: str) -> dict:
    return json.loads((out / "cells" / f"{v}.json").read_text())


def _scratches() -> set[Path]:
    from harness.settings import harness_home

    return set((harness_home() / "matrix-work").glob("cell-*"))


def test_two_real_cells_on_two_nodes_equal_a_local_run(ray_cluster, tmp_path):
    spec = _spec(tmp_path, {"0.11.0": "node_a", "0.32.0": "node_b"})
    out = tmp_path / "m"
    before = _scratches()
    rc, stdout, err = _finish(_driver(spec, out, ray_cluster.address))
    assert rc == 0, err[-3000:] + stdout[-2000:]
    assert "2 cell(s): 2 ran, 0 reused" in stdout
    node_ids = {name: node.node_id for name, node in ray_cluster.nodes.items()}
    ran_on = {v: _cell(out, v)["ran_on"] for v in ("0.11.0", "0.32.0")}
    assert ran_on["0.11.0"] == {"executor": "ray", "node_id": node_ids["node_a"], "node_ip": "127.0.0.1"}
    assert ran_on["0.32.0"] == {"executor": "ray", "node_id": node_ids["node_b"], "node_ip": "127.0.0.1"}
    for v in ("0.11.0", "0.32.0"):
        assert_cell_equals_committed(out, v)
    # the driver wrote DIR as a local run does: the golden diff against the baseline, the pages
    assert (
        _cell(out, "0.32.0")["golden_diff"]["baseline"] == "0.11.0"
        and "refused" not in _cell(out, "0.32.0")["golden_diff"]
    )
    assert json.loads((out / "matrix.json").read_text())["releases"]
    assert _scratches() <= before, "a node left its scratch directory"


def test_a_node_killed_mid_cell_fails_that_cell_only_and_leaves_no_engine(ray_cluster, tmp_path):
    ray_cluster.add("node_c")
    spec = _spec(tmp_path, {"0.11.0": "node_a", "0.32.0": "node_c"})
    out = tmp_path / "m"
    proc = _driver(spec, out, ray_cluster.address, "--ray-retries", "0")
    engine = _wait_for_engine(ray_cluster.raylet_pid("node_c"), proc)
    group = process_group(int(engine["pid"])) | {int(engine["pid"]), int(engine["harness_pid"])}
    ray_cluster.cluster.remove_node(ray_cluster.nodes.pop("node_c"), allow_graceful=False)
    assert not _wait_gone(group), "a process of the killed node's engine survived"
    rc, stdout, err = _finish(proc)
    assert rc == 1, err[-3000:]  # one failed cell
    killed = _cell(out, "0.32.0")
    assert killed["status"] == "failed" and killed["stage"] == "executor", killed
    assert killed["reason"].startswith("ray: "), killed["reason"]
    assert_cell_equals_committed(out, "0.11.0")
    assert "0.32.0: failed at executor: ray: " in stdout


def test_the_driver_interrupted_leaves_nothing_running_on_any_node(ray_cluster, tmp_path):
    spec = _spec(tmp_path, {"0.11.0": "node_b"})
    out = tmp_path / "m"
    proc = _driver(spec, out, ray_cluster.address)
    engine = _wait_for_engine(ray_cluster.raylet_pid("node_b"), proc)
    group = process_group(int(engine["pid"])) | {int(engine["pid"])}
    proc.send_signal(signal.SIGINT)
    rc, _out, err = _finish(proc)
    assert rc == 130, err[-3000:]
    assert not _wait_gone(group), "the cell's engine survived the driver"
    assert not _wait_gone({int(engine["harness_pid"])}), "the Ray worker that ran the cell survived the driver"
    for name in ray_cluster.nodes:
        assert not _engines_under(ray_cluster.raylet_pid(name)), name
    assert not (out / "cells" / "0.11.0.json").exists()  # an interrupted cell is no result
