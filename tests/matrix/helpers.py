"""Synthetic matrix cells and specs for the matrix tests (no engine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.matrix.cell import CELL_FORMAT, make_key

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "matrix" / "vllm-cpu.template.yaml"
LOCK = REPO / "manifests" / "locks" / "vllm-0.11.0-cpu.txt"


def write_spec(tmp: Path, versions: list[str], *, baseline: str | None = None, extra: str = "") -> Path:
    rel = [f"  - {{version: {v}, lock: {LOCK}}}" for v in versions]
    text = (
        "format: 1\nname: synth\n"
        f"template: {TEMPLATE}\n"
        'manifest_name: "synth-{version}"\nrequirement: "synth=={version}"\n'
        f"baseline: {baseline or versions[0]}\nexpectations: vllm-0.11\n{extra}releases:\n" + "\n".join(rel) + "\n"
    )
    p = tmp / "spec.yaml"
    p.write_text(text)
    return p


def cell(
    release: str,
    *,
    metrics: dict[str, Any] | None = None,
    wire: dict[str, list[str]] | None = None,
    cases: dict[str, Any] | None = None,
    flags: dict[str, Any] | None = None,
    status: str = "ran",
    key: dict[str, Any] | None = None,
) -> dict[str, Any]:
    c: dict[str, Any] = {
        "format": CELL_FORMAT,
        "release": release,
        "key": key or make_key("a" * 64, "b" * 64),
        "status": status,
        "stage": "done" if status == "ran" else "launch",
        "reason": None if status == "ran" else "engine exited with code 1",
        "created_at": f"2026-01-01T00:00:{len(release):02d}Z",
    }
    if status == "ran":
        c["observables"] = {
            "conformance": {"available": True, "cases": cases or {}},
            "metrics": metrics
            if metrics is not None
            else {"m_base": {"type": "counter", "labels": [], "buckets": None}},
            "wire_keys": wire if wire is not None else {"chat": ["choices"]},
            "flags": {"captured": flags is not None, "flags": flags or {}, "reason": None if flags else "none"},
        }
    return c


def write_cells(out: Path, cells: list[dict[str, Any]]) -> None:
    (out / "cells").mkdir(parents=True, exist_ok=True)
    for c in cells:
        (out / "cells" / f"{c['release']}.json").write_text(json.dumps(c))


def with_current_key(cell: dict, release: str, spec_path: Path) -> dict:
    """A committed cell with the key this harness gives its release today (the committed results may be older than
    this harness's suite: where a test moves or merges cells, the rule under test is the key's, not the suite's)."""
    from harness.matrix.run import cell_key, lock_for
    from harness.matrix.spec import load_spec

    spec = load_spec(spec_path)
    cell["key"] = cell_key(spec, release, lock_for(spec, release, REPO / "matrix" / "results"), None, stale=False)
    return cell


def _flags(cell: dict, exact: bool) -> dict:
    """The flags a cell observed; across suites without `choices` (the capture now adds the parser registries')."""
    flags = cell["observables"]["flags"]
    if exact or not isinstance(flags.get("flags"), dict):
        return flags
    return {**flags, "flags": {k: {f: x for f, x in v.items() if f != "choices"} for k, v in flags["flags"].items()}}


def _observed(cell: dict, scripted: bool) -> tuple[dict, dict, set]:
    """(metric surface, wire keys, case ids) of a cell; without the scripted stage's (scripted False)."""
    from harness.matrix.scripted import SCRIPTED_ENDPOINT_PREFIX, scripted_case_ids

    obs = cell["observables"]
    wire = {e: k for e, k in obs["wire_keys"].items() if scripted or not e.startswith(SCRIPTED_ENDPOINT_PREFIX)}
    cases = set(obs["conformance"]["cases"]) - (set() if scripted else set(scripted_case_ids()))
    return obs["metrics"], wire, cases


def assert_cell_equals_committed(out: Path, v: str) -> None:
    """A cell made here agrees with the committed one of matrix/results (a local run over every release): the same
    key, metric surface, wire keys, flags and case ids, and a golden recording with no regression against it."""
    from harness.matrix.cell import golden_diff_summary

    results = REPO / "matrix" / "results"
    fresh = json.loads((out / "cells" / f"{v}.json").read_text())
    committed = json.loads((results / "cells" / f"{v}.json").read_text())
    assert fresh["status"] == "ran", v
    # the committed results may be older than this harness's suite (cases or expectations added: another config);
    # then the lock, the model and everything both cells observed must still agree
    same_suite = fresh["key"].get("config_sha256") == committed["key"].get("config_sha256")
    if same_suite:
        assert fresh["key"] == committed["key"], v
    else:
        assert all(fresh["key"][k] == committed["key"][k] for k in ("lock_sha256", "model_sha256")), v
    # a cell of a spec without the scripted stage (the Ray tests') observed none of its rows
    scripted = "scripted" in fresh
    assert _observed(fresh, scripted)[:2] == _observed(committed, scripted)[:2], (v, "metrics, wire keys")
    assert _flags(fresh, same_suite) == _flags(committed, same_suite), (v, "flags")
    cases = _observed(fresh, scripted)[2]
    old = _observed(committed, scripted)[2]
    assert (cases == old) if same_suite else (old <= cases), v
    d = golden_diff_summary(results / "golden" / v, out / "golden" / v, v)
    assert "refused" not in d and not d["counts"].get("regression"), (v, d)
    if scripted:  # the scripted stage's recording, against the committed one
        d = golden_diff_summary(results / "golden" / v / "scripted", out / "golden" / v / "scripted", v)
        assert "refused" not in d and not d["counts"].get("regression"), (v, "scripted", d)
