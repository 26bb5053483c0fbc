"""Bisect: the search over synthetic observables (monotonic, non-monotonic, skipped releases) and the CLI's exit
codes and --json answer, from synthetic cells (no engine)."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.matrix.bisect import search
from tests.matrix.helpers import cell, write_cells, write_spec

VS = [f"1.{i}.0" for i in range(10)]


def _run(values: dict[str, object], known: set[str] = frozenset(), unobservable: set[str] = frozenset()):
    evaluated: list[str] = []

    def evaluate(v):
        evaluated.append(v)
        return (False, None) if v in unobservable else (True, values[v])

    kn = {v: ((False, None) if v in unobservable else (True, values[v])) for v in known}
    res = search(VS, evaluate, kn, mark_ran=lambda v: v in evaluated)
    return res, evaluated


def test_monotonic_change_found_in_log_steps():
    values = {v: ("old" if i < 6 else "new") for i, v in enumerate(VS)}
    res, ran = _run(values)
    assert (res.first_changed, res.last_same) == ("1.6.0", "1.5.0")
    assert len(ran) <= 2 + 4  # --from, --to, then about log2(8) probes
    assert res.values["1.5.0"] == "old" and res.values["1.6.0"] == "new"


def test_known_cells_are_used_before_running_any():
    values = {v: ("old" if i < 3 else "new") for i, v in enumerate(VS)}
    res, ran = _run(values, known=set(VS))
    assert res.first_changed == "1.3.0" and ran == [] and res.ran == []


def test_non_monotonic_answer_is_exact_when_the_cells_exist():
    # changes at 1.3.0 and changes back at 1.6.0: --to equals --from
    values = {v: ("x" if i < 3 or i >= 6 else "y") for i, v in enumerate(VS)}
    res, ran = _run(values, known=set(VS))
    assert (res.first_changed, res.last_same) == ("1.3.0", "1.2.0") and ran == []


def test_non_monotonic_without_cells_reports_none_and_lists_what_it_did_not_see():
    values = {v: ("x" if i < 3 or i >= 6 else "y") for i, v in enumerate(VS)}
    res, ran = _run(values)
    assert res.first_changed is None and ran == ["1.0.0", "1.9.0"]
    assert "1.4.0" in res.unevaluated


def test_unobservable_releases_are_skipped():
    values = {v: ("old" if i < 5 else "new") for i, v in enumerate(VS)}
    res, _ = _run(values, unobservable={"1.4.0", "1.5.0"})
    assert (res.first_changed, res.last_same) == ("1.6.0", "1.3.0")
    assert set(res.skipped) >= {"1.5.0"}


def test_from_release_unobservable_is_an_error():
    res, _ = _run({v: 1 for v in VS}, unobservable={"1.0.0"})
    assert res.error and "1.0.0" in res.error


@pytest.fixture
def synth(tmp_path):
    versions = ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]
    spec = write_spec(tmp_path, versions)
    g = {"type": "gauge", "labels": [], "buckets": None}
    write_cells(
        tmp_path / "results",
        [
            cell("1.0.0", metrics={"kv": g}, wire={"chat": ["choices"]}),
            cell("1.1.0", metrics={"kv": g}, wire={"chat": ["choices"]}),
            cell("1.2.0", metrics={"kv": {**g, "type": "counter"}}, wire={"chat": ["choices", "usage"]}),
            cell("1.3.0", metrics={}, wire={"chat": ["choices", "usage"]}, status="failed"),
        ],
    )
    return spec, tmp_path


def test_cli_change_found_exit_0_and_json(synth, capsys):
    spec, tmp = synth
    out = tmp / "answer.json"
    assert main(["bisect", str(spec), "--metric", "kv", "--to", "1.2.0", "--json", str(out), "--no-run"]) == 0
    text = capsys.readouterr().out
    assert "first changed in 1.2.0 (last same: 1.1.0)" in text and "1.1.0: gauge" in text and "1.2.0: counter" in text
    doc = json.loads(out.read_text())
    assert doc["first_changed"] == "1.2.0" and doc["last_same"] == "1.1.0"
    assert doc["observable"] == {"kind": "metric", "id": "kv"}
    assert doc["evidence"]["first_changed"]["value"]["type"] == "counter" and doc["ran"] == []


def test_cli_wire_key_and_no_change_exit_1(synth, capsys):
    spec, _ = synth
    assert main(["bisect", str(spec), "--wire-key", "chat:usage", "--to", "1.2.0", "--no-run"]) == 0
    assert main(["bisect", str(spec), "--wire-key", "choices", "--to", "1.2.0", "--no-run"]) == 1
    assert "no change from 1.0.0 to 1.2.0" in capsys.readouterr().out


def test_cli_failed_to_release_is_skipped_not_a_change(synth, capsys):
    spec, _ = synth
    assert main(["bisect", str(spec), "--metric", "kv", "--from", "1.2.0", "--no-run"]) == 1
    assert "skipped (no observation): 1.3.0" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["--metric", "kv", "--from", "9.9.9"],
        ["--metric", "kv", "--from", "1.2.0", "--to", "1.1.0"],
        ["--metric", "kv", "--from", "1.3.0"],
        ["--metric", ""],
        ["--metric", "a\x01b"],
        ["--flag=--enforce-eager", "--to", "1.2.0"],
        ["--flag", "enforce-eager", "--to", "1.2.0"],  # flags not captured in --from's cell
        ["--metric", "kv", "--case", "x"],
        [],
    ],
)
def test_cli_bad_input_exit_2(synth, argv, capsys):
    spec, _ = synth
    with pytest.raises(SystemExit) if ("--case" in argv or not argv) else _nothing():
        rc = main(["bisect", str(spec), *argv, "--no-run"])
        assert rc == 2
        assert capsys.readouterr().err.count("\n") == 1


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_cli_json_never_overwrites_the_spec(synth):
    spec, _ = synth
    assert main(["bisect", str(spec), "--metric", "kv", "--json", str(spec), "--no-run"]) == 2
    assert spec.read_text().startswith("format: 1")


def test_bisect_names_the_release_where_an_endpoint_appeared(tmp_path, capsys):
    """A messages case is `absent` in the releases that do not serve /v1/messages: bisect reads the cells and names
    the first release where it is anything else (no engine started)."""
    versions = ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]
    spec = write_spec(tmp_path, versions)
    gone = {"messages.create.shape": {"verdict": "absent", "behaviours": ["status-404"]}}
    there = {"messages.create.shape": {"verdict": "pass", "behaviours": []}}
    write_cells(tmp_path / "results", [cell(v, cases=gone if v < "1.2.0" else there) for v in versions])
    out = tmp_path / "answer.json"
    assert main(["bisect", str(spec), "--case", "messages.create.shape", "--json", str(out), "--no-run"]) == 0
    doc = json.loads(out.read_text())
    assert doc["first_changed"] == "1.2.0" and doc["last_same"] == "1.1.0" and doc["ran"] == []
    assert doc["evidence"]["last_same"]["value"]["verdict"] == "absent"
    text = capsys.readouterr().out
    assert "absent [status-404]" in text and "first changed in 1.2.0" in text
