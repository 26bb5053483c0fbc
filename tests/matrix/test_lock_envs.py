"""`harness lock` inputs (the local-version pin rule, refusals) and `harness envs list|gc` over a throwaway
$HARNESS_HOME: an environment a live process runs from is never deleted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from harness.cli import main
from harness.envs import MARKER, envs_in_use, find_uv, gc_envs, list_envs
from harness.errors import UsageError
from harness.matrix.lock import local_pin_overrides, parse_requirement

META = """Metadata-Version: 2.1
Name: engine-cpu
Version: 0.20.0
Requires-Dist: torch==2.11.0+cpu
Requires-Dist: numpy
Requires-Dist: kernels==1.2.0+cpu ; platform_machine == "x86_64"
Requires-Dist: extra-thing==3.0+cpu ; extra == "audio"
Requires-Dist: other (==4.0+cu121)
"""


def test_local_pins_are_overridden_unless_find_links_has_the_build(tmp_path):
    over, kept = local_pin_overrides(META, [])
    assert over == ["torch==2.11.0", "kernels==1.2.0", "other==4.0"] and kept == []
    (tmp_path / "torch-2.11.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    over, kept = local_pin_overrides(META, [str(tmp_path)])
    assert over == ["kernels==1.2.0", "other==4.0"] and kept == ["torch==2.11.0+cpu"]


@pytest.mark.parametrize("req", ["engine-cpu", "engine-cpu>=1", "engine-cpu==1; rm", "==1.0", "a==b==c", "x" * 300])
def test_lock_requires_an_exact_requirement(req):
    with pytest.raises(UsageError):
        parse_requirement(req)


def test_lock_cli_refusals_exit_2(tmp_path, capsys):
    assert main(["lock", "engine-cpu>=1", "--out", str(tmp_path / "l.txt")]) == 2
    assert main(["lock", "engine-cpu==1.0", "--out", str(tmp_path / "l.lock")]) == 2
    (tmp_path / "l.txt").write_text("x==1 --hash=sha256:" + "0" * 64 + "\n")
    assert main(["lock", "engine-cpu==1.0", "--out", str(tmp_path / "l.txt")]) == 2
    assert "already there" in capsys.readouterr().err


def test_uv_is_installed_for_the_project():
    uv = find_uv()
    assert uv is not None, "uv belongs to the test extra (pyproject.toml)"
    assert subprocess.run([uv, "--version"], capture_output=True, text=True).stdout.startswith("uv ")


def _env(home, name, *, complete=True, age=0.0):
    d = home / "envs" / name
    (d / "bin").mkdir(parents=True)
    if complete:
        (d / MARKER).write_text(json.dumps({"lock_sha256": "a" * 64, "installer": "uv 0.13.9"}))
    t = time.time() - age
    os.utime(d / MARKER if complete else d, (t, t))
    os.utime(d, (t, t))
    return d


# names as env_for makes them (gc touches nothing else under envs/)
NAMES = {short: f"vllm-0.1.0-{n * 16}" for short, n in (("new", "1"), ("mid", "2"), ("old", "3"), ("broken", "4"))}


def test_envs_gc_keeps_newest_and_never_one_in_use(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path))
    new = _env(tmp_path, NAMES["new"], age=10)
    mid = _env(tmp_path, NAMES["mid"], age=1000)
    old = _env(tmp_path, NAMES["old"], age=5000)
    broken = _env(tmp_path, NAMES["broken"], complete=False, age=1)
    shutil.copy("/bin/sleep", old / "bin" / "sleep")
    proc = subprocess.Popen([str(old / "bin" / "sleep"), "30"])
    deadline = time.monotonic() + 10
    while str(old).encode() not in open(f"/proc/{proc.pid}/cmdline", "rb").read() and time.monotonic() < deadline:
        time.sleep(0.01)  # until the child has exec'd (before, its cmdline is still pytest's)
    try:
        assert old.resolve() in envs_in_use()
        names = [e["name"] for e in list_envs()]
        assert set(names) == {NAMES["new"], NAMES["mid"], NAMES["old"], NAMES["broken"]}
        assert next(e for e in list_envs() if e["name"] == NAMES["old"])["in_use"] is True
        deleted, kept = gc_envs(1, dry_run=True)
        assert {e["name"] for e in deleted} == {NAMES["broken"], NAMES["mid"]} and new.is_dir() and mid.is_dir()
        assert main(["envs", "gc", "--keep", "1"]) == 0
        assert not mid.exists() and not broken.exists() and new.is_dir() and old.is_dir()
        assert f"kept {NAMES['old']} (in use)" in capsys.readouterr().out
    finally:
        proc.kill()
        proc.wait()
    gc_envs(1)
    assert not old.exists() and new.is_dir()
    assert main(["envs", "gc", "--keep", "-1"]) == 2
    assert main(["envs", "list"]) == 0 and NAMES["new"] in capsys.readouterr().out
