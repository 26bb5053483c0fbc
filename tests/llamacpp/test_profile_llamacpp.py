"""The llama.cpp engine profile as the launcher uses it (no engine): the argv engine_command builds, the flags and
variables a manifest may not set (llama.cpp's spellings), what reaches llama-server's environment, and a model
directory that holds no single GGUF file refused before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import ManifestError, UsageError
from harness.hashing import tree_hash
from harness.launch.base import LaunchSpec
from harness.launch.session import check_launch_inputs, prepare
from harness.launch.subprocess_engine import engine_command, engine_environment
from harness.manifest import load_manifest
from tests.llamacpp.conftest import LLAMACPP_MANIFEST, manifest_variant

BINARY = Path("/opt/builds/abc/bin/llama-server")
MANIFEST_ARGS = ["--threads", "2", "--ctx-size", "4096", "--parallel", "4", "--seed", "0"]


def spec(tmp_path: Path, manifest=None, **kw) -> LaunchSpec:
    model_dir = tmp_path / "model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "model.gguf").write_bytes(b"GGUF")
    return LaunchSpec(
        manifest=manifest or load_manifest(LLAMACPP_MANIFEST), run_id="t", run_dir=tmp_path / "run",
        model_dir=model_dir, port=41234, binary=BINARY, **kw,
    )  # fmt: skip


def test_argv_is_the_binary_the_manifests_args_then_the_harness_flags(tmp_path):
    s = spec(tmp_path, extra_args=("--temp", "0"))
    assert load_manifest(LLAMACPP_MANIFEST).server.args == MANIFEST_ARGS
    assert engine_command(s) == [
        str(BINARY),
        *MANIFEST_ARGS,
        "--temp", "0",  # conform --extra-arg / tests: after the manifest's, before the harness's
        "-m", str(tmp_path / "model" / "model.gguf"),  # the one GGUF in the verified directory
        "--alias", "tiny-llama",
        "--host", "127.0.0.1",
        "--port", "41234",
        "--metrics",
    ]  # fmt: skip


def _validate(path: Path, capsys) -> tuple[int, str]:
    rc = main(["validate", str(path)])
    out, err = capsys.readouterr()
    return rc, err


def _refused_line(path: Path, capsys) -> str:
    rc, err = _validate(path, capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("harness: error: "), err
    return lines[0]


FORBIDDEN_ARGS = [
    (["--host", "0.0.0.0"], "--host"),
    (["--host=0.0.0.0"], "--host"),
    (["--ho", "0.0.0.0"], "--host"),  # read as argparse would (llama.cpp's parser takes no prefixes: refused anyway)
    (["--port", "80"], "--port"),
    (["-m", "/elsewhere/model.gguf"], "-m"),
    (["--model", "/elsewhere/model.gguf"], "--model"),
    (["--hf-repo", "someone/model"], "--hf-repo"),
    (["-hf", "someone/model"], "-hf"),
    (["-hfr", "someone/model"], "-hfr"),
    (["--model-url", "http://10.0.0.1/m.gguf"], "--model-url"),
    (["--api-key", "sk-secret-1"], "--api-key"),
    (["--api-key=sk-secret-1"], "--api-key"),
    (["--api-key-file", "/etc/keys"], "--api-key-file"),
    (["--alias", "other"], "--alias"),
    (["--rpc", "10.0.0.1:50052"], "--rpc"),
    (["--models-dir", "/models"], "--models-dir"),
    (["-mmu", "http://10.0.0.1/p.gguf"], "-mmu"),
    (["--hf-repo-draft", "someone/draft"], "--hf-repo-draft"),
    (["-hfd", "someone/draft"], "-hfd"),
    (["--hf-token", "hf_secret-1"], "--hf-token"),
    (["--tools", "all"], "--tools"),
    (["--tools-runtime", "ssh:user@10.0.0.1"], "--tools-runtime"),
    (["--agent"], "--agent"),
    (["-ag"], "-ag"),
    (["--mcp-servers-json", "{}"], "--mcp-servers-json"),
    (["--ui-mcp-proxy"], "--ui-mcp-proxy"),
    (["--seed", "0", "--"], "'--'"),
]


@pytest.mark.parametrize("args, flag", FORBIDDEN_ARGS, ids=[" ".join(a) for a, _ in FORBIDDEN_ARGS])
def test_flags_the_harness_sets_or_that_leave_the_machine_are_refused(tmp_path, capsys, args, flag):
    path = manifest_variant(tmp_path, server__args=["--threads", "2", *args])
    line = _refused_line(path, capsys)
    assert str(path) in line and "server.args" in line and flag in line, line
    assert "secret" not in line  # a value (perhaps a key) is never echoed


@pytest.mark.parametrize("args", [["--threads", "2"], ["--ctx-size", "2048", "--parallel", "1"], ["--temp", "0"],
                                  ["--no-agent"], ["--seed", "-1"], ["--no-webui"]])  # fmt: skip
def test_ordinary_llama_server_flags_pass(tmp_path, capsys, args):
    rc, err = _validate(manifest_variant(tmp_path, server__args=args), capsys)
    assert rc == 0, err


FORBIDDEN_ENV = ["LLAMA_ARG_HOST", "LLAMA_ARG_PORT", "LLAMA_API_KEY", "LLAMA_ARG_MODEL", "LLAMA_ARG_HF_REPO",
                 "LLAMA_ARG_API_KEY_FILE", "LLAMA_ARG_TOOLS", "LLAMA_ARG_AGENT", "LLAMA_ARG_MMPROJ_URL",
                 "LLAMA_ARG_SPEC_DRAFT_HF_REPO", "HF_TOKEN", "AIP_MODE", "AIP_HTTP_PORT"]  # fmt: skip


@pytest.mark.parametrize("name", FORBIDDEN_ENV)
def test_variables_the_harness_sets_or_that_leave_the_machine_are_refused(tmp_path, capsys, name):
    path = manifest_variant(tmp_path, server__env={"LLAMA_ARG_THREADS": "2", name: "secret-value"})
    line = _refused_line(path, capsys)
    assert "server.env" in line and name in line and "secret" not in line, line


def test_extra_args_and_env_go_through_the_same_check():
    m = load_manifest(LLAMACPP_MANIFEST)
    with pytest.raises(UsageError, match=r"--extra-arg.*--host"):
        check_launch_inputs(m, ("--host", "0.0.0.0"))
    with pytest.raises(UsageError, match="LLAMA_API_KEY"):
        check_launch_inputs(m, (), {"LLAMA_API_KEY": "k"})
    # built without load_manifest (no validation): the launcher checks again
    bad = m.model_copy(update={"server": m.server.model_copy(update={"args": ["-m", "/x.gguf"]})})
    with pytest.raises(ManifestError, match=r"server\.args: -m"):
        check_launch_inputs(bad)


def test_the_key_goes_by_environment_and_inherited_engine_variables_stay_out(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_LLAMACPP_UNIT_KEY", "unit-key-1")
    for name, value in {"LLAMA_ARG_HOST": "0.0.0.0", "LLAMA_ARG_PORT": "80", "LLAMA_API_KEY": "inherited",
                        "AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "8080", "HF_TOKEN": "hf_x"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    m = load_manifest(manifest_variant(tmp_path, server__api_key_env="HARNESS_LLAMACPP_UNIT_KEY",
                                       server__env={"LLAMA_ARG_THREADS": "2"}))  # fmt: skip
    s = spec(tmp_path, m)
    env = engine_environment(s)
    assert env["LLAMA_API_KEY"] == "unit-key-1"
    assert "unit-key-1" not in " ".join(engine_command(s))
    assert env["LLAMA_ARG_THREADS"] == "2"  # the manifest's own
    for name in ("LLAMA_ARG_HOST", "LLAMA_ARG_PORT", "AIP_MODE", "AIP_HTTP_PORT", "HF_TOKEN"):
        assert name not in env, name
    assert env["HF_HUB_OFFLINE"] == "1"
    # without api_key_env no key reaches the engine, not even one inherited by the harness
    assert "LLAMA_API_KEY" not in engine_environment(spec(tmp_path))


def test_a_model_directory_without_one_gguf_is_refused_before_anything_starts(tmp_path, capsys, monkeypatch):
    model = tmp_path / "weights"
    model.mkdir()
    (model / "config.json").write_text("{}\n")
    path = manifest_variant(tmp_path, model__source=str(model), model__sha256=tree_hash(model))

    def no_build(*a, **k):
        raise AssertionError("the build was reached")

    monkeypatch.setattr(type(load_manifest(path).profile), "build_from_source", no_build)
    with pytest.raises(ManifestError) as e:
        prepare(path, run_dir=tmp_path / "run", quiet=True)
    assert e.value.field == "model.source" and "expected one .gguf file, found 0" in str(e.value)
    (model / "a.gguf").write_bytes(b"a")
    (model / "b.gguf").write_bytes(b"b")
    path = manifest_variant(tmp_path, model__source=str(model), model__sha256=tree_hash(model))
    rc = main(["up", str(path)])
    err = capsys.readouterr().err
    assert rc == 2 and err.strip().splitlines() == [
        f"harness: error: {path}: model.source: {model}: expected one .gguf file, found 2"
    ]
