"""Hostile input to `harness lock` and the matrix's locking stage (issue 21: findings 3, 5, 6, 11, 12, 20, 21).

A fake uv (a script the harness finds instead of uv) stands in wherever uv's answer is the input; the one test that
runs the real uv (finding 3) points every request it makes at two recording servers on 127.0.0.1: the fake index a
config file names, and a proxy that refuses whatever uv would fetch from its default index.
"""

from __future__ import annotations

import http.server
import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import harness.envs
from harness.cli import main
from harness.errors import DataError, HarnessError, ManifestError
from harness.matrix.lock import lock_release
from harness.matrix.run import ensure_cell
from harness.matrix.spec import load_spec
from tests.matrix.helpers import LOCK, TEMPLATE

SECRET = "TOP-SECRET-TOKEN"
NETRC = f"machine index.example login me password {SECRET}\n"
GOOD_LOCK = "six==1.16.0 \\\n    --hash=sha256:" + "a" * 64 + "\n"
UV_NO_SOLUTION = (
    "\x1b[1m\x1b[31merror\x1b[0m: No solution found when resolving dependencies\n"
    "  cause: Because six was not found in the package registry and you require six==1.16.0, we can conclude that "
    "your requirements are unsatisfiable.\x1b[0m\n"
)


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "harness-home"))


def fake_uv(tmp_path: Path, monkeypatch, *, lock: str | None = None, stderr: str = "") -> Path:
    """Put a script in uv's place: it logs each call, writes `lock` to its -o file (or fails printing `stderr`)."""
    calls = tmp_path / "uv-calls.jsonl"
    script = tmp_path / "fake-uv"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"open({str(calls)!r}, 'a').write(json.dumps([os.getcwd(), sys.argv[1:]]) + '\\n')\n"
        f"lock, stderr = {lock!r}, {stderr!r}\n"
        "if lock is None:\n"
        "    sys.stderr.write(stderr)\n"
        "    sys.exit(1)\n"
        "open(sys.argv[sys.argv.index('-o') + 1], 'w').write(lock)\n"
    )
    script.chmod(0o755)
    monkeypatch.setattr(harness.envs, "find_uv", lambda: str(script))
    return calls


def uv_calls(calls: Path) -> list:
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def spec_file(d: Path, releases: str, extra: str = "") -> Path:
    """A spec of `releases`; locked as of the day they are made (no index is asked for a release's date here)."""
    d.mkdir(parents=True, exist_ok=True)
    extra = extra if "lock_as_of" in extra else "lock_as_of: null\n" + extra
    p = d / "spec.yaml"
    p.write_text(
        f"format: 1\nname: synth\ntemplate: {TEMPLATE}\nmanifest_name: 'synth-{{version}}'\n"
        f"requirement: 'six=={{version}}'\nbaseline: 1.16.0\nexpectations: vllm-0.11\n{extra}releases:\n{releases}"
    )
    return p


def no_runner(*a, **kw):
    raise AssertionError("no cell may run past the lock here")


def lock_cli(out: Path, *extra: str) -> list[str]:
    empty = out.parent / "no-wheels"
    empty.mkdir(parents=True, exist_ok=True)
    return ["lock", "six==1.16.0", "--out", str(out), "--no-auto-overrides", "--find-links", str(empty), *extra]


# --- finding 3: uv reads no config file --------------------------------------------------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.server.seen.append(f"GET {self.path}")
        self.send_error(404)

    def do_CONNECT(self):  # the proxy: uv's default index is never reached, only refused here
        self.server.seen.append(f"CONNECT {self.path}")
        self.send_error(403)

    def log_message(self, *args):
        pass


@contextmanager
def recording_server() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _uv_toml_beside(tree: Path, index: str, monkeypatch) -> None:
    (tree / "locks" / "uv.toml").write_text(f'index-url = "{index}"\n')


def _pyproject_above(tree: Path, index: str, monkeypatch) -> None:
    (tree / "pyproject.toml").write_text(f'[project]\nname = "x"\nversion = "0"\n[tool.uv]\nindex-url = "{index}"\n')


