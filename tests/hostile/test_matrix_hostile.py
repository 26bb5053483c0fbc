"""Hostile input for `harness matrix`, `harness bisect`, the matrix pages and upgrade.md (issue 21: #7, #10, #19, #22,
#23, #26, #27). No engine: cells are synthetic, written into a matrix directory under tmp_path, and any attempt to
run a cell fails the test."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from markdown_it import MarkdownIt

import harness.matrix.run
from harness.cli import main
from harness.settings import REPO_ROOT
from tests.matrix.helpers import cell

VS = ["1.0.0", "1.1.0", "1.2.0"]
GAUGE = {"type": "gauge", "labels": [], "buckets": None}


@pytest.fixture
def matrix(tmp_path, monkeypatch) -> SimpleNamespace:
    """A spec of three releases over a copied template and lock, with a ran cell for each in DIR/cells; running a
    cell (lock, install, launch) raises."""
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    shutil.copy(REPO_ROOT / "matrix" / "vllm-cpu.template.yaml", tmp_path / "template.yaml")
    shutil.copy(REPO_ROOT / "manifests" / "locks" / "vllm-0.11.0-cpu.txt", tmp_path / "lock.txt")
    releases = "\n".join(f"  - {{version: {v}, lock: lock.txt}}" for v in VS)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        'format: 1\nname: synth\ntemplate: template.yaml\nmanifest_name: "synth-{version}"\n'
        f'requirement: "synth=={{version}}"\nbaseline: 1.0.0\nexpectations: vllm-0.11\nreleases:\n{releases}\n'
    )
    out = tmp_path / "results"
    (out / "cells").mkdir(parents=True)
    for v in VS:
        write_cell(out, cell(v, metrics={"kv": GAUGE}, wire={"chat": ["choices"]}))
    ran: list[str] = []

    def no_cell_runs(spec_: Any, release: str, *a: Any, **kw: Any) -> tuple[dict[str, Any], str]:
        ran.append(release)
        raise AssertionError(f"the command ran the cell of {release}")

    monkeypatch.setattr(harness.matrix.run, "ensure_cell", no_cell_runs)
    return SimpleNamespace(tmp=tmp_path, spec=spec, out=out, ran=ran)


def write_cell(out: Path, c: dict[str, Any]) -> Path:
    p = out / "cells" / f"{c['release']}.json"
    p.write_text(json.dumps(c))
    return p


def _set(doc: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        doc = doc[part]
    doc[last] = value


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: error: "), err
    return lines[0]


# --- #10: bisect --json never writes over a cell, the spec's template or a lock; an existing answer needs --force


@pytest.mark.parametrize(
    "target, missing",
    [("cells/1.0.0.json", False), ("cells/1.2.0.json", False), ("cells/1.2.0.json", True), ("../template.yaml", False),
     ("../lock.txt", False)],
)  # fmt: skip
def test_10_bisect_json_never_writes_over_an_input(matrix, capsys, target, missing):
    """Finding 10: --json OUT wrote over any file, even a cell it had just read. A cell (of any release, outside
    --to too, or one not made yet), the template and the locks are inputs: refused, with --force too."""
    path = (matrix.out / target).resolve()
    if missing:
        path.unlink()
    before = path.read_bytes() if path.exists() else None
    argv = ["bisect", str(matrix.spec), "--metric", "kv", "--to", "1.1.0", "--no-run", "--json", str(path)]
    for force in ([], ["--force"]):
        assert main([*argv, *force]) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert "input of this command" in line and str(path) in line
        assert (path.read_bytes() if path.exists() else None) == before
    assert main(["bisect", str(matrix.spec), "--metric", "kv", "--no-run"]) == 1  # the cells still read


def test_10_bisect_json_replaces_an_existing_answer_only_with_force(matrix, capsys):
    """Finding 10: an existing --json file is an earlier result: replaced only with --force."""
    answer = matrix.tmp / "answer.json"
    answer.write_text("earlier answer\n")
    argv = ["bisect", str(matrix.spec), "--metric", "kv", "--no-run", "--json", str(answer)]
    assert main(argv) == 2
    assert "already exists; pass --force" in _one_error_line(capsys.readouterr().err)
    assert answer.read_text() == "earlier answer\n"
    assert main([*argv, "--force"]) == 1  # no change in the range: exit 1, the answer written
    assert json.loads(answer.read_text())["first_changed"] is None


# --- #19: an empty or blank --releases is a usage error, before any work ----------------------------------------


@pytest.mark.parametrize("selection", [",", " ", "", " , ,", "\t"])
def test_19_empty_release_selection_is_a_usage_error(matrix, capsys, selection):
    """Finding 19: `--releases ","` selected no cell, exited 0 and rewrote the pages; `--releases " "` (an empty CI
    variable) selected every release."""
    assert main(["matrix", str(matrix.spec), "--out", str(matrix.out), "--releases", selection]) == 2
    assert "--releases" in _one_error_line(capsys.readouterr().err)
    assert matrix.ran == []
    assert not (matrix.out / "matrix.md").exists() and not (matrix.out / "matrix.json").exists()


# --- #22: a wire key is an exact member of a list of key paths ----------------------------------------------------


def test_22_wire_keys_as_a_string_are_not_matched_by_substring(matrix, capsys):
    """Finding 22: a cell whose wire keys are a string ("choices_usage") answered `--wire-key chat:usage` as present,
    a false change."""
    from harness.matrix.observe import observe

    tampered = cell("1.1.0", wire={"chat": "choices_usage"})  # type: ignore[dict-item]
    assert observe(tampered, "wire-key", "chat:usage") != (True, True)
    assert observe(tampered, "wire-key", "usage") != (True, ["chat"])
    p = write_cell(matrix.out, tampered)
    assert main(["bisect", str(matrix.spec), "--wire-key", "chat:usage", "--no-run"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"{p}: observables.wire_keys.chat: expected a list, got a string" in line


# --- #26, #27: a cell's whole shape is checked when it is read: one line naming the file and the field -----------

MALFORMED = [
    ("observables.conformance.cases", [], "case", "observables.conformance.cases", "a mapping"),
    ("observables.conformance.cases", {"c.one": "pass"}, "case", "observables.conformance.cases.c.one", "a mapping"),
    ("observables.conformance.cases", {"c.one": {"verdict": "pass", "behaviours": "x"}}, "case",
     "observables.conformance.cases.c.one.behaviours", "a list"),
    ("observables.metrics", "kv", "metric", "observables.metrics", "a mapping"),
    ("observables.metrics", {"kv": "gauge"}, "metric", "observables.metrics.kv", "a mapping"),
    ("observables.metrics", {"kv": {**GAUGE, "buckets": 3}}, "metric", "observables.metrics.kv.buckets", "a list"),
    ("observables.metrics", {"kv": {**GAUGE, "labels": "le"}}, "metric", "observables.metrics.kv.labels", "a list"),
    ("observables.flags", [], "flag", "observables.flags", "a mapping"),
    ("observables.flags", {"captured": True, "flags": ["--x"]}, "flag", "observables.flags.flags", "a mapping"),
    ("observables.wire_keys", ["chat"], "wire-key", "observables.wire_keys", "a mapping"),
    ("observables", "ran", "metric", "observables", "a mapping"),
]  # fmt: skip
OBSERVABLE = {"case": "--case=c.one", "metric": "--metric=kv", "flag": "--flag=--x", "wire-key": "--wire-key=chat:x"}


@pytest.mark.parametrize("field, value, kind, where, expected", MALFORMED)
def test_26_bisect_on_a_malformed_cell_names_the_file_and_field(matrix, capsys, field, value, kind, where, expected):
    """Finding 26: bisect on a cell with `cases` as a list, a case as a string, `metrics` as a string, `flags` as a
    list ...: AttributeError. Now one line, exit 2."""
    c = cell("1.0.0", metrics={"kv": GAUGE}, cases={"c.one": {"verdict": "pass", "behaviours": []}}, flags={"--x": {}})
    _set(c, field, value)
    p = write_cell(matrix.out, c)
    assert main(["bisect", str(matrix.spec), OBSERVABLE[kind], "--no-run"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"{p}: {where}: expected {expected}, got " in line


PAGE_MALFORMED = [
    ("timings", [1.0], "timings", "a mapping"),
    ("timings", {"ready_s": "soon"}, "timings.ready_s", "a number"),
    ("golden_diff", {"baseline": "1.0.0", "counts": [1, 2]}, "golden_diff.counts", "a mapping"),
    ("golden_diff", "refused", "golden_diff", "a mapping"),
    ("golden_errors", ["chat"], "golden_errors", "a mapping"),
    ("install", ["pip"], "install", "a mapping"),
    ("identity", "0.11.0", "identity", "a mapping"),
    ("log_errors", "RuntimeError: x", "log_errors", "a list"),
    ("observables.metrics", {"kv": "gauge"}, "observables.metrics.kv", "a mapping"),
    ("observables.metrics", {"kv": {**GAUGE, "type": "histogram", "buckets": 5}}, "observables.metrics.kv.buckets",
     "a list"),
    ("observables.flags", {"captured": False, "reason": ["no"]}, "observables.flags.reason", "a string"),
    ("observables.conformance", {"available": True, "cases": {"c": "pass"}}, "observables.conformance.cases.c",
     "a mapping"),
]  # fmt: skip


@pytest.mark.parametrize("field, value, where, expected", PAGE_MALFORMED)
def test_27_matrix_pages_on_a_malformed_cell_exit_2_before_any_work(matrix, capsys, monkeypatch, field, value, where,
                                                                    expected):  # fmt: skip
    """Finding 27: the pages on a malformed cell (`timings` as a list, `counts` as a list, a metric entry as a
    string, int `buckets` ...): AttributeError/TypeError. A malformed cell in DIR is a DataError before any cell is
    run or reused (every cell in DIR is rendered), and the pages are not written."""
    reused: list[str] = []

    def reuse(spec_: Any, release: str, out: Path, **kw: Any) -> tuple[dict[str, Any], str]:
        reused.append(release)
        return json.loads((out / "cells" / f"{release}.json").read_text()), "reused"

    monkeypatch.setattr(harness.matrix.run, "ensure_cell", reuse)
    c = cell("1.2.0", status="failed") if field in ("log_errors",) else cell("1.2.0", metrics={"kv": GAUGE})
    _set(c, field, value)
    p = write_cell(matrix.out, c)
    assert main(["matrix", str(matrix.spec), "--out", str(matrix.out), "--releases", "1.0.0"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"{p}: {where}: expected {expected}, got " in line
    assert reused == [] and not (matrix.out / "matrix.md").exists()


def test_26_27_committed_cells_have_the_shape(tmp_path):
    """The shape check accepts every committed cell (matrix/results/cells), with and without a key it adds."""
    from harness.matrix.cell import load_cell

    results = REPO_ROOT / "matrix" / "results"
    for p in sorted((results / "cells").glob("*.json")):
        assert load_cell(results, p.stem) is not None


def test_26_control_characters_in_a_field_name_are_shown_escaped(matrix, capsys):
    """A key of a tampered cell is quoted in the error line: escaped, never a terminal escape."""
    c = cell("1.0.0", metrics={"kv\x1b]0;owned\x07": "x"})
    write_cell(matrix.out, c)
    assert main(["bisect", str(matrix.spec), "--metric=kv", "--no-run"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "\x1b" not in line and "\x07" not in line and "observables.metrics.kv" in line


# --- #23: matrix.md and upgrade.md keep external text inert ------------------------------------------------------

IMAGE = "![x](https://host.invalid/p.png)"
LINK = "[click](https://host.invalid/)"


def _html(md: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(md)


def _assert_inert(md: str) -> str:
    page = _html(md)
    assert "<img" not in page and "<a " not in page and "<script" not in page, page
    assert "host.invalid" in page  # the text is shown, not dropped
    return page


def test_23_matrix_md_external_text_renders_as_text(matrix):
    """Finding 23: only `|`, newline and `<` were escaped in matrix.md: a server- or log-controlled reason like
    `![x](https://host/p.png)` rendered as a remote image where the committed page is shown; backticks broke code
    spans."""
    from harness.matrix.render import matrix_document, render_markdown
    from harness.matrix.spec import load_spec

    spec = load_spec(matrix.spec)
    evil_id = "kv`" + LINK + "`"
    cells = {
        "1.0.0": cell("1.0.0", metrics={"kv": GAUGE, evil_id: GAUGE}),
        "1.1.0": cell("1.1.0", metrics={"kv": {**GAUGE, "labels": [IMAGE]}}),
        "1.2.0": cell("1.2.0", status="failed"),
    }
    cells["1.2.0"]["reason"] = f"engine said {IMAGE} *and* {LINK}"
    cells["1.2.0"]["log_errors"] = [f"RuntimeError: {IMAGE}"]
    cells["1.1.0"]["identity"] = {"version": f"1.1.0 {LINK}"}
    md = render_markdown(matrix_document(spec, cells))
    page = _assert_inert(md)
    assert "<em>" not in page  # *and* stays text
    # the id's backticks did not end its code span: the whole id is one code element
    assert any(code.startswith("kv") and "click" in code for code in re.findall(r"<code>([^<]*)</code>", page))


def _report(**over: Any) -> dict[str, Any]:
    side = {"name": "old", "ok": True, "engine": {"kind": "vllm", "version": "0.11.0"}, "identity": {}}
    report: dict[str, Any] = {
        "verdict": {"verdict": "review", "reasons": []},
        "old": dict(side),
        "new": {**side, "name": "new"},
        "comparison": {"conformance": {"not_run": "not run"}},
        "settings": {"prompt_sets": ["chat"], "tolerance": 0.02, "margin": 0.1},
        "created_at": "now",
        "wall_seconds": 1.0,
    }
    report.update(over)
    return report


def test_23_upgrade_md_external_text_renders_as_text():
    """Finding 23 (upgrade.md): a reason, an engine's error, a wire key, a metric name and a log tail from outside
    stay text; a log tail holding a fence line cannot end its code block."""
    from harness.upgrade.render import render_markdown

    old = {"name": f"old {LINK}", "ok": False, "engine": {"version": "0.11.0"}, "identity": {},
           "error": f"EngineExited: {IMAGE}", "log_tail": f"line 1\n```\n{IMAGE}\n<script>x</script>\n"}  # fmt: skip
    report = _report(
        old=old,
        verdict={"verdict": "review", "reasons": [{"level": "review", "text": f"metric {IMAGE} removed"}]},
        comparison={
            "conformance": {"not_run": LINK},
            "wire": {"chat": {"added": ["a`b" + LINK], "removed": [IMAGE]}},
            "metrics": {"counts": {"old": 1, "new": 1}, "removed": [{"name": IMAGE, "type": "gauge"}]},
        },
    )
    md = render_markdown(report)
    page = _assert_inert(md)
    assert page.count("<pre>") == 1 and "&lt;script&gt;" in page  # the whole tail in one block, as text
    tail = page.split("<pre>")[1].split("</pre>")[0]
    assert "line 1" in tail and IMAGE in tail and "&lt;script&gt;" in tail
    assert any("a" in code and "click" in code for code in re.findall(r"<code>([^<]*)</code>", page))


# --- #7: a cell names the libraries its engine ran preloaded, without a machine path --------------------------------


def test_7_preloaded_libraries_are_named_in_the_cell(tmp_path, monkeypatch):
    """Finding 7: the cell records the release's LD_PRELOAD entries as the spec writes them ({env_dir} kept), so a
    cell says what its engine ran with and holds no machine path; a cell without it is still reused."""
    import harness.envs
    from harness.errors import InstallError
    from harness.matrix.cell import check_cell_shape, make_key, preload_entries, reuse_decision, run_cell

    env_dir = tmp_path / "envs" / "vllm-0.15.1-abc"
    value = f"/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4:{env_dir}/lib/libiomp5.so"
    manifest = SimpleNamespace(server=SimpleNamespace(env={"LD_PRELOAD": value}))
    want = ["/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "{env_dir}/lib/libiomp5.so"]
    assert preload_entries(manifest, env_dir) == want
    assert preload_entries(SimpleNamespace(server=SimpleNamespace(env={})), env_dir) is None

    def no_install(_m: Any) -> None:
        raise InstallError("no index here")

    monkeypatch.setattr(harness.envs, "env_for", lambda _m: SimpleNamespace(path=env_dir, marker=env_dir / "m"))
    monkeypatch.setattr(harness.envs, "ensure_env", no_install)
    key = make_key("a" * 64, "b" * 64, "c" * 64)
    failed = run_cell("1.0.0", manifest, key, tmp_path, expectations="vllm-0.11", baseline="1.0.0")
    assert failed["stage"] == "install" and failed["env_preload"] == want
    assert str(tmp_path) not in json.dumps(failed["env_preload"])
    check_cell_shape(failed, "cell.json")
    committed = json.loads((REPO_ROOT / "matrix" / "results" / "cells" / "0.15.1.json").read_text())
    assert "env_preload" not in committed and reuse_decision(committed, committed["key"])[0]  # the key is unchanged
    assert reuse_decision({**committed, "env_preload": want}, committed["key"])[0]
