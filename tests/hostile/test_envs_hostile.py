"""Hostile input for `harness envs list|gc` and the environment lock (issue 21: #8 marker fields, #9 lock files,
#13 foreign entries, #14 retitled processes, #28 deep markers). Every test runs over a throwaway $HARNESS_HOME; the
processes it starts are copies of /bin/sleep (or this Python) it kills itself. No socket opens."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.envs import MARKER

KEY = "0123456789abcdef"
OLD, NEW = f"vllm-0.1.0-{KEY}", f"vllm-0.2.0-{KEY}"  # names as env_for makes them
GOOD_MARKER = {"lock_sha256": "a" * 64, "installer": "uv 0.13.9", "installed_at": "2025-01-01T00:00:00Z"}


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    h = tmp_path / "home"
    (h / "envs").mkdir(parents=True)
    monkeypatch.setenv("HARNESS_HOME", str(h))
    return h


def _env(home: Path, name: str, *, marker: object = GOOD_MARKER, age: float = 0.0) -> Path:
    d = home / "envs" / name
    (d / "bin").mkdir(parents=True)
    if marker is not None:
        text = marker if isinstance(marker, str) else json.dumps(marker)
        (d / MARKER).write_text(text)
    t = time.time() - age
    os.utime(d, (t, t))
    return d


def _gc(capsys, *args: str) -> str:
    assert main(["envs", "gc", *args]) == 0
    return capsys.readouterr().out


def _listing(d: Path) -> dict[str, bool]:
    return {p.name: p.is_symlink() for p in d.iterdir()}


# --- #9: lock files ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dry_run", [False, True])
def test_9_gc_never_opens_a_lock_through_a_symlink(home, tmp_path, capsys, dry_run):
    """#9: `envs gc` (even --dry-run) opened `<env>.lock` with mode "w" through a symlink, truncating its target."""
    env = _env(home, OLD, age=100)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (home / "envs" / f"{OLD}.lock").symlink_to(victim)
    out = _gc(capsys, "--keep", "0", *(["--dry-run"] if dry_run else []))
    assert victim.read_text() == "precious\n"
    assert env.is_dir() and "symlink" in out and OLD in out


def test_9_gc_refuses_a_lock_that_is_a_fifo(home):
    """#9: a FIFO in a lock file's place is refused, not opened for writing (which blocks until a reader comes)."""
    env = _env(home, OLD, age=100)
    os.mkfifo(home / "envs" / f"{OLD}.lock")
    code = "import sys; from harness.cli import main; sys.exit(main(['envs', 'gc', '--keep', '0']))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert env.is_dir() and "not a regular file" in proc.stdout


def test_9_gc_dry_run_creates_nothing(home, capsys):
    """#9: `envs gc --dry-run` created a lock file beside every environment it looked at."""
    _env(home, OLD, age=100)
    _env(home, NEW, marker=None, age=10)
    before = _listing(home / "envs")
    out = _gc(capsys, "--keep", "0", "--dry-run")
    assert _listing(home / "envs") == before
    assert f"would delete {OLD}" in out and f"would delete {NEW}" in out


def test_9_ensure_env_refuses_a_symlinked_lock(home, tmp_path, monkeypatch):
    """#9: ensure_env opened `<env>.lock` with mode "w" through a symlink (truncating its target) before building."""
    import harness.envs
    from harness.errors import InstallError
    from harness.manifest import DEFAULT_MANIFEST, load_manifest

    def no_build(*_a, **_k):
        raise AssertionError("built an environment behind a symlinked lock")

    monkeypatch.setattr(harness.envs, "_build", no_build)
    manifest = load_manifest(DEFAULT_MANIFEST)
    env = harness.envs.env_for(manifest)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (env.path.parent / f"{env.path.name}.lock").symlink_to(victim)
    with pytest.raises(InstallError, match="symlink"):
        harness.envs.ensure_env(manifest, quiet=True)
    assert victim.read_text() == "precious\n"


# --- #13: only the harness's names ------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", ["0", "1"])
def test_13_gc_leaves_what_the_harness_did_not_make(home, tmp_path, capsys, keep):
    """#13: `envs gc` deleted any directory under envs/ without a marker (`mkdir envs/my-notes`), whatever --keep."""
    envs = home / "envs"
    _env(home, NEW, age=10)
    old = _env(home, OLD, age=1000)
    (envs / "my-notes").mkdir()
    (envs / "my-notes" / "todo.txt").write_text("keep me\n")
    (envs / "notes.txt").write_text("keep me\n")
    (envs / f"vllm-0.1.0-{KEY[:15]}").mkdir()  # a key one digit short
    (envs / f"nosuchengine-1.0.0-{KEY}").mkdir()
    (envs / "evil\x1b[2Kname").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data").write_text("keep me\n")
    (envs / f"vllm-0.3.0-{KEY}").symlink_to(outside)  # a harness name, but a symlink to elsewhere
    foreign = sorted(p.name for p in envs.iterdir() if p.name not in (NEW, OLD))
    out = _gc(capsys, "--keep", keep)
    assert all((envs / name).exists() or (envs / name).is_symlink() for name in foreign)
    assert (envs / "my-notes" / "todo.txt").read_text() == "keep me\n" and (outside / "data").is_file()
    assert "my-notes (not the harness's, left alone" in out
    assert "\x1b" not in out and "evil\\x1b[2Kname" in out
    assert not old.exists() and (envs / NEW).is_dir() == (keep == "1")  # the harness's own are still collected


