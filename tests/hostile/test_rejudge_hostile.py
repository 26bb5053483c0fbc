"""Hostile saved runs and options for `harness conform --rejudge` / `--render` (issue 21: findings 15-18, 24, 25).

15: --out's evidence/ is never written through a symbolic link (into the judged run's own evidence), and an earlier
    OUT/evidence is replaced whole with --force, refused without it, never mixed.
16: every mode of `conform` refuses the options it does not use (`--render DIR --out X` rewrote DIR/conformance.html).
17: an index with no case, or without a case its conformance.json lists, is an error, not a clean re-judge.
18: -k selects the saved cases that are judged again.
24: one byte budget for all the evidence files together, each read once however many entries name it.
25: an offline re-judge never sleeps for real: a `cancelled` exchange is replayed at once, and an index number outside
    the range a run writes (`max_stream_s: 5e8`) is refused.

The saved runs come from the TGI stand-in (tests/support/standin_server.py) and tests/support/badserver.py, both on
127.0.0.1; the re-judges themselves make no connection at all.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from tests.support.badserver import BadServer
from tests.support.standin_server import serve

KEY = "rejudge-hostile-key-5e1b"
KEY_ENV = "HARNESS_H21_REJUDGE_KEY"


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error: "), err
    return lines[0]


def index_of(run: Path) -> dict:
    return json.loads((run / "evidence" / "index.json").read_text())


def write_index(run: Path, index: dict) -> None:
    (run / "evidence" / "index.json").write_text(json.dumps(index))


def ids_of(out: Path) -> list[str]:
    return [c["id"] for c in json.loads((out / "conformance.json").read_text())["cases"]]


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory) -> Path:
    """A whole suite against the stand-in, judged by vLLM's expectations (so it has fails), with a key."""
    srv = serve(0, api_key=KEY)
    out = tmp_path_factory.mktemp("rjh") / "live"
    mp = pytest.MonkeyPatch()
    mp.setenv(KEY_ENV, KEY)
    try:
        code = main(["conform", "--url", srv.base_url, "--expect", "vllm-0.11", "--api-key-env", KEY_ENV,
                     "--out", str(out)])  # fmt: skip
    finally:
        mp.undo()
        srv.shutdown()
    assert code == 1 and "fail" in {c["verdict"] for c in index_of(out)["cases"]}
    return out


@pytest.fixture
def run(saved_run, tmp_path) -> Path:
    """A copy of the saved run, for a test to tamper with."""
    dst = tmp_path / "run"
    shutil.copytree(saved_run, dst)
    return dst


def rejudge(capsys, run: Path, *extra) -> tuple[int, str, str]:
    return run_cli(capsys, "conform", "--rejudge", run, "--expect", "vllm-0.11", *extra)


# -- 15: OUT/evidence: never through a symlink, never mixed ---------------------------------------------------------


def _link_to_run_evidence(run: Path, out: Path) -> None:
    out.mkdir()
    (out / "evidence").symlink_to(run / "evidence")


def _old_evidence(run: Path, out: Path) -> None:
    (out / "evidence").mkdir(parents=True)
    (out / "evidence" / "stale.json").write_text("{}")


def _out_is_a_link_into_run_evidence(run: Path, out: Path) -> None:
    out.symlink_to(run / "evidence")


OUT_LAYOUTS = {  # name: (layout, --force, what the refusal says)
    "evidence-symlink": (_link_to_run_evidence, False, "symbolic link"),
    "evidence-symlink-force": (_link_to_run_evidence, True, "symbolic link"),
    "old-evidence": (_old_evidence, False, "--force"),
    "out-inside-run-evidence": (_out_is_a_link_into_run_evidence, True, "evidence"),
}


@pytest.mark.parametrize("name", sorted(OUT_LAYOUTS))
def test_rejudge_out_evidence_is_never_written_through_or_mixed(name, run, tmp_path, capsys):
    """#15: `--rejudge RUN --out OUT` with OUT/evidence a symlink to RUN/evidence rewrote RUN's index.json; an old
    OUT/evidence was mixed with the new files."""
    layout, force, needle = OUT_LAYOUTS[name]
    out = tmp_path / "out"
    layout(run, out)
    before = {p.name: p.read_bytes() for p in (run / "evidence").iterdir()}
    code, _, err = rejudge(capsys, run, "--out", out, *(["--force"] if force else []), "-k", "health")
    assert code == 2
    assert needle in one_line_error(err)
    assert {p.name: p.read_bytes() for p in (run / "evidence").iterdir()} == before  # the input is untouched
    if name == "old-evidence":
        assert [p.name for p in (out / "evidence").iterdir()] == ["stale.json"]


def test_rejudge_force_replaces_old_evidence_whole(run, tmp_path, capsys):
    """#15: with --force, an earlier OUT/evidence is replaced, not mixed with the new files."""
    out = tmp_path / "out"
    _old_evidence(run, out)
    code, _, err = rejudge(capsys, run, "--out", out, "--force", "-k", "health")
    assert code in (0, 1), err
    names = {p.name for p in (out / "evidence").iterdir()}
    assert "stale.json" not in names and "index.json" in names
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary directory left


