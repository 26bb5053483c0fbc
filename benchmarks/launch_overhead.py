"""Time to ready through `harness up` versus the bare engine command, alternated in one run (3 pairs by default).

    .venv/bin/python benchmarks/launch_overhead.py [--pairs 3]

Both start the same engine environment, model and arguments; "ready" means GET /health == 200 and the served name in
/v1/models for both. The harness figure includes everything `harness up` does before printing `ready:` (manifest,
model hash, environment verification, port check, identity check).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time

import httpx

from harness.envs import env_for
from harness.launch.base import LaunchSpec
from harness.launch.ports import choose_port
from harness.launch.subprocess_engine import engine_command, engine_environment
from harness.manifest import DEFAULT_MANIFEST, load_manifest
from harness.models import resolve_model


def wait_ready(url: str, served: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("engine exited")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                if served in [d["id"] for d in httpx.get(url + "/v1/models", timeout=2).json()["data"]]:
                    return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(url)


def bare(m, model_dir, tmp) -> float:
    port = choose_port("127.0.0.1", 0)
    spec = LaunchSpec(manifest=m, run_id="bench", run_dir=tmp, model_dir=model_dir, port=port, env_dir=env_for(m).path)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        engine_command(spec),
        env=engine_environment(spec),
        cwd=tmp,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(spec.base_url, m.model.served_name, proc)
        return time.monotonic() - t0
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def via_harness() -> float:
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "up"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    line = proc.stdout.readline()
    elapsed = time.monotonic() - t0
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    if not line.startswith("ready:"):
        raise RuntimeError("harness up failed")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    import tempfile
    from pathlib import Path

    m = load_manifest(DEFAULT_MANIFEST)
    model_dir = resolve_model(m)
    tmp = Path(tempfile.mkdtemp())
    rows = []
    for i in range(args.pairs):
        b = bare(m, model_dir, tmp)
        h = via_harness()
        rows.append((b, h))
        print(
            f"pair {i + 1}: bare {b:6.1f} s   harness up {h:6.1f} s   overhead {h - b:+5.1f} s ({(h / b - 1) * 100:+.1f}%)"
        )
    bm, hm = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
    print(f"median: bare {bm:.1f} s, harness up {hm:.1f} s, overhead {hm - bm:+.1f} s ({(hm / bm - 1) * 100:+.1f}%)")


if __name__ == "__main__":
    main()
