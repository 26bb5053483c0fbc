"""Hostile input for `harness matrix --executor ray` (issue 31: #1, #17 and the Ray driver's part of #3). No Ray is
started: `ray.init` is replaced by a fake that records the address it was given (or fails the test where no Ray call
may happen); fake listeners answer on 127.0.0.1 only; addresses off loopback are written into the environment or the
command line and never dialled (tests/support/netguard fails any connect() off loopback, and `socket.create_connection`
fails the test where a refusal must come before any socket)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

import harness.matrix.run
from harness.cli import main
from harness.errors import RefusedError, UsageError
from harness.matrix.cell import failed_cell, make_key
from harness.matrix.executors import RayExecutor
from harness.matrix.run import CellJob
from harness.matrix.spec import load_spec
from tests.matrix.helpers import REPO, write_spec

SPEC = REPO / "matrix" / "vllm-cpu.yaml"
# what a gRPC server (Ray's GCS) sends first: an empty SETTINGS frame
SETTINGS_FRAME = bytes.fromhex("000000040000000000")


class Listener:
    """A TCP listener on 127.0.0.1 that accepts (bounded in count), sends `answer` (if any) and then says nothing,
    holding each connection open until closed."""

    def __init__(self, answer: bytes = b"") -> None:
        self.answer = answer
        self.accepted = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set() and self.accepted < 100:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            self._conns.append(conn)
            if self.answer:
                conn.sendall(self.answer)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for c in [*self._conns, self.sock]:
            c.close()


@pytest.fixture
def listeners():
    made: list[Listener] = []

    def make(answer: bytes = b"") -> Listener:
        made.append(Listener(answer))
        return made[-1]

    yield make
    for lst in made:
        lst.close()


@pytest.fixture
def fake_ray(monkeypatch):
    """ray.init records its address and stops the run there (a Ray of its own is never started)."""
    import ray

    class Stop(Exception):
        pass

    calls: list[dict] = []

    def init(address=None, **kw):
        calls.append({"address": address, **kw})
        raise Stop

    monkeypatch.setattr(ray, "init", init)
    return calls, Stop


def no_connect(*a, **kw):
    raise AssertionError(f"a socket was opened: {a!r}")


def no_ray_init(*a, **kw):
    raise AssertionError(f"ray.init was reached: {a!r} {kw!r}")


def no_plan(*a, **kw):
    raise AssertionError("the matrix was planned: the address was not refused first")


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: error:"), err
    return lines[0]


# --- finding 1: without --ray-address, a new Ray of the run alone; RAY_ADDRESS through the loopback rule ----------


def test_without_ray_address_a_new_local_ray_starts_whatever_ray_address_and_the_address_file_name(
    tmp_path, monkeypatch, listeners, fake_ray
):
    calls, stop = fake_ray
    env_cluster, file_cluster = listeners(), listeners()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{env_cluster.port}")
    # Ray's temp dir, with the address file a `ray start` leaves
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "raytmp"))
    (tmp_path / "raytmp" / "ray").mkdir(parents=True)
    (tmp_path / "raytmp" / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{file_cluster.port}")
    said: list[str] = []
    with pytest.raises(stop):
        RayExecutor().run(load_spec(SPEC), [], tmp_path / "out", prompt_sets=None, say=said.append)
    # "local": Ray starts a new instance and reads neither RAY_ADDRESS nor its address file (None would join them)
    assert [c["address"] for c in calls] == ["local"]
    assert calls[0]["_node_ip_address"] == "127.0.0.1"
    assert env_cluster.accepted == 0 and file_cluster.accepted == 0
    assert any("RAY_ADDRESS=" in line and "not joined" in line for line in said), said


@pytest.mark.parametrize(
    "value", ["192.0.2.1:6379", "example.com:6379", "10.0.0.5:6379", "[[127.0.0.1]]:6379", "ray://127.0.0.1:10001"]
)
def test_a_ray_address_in_the_environment_off_loopback_is_refused_before_any_socket(
    tmp_path, monkeypatch, capsys, value
):
    import ray

    monkeypatch.setattr(ray, "init", no_ray_init)
    monkeypatch.setattr(socket, "create_connection", no_connect)
    monkeypatch.setattr(harness.matrix.run, "run_matrix", no_plan)
    monkeypatch.setenv("RAY_ADDRESS", value)
    with pytest.raises((RefusedError, UsageError), match="RAY_ADDRESS"):
        RayExecutor()
    assert main(["matrix", str(SPEC), "--out", str(tmp_path / "out"), "--executor", "ray"]) == 2
    line = _one_line(capsys)
    assert "RAY_ADDRESS" in line and "--ray-address" in line, line


def test_an_explicit_ray_address_is_what_ray_joins_not_the_environment(monkeypatch, listeners, fake_ray):
    calls, stop = fake_ray
    gcs = listeners(SETTINGS_FRAME)
    monkeypatch.setenv("RAY_ADDRESS", "192.0.2.1:6379")  # never read: --ray-address names the cluster
    with pytest.raises(stop):
        RayExecutor(f"localhost:{gcs.port}").run(load_spec(SPEC), [], Path("unused"), prompt_sets=None, say=print)
    assert [c["address"] for c in calls] == [f"127.0.0.1:{gcs.port}"]  # a literal address: nothing to resolve


# --- finding 17: --ray-address where nothing runs Ray; malformed spellings -----------------------------------------


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("there", ["silent listener", "nothing listening", "an HTTP/1 server"])
def test_a_ray_address_where_nothing_runs_ray_is_one_line_within_the_probe_bound(
    tmp_path, monkeypatch, capsys, listeners, there
):
    import ray

    import harness.matrix.executors as executors

    monkeypatch.setattr(executors, "PROBE_S", 0.5, raising=False)
    monkeypatch.setattr(ray, "init", no_ray_init)  # Ray's own connect would retry for over 10 minutes

    def run_matrix(spec, out, releases, *, executor, say, **kw):  # the driver's connect, with no cell to run
        executor.run(spec, [], out, prompt_sets=None, say=say)

    monkeypatch.setattr(harness.matrix.run, "run_matrix", run_matrix)
    if there == "nothing listening":
        port = _closed_port()
    else:
        port = listeners(b"HTTP/1.1 400 Bad Request\r\n\r\n" if there == "an HTTP/1 server" else b"").port
    t0 = time.monotonic()
    argv = ["matrix", str(SPEC), "--out", str(tmp_path / "out"), "--executor", "ray", "--ray-address"]
    assert main([*argv, f"127.0.0.1:{port}"]) == 2
    assert time.monotonic() - t0 < 10
    line = _one_line(capsys)
    assert f"127.0.0.1:{port}" in line and "no Ray cluster answers" in line, line


def test_a_gcs_port_that_answers_but_never_lets_the_driver_join_is_refused_at_the_join_deadline(monkeypatch, listeners):
    import ray

    import harness.matrix.executors as executors

    gcs = listeners(SETTINGS_FRAME)  # answers as a gRPC server does, then nothing: ray.init would wait
    release = threading.Event()

    def stuck_init(address=None, **kw):
        if not release.wait(10):
            raise AssertionError("ray.init waited 10 s: nothing bounded the join")

    monkeypatch.setattr(executors, "JOIN_S", 0.5, raising=False)
    monkeypatch.setattr(ray, "init", stuck_init)
    t0 = time.monotonic()
    try:
        with pytest.raises(RefusedError, match="did not take this driver"):
            RayExecutor(f"127.0.0.1:{gcs.port}").run(
                load_spec(SPEC), [], Path("unused"), prompt_sets=None, say=lambda m: None
            )
        assert time.monotonic() - t0 < 8
    finally:
        release.set()


@pytest.mark.parametrize(
    "address",
    [
        "[[127.0.0.1]]:6379",
        "[127.0.0.1]:6379",
        "[[::1]]:6379",
        "::1:6379",
        "127.0.0.1:65536",
        "127.0.0.1:0",
        "[127.0.0.1:6379",
        "127.0.0.1:6379\n",
        " 127.0.0.1:6379",
        "127.0.0.1",
        "192.0.2.1:6379",
        "[::ffff:192.0.2.1]:6379",
    ],
)
def test_malformed_or_remote_ray_addresses_are_refused_with_one_line_before_any_socket(
    tmp_path, monkeypatch, capsys, address
):
    import ray

    monkeypatch.setattr(ray, "init", no_ray_init)
    monkeypatch.setattr(socket, "create_connection", no_connect)
    monkeypatch.setattr(harness.matrix.run, "run_matrix", no_plan)
    argv = ["matrix", str(SPEC), "--out", str(tmp_path / "out"), "--executor", "ray", "--ray-address", address]
    assert main(argv) == 2
    assert "--ray-address" in _one_line(capsys)


@pytest.mark.parametrize(
    "address, joined",
    [
        ("127.0.0.1:6379", "127.0.0.1:6379"),
        ("127.0.0.2:1", "127.0.0.2:1"),
        ("localhost:6379", "127.0.0.1:6379"),
        ("[::1]:6379", "[::1]:6379"),
    ],
)
def test_loopback_ray_addresses_are_taken_in_one_literal_spelling(address, joined):
    assert RayExecutor(address).address == joined


# --- finding 3 (the Ray driver's part): a cell's text from a node is shown escaped ----------------------------------


def test_the_drivers_line_for_a_cell_from_a_node_shows_its_text_escaped(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    spec = load_spec(write_spec(tmp_path, ["1.0.0"]))
    key = make_key("a" * 64, "b" * 64)
    hostile = failed_cell(
        "1.0.0", key, "launch", "boom\x1b]0;owned\x07\x1b[2J\r\x9b31m", ran_on={"executor": "ray", "node_id": "\x1b[8m"}
    )

    class Ray:  # what the driver's loop asks of Ray: the one task is done, its result is the hostile cell
        class exceptions:
            RayError = RuntimeError

        def wait(self, refs, num_returns, timeout):
            return refs[:1], refs[1:]

        def get(self, ref):
            return {"cell": hostile, "golden": {}}

    job = CellJob("1.0.0", key, tmp_path / "lock.txt", None)
    said: list[str] = []
    out = tmp_path / "out"
    (out / "cells").mkdir(parents=True)
    RayExecutor()._collect(Ray(), spec, {"ref": (job, time.monotonic())}, out, said.append)
    line = next(s for s in said if s.startswith("[1.0.0]"))
    assert not any(c in line for c in "\x1b\x07\r\x9b"), repr(line)
    assert "\\x1b]0;owned\\x07" in line and "\\x1b[8m" in line, line
