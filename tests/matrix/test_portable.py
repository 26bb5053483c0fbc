"""No absolute path of the machine that ran a cell, and no terminal escape, in a cell or in the committed results."""

from __future__ import annotations

import re

import pytest

from harness.matrix.cell import failed_cell, load_cell, make_key, write_cell
from harness.matrix.portable import machine_roots, portable_cell, portable_text, portable_value
from tests.matrix.helpers import REPO

ROOTS = {
    "env_dir": ["/srv/h/envs/vllm-1.0-abc"],
    "harness_home": ["/srv/h"],
    "home": ["/srv"],
    "out": ["/data/run1/"],
    "tmp": ["/tmp"],
    "python": ["/opt/py/3.11"],
}


def test_roots_become_placeholders_longest_first():
    text = (
        'File "/srv/h/envs/vllm-1.0-abc/lib/x.py", line 3\n'
        "model /srv/h/models/tiny; home /srv/.cache; (full log: /data/run1/work/1.0/engine.log)\n"
        'File "/opt/py/3.11/lib/contextlib.py"; scratch /tmp/abc'
    )
    assert portable_text(text, ROOTS) == (
        'File "{env_dir}/lib/x.py", line 3\n'
        "model {harness_home}/models/tiny; home {home}/.cache; (full log: {out}/work/1.0/engine.log)\n"
        'File "{python}/lib/contextlib.py"; scratch {tmp}/abc'
    )


def test_a_root_is_replaced_only_as_a_whole_path_component():
    assert portable_text("/var/tmp/x /tmpfs/y /srv/h2/z /srvx", ROOTS) == "/var/tmp/x /tmpfs/y {home}/h2/z /srvx"
    assert portable_text("file:///tmp/a", ROOTS) == "file://{tmp}/a"
    assert portable_text("/srv/h/envs/vllm-1.0-abcdef/x", ROOTS) == "{harness_home}/envs/vllm-1.0-abcdef/x"


def test_escapes_go_and_the_rest_of_a_value_stays():
    value = {
        "log_tail": "\x1b[1;36m(APIServer pid=1)\x1b[0;0m File /tmp/q",
        "n": 3,
        "ok": True,
        "none": None,
        "list": ["/srv/a", 1.5],
        "/srv/key": "k",
    }
    assert portable_value(value, ROOTS) == {
        "log_tail": "(APIServer pid=1) File {tmp}/q",
        "n": 3,
        "ok": True,
        "none": None,
        "list": ["{home}/a", 1.5],
        "{home}/key": "k",
    }
    assert portable_value(portable_value(value, ROOTS), ROOTS) == portable_value(value, ROOTS)  # idempotent


def test_machine_roots_name_this_machine(tmp_path, monkeypatch):
    home = tmp_path / "hh"
    monkeypatch.setenv("HARNESS_HOME", str(home))
    env = home / "envs" / "vllm-9-x"
    env.mkdir(parents=True)
    (env / "pyvenv.cfg").write_text("home = /opt/base-python/bin\nversion = 3.11.7\n")
    roots = machine_roots(tmp_path / "out", env)
    assert str(home) in roots["harness_home"] and str(env) in roots["env_dir"]
    assert "/opt/base-python" in roots["python"] and str(tmp_path / "out") in roots["out"]


def test_written_cells_hold_no_path_of_this_machine(tmp_path, monkeypatch):
    home = tmp_path / "hh"
    monkeypatch.setenv("HARNESS_HOME", str(home))
    out = tmp_path / "matrix"
    env = home / "envs" / "vllm-1.0.0-abc"
    key = make_key("a" * 64, "b" * 64, "c" * 64)
    tail = f'\x1b[31mFile "{env}/lib/vllm/x.py"\x1b[0m\n(full log: {out}/work/1.0.0/run/engine.log)'
    cell = failed_cell("1.0.0", key, "launch", f"exited; model {home}/models/tiny", tail, install={"env": env.name})
    write_cell(out, cell)
    text = (out / "cells" / "1.0.0.json").read_text()
    assert str(tmp_path) not in text and "\\u001b" not in text
    saved = load_cell(out, "1.0.0")
    assert saved is not None and saved["key"] == key  # the reuse key is untouched
    assert saved["log_tail"] == 'File "{env_dir}/lib/vllm/x.py"\n(full log: {out}/work/1.0.0/run/engine.log)'
    assert saved["reason"] == "exited; model {harness_home}/models/tiny"
    assert portable_cell(saved, out) == saved


# an absolute path of some machine: a Unix root directory that holds users' or scratch files, or a drive letter
_MACHINE_PATH = re.compile(r"(?<![\w.}\-/])(/root|/home|/work|/tmp|/usr/local|/Users|/var/folders)(?=/|\b)|\b[A-Z]:\\")
_ESCAPE = re.compile(r"[\x1b\x9b]|\\u001b|\\u009b|\\x1b", re.I)  # raw, or as JSON and Python write it


@pytest.mark.parametrize(("name", "at_least"), [("results", 24), ("drift", 10)])
def test_committed_results_hold_no_machine_path_and_no_terminal_escape(name, at_least):
    results = REPO / "matrix" / name
    files = [p for p in sorted(results.rglob("*")) if p.is_file()]
    assert len(files) > at_least  # the cells, the pages, the golden recordings (and the main matrix's locks)
    found = []
    for p in files:
        text = p.read_bytes().decode("utf-8", "replace")
        for m in _MACHINE_PATH.finditer(text):
            found.append(f"{p.relative_to(results)}: {text[max(0, m.start() - 40) : m.end() + 40]!r}")
        # a golden recording keeps the model's output byte for byte (the tiny random model emits ESC now and then):
        # that is data the diff compares, not a log's colour
        if _ESCAPE.search(text) and p.parts[len(results.parts)] != "golden":
            found.append(f"{p.relative_to(results)}: a terminal escape")
    assert not found, "\n".join(found[:20])


def test_the_walk_would_see_what_it_looks_for():
    assert _MACHINE_PATH.search('File "/root/.cache/harness/envs/x/lib.py"')
    assert _MACHINE_PATH.search("(full log: /work/matrix-full/work/0.11.2/engine.log)")
    assert _MACHINE_PATH.search(r"C:\Users\me\x")
    assert _ESCAPE.search('"log_tail": "\\u001b[1;36m(APIServer)"') and _ESCAPE.search("\x1b[0m")
    assert not _MACHINE_PATH.search("{out}/work/0.11.2/engine.log and {home}/tmp and /lib/x86_64-linux-gnu/libstdc++")
