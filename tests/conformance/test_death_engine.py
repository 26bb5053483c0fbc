"""The engine-death fault case against the real engines, each on a launch of its own (the case kills it: never the
shared session engine). vLLM runs must hold /tmp/harness-vllm.lock (`flock /tmp/harness-vllm.lock pytest ...`).

Each test: the case ends in bounded time and passes under the engine's expectation file (the death is detected: the
streams end, /health goes down), the process it killed is the one the profile names, and after the launcher's stop()
no process of the engine's group is left and nothing listens on its port."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from harness.conformance.expectations import default_expectation, load_expectations
from harness.conformance.runner import new_ctx, run_suite_sync
from harness.manifest import DEFAULT_MANIFEST, load_manifest
from harness.procs import pid_alive, process_group
from harness.settings import REPO_ROOT
from tests.conftest import unavailable

pytestmark = pytest.mark.engine

LLAMACPP_MANIFEST = REPO_ROOT / "manifests" / "llamacpp-0c1e570-cpu.yaml"


def _launch(manifest: Path, run_dir: Path):
    from harness.launch.session import prepare, start_verified

    m = load_manifest(manifest)
    try:
        engine = prepare(m, run_dir=run_dir, quiet=True)
        start_verified(engine, quiet=True)
    except Exception as exc:  # noqa: BLE001 - the reason the engine is unavailable
        unavailable(f"engine could not be started: {type(exc).__name__}: {exc}")
    return m, engine


def _listening(port: int) -> list[str]:
    """Lines of /proc/net/tcp{,6} with a socket listening on `port` (any process)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and int(cols[1].split(":")[1], 16) == port:
                found.append(line.strip())
    return found


def _connect_refused(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return True
    return False


def _kill_and_clean_up(manifest: Path, tmp_path: Path):
    m, eng = _launch(manifest, tmp_path / "run")
    pgid = eng.proc.pid
    port = eng.spec.port
    try:
        before = process_group(pgid)
        assert before and _listening(port)  # the engine was there
        exp = load_expectations(default_expectation(m.engine.kind, m.engine.version))
        ctx = new_ctx(eng.base_url, exp, api_key=eng.api_key, model=eng.served_name, engine=eng)
        t0 = time.monotonic()
        report = run_suite_sync(ctx, patterns=["fault.engine-death"], engine_info={"kind": m.engine.kind})
        took = time.monotonic() - t0
    finally:
        eng.stop()
    # nothing left: no process of the engine's group, no listening socket on its port, the port refuses connections
    assert process_group(pgid) == set()
    assert [pid for pid in before if pid_alive(pid)] == []  # every process it had, the killed worker's siblings too
    assert _listening(port) == [] and _connect_refused(port)
    [r] = report.results
    return r, took, before, pgid


def test_vllm_engine_death_is_detected_in_bounded_time_and_leaves_nothing(tmp_path):
    r, took, before, pgid = _kill_and_clean_up(DEFAULT_MANIFEST, tmp_path)
    assert r.id == "fault.engine-death" and r.verdict == "pass", (r.behaviours, r.note)
    assert took < 120  # start bound (30 s) + the expectation's bounds, never a hang
    [w] = r.extra["workers"]
    assert "EngineCore" in w["cmdline"] and not w["server"] and w["pid"] in before and w["pid"] != pgid
    # vllm-0.11: every in-flight stream ends with an error event (then [DONE]), /health goes down within 30 s
    ends = r.extra["streams"]
    assert len(ends) == 4 and {e["end"] for e in ends} == {"error-event"}
    assert all(e["chunks_before_kill"] >= 1 for e in ends) and all(e["after_s"] < 30 for e in ends)
    assert r.extra["health"]["down_after_s"] < 30
    assert set(r.extra["meanwhile"]["right_after_kill"]) == {"/version", "/v1/models"}


def test_llamacpp_engine_death_is_detected_in_bounded_time_and_leaves_nothing(tmp_path):
    if not LLAMACPP_MANIFEST.is_file():
        unavailable("no llama.cpp manifest")
    r, took, before, pgid = _kill_and_clean_up(LLAMACPP_MANIFEST, tmp_path)
    assert r.id == "fault.engine-death" and r.verdict == "pass", (r.behaviours, r.note)
    assert took < 60
    [w] = r.extra["workers"]
    assert w["server"] and w["pid"] == pgid  # no worker process: the server itself is killed
    ends = r.extra["streams"]
    assert len(ends) == 4 and {e["end"] for e in ends} == {"closed"}
    assert all(e["chunks_before_kill"] >= 1 for e in ends)
    assert r.extra["health"]["down_after_s"] < 10 and r.extra["server_exit"] == -9
    assert set(r.extra["meanwhile"]["right_after_kill"]) == {"/props", "/v1/models"}
