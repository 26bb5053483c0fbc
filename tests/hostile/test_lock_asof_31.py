"""Hostile input to `harness lock` and `lock --as-of` (issue 31: findings 12, 15, 19, 22, 25).

The index is a fake PEP 691 JSON index on 127.0.0.1, named to pip by PIP_INDEX_URL (the real `pip config list` reads
it); uv is the fake uv of test_matrix_lock_hostile, which records its command line; pip's download is replaced where
its answer is the input. Nothing leaves the loopback interface.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import harness.matrix.asof as asof
import harness.matrix.lock as lock
from harness.cli import main
from harness.errors import DataError, UsageError
from harness.matrix.asof import cutoff_for, parse_day, upload_time_in
from tests.hostile.test_matrix_lock_hostile import GOOD_LOCK, fake_uv, lock_cli, uv_calls

WHEEL = "six-1.16.0-py2.py3-none-any.whl"
DRIP_S, DRIPS = 0.05, 400  # a dripping answer lasts at most 20 s, whatever the client does


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "harness-home"))


def page(upload_time: str = "2025-10-04T01:39:32Z") -> bytes:
    return json.dumps({"meta": {"api-version": "1.1"}, "name": "six",
                       "files": [{"filename": WHEEL, "url": WHEEL, "hashes": {}, "upload-time": upload_time}]}).encode()  # fmt: skip


class _Index(http.server.BaseHTTPRequestHandler):
    """Serves `server.page` as the JSON page of every project, or drips (`server.drip`: "headers" or "body")."""

    def do_GET(self):
        self.server.seen.append(self.path)
        drip = self.server.drip
        if drip == "headers":
            self._drip(b"HTTP/1.1 200 OK\r\nX-Drip: " + b"a" * DRIPS)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.send_header("Content-Length", str(len(self.server.page) if drip is None else 1 << 20))
        self.end_headers()
        if drip is None:
            self.wfile.write(self.server.page)
        else:
            self._drip(b" " * DRIPS)

    def _drip(self, data: bytes) -> None:
        for i in range(min(len(data), DRIPS)):
            if self.server.stop.is_set():
                return
            self.wfile.write(data[i : i + 1])
            self.wfile.flush()
            time.sleep(DRIP_S)

    def log_message(self, *args):
        pass


@contextmanager
def fake_index(monkeypatch, *, page: bytes = b"", drip: str | None = None) -> Iterator[tuple[str, list[str]]]:
    """(the index URL pip is configured with, the paths it was asked for)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    server.page, server.drip, server.seen, server.stop = page, drip, [], threading.Event()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/simple"
    monkeypatch.setenv("PIP_INDEX_URL", url)
    try:
        yield url, server.seen
    finally:
        server.stop.set()
        server.shutdown()
        server.server_close()


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("harness: error:"), err
    return err[0]


# --- finding 12: the release is dated on the index uv resolves against ------------------------------------------


def test_as_of_release_dates_on_the_index_uv_resolves_against(tmp_path, monkeypatch, capsys):
    """Finding 12: the release was dated on pip's index (here the fake one) while uv, given `--find-links` but no
    index, resolved against its own default (PyPI)."""
    calls = fake_uv(tmp_path, monkeypatch, lock=GOOD_LOCK)
    with fake_index(monkeypatch, page=page()) as (index, seen):
        assert main(lock_cli(tmp_path / "locks" / "six.txt", "--as-of", "release")) == 0
    assert seen == ["/simple/six/"]  # dated there
    [(_cwd, argv)] = uv_calls(calls)
    assert argv[argv.index("--index-url") + 1] == index  # and resolved there
    assert "--no-config" in argv and argv[argv.index("--exclude-newer") + 1] == "2025-10-04T01:39:33Z"
    assert "--index-url" in capsys.readouterr().out  # the command it says it runs names the index


