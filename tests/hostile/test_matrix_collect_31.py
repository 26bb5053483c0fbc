"""Issue 31, findings 3, 6, 16 and 21: a cell's text shown escaped (`--cell-index`, a run's failed-cell summary,
`--collect`'s "not taken" line), `--collect` never writing through a symlink under OUT, `--collect` copying only
regular files within one bound and checking all before writing anything, and `--emit k8s-job`'s options and image.
No engine, no network; a FIFO is never opened (the checks are by lstat)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from harness.cli import main
from harness.matrix.cell import load_cell
from harness.matrix.executors import GOLDEN_MAX_BYTES
from tests.matrix.helpers import REPO, cell, with_current_key, write_spec

SPEC = REPO / "matrix" / "vllm-cpu.yaml"
CI_SPEC = REPO / "matrix" / "vllm-cpu-ci.yaml"
RESULTS = REPO / "matrix" / "results"
HOSTILE = "boom \x1b]0;owned\x07 \x1b[2J \x9b31m \u202eevil"  # OSC retitle, CSI clear, C1 CSI, bidi override
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def _raw_in(text: str) -> list[str]:
    return [c for c in RAW if c in text]


def _pod_dir(tmp: Path, name: str, release: str) -> Path:
    """A directory as one `--cell-index` pod leaves it: a committed cell (with today's key) and its recording."""
    d = tmp / name
    (d / "cells").mkdir(parents=True)
    c = with_current_key(json.loads((RESULTS / "cells" / f"{release}.json").read_text()), release, CI_SPEC)
    (d / "cells" / f"{release}.json").write_text(json.dumps(c))
    shutil.copytree(RESULTS / "golden" / release, d / "golden" / release)
    return d


def _failed_cell_in(out: Path, release: str) -> None:
    """A failed cell with today's key (so it is reused, not run) whose reason holds terminal escapes."""
    c = with_current_key(cell(release, status="failed"), release, CI_SPEC)
    c["reason"] = HOSTILE
    (out / "cells").mkdir(parents=True, exist_ok=True)
    (out / "cells" / f"{release}.json").write_text(json.dumps(c))


def _collect(out: Path, *dirs: Path) -> int:
    return main(["matrix", str(CI_SPEC), "--collect", *map(str, dirs), "--out", str(out)])


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# finding 3: a cell's text reaches the terminal escaped


def test_cell_index_shows_a_failed_cells_reason_escaped(tmp_path, capsys):
    out = tmp_path / "m"
    _failed_cell_in(out, "0.11.0")
    assert main(["matrix", str(CI_SPEC), "--cell-index", "0", "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert "failed at launch: boom \\x1b]0;owned\\x07" in captured.out, captured.out
    assert _raw_in(captured.out + captured.err) == []


def test_a_runs_failed_cell_summary_shows_the_reason_escaped(tmp_path, capsys):
    out = tmp_path / "m"
    _failed_cell_in(out, "0.11.0")
    assert main(["matrix", str(CI_SPEC), "--releases", "0.11.0", "--out", str(out)]) == 1
    captured = capsys.readouterr()
    # the run rewrites the reused cell (its ANSI sequences dropped as a cell is written); what is left is escaped
    assert "0.11.0: failed at launch: boom" in captured.out and "\\u202eevil" in captured.out, captured.out
    assert _raw_in(captured.out + captured.err) == []


def test_collects_not_taken_line_shows_the_cells_key_escaped(tmp_path, capsys):
    a = _pod_dir(tmp_path, "a", "0.11.0")
    c = json.loads((a / "cells" / "0.11.0.json").read_text())
    c["key"]["lock_sha256"] = "\x1b]0;x\x07\x9b2J"  # a stale key, quoted in the "not taken" line
    (a / "cells" / "0.11.0.json").write_text(json.dumps(c))
    assert _collect(tmp_path / "out", a) == 0
    err = capsys.readouterr().err
    assert "0.11.0 not taken: lock_sha256 changed (\\x1b]0;x\\x07\\x9b2J" in err, err
    assert _raw_in(err) == []


def test_a_run_says_why_it_runs_a_cell_escaped(tmp_path):
    """The driver's "running: why" line quotes the stored cell's key (the cell may come from another machine)."""
    from harness.matrix.cell import write_cell
    from harness.matrix.run import run_matrix
    from harness.matrix.spec import load_spec

    spec = load_spec(write_spec(tmp_path, ["1.0.0"]))
    out = tmp_path / "m"
    (out / "cells").mkdir(parents=True)
    (out / "cells" / "1.0.0.json").write_text(json.dumps(cell("1.0.0", key={"lock_sha256": "\x1b[2J\x9b1m"})))

    class Fake:  # stands for an executor: the cell "runs" with the planned key
        def run(self, spec, jobs, out, *, prompt_sets, say):
            for job in jobs:
                write_cell(out, cell(job.release, key=job.key))

    said: list[str] = []
    run_matrix(spec, out, spec.versions, executor=Fake(), say=said.append)
    running = [m for m in said if "running:" in m]
    assert running and "\\x1b[2J\\x9b1m" in running[0], said
    assert _raw_in("".join(said)) == []


# finding 6: no write through a symlink under OUT


@pytest.mark.parametrize("linked", ["golden", "golden/0.11.0", "cells"])
def test_collect_refuses_a_symlink_where_it_writes_and_leaves_its_target_alone(tmp_path, capsys, linked):
    a = _pod_dir(tmp_path, "a", "0.11.0")
    other = tmp_path / "other-run"  # another matrix's directory, which the link points into
    (other / "0.11.0").mkdir(parents=True)
    (other / "0.11.0" / "keep.json").write_text("{}")
    out = tmp_path / "out"
    (out / linked).parent.mkdir(parents=True, exist_ok=True)
    (out / linked).symlink_to(other if linked != "golden/0.11.0" else other / "0.11.0")
    assert _collect(out, a) == 2
    line = _one_line(capsys.readouterr().err)
    assert "symlink" in line and linked in line, line
    assert (other / "0.11.0" / "keep.json").read_text() == "{}"
    assert sorted(p.name for p in other.rglob("*")) == ["0.11.0", "keep.json"]  # nothing written there
    assert not (out / "matrix.json").exists()


# finding 16: regular files only, one bound, all checked before anything is copied


def _refused_and_out_untouched(out: Path, capsys, says: str) -> None:
    line = _one_line(capsys.readouterr().err)
    assert says in line, line
    assert load_cell(out, "0.11.0") is None and not (out / "matrix.json").exists()
    assert sorted(p.name for p in (out / "golden").iterdir()) == ["0.11.0"]  # no work directory left behind
    assert sorted(p.name for p in (out / "golden" / "0.11.0").iterdir()) == ["earlier.json"]  # not replaced


@pytest.fixture
def out_with_a_recording(tmp_path):
    """OUT holding an earlier recording of 0.11.0 (no cell), which a refused collect must leave as it is."""
    out = tmp_path / "out"
    (out / "golden" / "0.11.0").mkdir(parents=True)
    (out / "golden" / "0.11.0" / "earlier.json").write_text("{}")
    return out


def test_collect_refuses_a_fifo_in_a_recording_without_opening_it(tmp_path, capsys, out_with_a_recording):
    a = _pod_dir(tmp_path, "a", "0.11.0")
    os.mkfifo(a / "golden" / "0.11.0" / "zz-pipe")  # sorted last: the other files would be copied first
    assert _collect(out_with_a_recording, a) == 2
    _refused_and_out_untouched(out_with_a_recording, capsys, "not a regular file")


def test_collect_refuses_a_character_device_in_a_recording(tmp_path, capsys, out_with_a_recording):
    a = _pod_dir(tmp_path, "a", "0.11.0")
    try:  # /dev/null's numbers: the old code copied it (as an empty file) instead of refusing; /dev/zero filled a disk
        os.mknod(a / "golden" / "0.11.0" / "dev", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod is not permitted here (the FIFO test covers the file-type check)")
    assert _collect(out_with_a_recording, a) == 2
    _refused_and_out_untouched(out_with_a_recording, capsys, "not a regular file")


def test_collect_refuses_a_recording_over_the_bound_before_reading_it(tmp_path, capsys, out_with_a_recording):
    a = _pod_dir(tmp_path, "a", "0.11.0")
    half = GOLDEN_MAX_BYTES // 2 + 1  # each file within the bound, the two together over it: one total budget
    for name in ("big-1.bin", "big-2.bin"):
        with open(a / "golden" / "0.11.0" / name, "wb") as f:
            f.truncate(half)  # sparse: no disk used
    assert _collect(out_with_a_recording, a) == 2
    _refused_and_out_untouched(out_with_a_recording, capsys, f"exceeds {GOLDEN_MAX_BYTES >> 20} MiB")


def test_collect_checks_every_release_before_it_copies_any(tmp_path, capsys):
    """A good cell of one release and a FIFO in another's recording: nothing at all is written to OUT."""
    a, b = _pod_dir(tmp_path, "a", "0.11.0"), _pod_dir(tmp_path, "b", "0.32.0")
    os.mkfifo(b / "golden" / "0.32.0" / "pipe")
    out = tmp_path / "out"
    assert _collect(out, a, b) == 2
    assert "not a regular file" in _one_line(capsys.readouterr().err)
    assert not (out / "golden").exists() and load_cell(out, "0.11.0") is None


def test_collect_still_copies_a_good_recording_whole(tmp_path, capsys):
    a = _pod_dir(tmp_path, "a", "0.11.0")
    out = tmp_path / "out"
    (out / "golden" / "0.11.0").mkdir(parents=True)
    (out / "golden" / "0.11.0" / "stale.json").write_text("{}")  # an earlier recording is replaced, not merged
    assert _collect(out, a) == 0, capsys.readouterr().err
    src = sorted(p.relative_to(a / "golden").as_posix() for p in (a / "golden").rglob("*"))
    assert sorted(p.relative_to(out / "golden").as_posix() for p in (out / "golden").rglob("*")) == src
    for rel in src:
        if (a / "golden" / rel).is_file():
            assert (out / "golden" / rel).read_bytes() == (a / "golden" / rel).read_bytes()


# finding 21: --emit k8s-job's names, options and image


def test_emit_blames_the_spec_name_not_a_job_name_that_was_not_given(tmp_path, capsys):
    p = write_spec(tmp_path, ["1.0.0"])
    name = "vllm_cpu_" + "x" * 50  # a fine spec name; harness-matrix-<it> is over Kubernetes' 63
    p.write_text(p.read_text().replace("name: synth\n", f"name: {name}\n"))
    assert main(["matrix", str(p), "--emit", "k8s-job"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--job-name:" not in line and f"the spec's name {name!r}" in line and "give --job-name" in line, line
    assert main(["matrix", str(p), "--emit", "k8s-job", "--job-name", "cells"]) == 0  # the way out it names


@pytest.mark.parametrize(
    "extra, named",
    [
        (["--out", "D"], "--out"),
        (["--prompts", "chat"], "--prompts"),
        (["--retry-failed"], "--retry-failed"),
        (["--out", "D", "--prompts", "chat", "--retry-failed"], "--out, --prompts, --retry-failed"),
    ],
)
def test_emit_refuses_options_it_does_not_use(tmp_path, capsys, extra, named):
    extra = [str(tmp_path / a) if a == "D" else a for a in extra]
    assert main(["matrix", str(SPEC), "--emit", "k8s-job", *extra]) == 2
    captured = capsys.readouterr()
    line = _one_line(captured.err)
    assert f"does not use {named}" in line and captured.out == "", line
    assert not (tmp_path / "D").exists()


DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    "image",
    [
        "reg.example.com/harness:1.0",  # a tag alone: what it names may change between two pods
        "harness",
        f"harness:1\n  hostPath: /@{DIGEST}",
        f"harness :1@{DIGEST}",
        f"harness:1@{DIGEST} ",
        f"\x1b]0;x\x07harness@{DIGEST}",
        f"Harness@{DIGEST}",
        f"harness@sha256:{'A' * 64}",
        f"harness@sha256:{'a' * 63}",
        f"{{harness: 1}}@{DIGEST}",
        f"harness:*@{DIGEST}",
        f"-harness@{DIGEST}",
        "",
    ],
)
def test_emit_refuses_an_image_not_pinned_by_digest(capsys, image):
    assert main(["matrix", str(SPEC), "--emit", "k8s-job", f"--image={image}"]) == 2
    captured = capsys.readouterr()
    line = _one_line(captured.err)
    assert "--image: not an image reference pinned by digest" in line and captured.out == "", line
    assert _raw_in(line) == []


@pytest.mark.parametrize(
    "image",
    [
        f"harness@{DIGEST}",
        f"reg.example.com:5000/team/harness-matrix:1.2.3_rc1@{DIGEST}",
        f"ghcr.io/a/b.c__d:v1@{DIGEST}",
    ],
)
def test_emit_takes_an_image_pinned_by_digest(capsys, image):
    import yaml

    assert main(["matrix", str(SPEC), "--emit", "k8s-job", "--image", image]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["spec"]["template"]["spec"]["containers"][0]["image"] == image
