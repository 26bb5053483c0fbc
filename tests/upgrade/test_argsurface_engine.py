"""The real argument surfaces, read from the installed engine runtimes (marked engine: it needs the vLLM 0.11.0 and
0.32.0 environments and the llama-server build; the capture builds each parser, no engine starts, so no vLLM lock)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from harness.envs import ensure_env
from harness.errors import HarnessError
from harness.manifest import load_manifest
from harness.settings import REPO_ROOT
from harness.upgrade.arguments import check_arguments
from tests.conftest import unavailable

pytestmark = pytest.mark.engine
MANIFESTS = REPO_ROOT / "manifests"


def _env(name: str):
    m = load_manifest(MANIFESTS / name)
    try:
        return m, ensure_env(m, quiet=True)
    except HarnessError as exc:
        unavailable(f"{name}: engine environment: {exc.one_line()}")


def test_real_vllm_0_11_0_surface_has_the_known_flags_with_their_defaults():
    m, env = _env("vllm-0.11.0-cpu.yaml")
    t0 = time.monotonic()
    s = m.profile.argument_surface(env.path, "0.11.0")  # captured now, not from the cache
    assert time.monotonic() - t0 < 180
    f = s["flags"]
    assert len(f) > 150 and s["abbrev"] and s["release"] == "0.11.0"
    assert f["--swap-space"]["default"] == 4
    assert f["--max-model-len"]["default"] is None and f["--max-model-len"]["takes_value"]
    assert f["--dtype"]["default"] == "auto" and "float32" in f["--dtype"]["choices"]
    assert f["--seed"]["default"] is None
    assert f["--gpu-memory-utilization"]["default"] == 0.9
    assert f["--guided-decoding-backend"]["deprecated"]
    assert s["aliases"]["-tp"] == "--tensor-parallel-size"
    assert "Size of the CPU swap space" in f["--swap-space"]["help"]  # help texts read (vLLM reads them for --help)
    # the harness's own flags are part of the parser (and refused in a manifest by the profile, not by absence)
    assert {"--host", "--port", "--model", "--served-model-name"} <= set(f)


def test_real_upgrade_check_names_a_flag_0_32_0_removed(tmp_path):
    _env("vllm-0.11.0-cpu.yaml")
    new, _ = _env("vllm-0.32.0-cpu.yaml")
    data = yaml.safe_load((MANIFESTS / "vllm-0.11.0-cpu.yaml").read_text())
    data["runtime"]["python"]["lock"] = str((MANIFESTS / data["runtime"]["python"]["lock"]).resolve())
    data["server"]["args"] += ["--swap-space", "4"]
    old_path = tmp_path / "old-swap.yaml"
    old_path.write_text(yaml.safe_dump(data))
    found = check_arguments(load_manifest(old_path), new)
    assert found["new_surface"]["release"] == "vllm 0.32.0" and found["old_surface"]["release"] == "vllm 0.11.0"
    removed = [p["flag"] for p in found["old_args"] if p["problem"] == "removed"]
    assert removed == ["--swap-space"] and found["launch_refused"] == ""
    assert "--swap-space" in {x["flag"] for x in found["release"]["removed"]}


def test_real_llama_server_surface():
    m = load_manifest(MANIFESTS / "llamacpp-0c1e570-cpu.yaml")
    try:
        binary = m.profile.build_from_source(m.runtime.source, m.engine.version, quiet=True)
    except HarnessError as exc:
        unavailable(f"llama-server build: {exc.one_line()}")
    s = m.profile.argument_surface(Path(binary), m.engine.version)
    assert s["flags"]["--ctx-size"]["env"] == "LLAMA_ARG_CTX_SIZE" and s["aliases"]["-np"] == "--parallel"
    assert s["flags"]["--metrics"]["takes_value"] is False