def test_a_lock_as_of_now_resolves_against_the_same_one_index(tmp_path, monkeypatch, capsys):
    """Finding 12: one index for the whole lock; without --as-of the index is not asked, uv still names it."""
    calls = fake_uv(tmp_path, monkeypatch, lock=GOOD_LOCK)
    with fake_index(monkeypatch, page=page()) as (index, seen):
        assert main(lock_cli(tmp_path / "locks" / "six.txt")) == 0
    [(_cwd, argv)] = uv_calls(calls)
    assert argv.count("--index-url") == 1 and argv[argv.index("--index-url") + 1] == index and seen == []
    capsys.readouterr()


def test_the_said_command_does_not_show_the_indexs_password(tmp_path, monkeypatch, capsys):
    """Finding 12: the index now on uv's command line may carry a user:password; the line the lock says hides it."""
    calls = fake_uv(tmp_path, monkeypatch, lock=GOOD_LOCK)
    monkeypatch.setenv("PIP_INDEX_URL", "http://me:hunter2-secret@127.0.0.1:9/simple")
    assert main(lock_cli(tmp_path / "locks" / "six.txt")) == 0
    [(_cwd, argv)] = uv_calls(calls)
    assert argv[argv.index("--index-url") + 1] == "http://me:hunter2-secret@127.0.0.1:9/simple"
    out = capsys.readouterr().out
    assert "--index-url http://***@127.0.0.1:9/simple" in out and "hunter2" not in out


# --- finding 15: one wall-clock deadline on the whole read of the index ------------------------------------------


@pytest.mark.parametrize("drip", ["headers", "body"])
def test_a_dripping_index_is_given_up_at_the_deadline(tmp_path, monkeypatch, capsys, drip):
    """Finding 15: an index sending a byte every 20 s was still being read at 200 s (httpx bounds each read only)."""
    calls = fake_uv(tmp_path, monkeypatch, lock=GOOD_LOCK)
    monkeypatch.setattr(asof, "INDEX_DEADLINE_S", 0.5, raising=False)
    with fake_index(monkeypatch, drip=drip) as (index, seen):
        t0 = time.monotonic()
        code = main(lock_cli(tmp_path / "locks" / "six.txt", "--as-of", "release"))
        elapsed = time.monotonic() - t0
    assert code == 2 and elapsed < DRIPS * DRIP_S / 2  # the drip would last 20 s
    line = one_error_line(capsys)
    assert f"{index}/six/" in line and "0.5 s" in line and seen == ["/simple/six/"]
    assert uv_calls(calls) == [] and not (tmp_path / "locks" / "six.txt").exists()


# --- finding 19: an upload time out of range is refused, naming the field ----------------------------------------


@pytest.mark.parametrize("stamp", ["9999-12-31T23:59:59Z", "0001-01-01T00:00:00+01:00", "9999-12-31T23:00:00-05:00",
                                   "0001-01-01T00:00:00Z"])  # fmt: skip
def test_an_upload_time_out_of_range_is_one_line(tmp_path, monkeypatch, capsys, stamp):
    """Finding 19: a far-future or far-past `upload-time` gave an OverflowError traceback."""
    calls = fake_uv(tmp_path, monkeypatch, lock=GOOD_LOCK)
    with fake_index(monkeypatch, page=page(stamp)):
        assert main(lock_cli(tmp_path / "locks" / "six.txt", "--as-of", "release")) == 2
    line = one_error_line(capsys)
    assert "upload-time" in line and WHEEL in line and "1970" in line and "Traceback" not in line
    assert uv_calls(calls) == []


def test_upload_time_in_refuses_a_time_out_of_range_and_takes_a_naive_one_as_utc():
    with pytest.raises(DataError, match=r"files\[0\].*upload-time"):
        upload_time_in(json.loads(page("9999-12-31T23:59:59.999999Z")), "six", "1.16.0")
    when = upload_time_in(json.loads(page("2025-10-04T01:39:32")), "six", "1.16.0")
    assert cutoff_for("release", "six==1.16.0", dater=lambda n, v: when) == "2025-10-04T01:39:33Z"


