"""`harness validate` reads server.args against the release the manifest pins: automatically when that release's
argument surface was read before (cached), or with --surface from its installed environment (never installing, never
starting an engine). A flag the release rejects is one line naming it, exit 2. The surfaces here are the real
captures in tests/upgrade/data/argsurface, planted in a temporary $HARNESS_HOME."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.launch.argsurface import cached_surface, surface_from_actions
from harness.launch.surfaces import surface_key
from harness.manifest import load_manifest
from harness.settings import REPO_ROOT

MANIFESTS = REPO_ROOT / "manifests"
DATA = REPO_ROOT / "tests" / "upgrade" / "data" / "argsurface"


def variant(tmp_path: Path, version: str, args: list[str]) -> Path:
    data = yaml.safe_load((MANIFESTS / f"vllm-{version}-cpu.yaml").read_text())
    data["runtime"]["python"]["lock"] = str((MANIFESTS / data["runtime"]["python"]["lock"]).resolve())
    data["server"]["args"] = args
    p = tmp_path / f"m-{version}.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def plant(manifest: Path, version: str) -> None:
    doc = json.loads((DATA / f"vllm-{version}-parser-dump.json").read_text())
    surface = surface_from_actions(doc["actions"], engine="vllm", release=version)
    cached_surface(surface_key(load_manifest(manifest)), lambda: surface)


def test_a_removed_flag_is_named_on_one_line(tmp_path, home, capsys):
    m = variant(tmp_path, "0.32.0", ["--enforce-eager", "--swap-space", "4"])
    assert main(["validate", str(m)]) == 0  # nothing read before: not checked, nothing run
    assert "args:" not in capsys.readouterr().out
    plant(m, "0.32.0")
    assert main(["validate", str(m)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"harness: error: {m}: server.args: --swap-space: not a flag of vllm 0.32.0"]


def test_accepted_flags_say_so(tmp_path, home, capsys):
    m = variant(tmp_path, "0.11.0", ["--enforce-eager", "--dtype", "float32", "--swap-space", "4", "--max_model", "9"])
    plant(m, "0.11.0")
    assert main(["validate", str(m)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "args: the 4 flags of server.args are accepted by vllm 0.11.0's own parser"
    )


def test_a_bad_choice_and_the_count_of_further_problems(tmp_path, home, capsys):
    m = variant(tmp_path, "0.11.0", ["--dtype", "float64", "--nope", "--nope2"])
    plant(m, "0.11.0")
    assert main(["validate", str(m)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "server.args: --dtype 'float64': not one of vllm 0.11.0's choices" in line and "(and 2 more)" in line


def test_surface_without_an_installed_environment_is_one_line_and_installs_nothing(tmp_path, home, capsys):
    m = variant(tmp_path, "0.32.0", ["--enforce-eager"])
    assert main(["validate", str(m), "--surface"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--surface: argument surface of vLLM 0.32.0 not captured: its environment is not installed" in line
    assert "harness install" in line
    assert not (home / "envs").exists() or not any((home / "envs").iterdir())