def _user_config(tree: Path, index: str, monkeypatch) -> None:
    (tree / "xdg" / "uv").mkdir(parents=True)
    (tree / "xdg" / "uv" / "uv.toml").write_text(f'index-url = "{index}"\n')


@pytest.mark.parametrize("config", [_uv_toml_beside, _pyproject_above, _user_config])
def test_uv_reads_no_config_file(tmp_path, monkeypatch, capsys, config):
    """Finding 3: a uv.toml beside the lock, a [tool.uv] in a pyproject.toml above it or the user's uv config named
    the index the lock was resolved from (a fake index logged `GET /simple/six/`)."""
    tree = tmp_path / "tree"
    (tree / "locks").mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tree / "xdg"))
    with recording_server() as index, recording_server() as proxy:
        config(tree, f"http://127.0.0.1:{index.server_port}/simple/", monkeypatch)
        for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.server_port}")
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.setenv(name, "127.0.0.1,localhost")  # the fake index, were it asked, is asked directly
        code = main(lock_cli(tree / "locks" / "six.txt"))
    assert index.seen == []
    assert code == 2 and proxy.seen  # uv went for its default index, through the loopback proxy that refused it
    assert not (tree / "locks" / "six.txt").exists()
    capsys.readouterr()


# --- finding 21: a lock failure keeps uv's reason ------------------------------------------------------------------


def test_lock_failure_keeps_uvs_reason_on_the_first_line(tmp_path, monkeypatch, capsys):
    """Finding 21: the one line kept was "uv pip compile failed for six==1.16.0:"; uv's error was on the next
    lines, so neither the CLI's line nor a failed cell's `reason` said why."""
    fake_uv(tmp_path, monkeypatch, stderr=UV_NO_SOLUTION)
    assert main(lock_cli(tmp_path / "locks" / "six.txt")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "six was not found in the package registry" in err[0]
    assert "\x1b" not in err[0] and "\\x1b" not in err[0]  # the colour codes are stripped, not shown
    spec = load_spec(spec_file(tmp_path / "spec", "  - {version: 1.16.0}\n"))
    cell, _ = ensure_cell(spec, "1.16.0", tmp_path / "m", runner=no_runner, say=lambda m: None)
    assert cell["stage"] == "lock" and "six was not found in the package registry" in cell["reason"]
    assert "\x1b" not in cell["reason"]


# --- finding 12: `harness lock` writes nothing over its inputs without --force, nor when the lock fails ------------


@pytest.mark.parametrize("existing", ["six.in", "six.overrides"])
def test_lock_refuses_to_write_over_its_inputs_without_force(tmp_path, monkeypatch, capsys, existing):
    """Finding 12: `harness lock` overwrote `<stem>.in` and `<stem>.overrides` without --force, even when the lock
    then failed."""
    calls = fake_uv(tmp_path, monkeypatch, stderr=UV_NO_SOLUTION)
    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / existing).write_text("keep me\n")
    assert main(lock_cli(locks / "six.txt", "--override", "six==1.16.0")) == 2
    assert (locks / existing).read_text() == "keep me\n"
    assert "--force" in capsys.readouterr().err and uv_calls(calls) == []  # refused before uv ran
    assert sorted(p.name for p in locks.iterdir()) == sorted([existing, "no-wheels"])


def test_a_failed_lock_with_force_leaves_every_file_as_it_was(tmp_path, monkeypatch):
    """Finding 12: with --force, a lock that fails leaves the lock and its inputs as they were (nothing half made)."""
    calls = fake_uv(tmp_path, monkeypatch, stderr=UV_NO_SOLUTION)
    locks = tmp_path / "locks"
    locks.mkdir()
    before = {"six.txt": GOOD_LOCK, "six.in": "six==1.16.0\n", "six.overrides": "old==1.0\n"}
    for name, text in before.items():
        (locks / name).write_text(text)
    assert main(lock_cli(locks / "six.txt", "--force", "--override", "new==2.0")) == 2
    assert len(uv_calls(calls)) == 1
    assert {n: (locks / n).read_text() for n in before} == before
    assert sorted(p.name for p in locks.iterdir()) == sorted([*before, "no-wheels"])  # no working directory left


