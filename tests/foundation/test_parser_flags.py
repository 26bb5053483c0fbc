"""A manifest asking for a tool-call or reasoning parser its release has not registered is refused before launch,
naming the flag (the surface lists the registry's names as the flag's choices; no engine starts)."""

from __future__ import annotations

import pytest
import yaml

from harness.errors import ManifestError
from harness.launch.argsurface import cached_surface, surface_from_actions
from harness.launch.session import refuse_unaccepted_args
from harness.launch.surfaces import surface_key
from harness.manifest import load_manifest
from harness.settings import REPO_ROOT

MANIFESTS = REPO_ROOT / "manifests"


def _action(flag: str, choices: list[str] | None) -> dict:
    return {"option_strings": [flag], "dest": flag[2:].replace("-", "_"), "default": None, "choices": choices,
            "nargs": None, "takes_value": True, "deprecated": False, "help": "", "help_full": ""}  # fmt: skip


def _manifest(tmp_path, args: list[str]):
    data = yaml.safe_load((MANIFESTS / "vllm-0.11.0-cpu-scripted.yaml").read_text())
    data["runtime"]["python"]["lock"] = str((MANIFESTS / data["runtime"]["python"]["lock"]).resolve())
    data["server"]["args"] = args
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(data))
    return load_manifest(p)


@pytest.fixture
def planted(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))

    def plant(m) -> None:
        actions = [
            {**_action("--enable-auto-tool-choice", None), "nargs": 0, "takes_value": False},
            _action("--tool-call-parser", ["hermes", "llama3_json"]),
            _action("--reasoning-parser", ["deepseek_r1", "qwen3"]),
        ]
        surface = surface_from_actions(actions, engine="vllm", release="0.11.0")
        cached_surface(surface_key(m), lambda: surface)

    return plant


@pytest.mark.parametrize("flag", ["--tool-call-parser", "--reasoning-parser"])
def test_a_parser_the_release_lacks_is_refused_naming_the_flag(tmp_path, planted, flag):
    args = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"]
    args[args.index(flag) + 1] = "no_such_parser"
    m = _manifest(tmp_path, args)
    planted(m)
    with pytest.raises(ManifestError) as err:
        refuse_unaccepted_args(m)
    line = str(err.value)
    assert "server.args" in line and flag in line and "no_such_parser" in line and "refused before launch" in line


def test_the_parsers_the_release_has_pass(tmp_path, planted):
    m = _manifest(
        tmp_path, ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"]
    )
    planted(m)
    refuse_unaccepted_args(m)  # no exception


def test_without_a_readable_surface_the_engine_decides(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))  # no environment installed there: nothing to read
    m = _manifest(tmp_path, ["--tool-call-parser", "no_such_parser"])
    refuse_unaccepted_args(m)  # no exception: the surface cannot be read without the environment
