"""Hostile input to `validate`, `model hash|build`, `up` and the launch arguments (issue 12: findings 4, 5, 13, 14, 19,
23, 24, 27, 29). Every refusal is one line on stderr naming the file and the field (or the path), exit 2, no hang, and
nothing started or written over."""

from __future__ import annotations

import argparse
import builtins
import hashlib
import io
import os
import socket
import threading
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.errors import DataError, ManifestError, UsageError
from harness.hashing import tree_hash
from harness.manifest import DEFAULT_MANIFEST, load_manifest
from harness.models.reference import build_reference_model
from tests.support import netguard

BASE = yaml.safe_load(DEFAULT_MANIFEST.read_text())
LOCK = DEFAULT_MANIFEST.parent / BASE["runtime"]["python"]["lock"]
LOCK_SHA = hashlib.sha256(LOCK.read_bytes()).hexdigest()
HASH_LINE = "    --hash=sha256:" + "a" * 64
DIGEST = "sha256:" + "b" * 64


def variant(**changes) -> dict:
    data = yaml.safe_load(DEFAULT_MANIFEST.read_text())
    data["runtime"]["python"]["lock"] = str(LOCK)
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split("__")
        for k in parents:
            node = node[k]
        node[leaf] = value
    return data


def tgi_variant(**server) -> dict:
    data = variant()
    data["engine"] = {"kind": "tgi", "version": "3.3.5"}
    data["runtime"] = {"docker": {"image": "example/tgi:3.3.5", "digest": DIGEST}}
    data["server"].update(server)
    return data