def test_a_lock_is_moved_into_place_with_its_inputs_once_uv_succeeded(tmp_path, monkeypatch):
    """Finding 12 (the good path): the lock and its inputs appear together, uv ran elsewhere, the command names
    only relative files (it is the lock's header)."""
    calls = fake_uv(tmp_path, monkeypatch, lock=GOOD_LOCK)
    locks = tmp_path / "locks"
    r = lock_release("six==1.16.0", locks / "six.txt", overrides=["six>=1.0"], find_links=[], auto_overrides=False,
                     say=lambda m: None)  # fmt: skip
    assert r.packages == 1 and (locks / "six.txt").read_text() == GOOD_LOCK
    assert (locks / "six.in").read_text() == "six==1.16.0\n" and (locks / "six.overrides").read_text() == "six>=1.0\n"
    assert sorted(p.name for p in locks.iterdir()) == ["six.in", "six.overrides", "six.txt"]
    [(cwd, argv)] = uv_calls(calls)
    assert Path(cwd) != locks and argv[-2:] == ["-o", "six.txt"] and "--no-config" in argv


# --- finding 11: a stale lock stays until a new one exists -------------------------------------------------------


@pytest.mark.parametrize("inputs", [None, "six==1.15.0\n"])
def test_a_stale_lock_is_kept_when_locking_again_fails(tmp_path, monkeypatch, inputs):
    """Finding 11: `harness matrix` deleted a lock in DIR/locks/ without an `.in` (or with another one) before locking
    again; when the new lock failed, nothing was left."""
    fake_uv(tmp_path, monkeypatch, stderr=UV_NO_SOLUTION)
    spec = load_spec(spec_file(tmp_path / "spec", "  - {version: 1.16.0}\n"))
    locks = tmp_path / "m" / "locks"
    locks.mkdir(parents=True)
    (locks / "synth-1.16.0.txt").write_text(GOOD_LOCK)
    if inputs is not None:
        (locks / "synth-1.16.0.in").write_text(inputs)
    said: list[str] = []
    cell, _ = ensure_cell(spec, "1.16.0", tmp_path / "m", runner=no_runner, say=said.append)
    assert (locks / "synth-1.16.0.txt").read_text() == GOOD_LOCK
    assert inputs is None or (locks / "synth-1.16.0.in").read_text() == inputs
    assert cell["stage"] == "lock" and "left as it was" in cell["reason"]
    assert any("stale" in m for m in said)


# --- finding 6: a lock's inputs are never shown, and never read through a symlink --------------------------------


def _matrix_locks(tmp_path: Path) -> tuple[Path, Path]:
    secret = tmp_path / "outside" / "token.txt"
    secret.parent.mkdir()
    secret.write_text(f"{SECRET}\n")
    locks = tmp_path / "m" / "locks"
    locks.mkdir(parents=True)
    (locks / "synth-1.16.0.txt").write_text(GOOD_LOCK)
    return locks, secret


@pytest.mark.parametrize("kind", ["symlink", "directory"])
def test_a_lock_input_that_is_not_a_regular_file_is_refused(tmp_path, monkeypatch, kind):
    """Finding 6: a symlinked DIR/locks/<stem>.in printed its target's content ("lock ... is stale (locked for
    TOP-SECRET-TOKEN ...)")."""
    calls = fake_uv(tmp_path, monkeypatch, stderr=UV_NO_SOLUTION)
    spec = load_spec(spec_file(tmp_path / "spec", "  - {version: 1.16.0}\n"))
    locks, secret = _matrix_locks(tmp_path)
    if kind == "symlink":
        (locks / "synth-1.16.0.in").symlink_to(secret)
    else:
        (locks / "synth-1.16.0.in").mkdir()
    said: list[str] = []
    with pytest.raises(DataError) as err:
        ensure_cell(spec, "1.16.0", tmp_path / "m", runner=no_runner, say=said.append)
    assert "synth-1.16.0.in" in str(err.value) and SECRET not in str(err.value) + "".join(said)
    assert uv_calls(calls) == [] and not (tmp_path / "m" / "cells").exists()


