"""Refusals before anything starts: a changed model byte (both hashes shown) and a busy port."""

from __future__ import annotations

import shutil
import socket

import yaml

from harness.cli import main
from harness.hashing import tree_hash
from harness.manifest import DEFAULT_MANIFEST
from harness.models.reference import build_reference_model


def _manifest(tmp_path, model_dir, port=0):
    data = yaml.safe_load(DEFAULT_MANIFEST.read_text())
    data["runtime"]["python"]["lock"] = str(DEFAULT_MANIFEST.parent / data["runtime"]["python"]["lock"])
    data["model"]["source"] = str(model_dir)
    data["model"]["sha256"] = tree_hash(model_dir)
    data["server"]["port"] = port
    p = tmp_path / "local.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def _engines_running() -> list[str]:
    from harness.launch import registry

    return [e["run_id"] for e in registry.entries() if registry.alive(e)]


def test_one_changed_byte_refuses_with_both_hashes(tmp_path, capsys):
    model = tmp_path / "model"
    build_reference_model(model)
    manifest = _manifest(tmp_path, model)
    pinned = tree_hash(model)
    weights = model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    actual = tree_hash(model)
    before = _engines_running()
    assert main(["up", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert pinned in err and actual in err and "refusing" in err
    assert _engines_running() == before


def test_busy_port_is_refused_before_start(tmp_path, capsys):
    model = tmp_path / "model"
    build_reference_model(model)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        manifest = _manifest(tmp_path, model, port=port)
        before = _engines_running()
        assert main(["up", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is busy" in err
    assert _engines_running() == before


def test_model_hash_recipe_matches_sha256sum(tmp_path):
    """The documented recipe: sha256 over `sha256sum`-format lines sorted by path."""
    import hashlib
    import subprocess

    model = tmp_path / "m"
    build_reference_model(model)
    if shutil.which("sha256sum") is None:
        raise AssertionError("sha256sum missing")
    out = subprocess.run(
        "find . -type f | sed 's|^\\./||' | LC_ALL=C sort | xargs sha256sum",
        shell=True, cwd=model, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert hashlib.sha256(out.encode()).hexdigest() == tree_hash(model)
