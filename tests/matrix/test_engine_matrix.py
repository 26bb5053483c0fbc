"""The committed 3-release matrix (matrix/results/, made by a real run): re-running it does no install and no launch,
and bisect answers from its cells without starting an engine. Marked engine and slow: were the reuse to break, the
re-run would need the real engines (and here it fails instead of starting one)."""

from __future__ import annotations

import json
import shutil

import pytest

from harness.cli import main
from harness.matrix.spec import load_spec
from tests.matrix.helpers import REPO

pytestmark = [pytest.mark.engine, pytest.mark.slow]

CI_SPEC = REPO / "matrix" / "vllm-cpu-ci.yaml"
RESULTS = REPO / "matrix" / "results"
RELEASES = ["0.11.0", "0.20.0", "0.32.0"]


@pytest.fixture
def no_engine_work(monkeypatch):
    """Any install or launch fails the test."""

    def refuse(*a, **kw):
        raise AssertionError("the matrix started engine work on a re-run of finished cells")

    import harness.envs
    import harness.launch.session
    import harness.matrix.cell
    import harness.matrix.lock
    import harness.matrix.run

    monkeypatch.setattr(harness.envs, "_build", refuse)
    monkeypatch.setattr(harness.launch.session, "prepare", refuse)
    monkeypatch.setattr(harness.matrix.cell, "run_cell", refuse)
    monkeypatch.setattr(harness.matrix.run, "run_cell", refuse)
    monkeypatch.setattr(harness.matrix.lock, "lock_release", refuse)


def test_committed_cells_ran_all_three_releases():
    for v in RELEASES:
        cell = json.loads((RESULTS / "cells" / f"{v}.json").read_text())
        assert cell["release"] == v
        assert cell["status"] == "ran", f"{v}: {cell.get('stage')}: {cell.get('reason')}"
        assert cell["identity"]["version"] == v
        assert cell["observables"]["metrics"] and cell["observables"]["wire_keys"]
        assert cell["observables"]["conformance"]["expectations"] == "vllm-0.11"


def test_rerun_of_the_committed_matrix_does_no_install_and_no_launch(tmp_path, no_engine_work, capsys):
    out = tmp_path / "results"
    shutil.copytree(RESULTS, out, ignore=shutil.ignore_patterns("work", "manifests"))
    before = {p.name: p.read_bytes() for p in (out / "cells").iterdir()}
    rc = main(["matrix", str(CI_SPEC), "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "3 cell(s): 0 ran, 3 reused" in captured.out
    assert {p.name: p.read_bytes() for p in (out / "cells").iterdir()} == before
    assert (out / "matrix.html").read_text().count("<th>0.") >= 3
    committed = json.loads((RESULTS / "matrix.json").read_text())
    again = json.loads((out / "matrix.json").read_text())
    assert again["rows"] == committed["rows"]


def test_bisect_answers_from_the_committed_cells(tmp_path, no_engine_work, capsys):
    doc = json.loads((RESULTS / "matrix.json").read_text())
    changed = [r for r in doc["rows"] if r["kind"] == "metric" and r["first_changed"]]
    assert changed, "the committed matrix shows no metric change between 0.11.0 and 0.32.0"
    row = changed[0]
    out = tmp_path / "answer.json"
    rc = main(["bisect", str(CI_SPEC), "--metric", row["id"], "--json", str(out)])
    assert rc == 0, capsys.readouterr().err
    answer = json.loads(out.read_text())
    assert answer["first_changed"] == row["first_changed"] and answer["ran"] == []
    assert answer["evidence"]["first_changed"]["shown"] == row["values"][row["first_changed"]]
    spec = load_spec(CI_SPEC)
    assert answer["last_same"] == spec.versions[spec.versions.index(row["first_changed"]) - 1]