# --- #14: environments in use -----------------------------------------------------------------------------------


def _wait_until(check, what: str) -> None:
    deadline = time.monotonic() + 60  # generous: only a broken child takes this long
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"child never reached: {what}")
        time.sleep(0.02)


def _exe_in(pid: int, d: Path) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/exe").startswith(str(d.resolve()))
    except OSError:
        return False


@pytest.mark.parametrize("argv0, cwd_in_env", [("VLLM::EngineCore", False), ("sleep", False), ("bin/sleep", True)])
def test_14_gc_keeps_an_env_a_retitled_process_runs_from(home, tmp_path, capsys, argv0, cwd_in_env):
    """#14: `envs gc` read only an absolute argv[0]: a process that rewrote it (vLLM's `VLLM::EngineCore`) or started
    with a relative one lost its environment."""
    env = _env(home, OLD, age=1000)
    _env(home, NEW, age=10)
    shutil.copy("/bin/sleep", env / "bin" / "sleep")
    cwd = env if cwd_in_env else tmp_path
    proc = subprocess.Popen(["bash", "-c", f'exec -a "{argv0}" "{env / "bin" / "sleep"}" 120'], cwd=cwd)
    try:
        _wait_until(lambda: _exe_in(proc.pid, env), "exec of the copied sleep")
        out = _gc(capsys, "--keep", "0")
        assert env.is_dir() and f"kept {OLD} (in use)" in out
    finally:
        proc.kill()
        proc.wait()


def test_14_gc_keeps_an_env_whose_file_a_process_maps(home, tmp_path, capsys):
    """#14: a process whose executable lies elsewhere but that maps a file of the environment (its site-packages)."""
    env = _env(home, OLD, age=1000)
    lib = env / "lib.so"
    lib.write_bytes(b"\0" * 4096)
    code = (
        "import mmap, sys, time; f = open(sys.argv[1], 'rb'); m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ);"
        "print('ready', flush=True); time.sleep(120)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(lib)], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        out = _gc(capsys, "--keep", "0")
        assert env.is_dir() and f"kept {OLD} (in use)" in out
    finally:
        proc.kill()
        proc.wait()


def test_14_gc_keeps_the_env_of_a_live_registry_engine(home, tmp_path, capsys):
    """#14: a live engine of the run registry keeps the environment its manifest names, whatever its process shows."""
    from harness.envs import env_for
    from harness.launch import registry
    from harness.manifest import DEFAULT_MANIFEST, load_manifest
    from harness.procs import process_start_time

    env = env_for(load_manifest(DEFAULT_MANIFEST)).path
    _env(home, env.name, age=1000)
    proc = subprocess.Popen(["sleep", "120"], cwd=tmp_path)  # runs from outside every environment
    try:
        _wait_until(lambda: process_start_time(proc.pid) is not None, "start")
        entry = {"kind": "subprocess", "pid": proc.pid, "pid_start": process_start_time(proc.pid)}
        registry.register("run-1", {**entry, "manifest": str(DEFAULT_MANIFEST)})
        out = _gc(capsys, "--keep", "0")
        assert env.is_dir() and f"kept {env.name} (in use)" in out
    finally:
        proc.kill()
        proc.wait()
    out = _gc(capsys, "--keep", "0")  # the engine gone, its environment is collected like any other
    assert not env.exists() and f"deleted {env.name}" in out


# --- #28: markers read bounded -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "marker, problem",
    [("[" * 100_000, "nested"), ('{"a":' * 100 + "1" + "}" * 100, "nested"), ("[1]", "not a JSON object"),
     ("{", "not valid JSON")],
)  # fmt: skip
def test_28_unreadable_marker_is_one_line_and_kept(home, capsys, marker, problem):
    """#28: `envs list` / `gc` on a deeply nested harness-env.json raised RecursionError (bare json.loads); a marker
    that is not JSON read as "incomplete", so gc deleted the environment first."""
    env = _env(home, OLD, marker=marker, age=1000)
    assert main(["envs", "list"]) == 0
    out = capsys.readouterr().out
    assert "marker unreadable: " in out and problem in out
    out = _gc(capsys, "--keep", "0")
    assert env.is_dir() and "marker unreadable" in out and "in doubt" in out


def test_28_verify_env_reports_a_deep_marker(tmp_path):
    """#28: verify_env read the marker with bare json.loads: a deep one raised RecursionError mid-launch."""
    from harness.envs import EngineEnv, verify_env

    env = EngineEnv(path=tmp_path / OLD, lock=tmp_path / "x.lock", lock_hash="a" * 64, python_version="3.11")
    (env.path / "bin").mkdir(parents=True)
    env.python.write_text("")
    env.marker.write_text("[" * 100_000)
    problems = verify_env(env)
    assert len(problems) == 1 and problems[0].startswith("marker unreadable") and "nested" in problems[0]


# --- #8: marker fields shown escaped ------------------------------------------------------------------------------


def test_8_envs_list_shows_marker_fields_escaped(home, capsys):
    """#8: `envs list` printed marker fields raw: a marker could clear the line and retitle the terminal."""
    hostile = {"lock_sha256": "a" * 64, "installer": "uv\x1b[2K\rcomplete", "installed_at": "\x1b]0;owned\x07\x9b31m"}
    _env(home, OLD, marker=hostile)
    assert main(["envs", "list"]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\r\x07\x9b"), out
    assert "uv\\x1b[2K\\rcomplete" in out and "\\x1b]0;owned\\x07\\x9b31m" in out
