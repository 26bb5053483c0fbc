"""`harness upgrade` end to end on collected sides that need no engine: each manifest is loaded once, each side is
collected once from the loaded Manifest, and the report on disk is the one compare + judge + render make."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import harness.upgrade.run as run
from harness.cli import main
from harness.errors import RefusedError
from harness.manifest import Manifest, load_manifest
from harness.metrics.surface import surface_from_text
from harness.settings import REPO_ROOT
from harness.upgrade.compare import compare_sides
from harness.upgrade.judge import RULES, judge
from harness.upgrade.render import render_markdown
from tests.golden.helpers import choice, record, write

OLD = REPO_ROOT / "manifests" / "vllm-0.11.0-cpu.yaml"
NEW = REPO_ROOT / "manifests" / "vllm-0.32.0-cpu.yaml"
DATA = REPO_ROOT / "tests" / "golden" / "data"
TOKS = [72, 101, 108, 108, 111]


@pytest.fixture
def calls(monkeypatch):
    """Counts load_manifest calls and replaces the launch with a side built from constructed recordings."""
    seen: dict[str, list] = {"load": [], "collect": []}
    real_load = run.load_manifest

    def counting_load(path, **kw):
        seen["load"].append(Path(path))
        return real_load(path, **kw)

    def fake_collect(manifest, out, sets, *, expectations, conformance, say):
        seen["collect"].append((manifest, expectations, conformance))
        version = manifest.engine.version
        rec = out / manifest.name / "golden"
        write(rec, {"chat": [record("p", [choice(TOKS)])]})
        return {
            "manifest": str(manifest.path),
            "name": manifest.name,
            "ok": True,
            "engine": {"kind": manifest.engine.kind, "version": version},
            "golden_dir": str(rec),
            "metrics": surface_from_text((DATA / f"metrics-vllm-{version}.txt").read_text()),
            "conformance": {"available": False, "reason": "not run (--no-conformance)"},
            "wall_seconds": 0.1,
        }

    monkeypatch.setattr(run, "load_manifest", counting_load)
    monkeypatch.setattr(run, "collect_side", fake_collect)
    return seen


def test_each_manifest_loaded_once_each_side_collected_once(tmp_path, calls):
    out = tmp_path / "u"
    report = run.run_upgrade(OLD, NEW, out, tolerance=0.02, margin=0.1, conformance=False, say=lambda s: None)
    assert calls["load"] == [OLD, NEW]
    assert [m.name for m, _, _ in calls["collect"]] == ["vllm-0.11.0-cpu", "vllm-0.32.0-cpu"]
    assert all(isinstance(m, Manifest) for m, _, _ in calls["collect"])
    # both sides are judged under the old engine's expectations
    assert {exp for _, exp, _ in calls["collect"]} == {"vllm-0.11"}
    assert report["settings"]["expectations"] == "vllm-0.11"
    assert report["format"] == "harness-upgrade/1" and report["verdict"]["verdict"] == "review"


def test_loaded_manifests_are_not_loaded_again(tmp_path, calls):
    run.run_upgrade(
        load_manifest(OLD),
        load_manifest(NEW),
        tmp_path / "u",
        tolerance=0.02,
        margin=0.1,
        conformance=False,
        say=lambda s: None,
    )
    assert calls["load"] == [] and len(calls["collect"]) == 2


def test_the_report_on_disk_is_compare_judge_render(tmp_path, calls):
    out = tmp_path / "u"
    report = run.run_upgrade(OLD, NEW, out, tolerance=0.02, margin=0.1, conformance=False, say=lambda s: None)
    saved = json.loads((out / "upgrade.json").read_text())
    assert saved == json.loads(json.dumps(report, default=str))
    assert "metrics" not in saved["old"] and "metrics" not in saved["new"]  # the surfaces are in metrics.txt
    old_m, new_m = load_manifest(OLD), load_manifest(NEW)
    sides = [
        dict(saved[k], metrics=surface_from_text((DATA / f"metrics-vllm-{v}.txt").read_text()))
        for k, v in (("old", "0.11.0"), ("new", "0.32.0"))
    ]
    cmp = compare_sides(old_m, new_m, *sides, tolerance=0.02, margin=0.1)
    assert saved["comparison"] == json.loads(json.dumps(cmp, default=str))
    assert saved["verdict"] == judge(*sides, cmp)
    assert (out / "upgrade.md").read_text() == render_markdown(saved)  # a saved report renders the same


def test_refusals_come_before_any_side_is_collected(tmp_path, calls):
    with pytest.raises(RefusedError, match="both manifests are named"):
        run.run_upgrade(OLD, OLD, tmp_path / "u", tolerance=0.02, margin=0.1, say=lambda s: None)
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "upgrade.json").write_text("{}")
    with pytest.raises(RefusedError, match="already there"):
        run.run_upgrade(OLD, NEW, tmp_path / "v", tolerance=0.02, margin=0.1, say=lambda s: None)
    assert calls["collect"] == []


def test_command_prints_the_verdict_and_exits_by_it(tmp_path, calls, capsys):
    out = tmp_path / "u"
    assert main(["upgrade", str(OLD), str(NEW), "--out", str(out), "--no-conformance"]) == 0  # review exits 0
    printed = capsys.readouterr()
    assert printed.out.startswith("verdict: review\n") and f"report: {out / 'upgrade.md'}" in printed.out
    assert "[vllm-0.11.0-cpu] launching vllm 0.11.0" in printed.err
    assert calls["collect"][0][2] is False  # --no-conformance reached the collection


def test_one_rule_per_area():
    names = ["engines", "golden", "metrics", "arguments", "wire", "conformance", "packages"]
    assert [r.__name__ for r in RULES] == names