# -- 16: each mode takes its own options, and refuses the others ----------------------------------------------------

MODE_MISUSE = {  # name: (argv after `conform`, the option named in the refusal)
    "render-out": (["--render", "{run}", "--out", "{tmp}/x"], "--out"),
    "render-force": (["--render", "{run}", "--force"], "--force"),
    "render-k": (["--render", "{run}", "-k", "health"], "-k"),
    "render-expect": (["--render", "{run}", "--expect", "openai"], "--expect"),
    "rejudge-stream-seconds": (
        ["--rejudge", "{run}", "--expect", "vllm-0.11", "--stream-seconds", "1"],
        "--stream-seconds",
    ),  # fmt: skip
    "rejudge-model": (["--rejudge", "{run}", "--expect", "vllm-0.11", "--model", "m"], "--model"),
    "rejudge-api-key-env": (
        ["--rejudge", "{run}", "--expect", "vllm-0.11", "--api-key-env", KEY_ENV],
        "--api-key-env",
    ),  # fmt: skip
    "url-extra-arg": (["--url", "http://127.0.0.1:9", "--expect", "openai", "--extra-arg=--x"], "--extra-arg"),
    "list-k": (["--list", "-k", "health"], "-k"),
}


@pytest.mark.parametrize("name", sorted(MODE_MISUSE))
def test_an_option_a_mode_does_not_use_is_refused(name, run, tmp_path, capsys, monkeypatch):
    """#16: `conform --render RUN_DIR --out X` ignored --out, --force and -k and rewrote RUN_DIR/conformance.html."""
    monkeypatch.setenv(KEY_ENV, KEY)
    argv, flag = MODE_MISUSE[name]
    html = run / "conformance.html"
    before = (html.stat().st_ino, html.read_bytes())
    code, out, err = run_cli(capsys, "conform", *(a.format(run=run, tmp=tmp_path) for a in argv))
    assert code == 2
    line = one_line_error(err)
    assert "does not take" in line and flag in line
    assert (html.stat().st_ino, html.read_bytes()) == before
    assert not (tmp_path / "x").exists()


# -- 17: no case, or a case cut out of the index, is an error --------------------------------------------------------


def _no_cases(index: dict, report: dict) -> None:
    index["cases"] = []


def _fails_cut_out(index: dict, report: dict) -> None:
    index["cases"] = [c for c in index["cases"] if c["verdict"] != "fail"]


def _all_cut_out_of_both(index: dict, report: dict) -> None:
    index["cases"], report["cases"] = [], []


def _case_added(index: dict, report: dict) -> None:
    index["cases"].append({**index["cases"][0], "id": "health.not-in-the-report"})


INDEX_TAMPERING = {  # name: (tampering, what the error names)
    "no-cases": (_no_cases, "no case saved"),
    "fails-cut-out": (_fails_cut_out, "is not in the index"),
    "no-cases-anywhere": (_all_cut_out_of_both, "no case saved"),
    "case-not-in-report": (_case_added, "is not a case of"),
}


@pytest.mark.parametrize("name", sorted(INDEX_TAMPERING))
def test_a_rejudge_of_missing_cases_is_an_error(name, run, capsys):
    """#17: an index with no cases re-judged clean (exit 0); cutting the failing cases out of index.json gave a clean
    re-judge of a run with fails."""
    tamper, needle = INDEX_TAMPERING[name]
    index = index_of(run)
    report = json.loads((run / "conformance.json").read_text())
    tamper(index, report)
    write_index(run, index)
    (run / "conformance.json").write_text(json.dumps(report))
    code, out, err = rejudge(capsys, run)
    assert code == 2, out
    line = one_line_error(err)
    assert needle in line and "index.json" in line


# -- 18: -k selects what is judged again ----------------------------------------------------------------------------


def test_rejudge_honours_k(saved_run, tmp_path, capsys):
    """#18: `--rejudge -k 'health.*'` judged every saved case again."""
    out = tmp_path / "out"
    code, stdout, err = rejudge(capsys, saved_run, "-k", "health.*", "--out", out)
    assert code in (0, 1), err
    got = ids_of(out)
    assert got and all(i.startswith("health.") for i in got)
    assert got == [i for i in ids_of(saved_run) if i.startswith("health.")]
    assert f"rejudged {len(got)} cases" in stdout
    assert [c["id"] for c in index_of(out)["cases"]] == got  # what was replayed is saved: it can be judged again


def test_rejudge_k_that_selects_nothing_is_an_error(saved_run, capsys):
    """#18: a -k that selects none of the saved cases judges nothing: not a pass."""
    code, _, err = rejudge(capsys, saved_run, "-k", "no.such.case")
    assert code == 2 and "selects none" in one_line_error(err)


