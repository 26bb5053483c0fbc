"""Recording files: strict reading (file + line in every error), no overwrite without force, atomic writes."""

from __future__ import annotations

import json
import os

import pytest

from harness.cli import main
from harness.errors import DataError, OutputError, RefusedError
from harness.golden.store import load_recording, write_recording
from harness.manifest import DEFAULT_MANIFEST

from .helpers import choice, meta, record, write

TOKS = [72, 101, 108, 108, 111]


def _rec(tmp_path, n=3):
    d = tmp_path / "rec"
    write(d, {"chat": [record(f"p{i}", [choice(TOKS)]) for i in range(n)]})
    return d


def _snapshot(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_roundtrip(tmp_path):
    d = _rec(tmp_path)
    r = load_recording(d)
    assert list(r.sets["chat"]) == ["p0", "p1", "p2"]
    m = json.loads((d / "meta.json").read_text())
    assert (
        m["format"] == "harness-golden/1"
        and m["sets"]["chat"]["prompts"] == 3
        and len(m["sets"]["chat"]["sha256"]) == 64
    )


def _strip_sha(d):
    """Drop the per-file sha256 so the line-level checks (not the content hash) are what fails."""
    m = json.loads((d / "meta.json").read_text())
    m["sets"]["chat"].pop("sha256")
    (d / "meta.json").write_text(json.dumps(m))


def test_truncated_file_names_file_and_line(tmp_path):
    d = _rec(tmp_path)
    _strip_sha(d)
    f = d / "chat.jsonl"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 40])  # cut inside line 3
    with pytest.raises(DataError, match=r"chat\.jsonl: line 3: truncated"):
        load_recording(d)


def test_corrupt_line_names_file_and_line(tmp_path):
    d = _rec(tmp_path)
    _strip_sha(d)
    f = d / "chat.jsonl"
    lines = f.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace('"token_ids":[', '"token_ids":[[', 1)
    f.write_text("".join(lines))
    with pytest.raises(DataError, match=r"chat\.jsonl: line 2: "):
        load_recording(d)


def test_malformed_record_field_named(tmp_path):
    d = _rec(tmp_path)
    _strip_sha(d)
    f = d / "chat.jsonl"
    lines = f.read_text().splitlines(keepends=True)
    obj = json.loads(lines[2])
    obj["choices"][0]["logprobs"][1] = [1, "x", []]
    lines[2] = json.dumps(obj) + "\n"
    f.write_text("".join(lines))
    with pytest.raises(DataError, match=r"chat\.jsonl: line 3: choices\[0\]\.logprobs\[1\]"):
        load_recording(d)


def test_content_hash_mismatch_detected(tmp_path):
    d = _rec(tmp_path)
    f = d / "chat.jsonl"
    f.write_text(f.read_text().replace('"usage":{', '"usage":{"x":1,', 1))
    with pytest.raises(DataError, match=r"chat\.jsonl: content does not match meta\.json"):
        load_recording(d)


def test_corrupt_meta_names_line(tmp_path):
    d = _rec(tmp_path)
    text = (d / "meta.json").read_text()
    (d / "meta.json").write_text(text[: len(text) // 2])
    with pytest.raises(DataError, match=r"meta\.json: line \d+: not valid JSON"):
        load_recording(d)


def test_missing_set_file(tmp_path):
    d = _rec(tmp_path)
    (d / "chat.jsonl").unlink()
    with pytest.raises(DataError, match=r"chat\.jsonl: missing"):
        load_recording(d)


def test_corrupt_file_is_not_overwritten_by_diff(tmp_path, capsys):
    d = _rec(tmp_path)
    _strip_sha(d)
    f = d / "chat.jsonl"
    f.write_bytes(f.read_bytes()[:-30])
    before = _snapshot(d)
    good = tmp_path / "good"
    write(good, {"chat": [record("p0", [choice(TOKS)])]})
    assert main(["golden", "diff", str(good), str(d)]) == 2
    err = capsys.readouterr().err
    assert "chat.jsonl: line 3" in err and "truncated" in err
    assert _snapshot(d) == before


def test_no_overwrite_without_force(tmp_path):
    d = _rec(tmp_path)
    before = _snapshot(d)
    with pytest.raises(RefusedError, match="--force"):
        write(d, {"chat": [record("z", [choice(TOKS)])]})
    assert _snapshot(d) == before
    write(d, {"chat": [record("z", [choice(TOKS)])]}, force=True)
    assert list(load_recording(d).sets["chat"]) == ["z"]


def test_cli_record_refuses_before_launching(tmp_path, capsys):
    d = _rec(tmp_path)
    before = _snapshot(d)
    rc = main(["golden", "record", str(DEFAULT_MANIFEST), "--out", str(d)])
    assert rc == 2 and "--force" in capsys.readouterr().err
    assert _snapshot(d) == before


def test_invalid_records_never_written(tmp_path):
    bad = record("p", [choice(TOKS)])
    bad["choices"][0]["token_ids"] = "nope"
    with pytest.raises(DataError, match="token_ids"):
        write_recording(tmp_path / "x", meta(), {"chat": [bad]})
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


def test_atomic_write_failure_leaves_old_file(tmp_path, monkeypatch):
    d = _rec(tmp_path)
    before = _snapshot(d)

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OutputError, match="disk full"):  # one line for the user, not a traceback
        write(d, {"chat": [record("z", [choice(TOKS)])]}, force=True)
    monkeypatch.undo()
    assert _snapshot(d) == before  # no temp files left, old content intact
