"""Progress of long work (issue 21, seen by hand: `harness matrix`, `harness upgrade` and an engine's start printed
nothing for minutes): harness.progress shows the stage and its elapsed seconds. Not on a terminal (pytest, a pipe) it
prints plain lines at a bounded rate and never a terminal escape. The clock is the tests' own, so no assertion
depends on how fast this machine is; a real engine never starts (a fake one answers on 127.0.0.1)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from harness.manifest import DEFAULT_MANIFEST, load_manifest
from harness.settings import REPO_ROOT

LINE = re.compile(r"^  \.\.\. (?P<stage>.+) \((?P<s>\d+) s(?:; (?P<detail>.*))?\)$")


class Clock:
    """A monotonic clock the test moves: by hand, or by `step` seconds at every reading (for the ticker thread)."""

    def __init__(self, step: float = 0.0) -> None:
        self.t, self.step = 1000.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


@pytest.fixture
def clock(monkeypatch):
    import harness.progress as progress

    c = Clock()
    monkeypatch.setenv("HARNESS_PROGRESS", "plain")  # plain lines even under `pytest -s` on a terminal
    monkeypatch.setattr(progress, "_clock", c)
    monkeypatch.setattr(progress, "_REFRESH_S", 3600.0)  # the ticker thread stays idle: the test ticks by hand
    return c


@pytest.fixture
def ticking(monkeypatch):
    """A ticker that runs often against a clock that moves 5 s at each reading; every line said lands in `said`."""
    import harness.progress as progress

    said: list[str] = []
    monkeypatch.setenv("HARNESS_PROGRESS", "plain")
    monkeypatch.setattr(progress, "_clock", Clock(step=5.0))
    monkeypatch.setattr(progress, "_REFRESH_S", 0.01)
    monkeypatch.setattr(progress, "_to_stderr", said.append)
    return SimpleNamespace(said=said, say=said.append)


def _wait_until(said: list[str], *wanted: str) -> None:
    """Until a progress line holds every `wanted` text (a hang guard of 60 s, not a timing assertion: the ticker runs
    every 10 ms and each of its readings moves the clock 5 s)."""
    for _ in range(6000):
        if any(x.startswith("  ... ") and all(w in x for w in wanted) for x in said):
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"no progress line with {wanted!r}: {said}")


def _progress_lines(lines: list[str]) -> list[re.Match[str]]:
    return [m for m in (LINE.match(x) for x in lines) if m]


def test_plain_lines_name_the_stage_and_its_elapsed_seconds(clock):
    from harness.progress import progress

    said: list[str] = []
    with progress("waiting for the engine", say=said.append, live=False) as stage:
        for _ in range(5):  # a fake slow wait: 25 s by the test's clock, one tick every 5 s
            clock.t += 5
            stage.detail("/health 503")
            stage.tick()
    assert said == [
        "  ... waiting for the engine (10 s; /health 503)",
        "  ... waiting for the engine (20 s; /health 503)",
    ]


def test_a_stage_shorter_than_the_period_prints_nothing(clock):
    from harness.progress import progress

    said: list[str] = []
    with progress("quick", say=said.append) as stage:
        clock.t += 9
        stage.tick()
    assert said == []


def test_a_nested_stage_shows_under_the_outer_one_and_what_it_said(clock):
    from harness.progress import progress

    said: list[str] = []
    with progress("[0.11.0] cell 1 of 2", say=said.append) as cell:
        cell.say("[0.11.0] running: no cell yet")
        with progress("waiting for vllm 0.11.0 to be ready") as wait:
            clock.t += 35
            wait.tick()
        clock.t += 10
        cell.tick()
    assert said == [
        "[0.11.0] running: no cell yet",
        "  ... [0.11.0] cell 1 of 2: running: no cell yet / waiting for vllm 0.11.0 to be ready (35 s)",
        "  ... [0.11.0] cell 1 of 2: running: no cell yet (45 s)",
    ]


def test_not_a_tty_gets_plain_lines_and_no_escape(clock, capsys, monkeypatch):
    from harness.progress import progress

    monkeypatch.delenv("HARNESS_PROGRESS")  # what the harness finds for itself: captured stderr is no terminal
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich would call that a terminal; a pipe is still a pipe
    with progress("waiting for the engine") as stage:
        stage.detail("server said \x1b[2K\rready \x1b]0;owned\x07")
        clock.t += 12
        stage.tick()
    err = capsys.readouterr().err
    assert err == "  ... waiting for the engine (12 s; server said \\x1b[2K\\rready \\x1b]0;owned\\x07)\n"


def test_a_quiet_launch_shows_nothing(clock, capsys):
    from harness.progress import progress

    with progress("waiting", enabled=False) as stage:
        clock.t += 60
        stage.tick()
    assert capsys.readouterr().err == ""


# --- the hooks: an engine's start, `harness upgrade`, `harness matrix` ---------------------------------------------


class SlowEngineServer:
    """An engine that answers /health 503 until `ready()`, then /health 200, /v1/models and /version."""

    def __init__(self, served: str, version: str, ready: Callable[[], bool]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/health":
                    status, doc = (200, {}) if ready() else (503, {"error": "loading"})
                elif self.path == "/v1/models":
                    status, doc = 200, {"data": [{"id": served}]}
                else:
                    status, doc = 200, {"version": version}
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> SlowEngineServer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def test_an_engine_start_shows_what_it_waits_for(ticking, tmp_path, capsys):
    from harness.launch.session import start_verified

    m = load_manifest(DEFAULT_MANIFEST)
    m = m.model_copy(update={"server": m.server.model_copy(update={"startup_timeout_s": 60})})
    # ready once the wait was shown with why it is not ready yet
    shown_why = lambda: any(x.endswith("; /health 503)") for x in ticking.said)  # noqa: E731
    with SlowEngineServer(m.model.served_name, m.engine.version, shown_why) as srv:
        spec = SimpleNamespace(manifest=m, run_id="r1", api_key=lambda: None, binary=None, env_dir=None)
        engine = SimpleNamespace(spec=spec, base_url=srv.url, log_path=tmp_path / "log", identity=None,
                                 start=lambda: None, stop=lambda: None, exit_status=lambda: None,
                                 log_tail=lambda: "", local_pids=lambda: [])  # fmt: skip
        identity = start_verified(engine)  # type: ignore[arg-type]
    assert identity["version"] == m.engine.version
    lines = _progress_lines(ticking.said)
    assert lines and {m["stage"] for m in lines} == {"waiting for vllm 0.11.0 to be ready"}, ticking.said
    assert all(int(m["s"]) > 0 for m in lines) and lines[-1]["detail"] == "/health 503"
    assert "\x1b" not in "".join(ticking.said) + capsys.readouterr().err


def test_upgrade_shows_each_sides_stage(ticking, tmp_path, monkeypatch):
    import harness.upgrade.run as run

    def slow_collect(manifest, out, sets, *, expectations, conformance, say):
        say(f"[{manifest.name}] ready; recording golden prompt sets")
        _wait_until(ticking.said, f"[{manifest.name}]: ready")  # the side takes "minutes": shown before it ends
        return {"manifest": str(manifest.path), "name": manifest.name, "ok": False, "launched": True,
                "engine": {"kind": manifest.engine.kind, "version": manifest.engine.version},
                "error": "fake side", "wall_seconds": 0.1}  # fmt: skip

    monkeypatch.setattr(run, "collect_side", slow_collect)
    run.run_upgrade(DEFAULT_MANIFEST, REPO_ROOT / "manifests" / "vllm-0.32.0-cpu.yaml", tmp_path / "u",
                    tolerance=0.02, margin=0.1, conformance=False, say=ticking.say)  # fmt: skip
    stages = [m["stage"] for m in _progress_lines(ticking.said)]
    for name in ("vllm-0.11.0-cpu", "vllm-0.32.0-cpu"):
        assert f"[{name}]: ready; recording golden prompt sets" in stages, ticking.said
    assert "[vllm-0.11.0-cpu] ready; recording golden prompt sets" in ticking.said  # the side's own line, as before


def test_matrix_shows_each_cells_stage(ticking, tmp_path):
    from harness.matrix.run import run_matrix
    from harness.matrix.spec import load_spec
    from tests.matrix.helpers import cell, write_spec

    def slow_runner(release, manifest, key, out, *, say, **kw):
        say(f"[{release}] launching")
        _wait_until(ticking.said, f"[{release}] cell", ": launching (")
        return cell(release, key=key)

    spec = load_spec(write_spec(tmp_path, ["1.0.0", "1.1.0"]))
    run_matrix(spec, tmp_path / "m", spec.versions, runner=slow_runner, say=ticking.say)
    stages = [m["stage"] for m in _progress_lines(ticking.said)]
    assert "[1.0.0] cell 1 of 2: launching" in stages and "[1.1.0] cell 2 of 2: launching" in stages, ticking.said
