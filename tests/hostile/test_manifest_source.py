"""Hostile `runtime.source` manifests (the pinned source build llama.cpp runs under) and llama.cpp's engine.version:
`harness validate` refuses each with one line on stderr naming the file and the field, exit 2, and nothing is built
or started."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.settings import REPO_ROOT

LLAMACPP = REPO_ROOT / "manifests" / "llamacpp-0c1e570-cpu.yaml"
BASE = yaml.safe_load(LLAMACPP.read_text())
BASE["runtime"]["source"]["build_lock"] = str(LLAMACPP.parent / BASE["runtime"]["source"]["build_lock"])
SHA = BASE["runtime"]["source"]["sha256"]
VLLM_LOCK = str(REPO_ROOT / "manifests" / "locks" / "vllm-0.11.0-cpu.txt")


def variant(tmp_path: Path, change) -> Path:
    data = copy.deepcopy(BASE)
    change(data)
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def source(**fields):
    return lambda d: d["runtime"]["source"].update(fields)


def engine(**fields):
    return lambda d: d["engine"].update(fields)


def drop(key):
    return lambda d: d["runtime"]["source"].pop(key)


@pytest.fixture
def nothing_is_built(monkeypatch):
    def got_past(*a, **k):
        raise AssertionError("validation went on to build or resolve something")

    monkeypatch.setattr("harness.engines.llamacpp_build.ensure_llama_server", got_past)
    monkeypatch.setattr("harness.models.resolve_model", got_past)


CASES = [
    ("sha256 short", source(sha256="832db069"), "runtime.source.sha256", "must be 64 lowercase hex characters"),
    ("sha256 upper", source(sha256=SHA.upper()), "runtime.source.sha256", "64 lowercase"),
    ("sha256 newline", source(sha256=SHA + "\n"), "runtime.source.sha256", "64 lowercase"),
    ("sha256 number", source(sha256=12345), "runtime.source.sha256", "valid string"),
    ("subdir absolute", source(subdir="/vendor/llama.cpp"), "runtime.source.subdir", "plain relative name"),
    ("subdir dotdot", source(subdir="vendor/../../etc"), "runtime.source.subdir", "plain relative name"),
    ("subdir only dotdot", source(subdir=".."), "runtime.source.subdir", "plain relative name"),
    ("subdir empty", source(subdir=""), "runtime.source.subdir", "plain relative name"),
    ("filename dotdot", source(filename="../llama.tar.gz"), "runtime.source.filename", "plain relative name"),
    ("package absolute", source(package="/tmp/pkg"), "runtime.source.package", "plain relative name"),
    ("archive version", source(version="latest"), "runtime.source.version", "exact version like 0.3.36"),
    ("unknown field", source(url="http://10.0.0.1/llama.tar.gz"), "runtime.source.url", "Extra inputs"),
    ("no sha256", drop("sha256"), "runtime.source.sha256", "Field required"),
    ("no subdir", drop("subdir"), "runtime.source.subdir", "Field required"),
    ("python under llamacpp", lambda d: d.update(runtime={"python": {"version": "3.11", "lock": VLLM_LOCK}}),
     "runtime", "llama.cpp runs under runtime.source, not runtime.python"),
    ("docker under llamacpp", lambda d: d.update(runtime={"docker": {"image": "x:1", "digest": "sha256:" + "a" * 64}}),
     "runtime", "llama.cpp runs under runtime.source, not runtime.docker"),
    ("source and python", lambda d: d["runtime"].update(python={"version": "3.11", "lock": VLLM_LOCK}),
     "runtime", "exactly one of runtime.python, runtime.docker or runtime.source"),
    ("source under vllm", engine(kind="vllm", version="0.11.0"), "runtime",
     "vLLM runs under runtime.docker or runtime.python, not runtime.source"),
    ("version a release", engine(version="0.3.36"), "engine.version", "exact llama.cpp version like 0c1e570"),
    ("version a tag", engine(version="b6000"), "engine.version", "like 0c1e570"),
    ("version upper", engine(version="0C1E570"), "engine.version", "like 0c1e570"),
    ("version short", engine(version="0c1e5"), "engine.version", "like 0c1e570"),
    ("version too long", engine(version="0" * 41), "engine.version", "like 0c1e570"),
    ("version newline", engine(version="0c1e570\n"), "engine.version", "like 0c1e570"),
    ("version number", engine(version=1234567), "engine.version", "valid string"),
]  # fmt: skip


@pytest.mark.parametrize("change, field, says", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_bad_source_manifest_is_one_line_naming_the_field(tmp_path, capsys, nothing_is_built, change, field,
                                                               says):  # fmt: skip
    path = variant(tmp_path, change)
    rc = main(["validate", str(path)])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith(f"harness: error: {path}: {field}: "), lines[0]
    assert says in lines[0], lines[0]


def test_the_committed_manifest_and_a_full_commit_validate(tmp_path, capsys, nothing_is_built):
    assert main(["validate", str(LLAMACPP)]) == 0
    full = variant(tmp_path, engine(version="0c1e57098bba43ac29e6e3b677cdceebdd22334f"))
    assert main(["validate", str(full)]) == 0, capsys.readouterr().err
