"""`harness matrix SPEC --out DIR --rejudge OLD.yaml`: cells judged again under a changed expectation file from their
recorded tags, with no engine started; only a cell whose key proves it was judged under OLD.yaml is touched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.matrix.run import cell_key, lock_for
from harness.matrix.spec import load_spec
from harness.settings import EXPECTATIONS_DIR
from tests.matrix.helpers import cell, write_cells, write_spec

CASES = {
    "reasoning.stream": {"verdict": "fail", "behaviours": ["think-markers-in-reasoning"]},
    "tools.auto.id": {"verdict": "quirk", "behaviours": ["id-longer-than-40"]},
    "chat.stream.role-first": {"verdict": "pass", "behaviours": []},
}


def _old_file(tmp: Path, drop: str = "reasoning.stream", skip: str | None = None) -> Path:
    """vllm-0.11.yaml as it was before `drop` was declared (and with `skip` skipped)."""
    raw = yaml.safe_load((EXPECTATIONS_DIR / "vllm-0.11.yaml").read_text())
    raw["cases"].pop(drop, None)
    if skip:
        raw["cases"][skip] = {"skip": "not judged then"}
    p = tmp / "old.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


def _matrix(tmp: Path, old: Path, cases: dict | None = None) -> tuple[Path, Path]:
    spec_path = write_spec(tmp, ["0.11.0", "0.12.0"])
    spec = load_spec(spec_path)
    out = tmp / "m"
    cells = []
    for v in ("0.11.0", "0.12.0"):
        key = cell_key(spec, v, lock_for(spec, v, out), None, stale=False, expectations=old)
        c = cell(v, cases=json.loads(json.dumps(cases or CASES)), key=dict(key))
        c["observables"]["conformance"]["counts"] = {"fail": 1, "pass": 1, "quirk": 1}
        cells.append(c)
    write_cells(out, cells)
    return spec_path, out


def _cell(out: Path, v: str) -> dict:
    return json.loads((out / "cells" / f"{v}.json").read_text())


def test_an_entry_declared_since_turns_the_recorded_fail_into_its_verdict_and_the_cells_are_current(tmp_path, capsys):
    old = _old_file(tmp_path)
    spec_path, out = _matrix(tmp_path, old)
    assert main(["matrix", str(spec_path), "--out", str(out), "--plan"]) == 0
    assert "0 would run" not in capsys.readouterr().out  # judged under the old file: another config
    assert main(["matrix", str(spec_path), "--out", str(out), "--rejudge", str(old)]) == 0
    said = capsys.readouterr()
    assert "re-judged 2 of 2 cell(s) under vllm-0.11" in said.out
    assert "[0.11.0] re-judged: 1 verdict(s) changed (reasoning.stream)" in said.err
    c = _cell(out, "0.11.0")
    conf = c["observables"]["conformance"]
    # reasoning.stream's coalesced-delta outcome is declared a known intermittent one (issue 34)
    want = {"verdict": "expected-intermittent", "behaviours": ["think-markers-in-reasoning"]}
    assert conf["cases"]["reasoning.stream"] == want
    assert conf["cases"]["tools.auto.id"]["verdict"] == "quirk"  # an entry the change did not touch: as it was
    assert conf["counts"] == {"fail": 0, "pass": 1, "quirk": 1, "expected-intermittent": 1}
    assert c["rejudged"]["entries"] == ["reasoning.stream"] and c["rejudged"]["changed"] == ["reasoning.stream"]
    assert main(["matrix", str(spec_path), "--out", str(out), "--plan"]) == 0
    assert "0 would run, 2 would be reused" in capsys.readouterr().out  # the current key: a run reuses them
    doc = json.loads((out / "matrix.json").read_text())
    row = next(r for r in doc["rows"] if r["kind"] == "case" and r["id"] == "reasoning.stream")
    assert row["values"]["0.11.0"].startswith("expected-intermittent")


def test_a_cell_not_judged_under_the_old_file_is_left_as_it_was(tmp_path, capsys):
    old = _old_file(tmp_path)
    spec_path, out = _matrix(tmp_path, old)
    (tmp_path / "o").mkdir()
    other = _old_file(tmp_path / "o", drop="tools.auto.id")  # another file: not what judged the cells
    before = (out / "cells" / "0.11.0.json").read_bytes()
    assert main(["matrix", str(spec_path), "--out", str(out), "--rejudge", str(other)]) == 1
    said = capsys.readouterr()
    assert "[0.11.0] not re-judged: not a cell of this spec judged under old.yaml (config_sha256 changed" in said.err
    assert "0 of 2 cell(s)" in said.out
    assert (out / "cells" / "0.11.0.json").read_bytes() == before


def test_a_case_the_old_file_skipped_never_ran_so_its_cell_is_not_rejudged(tmp_path, capsys):
    old = _old_file(tmp_path, skip="chat.stream.role-first")
    cases = {**CASES, "chat.stream.role-first": {"verdict": "skip", "behaviours": []}}
    spec_path, out = _matrix(tmp_path, old, cases)
    before = (out / "cells" / "0.11.0.json").read_bytes()
    assert main(["matrix", str(spec_path), "--out", str(out), "--rejudge", str(old)]) == 1
    assert "chat.stream.role-first was skipped by the old file: it never ran" in capsys.readouterr().err
    assert (out / "cells" / "0.11.0.json").read_bytes() == before


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--releases", "0.11.0"], "--releases is not used"),
        (["--collect", "x"], "do not go together"),
    ],
)
def test_rejudge_refuses_options_it_does_not_use(tmp_path, capsys, extra, says):
    old = _old_file(tmp_path)
    spec_path, out = _matrix(tmp_path, old)
    assert main(["matrix", str(spec_path), "--out", str(out), "--rejudge", str(old), *extra]) == 2
    assert says in capsys.readouterr().err


def test_rejudge_of_a_missing_file_is_one_line_and_exit_2(tmp_path, capsys):
    spec_path, out = _matrix(tmp_path, _old_file(tmp_path))
    before = {p.name: p.read_bytes() for p in (out / "cells").iterdir()}
    assert main(["matrix", str(spec_path), "--out", str(out), "--rejudge", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err
    assert "nope.yaml is not a file" in err and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in (out / "cells").iterdir()} == before


def test_a_drift_cell_is_rejudged_with_the_release_cells(tmp_path, capsys):
    """A drift cell (the same release locked as of today) was judged under the same file: left out, a run would start
    it again although only the expectation file changed."""
    from tests.matrix.helpers import LOCK

    old = _old_file(tmp_path)
    spec_path = write_spec(tmp_path, ["0.11.0"])
    spec_path.write_text(spec_path.read_text() + f"drift:\n  - {{version: 0.11.0, lock: {LOCK}}}\n")
    spec, out = load_spec(spec_path), tmp_path / "m"
    cells = []
    for v in ("0.11.0", "0.11.0+drift"):
        key = cell_key(spec, v, lock_for(spec, v, out), None, stale=False, expectations=old)
        cells.append(cell(v, cases=json.loads(json.dumps(CASES)), key=dict(key)))
    write_cells(out, cells)
    assert main(["matrix", str(spec_path), "--out", str(out), "--rejudge", str(old)]) == 0
    assert "[0.11.0+drift] re-judged: 1 verdict(s) changed (reasoning.stream)" in capsys.readouterr().err
    assert (
        _cell(out, "0.11.0+drift")["observables"]["conformance"]["cases"]["reasoning.stream"]["verdict"]
        == "expected-intermittent"
    )
    assert main(["matrix", str(spec_path), "--out", str(out), "--plan"]) == 0
    assert "0 would run, 2 would be reused" in capsys.readouterr().out
