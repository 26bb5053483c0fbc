"""`harness matrix SPEC --cell-index N --out DIR`, what each pod of the Indexed Job runs, for real: index 0 of the CI
spec is 0.11.0 (its environment is the pinned manifest's: verified, not installed); the cell agrees with the
committed one, no pages are written, and `--collect` of that pod's directory and another's gives the committed
matrix's cells."""

from __future__ import annotations

import json
import shutil

import pytest

from harness.cli import main
from harness.matrix.cell import load_cell
from tests.matrix.helpers import REPO, assert_cell_equals_committed, with_current_key

pytestmark = [pytest.mark.engine, pytest.mark.slow]

CI_SPEC = REPO / "matrix" / "vllm-cpu-ci.yaml"
RESULTS = REPO / "matrix" / "results"


def test_cell_index_runs_that_cell_for_real_and_collect_merges_it(tmp_path, capsys):
    pod0 = tmp_path / "cell-0"
    rc = main(["matrix", str(CI_SPEC), "--cell-index", "0", "--out", str(pod0)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err[-3000:]
    assert f"matrix: cell 0 (0.11.0): ran; ran; {pod0}/cells/0.11.0.json" in captured.out
    assert [p.name for p in (pod0 / "cells").iterdir()] == ["0.11.0.json"]
    assert not (pod0 / "matrix.json").exists()  # pages come from --collect
    assert_cell_equals_committed(pod0, "0.11.0")
    assert load_cell(pod0, "0.11.0")["ran_on"] == {"executor": "local"}

    pod2 = tmp_path / "cell-2"  # the 0.32.0 pod's directory (its committed cell and recording)
    (pod2 / "cells").mkdir(parents=True)
    committed = json.loads((RESULTS / "cells" / "0.32.0.json").read_text())
    (pod2 / "cells" / "0.32.0.json").write_text(json.dumps(with_current_key(committed, "0.32.0", CI_SPEC)))
    shutil.copytree(RESULTS / "golden" / "0.32.0", pod2 / "golden" / "0.32.0")
    out = tmp_path / "matrix"
    assert main(["matrix", str(CI_SPEC), "--collect", str(pod0), str(pod2), "--out", str(out)]) == 0
    assert "collected 2 cell(s) from 2 directories" in capsys.readouterr().out
    assert_cell_equals_committed(out, "0.11.0")
    merged = load_cell(out, "0.32.0")
    committed = json.loads((RESULTS / "cells" / "0.32.0.json").read_text())
    assert merged["golden_diff"]["baseline"] == "0.11.0" and "refused" not in merged["golden_diff"]
    assert merged["golden_diff"]["counts"].keys() == committed["golden_diff"]["counts"].keys()
    releases = [r["release"] for r in json.loads((out / "matrix.json").read_text())["releases"]]
    assert {"0.11.0", "0.32.0"} <= set(releases)