# --- finding 22: the day is checked against the range uv takes, before anything is fetched -----------------------


@pytest.mark.parametrize("day", ["0001-01-01", "0999-12-31", "1969-12-31", "9999-12-31"])
def test_a_day_out_of_range_is_refused_before_any_fetch(tmp_path, monkeypatch, capsys, day):
    """Finding 22: `--as-of 0001-01-01` passed the day check; the wheel was fetched, then uv refused the cutoff
    `1-01-01T23:59:59Z` (and 9999-12-31 overflowed)."""
    calls = fake_uv(tmp_path, monkeypatch, lock=GOOD_LOCK)
    fetched: list[str] = []
    monkeypatch.setattr(lock, "_wheel_metadata", lambda req, say: fetched.append(req) or "")
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    argv = ["lock", "six==1.16.0", "--out", str(tmp_path / "six.txt"), "--find-links", str(empty), "--as-of", day]
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert "--as-of" in line and "1970-01-01" in line and "9998-12-31" in line
    assert fetched == [] and uv_calls(calls) == []


def test_the_days_at_the_ends_of_the_range_make_cutoffs_uv_takes():
    assert cutoff_for("1970-01-01", "six==1.16.0") == "1970-01-01T23:59:59Z"
    assert cutoff_for("9998-12-31", "six==1.16.0") == "9998-12-31T23:59:59Z"
    with pytest.raises(UsageError, match="1970-01-01 to 9998-12-31"):
        parse_day("0001-01-01")


# --- finding 25: pip's failure is one line of pip's own, not its traceback ---------------------------------------

PIP_CRASH = (
    "ERROR: Exception:\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3/dist-packages/pip/_internal/cli/base_command.py", line 180, in exc_logging_wrapper\n'
    "    status = run_func(*args)\n"
    '  File "/usr/lib/python3/dist-packages/pip/_internal/network/session.py", line 100, in send\n'
    "    raise ConnectionError(msg)\n"
    "pip._vendor.requests.exceptions.ConnectionError: \x1b[31mHTTPConnectionPool(host='127.0.0.1', port=9)\x1b[0m\n"
)
PIP_NOT_FOUND = (
    "ERROR: Could not find a version that satisfies the requirement six==1.16.0 (from versions: none)\n"
    "ERROR: No matching distribution found for six==1.16.0\n"
    "\n[notice] A new release of pip is available: 24.0 -> 25.3\n"
    "[notice] To update, run: pip install --upgrade pip\n"
)


@pytest.mark.parametrize("stderr, reason", [
    (PIP_CRASH, "pip._vendor.requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=9)"),
    (PIP_NOT_FOUND, "ERROR: No matching distribution found for six==1.16.0"),
    ("", "pip said nothing"),
])  # fmt: skip
def test_the_pip_step_fails_with_one_line_of_pips_own(tmp_path, monkeypatch, capsys, stderr, reason):
    """Finding 25: the pip step's error joined pip's last three lines: the frames of its traceback."""
    calls = fake_uv(tmp_path, monkeypatch, lock=GOOD_LOCK)
    run = subprocess.run

    def pip_fails(cmd, *a, **kw):
        if "download" in cmd:  # pip's download alone; `pip config list` and the fake uv run as they are
            return subprocess.CompletedProcess(cmd, 1, stdout="", stderr=stderr)
        return run(cmd, *a, **kw)

    monkeypatch.setattr(subprocess, "run", pip_fails)
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    assert main(["lock", "six==1.16.0", "--out", str(tmp_path / "six.txt"), "--find-links", str(empty)]) == 2
    line = one_error_line(capsys)
    assert "cannot fetch the wheel of six==1.16.0: " in line and reason in line
    assert "Traceback" not in line and 'File "' not in line and "[notice]" not in line
    assert "\x1b" not in line and "\\x1b" not in line and uv_calls(calls) == []