def test_a_stale_lock_input_is_named_by_a_hash_never_quoted(tmp_path, monkeypatch):
    """Finding 6: an `.in` holding anything else is stale; the message names the file and a short hash of it."""
    fake_uv(tmp_path, monkeypatch, stderr=UV_NO_SOLUTION)
    spec = load_spec(spec_file(tmp_path / "spec", "  - {version: 1.16.0}\n"))
    locks, _ = _matrix_locks(tmp_path)
    (locks / "synth-1.16.0.in").write_text(f"{SECRET}\n")
    said: list[str] = []
    cell, _ = ensure_cell(spec, "1.16.0", tmp_path / "m", runner=no_runner, say=said.append)
    stale = [m for m in said if "stale" in m]
    assert stale and "synth-1.16.0.in" in stale[0] and "sha256" in stale[0] and "six==1.16.0" in stale[0]
    assert SECRET not in "".join(said) + json.dumps(cell)


# --- finding 5: a lock's content is never quoted, and a spec's locks lie under known places ----------------------


def test_a_committed_lock_outside_the_spec_is_refused_when_the_spec_is_read(tmp_path):
    """Finding 5: a release's `lock:` could name any file (a netrc); it must lie under the spec's directory (the
    harness's manifests/locks/ or the matrix directory), symlinks resolved."""
    outside = tmp_path / "home" / "netrc.txt"
    outside.parent.mkdir()
    outside.write_text(NETRC)
    d = tmp_path / "spec"
    d.mkdir()
    (d / "linked.txt").symlink_to(outside)
    for lock in ("../home/netrc.txt", str(outside), "linked.txt"):
        with pytest.raises(ManifestError) as err:
            load_spec(spec_file(d, f"  - {{version: 1.16.0, lock: '{lock}'}}\n"))
        assert err.value.field == "releases.1.16.0.lock" and "outside" in str(err.value)
        assert SECRET not in str(err.value)
    (outside.parent / "real.txt").write_text(GOOD_LOCK)
    spec = load_spec(spec_file(d, "  - {version: 1.16.0, lock: ../home/real.txt}\n"), out=outside.parent)
    assert spec.committed_lock("1.16.0") == (outside.parent / "real.txt").resolve()  # the matrix directory may
    assert load_spec(spec_file(d, f"  - {{version: 1.16.0, lock: '{LOCK}'}}\n")).committed_lock("1.16.0") == LOCK