def write(tmp_path: Path, data: dict, name: str = "m.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("harness: error: "), lines
    return lines[0]


def refused(argv: list[str], capsys, *needles: str) -> str:
    rc, _out, err = run(argv, capsys)
    assert rc == 2, err
    line = one_error_line(err)
    for n in needles:
        assert n in line, (n, line)
    return line


def finishes(fn, timeout: float = 20.0):
    """Run fn in a thread; fail (instead of hanging the suite) if it does not return in time."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"still running after {timeout} s (blocked on a FIFO?)"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.fixture
def deny(monkeypatch):
    """deny(path): opening or listing `path` fails with EACCES, as for an unreadable file or directory (the tests
    may run as root, whom chmod 000 does not stop)."""
    denied: set[str] = set()
    real_open, real_io_open, real_scandir = os.open, io.open, os.scandir

    def check(path):
        if isinstance(path, (str, bytes, os.PathLike)) and os.path.abspath(os.fsdecode(path)) in denied:
            raise PermissionError(13, "Permission denied", os.fsdecode(path))

    def os_open(path, *a, **kw):
        check(path)
        return real_open(path, *a, **kw)

    def io_open(file, *a, **kw):
        check(file)
        return real_io_open(file, *a, **kw)

    def scandir(path="."):
        check(path)
        return real_scandir(path)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(io, "open", io_open)
    monkeypatch.setattr(builtins, "open", io_open)
    monkeypatch.setattr(os, "scandir", scandir)
    return lambda p: denied.add(os.path.abspath(p))


@pytest.fixture
def nothing_launches(monkeypatch):
    """Anything that gets past the pre-launch checks fails the test at once: no model, no env, no engine."""

    def got_past(*a, **kw):
        raise AssertionError("the launch went past the checks that should have refused it")

    monkeypatch.setattr("harness.models.resolve_model", got_past)
    monkeypatch.setattr("harness.envs.ensure_env", got_past)


# -- 4: server.args read the way the engine reads them -------------------------------------------------------------

BYPASSES = [
    (["--api_key", "sk-x"], "--api-key"),  # FlexibleArgumentParser: _ is -
    (["--api-ke=sk-x"], "--api-key"),  # argparse: an unambiguous prefix is the flag
    (["--ho", "0.0.0.0"], "--host"),
    (["--host=0.0.0.0"], "--host"),
    (["--po", "80"], "--port"),
    (["--host.x", "0.0.0.0"], "--host"),  # --flag.key value is a JSON field of --flag
    (["--config", "engine.yaml"], "--config"),  # more flags from a file: refused outright
    (["--conf=engine.yaml"], "--config"),
    (["--uds", "/tmp/engine.sock"], "--uds"),
    (["-dpa", "10.0.0.1"], "-dpa"),
    (["--data_parallel_address=10.0.0.1"], "--data-parallel-address"),
    (["--otlp-traces-endpoint", "http://10.0.0.1:4317"], "--otlp-traces-endpoint"),
    (["--served_model_name", "other"], "--served-model-name"),
    (["--model", "/elsewhere"], "--model"),
    (["--seed", "0", "--"], "'--'"),
]


@pytest.mark.parametrize("args, flag", BYPASSES, ids=[" ".join(a) for a, _ in BYPASSES])
def test_server_args_bypasses_are_refused(tmp_path, capsys, args, flag):
    path = write(tmp_path, variant(server__args=["--enforce-eager", *args]))
    line = refused(["validate", str(path)], capsys, str(path), "server.args", flag)
    assert "sk-x" not in line  # a key given in the args is not echoed


@pytest.mark.parametrize("args", [["--enforce-eager"], ["--max-model-len", "1024"], ["--config-format", "auto"],
                                  ["--model-impl", "vllm"], ["--seed", "-1"], ["--max_num_seqs=4"]])  # fmt: skip
def test_ordinary_engine_args_pass(tmp_path, capsys, args):
    path = write(tmp_path, variant(server__args=args))
    rc, out, err = run(["validate", str(path)], capsys)
    assert rc == 0, err


TGI_BYPASSES = [(["--hostname=0.0.0.0"], "--hostname"), (["--api_key", "k"], "--api-key"),
                (["--model-id", "/x"], "--model-id"), (["--port", "81"], "--port")]  # fmt: skip


@pytest.mark.parametrize("args, flag", TGI_BYPASSES)
def test_tgi_args_are_checked_for_tgi(tmp_path, capsys, args, flag):
    path = write(tmp_path, tgi_variant(args=args))
    refused(["validate", str(path)], capsys, "server.args", flag)


def test_env_cannot_move_the_engine_off_loopback(tmp_path, capsys):
    path = write(tmp_path, variant(server__env={"VLLM_HOST_IP": "0.0.0.0"}))
    refused(["validate", str(path)], capsys, "server.env", "VLLM_HOST_IP")


def test_harness_flags_come_last_and_its_env_wins(tmp_path):
    from harness.launch.base import LaunchSpec
    from harness.launch.subprocess_engine import engine_command, engine_environment

    m = load_manifest(DEFAULT_MANIFEST)
    # built without validation, as a caller could: the launcher's own settings still decide
    m = m.model_copy(update={"server": m.server.model_copy(update={"env": {"VLLM_HOST_IP": "0.0.0.0"}})})
    spec = LaunchSpec(manifest=m, run_id="t", run_dir=tmp_path, model_dir=tmp_path, port=12345, env_dir=tmp_path,
                      extra_args=("--max-num-seqs", "4"))  # fmt: skip
    cmd = engine_command(spec)
    assert cmd[-8:] == ["--model", str(tmp_path), "--served-model-name", m.model.served_name,
                        "--host", "127.0.0.1", "--port", "12345"]  # fmt: skip
    assert cmd.index("--max-num-seqs") < cmd.index("--host")
    env = engine_environment(spec)
    assert env["VLLM_HOST_IP"] == "127.0.0.1"
    assert env["VLLM_NO_USAGE_STATS"] == "1"  # vLLM would otherwise post usage stats off this machine


def test_extra_arg_goes_through_the_same_check(tmp_path, capsys, nothing_launches):
    line = refused(["conform", str(DEFAULT_MANIFEST), "--extra-arg=--api_key=sk-x"], capsys, "--extra-arg", "--api-key")
    assert "sk-x" not in line
    refused(["conform", str(DEFAULT_MANIFEST), "--extra-arg=--ho", "--extra-arg=0.0.0.0"], capsys, "--host")


def test_unvalidated_manifest_args_are_refused_before_launch(nothing_launches):
    from harness.launch.session import prepare

    m = load_manifest(DEFAULT_MANIFEST)
    m = m.model_copy(update={"server": m.server.model_copy(update={"args": ["--ho", "0.0.0.0"]})})
    with pytest.raises(ManifestError, match="server.args"):
        prepare(m, quiet=True)
    with pytest.raises(UsageError, match="--host"):
        prepare(load_manifest(DEFAULT_MANIFEST), extra_args=("--host=0.0.0.0",), quiet=True)
    assert netguard.ATTEMPTS == []


def _vllm_like_parser() -> argparse.ArgumentParser:
    """argparse as vLLM's FlexibleArgumentParser sets it up (allow_abbrev), with the real names around the
    forbidden ones, so that prefixes are resolved among neighbours as in vLLM."""
    p = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    for flag in ["--host", "--port", "--api-key", "--uds", "--config", "--config-format", "--model", "--model-impl",
                 "--served-model-name", "--seed", "--max-model-len", "--hf-config-path", "--data-parallel-address",
                 "--data-parallel-rpc-port", "--otlp-traces-endpoint", "--kv-events-config", "--kv-transfer-config",
                 "--max-num-seqs", "--dtype"]:  # fmt: skip
        p.add_argument(flag)
    p.add_argument("--enforce-eager", action="store_true")
    return p


def _flexible(tokens: list[str]) -> list[str]:
    """FlexibleArgumentParser's rewriting: _ -> - in a long flag's name (up to '=' or '.'), dotted flags become the
    base flag (a JSON value)."""
    out = []
    for t in tokens:
        if t.startswith("--"):
            name, eq, value = t.partition("=")
            base = name.split(".", 1)[0].replace("_", "-")
            out.append(base + (eq + value if eq else ""))
        else:
            out.append(t)
    return out


# vLLM's options that the manifest must not set (harness.launch.argcheck.FORBIDDEN_ARGS["vllm"], spelled out here so
# that the test states the rule independently), and neighbours that it may.
VLLM_FORBIDDEN = [
    "--host",
    "--port",
    "--api-key",
    "--uds",
    "--config",
    "--model",
    "--served-model-name",
    "--data-parallel-address",
    "--otlp-traces-endpoint",
    "--kv-events-config",
    "--kv-transfer-config",
]
_NAMES = [f.lstrip("-") for f in VLLM_FORBIDDEN] + ["seed", "dtype", "model-impl", "config-format", "max-num-seqs"]
_token = st.one_of(
    st.sampled_from(["0.0.0.0", "1", "x.yaml", "sk-x"]),
    st.builds(
        lambda name, cut, under, eq: "--" + (name[:cut] if cut else name).replace("-", "_" if under else "-")
        + ("=v" if eq else ""),
        st.sampled_from(_NAMES), st.integers(0, 12), st.booleans(), st.booleans(),
    ),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(_token, max_size=6))
def test_whatever_argparse_reads_as_a_forbidden_flag_is_refused(tokens):
    from harness.launch.argcheck import FORBIDDEN_ARGS, refused_arg

    assert set(VLLM_FORBIDDEN) <= set(FORBIDDEN_ARGS["vllm"])
    try:
        ns, _rest = _vllm_like_parser().parse_known_args(_flexible(tokens))
    except (argparse.ArgumentError, SystemExit):
        return  # the engine would refuse to start
    set_by_args = {k for k, v in vars(ns).items() if v not in (None, False)}
    forbidden = {f.lstrip("-").replace("-", "_") for f in VLLM_FORBIDDEN}
    if set_by_args & forbidden:
        assert refused_arg("vllm", tokens) is not None, (tokens, set_by_args & forbidden)


# -- 5, 19, 24: model hash refuses what its recipe does not cover ---------------------------------------------------


@pytest.fixture
def model(tmp_path) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text("{}\n")
    (d / "sub").mkdir()
    (d / "sub" / "weights.bin").write_bytes(b"\0" * 16)
    return d


def test_symlinked_subdirectory_is_refused(tmp_path, capsys, model):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "w.bin").write_bytes(b"1")
    (model / "shards").symlink_to(outside, target_is_directory=True)
    refused(["model", "hash", str(model)], capsys, str(model / "shards"), "symlink")


def test_unreadable_subdirectory_is_refused(capsys, model, deny):
    deny(model / "sub")
    refused(["model", "hash", str(model)], capsys, str(model / "sub"), "cannot read")


def test_unreadable_file_is_refused(capsys, model, deny):
    deny(model / "config.json")
    refused(["model", "hash", str(model)], capsys, str(model / "config.json"), "cannot read")


def _fifo(d: Path) -> Path:
    p = d / "pipe"
    os.mkfifo(p)
    return p


def _socket(d: Path) -> Path:
    p = d / "sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    s.close()
    return p


@pytest.mark.parametrize("make", [_fifo, _socket], ids=["fifo", "socket"])
def test_non_regular_file_is_refused_without_blocking(capsys, model, make):
    p = make(model / "sub")
    rc = finishes(lambda: main(["model", "hash", str(model)]))
    assert rc == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(p) in line and "not a regular file" in line


def test_launch_refuses_a_fifo_in_the_model(tmp_path, model):
    from harness.models import resolve_model

    pinned = tree_hash(model)
    _fifo(model)
    data = variant(model__source=str(model), model__sha256=pinned)
    m = load_manifest(write(tmp_path, data))
    with pytest.raises(DataError, match="not a regular file"):
        finishes(lambda: resolve_model(m))


@pytest.mark.parametrize("name", [b"\xff\xfe.bin", b"a\nb.bin"], ids=["not-utf8", "newline"])
def test_file_names_the_recipe_cannot_cover(capsys, model, name):
    with open(os.path.join(os.fsencode(model), name), "wb") as f:
        f.write(b"x")
    line = refused(["model", "hash", str(model)], capsys)
    assert "name" in line and str(model) in line


def test_hash_of_a_clean_tree_is_unchanged(model):
    # the recipe itself: sha256 of "<sha256>  <path>\n" lines sorted by path
    lines = sorted(
        (p.relative_to(model).as_posix(), hashlib.sha256(p.read_bytes()).hexdigest())
        for p in model.rglob("*") if p.is_file()
    )  # fmt: skip
    text = "".join(f"{h}  {rel}\n" for rel, h in lines)
    assert tree_hash(model) == hashlib.sha256(text.encode()).hexdigest()


# -- 13: no trailing newline passes a format check ------------------------------------------------------------------

NEWLINES = [
    ("engine__version", "0.11.0\n", "engine.version"),
    ("model__sha256", BASE["model"]["sha256"] + "\n", "model.sha256"),
    ("server__api_key_env", "MY_KEY\n", "server.api_key_env"),
    ("runtime__python__lock_sha256", LOCK_SHA + "\n", "runtime.python.lock_sha256"),
    ("runtime__python__version", "3.11\n", "runtime.python.version"),
]


@pytest.mark.parametrize("field, value, shown", NEWLINES, ids=[n[2] for n in NEWLINES])
def test_trailing_newline_is_refused_in_one_line(tmp_path, capsys, field, value, shown):
    path = write(tmp_path, variant(**{field: value}))
    line = refused(["validate", str(path)], capsys, str(path), shown)
    if shown != "server.api_key_env":  # a would-be key is not echoed
        assert "\\n" in line  # shown with repr, so the message is one line and the newline is visible


def test_trailing_newline_in_a_docker_digest(tmp_path, capsys):
    data = tgi_variant()
    data["runtime"]["docker"]["digest"] = DIGEST + "\n"
    refused(["validate", str(write(tmp_path, data))], capsys, "runtime.docker.digest", "\\n")


# -- 14: duplicate keys, lock contents, hosts that can never be bound -------------------------------------------------


def test_duplicate_engine_block_is_refused(tmp_path, capsys):
    text = DEFAULT_MANIFEST.read_text().replace("locks/", str(LOCK.parent) + "/")
    p = tmp_path / "dup.yaml"
    p.write_text(text + "engine:\n  kind: tgi\n  version: 3.3.5\n")
    refused(["validate", str(p)], capsys, str(p), "duplicate key 'engine'", "line")


PASSWD = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
BAD_LOCKS = [
    ("empty", "", "no name==version"),
    ("comments only", "# nothing here\n\n", "no name==version"),
    ("passwd", PASSWD, "line 1"),
    ("no hashes", "numpy==2.0.0\nrequests==2.32.0\n", "line 1: numpy==2.0.0 has no --hash"),
    ("one line without hash", f"numpy==2.0.0 \\\n{HASH_LINE}\nrequests==2.32.0\n", "line 3: requests"),
    ("range", f"numpy>=2.0 \\\n{HASH_LINE}\n", "line 1"),
    ("wildcard", f"numpy==2.* \\\n{HASH_LINE}\n", "line 1"),
    ("short hash", "numpy==2.0.0 --hash=sha256:abc\n", "line 1"),
    ("md5", "numpy==2.0.0 --hash=md5:" + "a" * 32 + "\n", "line 1"),
    ("other option", f"numpy==2.0.0 --global-option=x \\\n{HASH_LINE}\n", "line 1"),
    ("include", f"-r other.txt\nnumpy==2.0.0 \\\n{HASH_LINE}\n", "line 1"),
    ("url", f"numpy @ https://example.invalid/numpy.whl \\\n{HASH_LINE}\n", "line 1"),
]


@pytest.mark.parametrize("text, needle", [(t, n) for _, t, n in BAD_LOCKS], ids=[i for i, _, _ in BAD_LOCKS])
def test_lock_contents_are_checked(tmp_path, capsys, text, needle):
    lock = tmp_path / "lock.txt"
    lock.write_text(text)
    path = write(tmp_path, variant(runtime__python__lock=str(lock), runtime__python__lock_sha256=None))
    refused(["validate", str(path)], capsys, str(path), "runtime.python.lock", str(lock), needle)


def test_a_good_hand_written_lock_passes(tmp_path, capsys):
    lock = tmp_path / "lock.txt"
    lock.write_text(f"--index-url https://pypi.org/simple\nnumpy[extra]==2.0.0+cpu ; python_version >= '3.11' \\\n"
                    f"{HASH_LINE} \\\n    --hash sha256:{'c' * 64}\n    # via torch\n")  # fmt: skip
    path = write(tmp_path, variant(runtime__python__lock=str(lock), runtime__python__lock_sha256=None))
    rc, out, err = run(["validate", str(path)], capsys)
    assert rc == 0, err


def test_lock_that_is_a_fifo_does_not_hang(tmp_path, capsys):
    lock = tmp_path / "lock.txt"
    os.mkfifo(lock)
    path = write(tmp_path, variant(runtime__python__lock=str(lock), runtime__python__lock_sha256=None))
    assert finishes(lambda: main(["validate", str(path)])) == 2
    assert "not a regular file" in one_error_line(capsys.readouterr().err)


def test_install_reads_the_lock_the_same_way(tmp_path):
    from harness.envs import parse_lock
    from harness.errors import InstallError

    lock = tmp_path / "lock.txt"
    lock.write_text(PASSWD)
    with pytest.raises(InstallError, match="line 1"):
        parse_lock(lock)
    assert len(parse_lock(LOCK)) > 100


@pytest.mark.parametrize("host", [" 127.0.0.1 ", "[127.0.0.1]", "127.0.0.1\n", "[::1]", "127.0.0.1.", "0x7f.1"])
def test_hosts_that_can_never_be_bound_are_refused(tmp_path, capsys, host):
    path = write(tmp_path, variant(server__host=host))
    refused(["validate", str(path)], capsys, "server.host", repr(host))


# -- 23, 24, 29: readers of the manifest ----------------------------------------------------------------------------


def test_deeply_nested_manifest(tmp_path, capsys):
    p = tmp_path / "deep.yaml"
    p.write_text("engine: " + "[" * 20000 + "]" * 20000 + "\n")
    refused(["validate", str(p)], capsys, str(p), "nested")


def test_unreadable_manifest(tmp_path, capsys, deny):
    p = write(tmp_path, variant())
    deny(p)
    refused(["validate", str(p)], capsys, str(p), "cannot read")


def test_unreadable_lock(tmp_path, capsys, deny):
    lock = tmp_path / "lock.txt"
    lock.write_text(f"numpy==2.0.0 --hash=sha256:{'a' * 64}\n")
    path = write(tmp_path, variant(runtime__python__lock=str(lock), runtime__python__lock_sha256=None))
    deny(lock)
    refused(["validate", str(path)], capsys, "runtime.python.lock", "cannot read")


def test_validate_a_directory_says_so(tmp_path, capsys):
    refused(["validate", str(tmp_path)], capsys, str(tmp_path), "is a directory")


def test_up_refuses_an_unset_api_key_variable(tmp_path, capsys, monkeypatch, nothing_launches):
    monkeypatch.delenv("HARNESS_TEST_UNSET_KEY", raising=False)
    path = write(tmp_path, variant(server__api_key_env="HARNESS_TEST_UNSET_KEY"))
    refused(["up", str(path)], capsys, "server.api_key_env", "HARNESS_TEST_UNSET_KEY", "not set")
    monkeypatch.setenv("HARNESS_TEST_UNSET_KEY", "")
    refused(["run", str(path)], capsys, "HARNESS_TEST_UNSET_KEY", "not set")


# -- 27: model build never deletes what it did not build ------------------------------------------------------------


def test_model_build_dot_force_is_refused(tmp_path, capsys, monkeypatch):
    (tmp_path / "notes.txt").write_text("keep")
    monkeypatch.chdir(tmp_path)
    refused(["model", "build", ".", "--force"], capsys, "current directory")
    refused(["model", "build", str(tmp_path.parent), "--force"], capsys, "current directory")
    assert (tmp_path / "notes.txt").read_text() == "keep"
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_model_build_refuses_a_foreign_directory_even_forced(tmp_path, capsys):
    d = tmp_path / "my-model"
    d.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):  # a real model has the reference's names
        (d / name).write_text('{"model_type": "llama", "vocab_size": 32000}')
    refused(["model", "build", str(d), "--force"], capsys, str(d), "not empty")
    assert sorted(p.name for p in d.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]


def test_model_build_refuses_a_file_and_a_symlink_even_forced(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("keep")
    refused(["model", "build", str(f), "--force"], capsys, str(f), "not a directory")
    assert f.read_text() == "keep"
    link = tmp_path / "link"
    link.symlink_to(f)
    refused(["model", "build", str(link), "--force"], capsys, str(link), "symlink")
    assert link.is_symlink() and f.read_text() == "keep"


def test_model_build_with_nested_config_json_is_not_taken_for_a_reference_model(tmp_path, capsys):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("[" * 20000 + "]" * 20000)
    refused(["model", "build", str(d), "--force"], capsys, str(d))
    assert (d / "config.json").stat().st_size == 40000


def test_model_build_into_an_unwritable_place(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    refused(["model", "build", str(f / "model")], capsys, str(f / "model"))


def test_model_build_force_rebuilds_its_own_model(tmp_path, capsys):
    d = tmp_path / "m"
    build_reference_model(d)
    rc, out, err = run(["model", "build", str(d), "--force"], capsys)
    assert rc == 0, err
    assert out.strip() == tree_hash(d)


def test_pin_reads_and_checks_the_manifest_through_the_bounded_readers(tmp_path):
    from harness.pin import pin_manifest

    class Image:
        id = "sha256:" + "c" * 64
        attrs = {"RepoDigests": [f"example/tgi@{DIGEST}"]}

    class Client:
        class images:  # noqa: N801 - the docker SDK's shape
            @staticmethod
            def get(name):
                return Image()

    data = tgi_variant()
    del data["runtime"]["docker"]["digest"]
    path = write(tmp_path, data)
    assert pin_manifest(path, client=Client()) == DIGEST
    assert load_manifest(path).runtime.docker.digest == DIGEST


def test_ps_skips_corrupt_and_non_regular_registry_entries(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path))
    runs = tmp_path / "runs"
    runs.mkdir()
    os.mkfifo(runs / "fifo.json")
    (runs / "deep.json").write_text("[" * 20000 + "]" * 20000)
    (runs / "list.json").write_text("[1, 2]")
    (runs / "nopid.json").write_text('{"run_id": "x", "kind": "subprocess", "pid": "1"}')
    rc = finishes(lambda: main(["ps", "--json"]))
    assert rc == 0
    assert [r for r in yaml.safe_load(capsys.readouterr().out) if r.get("kind") == "subprocess"] == []


@pytest.mark.parametrize(
    "modes, says",
    [
        ({"/version": "http500"}, "HTTP 500"),
        ({"/version": "html"}, "not JSON"),
        ({"/version": "jsonlist"}, "not an object"),
    ],
)
def test_identity_endpoint_garbage_is_one_line_not_a_traceback(modes, says):
    """A server that answers /version with an error, HTML or a JSON list is an identity mismatch, said in one line."""
    from types import SimpleNamespace

    from harness.errors import IdentityMismatch
    from harness.launch.ready import verify_identity
    from tests.support.badserver import BadServer

    with BadServer(modes) as server:
        manifest = load_manifest(DEFAULT_MANIFEST)
        engine = SimpleNamespace(base_url=server.url, spec=SimpleNamespace(manifest=manifest, api_key=lambda: None))
        with pytest.raises(IdentityMismatch, match=says) as err:
            verify_identity(engine)
    assert "\n" not in str(err.value) and "/version" in str(err.value)