# -- 24: one byte budget, each file read once -----------------------------------------------------------------------


def _count_opens(monkeypatch, target: Path) -> list[str]:
    """Every os.open of `target` (by any name: its resolved path)."""
    real_open, real = os.open, str(target.resolve())
    opened: list[str] = []

    def counting(p, *a, **kw):
        if not isinstance(p, int) and os.path.realpath(os.fspath(p)) == real:
            opened.append(os.fspath(p))
        return real_open(p, *a, **kw)

    monkeypatch.setattr(os, "open", counting)
    return opened


def test_a_file_named_by_many_entries_is_read_once(run, capsys, monkeypatch):
    """#24: 60 index entries naming one 10 MB file read (and kept) it 60 times: 1.27 GB resident."""
    big = run / "evidence" / "big.json"
    pad = "x" * (1 << 20)
    big.write_text(json.dumps({"format": 1, "key": "x", "exchanges": [], "padding": pad}))
    index = index_of(run)
    for c in index["cases"][:60]:
        c["file"] = "big.json"
    write_index(run, index)
    opened = _count_opens(monkeypatch, big)
    code, out, err = rejudge(capsys, run)
    assert code in (0, 1), err
    assert len(opened) == 1, opened


def test_the_evidence_files_together_have_one_budget(run, capsys, monkeypatch):
    """#24: the 256 MiB cap was per entry, so many files just under it were all read; the budget is the total."""
    import harness.conformance.evidence as evidence

    files = [p for p in (run / "evidence").iterdir() if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    biggest = max(p.stat().st_size for p in files)
    # every file fits the per-file cap, the index fits its own, but the files together are over the budget
    monkeypatch.setattr(evidence, "MAX_EVIDENCE_BYTES", max(total // 2, biggest + 1), raising=False)
    code, out, err = rejudge(capsys, run)
    assert code == 2, out
    assert "together" in one_line_error(err)


# -- 25: an offline re-judge never sleeps for real ------------------------------------------------------------------


@pytest.fixture
def long_sleeps(monkeypatch) -> list[float]:
    """Every asyncio.sleep of a second or more, answered at once (so a regression records, rather than hangs)."""
    real_sleep = asyncio.sleep
    asked: list[float] = []

    async def sleep(delay, result=None):
        if delay >= 1.0:
            asked.append(delay)
            return result
        return await real_sleep(delay, result)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return asked


@pytest.fixture(scope="module", params=["stall", "drip"])
def bounded_run(request, tmp_path_factory) -> Path:
    """A live run whose chat request was ended by the run's time bound (0.5 s): before any answer (stall) or during
    the body (drip); its exchange is saved as `cancelled`."""
    out = tmp_path_factory.mktemp("bound") / request.param
    with BadServer({"/v1/chat/completions": request.param, "*": "ok"}) as s:
        code = main(["conform", "--url", s.url, "--expect", "vllm-0.11", "-k", "chat.length", "--stream-seconds",
                     "0.5", "--out", str(out)])  # fmt: skip
    assert code == 1
    saved = json.loads((out / "evidence" / "chat.length.json").read_text())
    assert [e["ended"] for e in saved["exchanges"]][0] == "cancelled"
    return out


def test_a_cancelled_exchange_is_replayed_without_sleeping(bounded_run, tmp_path, capsys, long_sleeps):
    """#25: the replay slept `max_stream_s + 5` for each exchange the live run's bound had ended."""
    out = tmp_path / "again"
    code, stdout, err = rejudge(capsys, bounded_run, "--out", out)
    assert long_sleeps == []
    assert code == 1, err
    live = json.loads((bounded_run / "conformance.json").read_text())["cases"]
    again = json.loads((out / "conformance.json").read_text())["cases"]
    assert [(c["id"], c["verdict"], c["behaviour"]) for c in again] == [
        (c["id"], c["verdict"], c["behaviour"]) for c in live
    ]
    assert again[0]["extra"]["rejudge"]["rejudged"] is True
    # what the re-judge recorded is judged again the same, without sleeping either
    code, _, err = rejudge(capsys, out, "--out", tmp_path / "third")
    assert code == 1 and long_sleeps == [], err
    assert ids_of(tmp_path / "third") == ids_of(out)


@pytest.mark.parametrize("field, value", [("max_stream_s", 5e8), ("max_stream_s", -1), ("max_stream_bytes", 1e300),
                                          ("max_stream_s", "45")])  # fmt: skip
def test_an_index_number_out_of_range_is_refused(field, value, bounded_run, tmp_path, capsys, long_sleeps):
    """#25: `max_stream_s: 5e8` with one cancelled exchange made the re-judge sleep until the suite's 600 s bound."""
    run = tmp_path / "run"
    shutil.copytree(bounded_run, run)
    index = index_of(run)
    index[field] = value
    write_index(run, index)
    code, out, err = rejudge(capsys, run)
    assert long_sleeps == []
    assert code == 2, out
    line = one_line_error(err)
    assert field in line and "index.json" in line