def test_a_committed_lock_that_is_not_a_lock_is_named_by_its_line(tmp_path, capsys):
    """Finding 5: a lock's first line was copied into cells/*.json, matrix.json/md/html and stderr; now the spec is
    refused when read (exit 2) naming the line, and no cell is written."""
    d = tmp_path / "spec"
    d.mkdir()
    (d / "netrc.txt").write_text(GOOD_LOCK + NETRC)
    spec = spec_file(d, "  - {version: 1.16.0, lock: netrc.txt}\n")
    assert main(["matrix", str(spec), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert "releases.1.16.0.lock" in err and "line 3" in err and SECRET not in err
    assert not (tmp_path / "m" / "cells").exists() or not list((tmp_path / "m" / "cells").iterdir())


@pytest.mark.parametrize("kind", ["symlink", "regular"])
def test_a_lock_in_the_matrix_directory_is_never_quoted(tmp_path, monkeypatch, kind):
    """Finding 5 and 6: a DIR/locks/ lock that is a symlink is refused; one that holds anything but hashed pins is
    named by its line (it was quoted into the cell's reason when its manifest was rendered)."""
    fake_uv(tmp_path, monkeypatch, stderr=UV_NO_SOLUTION)
    spec = load_spec(spec_file(tmp_path / "spec", "  - {version: 1.16.0}\n"))
    locks, _ = _matrix_locks(tmp_path)
    netrc = tmp_path / "outside" / "netrc"
    netrc.write_text(NETRC)
    (locks / "synth-1.16.0.txt").unlink()
    if kind == "symlink":
        (locks / "synth-1.16.0.txt").symlink_to(netrc)
    else:
        (locks / "synth-1.16.0.txt").write_text(NETRC)
    (locks / "synth-1.16.0.in").write_text("six==1.16.0\n")  # not stale: the lock is used as it is
    with pytest.raises(DataError) as err:
        ensure_cell(spec, "1.16.0", tmp_path / "m", runner=no_runner, say=lambda m: None)
    assert "synth-1.16.0.txt" in str(err.value) and SECRET not in str(err.value)
    assert kind == "symlink" or "line 1" in str(err.value)


def test_a_lock_uv_wrote_wrong_is_named_by_its_line(tmp_path, monkeypatch):
    """Finding 5: "uv wrote a lock the harness cannot read" quoted the line; nothing is moved into place either."""
    fake_uv(tmp_path, monkeypatch, lock=NETRC)
    with pytest.raises(HarnessError) as err:
        lock_release("six==1.16.0", tmp_path / "locks" / "six.txt", find_links=[], auto_overrides=False,
                     say=lambda m: None)  # fmt: skip
    assert "line 1" in str(err.value) and SECRET not in str(err.value)
    assert not (tmp_path / "locks" / "six.txt").exists() and not (tmp_path / "locks" / "six.in").exists()


# --- finding 20: a spec's requirements and env are refused when it is read ---------------------------------------


@pytest.mark.parametrize(
    "release, extra, field",
    [("{version: 1.16.0, overrides: ['-e git+https://example.invalid/x.git']}", "", "releases.0.overrides"),
     ("{version: 1.16.0, overrides: ['foo @ https://example.invalid/foo.whl']}", "", "releases.0.overrides"),
     ("{version: 1.16.0, extra: ['--index-url=http://example.invalid/simple']}", "", "releases.0.extra"),
     ("{version: 1.16.0, extra: ['foo==1.0\\n-e git+https://example.invalid/x']}", "", "releases.0.extra"),
     ("{version: 1.16.0, extra: ['foo==1.0 ; os_name == \"posix\"']}", "", "releases.0.extra"),
     ("{version: 1.16.0}", "defaults: {overrides: ['foo@file:///etc/x']}\n", "defaults.overrides"),
     ("{version: 1.16.0, env: {VLLM_HOST_IP: 0.0.0.0}}", "", "releases.1.16.0.env"),
     ("{version: 1.16.0}", "defaults: {env: {VLLM_API_KEY: k}}\n", "defaults.env")],
)  # fmt: skip
def test_a_spec_with_bad_requirements_or_env_is_refused_before_any_lock(tmp_path, monkeypatch, capsys, release,
                                                                        extra, field):  # fmt: skip
    """Finding 20: bad `overrides`/`extra` (`-e git+https://...`, `foo @ https://...`) and a forbidden `env` passed
    load_spec and failed later as a cell (exit 1), which bisect wrote."""
    import harness.matrix.lock

    tried: list[str] = []
    monkeypatch.setattr(harness.matrix.lock, "lock_release", lambda req, *a, **k: tried.append(req) or 1 / 0)
    spec = spec_file(tmp_path / "spec", f"  - {release}\n", extra)
    with pytest.raises(ManifestError) as err:
        load_spec(spec)
    assert err.value.field == field or field in str(err.value)
    assert main(["matrix", str(spec), "--out", str(tmp_path / "m")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert tried == [] and not (tmp_path / "m" / "cells").exists()


@pytest.mark.parametrize("entry", ["six==1.16.0", "six>=1.0,<2", "foo[bar]~=1.2", "intel-openmp==2024.2.1"])
def test_plain_requirements_are_accepted(tmp_path, entry):
    spec = load_spec(spec_file(tmp_path / "spec", f"  - {{version: 1.16.0, extra: ['{entry}']}}\n"))
    assert spec.setting("1.16.0", "extra") == [entry]
