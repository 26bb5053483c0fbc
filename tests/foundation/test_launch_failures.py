"""A dead engine and a slow one: one clear line, the engine log's tail, exit 1, nothing left running."""

from __future__ import annotations

import pytest
import yaml

from harness.cli import main
from harness.manifest import DEFAULT_MANIFEST

pytestmark = pytest.mark.engine


def _manifest(tmp_path, **server):
    data = yaml.safe_load(DEFAULT_MANIFEST.read_text())
    data["runtime"]["python"]["lock"] = str(DEFAULT_MANIFEST.parent / data["runtime"]["python"]["lock"])
    data["server"].update(server)
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def _engines_of(manifest) -> list[dict]:
    """Registry entries of engines launched from this manifest (other harness runs on the machine don't count)."""
    from harness.launch import registry

    return [e for e in registry.entries() if e.get("manifest") == str(manifest.resolve())]


def test_engine_that_exits_fails_fast_with_its_log(tmp_path, capsys):
    # a value the parser takes but the engine refuses at start: longer than the model's 2048 positions
    args = yaml.safe_load(DEFAULT_MANIFEST.read_text())["server"]["args"] + ["--max-model-len", "999999"]
    manifest = _manifest(tmp_path, args=args)
    assert main(["up", str(manifest)]) == 1
    err = capsys.readouterr().err
    assert "engine exited with status" in err and "before it was ready" in err
    assert "--- engine log (tail) ---" in err and "999999" in err  # vLLM's own complaint, from engine.log
    assert _engines_of(manifest) == []


def test_a_value_outside_the_releases_choices_is_refused_before_launch(tmp_path, capsys):
    args = yaml.safe_load(DEFAULT_MANIFEST.read_text())["server"]["args"] + ["--dtype", "not-a-dtype"]
    manifest = _manifest(tmp_path, args=args)
    assert main(["up", str(manifest)]) == 2  # the release's own parser would refuse it: nothing starts
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln.startswith("harness: error:")]
    assert len(err) == 1 and "server.args" in err[0] and "--dtype 'not-a-dtype'" in err[0]
    assert "refused before launch" in err[0]
    assert _engines_of(manifest) == []


def test_startup_timeout_shows_the_log_and_stops_the_engine(tmp_path, capsys):
    manifest = _manifest(tmp_path, startup_timeout_s=3)
    assert main(["up", str(manifest)]) == 1
    err = capsys.readouterr().err
    assert "engine not ready after 3 s" in err and "--- engine log (tail) ---" in err and "engine.log" in err
    assert _engines_of(manifest) == []
    run_dir = next(line.split("log: ")[1].rstrip(")") for line in err.splitlines() if "log: " in line)
    assert not processes_holding(run_dir)


def processes_holding(log_path: str) -> set[int]:
    """Processes still running with this run's engine.log open (an engine left behind would have it)."""
    import os
    from pathlib import Path

    alive = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            for fd in os.scandir(fd_dir):
                if os.readlink(fd.path) == log_path:
                    alive.add(int(fd_dir.parent.name))
        except OSError:
            continue
    return alive
