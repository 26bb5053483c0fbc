"""Malformed manifests: one line naming the file and the field, exit 2 (acceptance 4 of the foundation issue)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.manifest import DEFAULT_MANIFEST, is_loopback_host

BASE = yaml.safe_load(DEFAULT_MANIFEST.read_text())
LOCK = str(DEFAULT_MANIFEST.parent / BASE["runtime"]["python"]["lock"])


def write(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def variant(**changes) -> dict:
    data = yaml.safe_load(DEFAULT_MANIFEST.read_text())
    data["runtime"]["python"]["lock"] = LOCK
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split("__")
        for k in parents:
            node = node[k]
        node[leaf] = value
    return data


def test_default_manifest_validates(capsys):
    assert main(["validate", str(DEFAULT_MANIFEST)]) == 0
    assert "vllm 0.11.0" in capsys.readouterr().out


@pytest.mark.parametrize(
    "data, field",
    [
        (variant(engine__colour="blue"), "engine.colour"),
        (variant(server__port="eighty"), "server.port"),
        (variant(server__host="0.0.0.0"), "server.host"),
        (variant(server__host="10.0.0.5"), "server.host"),
        (variant(model__sha256="abc123"), "model.sha256"),
        (variant(engine__version="0.11"), "engine.version"),
        (variant(server__api_key_env="sk-this-is-a-key"), "server.api_key_env"),
        (variant(server__args=["--host", "0.0.0.0"]), "server.args"),
        (variant(runtime__python__lock_sha256="0" * 64), "runtime.python.lock_sha256"),
    ],
)
def test_malformed_manifest_names_file_and_field(tmp_path, capsys, data, field):
    path = write(tmp_path, data)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert str(path) in err[0] and field in err[0]


def test_docker_runtime_without_digest(tmp_path, capsys):
    data = variant()
    data["runtime"] = {"docker": {"image": "example/tgi:3.3.5"}}
    data["engine"] = {"kind": "tgi", "version": "3.3.5"}
    path = write(tmp_path, data)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "runtime.docker.digest" in err and str(path) in err and len(err.splitlines()) == 1


def test_shipped_tgi_manifest_says_digest_missing(capsys):
    assert main(["validate", str(DEFAULT_MANIFEST.parent / "tgi-3.3.5.yaml")]) == 2
    assert "digest: missing" in capsys.readouterr().err


def test_yaml_syntax_error(tmp_path, capsys):
    p = tmp_path / "bad.yaml"
    p.write_text("engine: [unclosed\n")
    assert main(["validate", str(p)]) == 2
    assert str(p) in capsys.readouterr().err


@pytest.mark.parametrize(
    "host, ok",
    [("127.0.0.1", True), ("127.5.6.7", True), ("::1", True), ("localhost", True), ("[::1]", False), ("[127.0.0.1]", False),
     (" 127.0.0.1 ", False), ("127.0.0.1\n", False),
     ("0.0.0.0", False), ("192.168.1.1", False), ("example.com", False), ("::", False)],
)  # fmt: skip
def test_loopback_decided_on_parsed_value(host, ok):
    assert is_loopback_host(host) is ok
