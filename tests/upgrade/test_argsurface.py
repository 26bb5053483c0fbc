"""Argument surfaces (harness.launch.argsurface): parsing each engine's own flag listing, reading a manifest's flags as
that engine's parser does, the release-to-release diff with its rename rule, the cache, and the upgrade's argument
check made before any engine starts. Fixtures are real captures: the vLLM 0.11.0 and 0.32.0 parser dumps (the
profile's snippet run by each engine environment's Python; help texts cut to 400 characters) and llama-server
0c1e570's `--help`. No engine runs here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import harness.upgrade.arguments as arguments
import harness.upgrade.run as run
from harness.launch import argsurface
from harness.launch.argsurface import (
    args_against,
    cached_surface,
    check_args,
    diff_surfaces,
    rename_of,
    resolve,
    surface_from_actions,
    surface_from_help,
)
from harness.launch.surfaces import SurfaceUnavailable
from harness.settings import REPO_ROOT

DATA = Path(__file__).parent / "data" / "argsurface"
MANIFESTS = REPO_ROOT / "manifests"


def vllm_surface(version: str) -> dict:
    doc = json.loads((DATA / f"vllm-{version}-parser-dump.json").read_text())
    assert doc["version"] == version
    return surface_from_actions(doc["actions"], engine="vllm", release=version, abbrev=True)


@pytest.fixture(scope="module")
def v011() -> dict:
    return vllm_surface("0.11.0")


@pytest.fixture(scope="module")
def v032() -> dict:
    return vllm_surface("0.32.0")


@pytest.fixture(scope="module")
def llama() -> dict:
    text = (DATA / "llama-server-0c1e570-help.txt").read_text()
    return surface_from_help(text, engine="llamacpp", release="0c1e570")


# -- parsing ---------------------------------------------------------------------------------------------------------


def test_vllm_dump_gives_every_flag_with_its_default(v011, v032):
    assert len(v011["flags"]) == 183 and len(v032["flags"]) == 316
    f = v011["flags"]
    assert f["--swap-space"]["default"] == 4 and f["--swap-space"]["takes_value"]
    assert f["--max-model-len"]["dest"] == "max_model_len"
    assert "float32" in f["--dtype"]["choices"] and f["--dtype"]["default"] == "auto"
    assert f["--enforce-eager"]["takes_value"] is False or f["--enforce-eager"]["nargs"] in (0, "?")
    assert f["--seed"]["default"] is None and v032["flags"]["--seed"]["default"] == 0
    assert f["--guided-decoding-backend"]["deprecated"] and not f["--dtype"]["deprecated"]
    # every other spelling is an alias of the first long one
    assert v011["aliases"]["-tp"] == "--tensor-parallel-size"
    assert v011["aliases"]["--no-enable-prefix-caching"] == "--enable-prefix-caching"
    assert v011["aliases"]["-O"] == "--compilation-config"
    # a default that is an object is kept as its repr, never as a live value
    assert set(f["--compilation-config"]["default"]) == {"repr"}
    json.dumps(v011)  # the surface is JSON as it stands


def test_llama_server_help_gives_spellings_defaults_choices_and_variables(llama):
    f, aliases = llama["flags"], llama["aliases"]
    assert len(f) == 255 and not llama["abbrev"]
    assert f["--ctx-size"]["options"] == ["-c", "--ctx-size"] and aliases["-c"] == "--ctx-size"
    assert f["--ctx-size"]["default"] == "0, 0 = loaded from model" and f["--ctx-size"]["env"] == "LLAMA_ARG_CTX_SIZE"
    assert f["--threads"]["default"] == "-1" and f["--threads"]["placeholder"] == "N"
    assert f["--flash-attn"]["choices"] == ["on", "off", "auto"] and f["--flash-attn"]["default"] == "auto"
    assert f["--rope-scaling"]["choices"] == ["none", "linear", "yarn"]
    assert f["--defrag-thold"]["deprecated"] and not f["--threads"]["deprecated"]
    # a flag without a value, its negation an alias
    assert f["--kv-offload"]["takes_value"] is False and aliases["--no-kv-offload"] == "--kv-offload"
    # spellings longer than the left column: the description starts on the next line
    assert f["--ctx-checkpoints"]["options"] == ["-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"]
    assert f["--ctx-checkpoints"]["default"] == "32"
    assert aliases["--cache-type-k-draft"] == "--spec-draft-type-k"
    # a placeholder with commas stays one value, not spellings
    assert f["--override-tensor"]["options"] == ["-ot", "--override-tensor"]
    assert not any(k.startswith("---") for k in f)


def test_a_help_text_that_lists_nothing_gives_no_flags():
    s = surface_from_help("usage: thing [options]\n\nsomething went wrong\n", engine="x", release="1")
    assert s["flags"] == {} and s["aliases"] == {}


# -- reading a manifest's flags ----------------------------------------------------------------------------------


def test_flags_are_read_as_each_engine_parser_reads_them(v011, llama):
    assert resolve(v011, "--max-model")[0] == "--max-model-len"  # argparse: an unambiguous prefix
    assert check_args(v011, ["--max_model_len=1024", "--dtype", "float32", "-tp", "1", "--seed", "-1"]) == []
    (amb,) = check_args(v011, ["--max-num", "4"])
    assert amb["problem"] == "ambiguous" and "--max-num-seqs" in amb["line"]
    (bad,) = check_args(v011, ["--dtype", "float64"])
    assert bad["problem"] == "bad-choice" and bad["flag"] == "--dtype" and "float32" in bad["line"]
    (unknown,) = check_args(v011, ["--no-such-flag", "x"])
    assert unknown == {
        "flag": "--no-such-flag",
        "problem": "unknown",
        "line": "--no-such-flag: not a flag of vllm 0.11.0",
    }
    # llama.cpp's parser takes no prefixes and no underscores
    assert check_args(llama, ["--threads", "2", "-c", "4096", "--parallel", "4", "--seed", "0"]) == []
    assert [p["flag"] for p in check_args(llama, ["--ctx", "1", "--ctx_size", "2"])] == ["--ctx", "--ctx_size"]
    assert check_args(llama, ["-fa", "maybe"])[0]["problem"] == "bad-choice"


# -- release to release ------------------------------------------------------------------------------------------


def test_diff_0_11_to_0_32_names_removed_renamed_added_and_defaults(v011, v032):
    d = diff_surfaces(v011, v032)
    removed = {x["flag"] for x in d["removed"]}
    renamed = {x["flag"]: (x["to"], x["rule"]) for x in d["renamed"]}
    assert {"--swap-space", "--guided-decoding-backend", "--task", "--num-lookahead-slots"} <= removed
    assert renamed["--disable-log-requests"] == ("--enable-log-requests", "inverted")
    assert renamed["--cuda-graph-sizes"] == ("--cudagraph-capture-sizes", "near name")
    assert not removed & set(renamed)
    assert "-O" in d["aliases_removed"] and "--optimization-level" in d["added"]
    defaults = {x["flag"]: (x["old"], x["new"]) for x in d["defaults_changed"]}
    assert defaults["--seed"] == (None, 0) and defaults["--gpu-memory-utilization"] == (0.9, 0.92)
    assert "--compilation-config" in d["config_defaults_changed"] and "--compilation-config" not in defaults
    assert diff_surfaces(v011, v011)["removed"] == [] and diff_surfaces(v011, v011)["defaults_changed"] == []


def _s(*flags: dict, aliases: dict | None = None) -> dict:
    return {
        "engine": "e",
        "release": "1",
        "abbrev": True,
        "flags": {f["options"][0]: {"default": None, **f} for f in flags},
        "aliases": aliases or {},
    }


@pytest.mark.parametrize(
    "old_flag, new_flags, expected",
    [
        # hint: the old help names the new flag
        ({"options": ["--old-x"], "mentions": ["--new-y"]}, [{"options": ["--new-y"]}], ("--new-y", "hint")),
        # hint: the new flag's help names the old one
        ({"options": ["--old-x"]}, [{"options": ["--new-y"], "mentions": ["--old-x"]}], ("--new-y", "hint")),
        # dest: the same setting under another spelling
        ({"options": ["--old-x"], "dest": "x"}, [{"options": ["--other"], "dest": "x"}], ("--other", "dest")),
        # inverted
        ({"options": ["--disable-foo"]}, [{"options": ["--enable-foo"]}], ("--enable-foo", "inverted")),
        ({"options": ["--no-foo"]}, [{"options": ["--foo"]}], ("--foo", "inverted")),
        # near name: separators ignored, clearly the closest
        ({"options": ["--cuda-graph-sizes"]}, [{"options": ["--cudagraph-sizes"]}], ("--cudagraph-sizes", "near name")),
        # nothing close: removed
        ({"options": ["--swap-space"]}, [{"options": ["--mamba-backend"]}], None),
        # two equally close: no guess
        ({"options": ["--abcdefgh"]}, [{"options": ["--abcdefgx"]}, {"options": ["--abcdefgy"]}], None),
    ],
)
def test_rename_rule(old_flag, new_flags, expected):
    old, new = _s(old_flag), _s(*new_flags)
    r = rename_of(old_flag["options"][0], old, new)
    assert (r and (r["to"], r["rule"])) == expected if expected else r is None


def test_args_against_names_each_old_flag_the_new_release_rejects(v011, v032):
    args = ["--enforce-eager", "--dtype", "float32", "--seed", "0", "--swap-space", "4", "-O", "3",
            "--disable_log_requests", "--max-num-seqs", "4"]  # fmt: skip
    found = {p["flag"]: p for p in args_against(v011, v032, args)}
    assert (
        found["--swap-space"]["problem"] == "removed" and "not a flag of vllm 0.32.0" in found["--swap-space"]["line"]
    )
    assert found["-O"]["problem"] == "renamed" and found["-O"]["to"] == "--compilation-config"
    assert found["-O"]["rule"] == "dest"
    assert found["--disable_log_requests"]["to"] == "--enable-log-requests"  # read as --disable-log-requests
    assert found["--seed"]["problem"] == "default-changed" and (found["--seed"]["old"], found["--seed"]["new"]) == (
        None,
        0,
    )
    assert "--enforce-eager" not in found and "--max-num-seqs" not in found and "--dtype" not in found
    # without the old surface a gone flag is still named (removed: nothing says what it became)
    assert args_against(None, v032, ["--swap-space", "4"])[0]["problem"] == "removed"


# -- the cache ---------------------------------------------------------------------------------------------------


def test_cache_captures_once_survives_damage_and_is_bounded(tmp_path, monkeypatch, v011):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path))
    calls: list[str] = []

    def capture(key):
        def f():
            calls.append(key)
            return v011

        return f

    assert cached_surface("k1", capture("k1"))["release"] == "0.11.0"
    assert cached_surface("k1", capture("k1"))["flags"] == v011["flags"] and calls == ["k1"]
    (entry,) = (tmp_path / "surfaces").glob("k1-*.json")
    entry.write_text("{not json")
    cached_surface("k1", capture("k1"))
    assert calls == ["k1", "k1"]  # a damaged entry is captured again, not trusted
    monkeypatch.setattr(argsurface, "MAX_CACHED", 2)
    for k in ("k2", "k3", "k4"):
        cached_surface(k, capture(k))
    assert len(list((tmp_path / "surfaces").glob("*.json"))) == 2


# -- the upgrade: checked before any engine starts ---------------------------------------------------------------


def _manifest(tmp_path: Path, version: str, extra_args: list[str], name: str) -> Path:
    data = yaml.safe_load((MANIFESTS / f"vllm-{version}-cpu.yaml").read_text())
    data["runtime"]["python"]["lock"] = str((MANIFESTS / data["runtime"]["python"]["lock"]).resolve())
    data["server"]["args"] = [*data["server"]["args"], *extra_args]
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


@pytest.fixture
def staged(monkeypatch, v011, v032):
    """The release surfaces from the fixtures (nothing installed or run) and a launcher that only logs."""
    log: list[str] = []
    surfaces = {"0.11.0": v011, "0.32.0": v032}

    def fake_surface(m, *, install, say):
        log.append(f"surface {m.engine.version} install={install}")
        return surfaces[m.engine.version]

    def fake_collect(manifest, out, sets, *, expectations, conformance, say):
        log.append(f"launch {manifest.name}")
        return {
            "manifest": str(manifest.path),
            "name": manifest.name,
            "ok": True,
            "engine": {"kind": manifest.engine.kind, "version": manifest.engine.version},
            "conformance": {"available": False, "reason": "not run (--no-conformance)"},
            "wall_seconds": 0.1,
        }

    monkeypatch.setattr(arguments, "release_surface", fake_surface)
    monkeypatch.setattr(run, "collect_side", fake_collect)
    return log


def test_upgrade_names_a_removed_flag_before_launching_the_new_engine(tmp_path, staged):
    old = _manifest(tmp_path, "0.11.0", ["--swap-space", "4"], "old-swap")
    out = tmp_path / "u"
    report = run.run_upgrade(
        old, MANIFESTS / "vllm-0.32.0-cpu.yaml", out, tolerance=0.02, margin=0.1, conformance=False,
        say=staged.append,
    )  # fmt: skip
    named = next(i for i, line in enumerate(staged) if line.startswith("[arguments]") and "--swap-space" in line)
    first_launch = next(i for i, line in enumerate(staged) if line.startswith("launch "))
    assert named < first_launch  # the new release's surface was read and the flag named before any launch
    assert staged[0] == "[arguments] reading vllm-0.32.0-cpu's release flags before any engine starts"
    assert "surface 0.32.0 install=True" in staged[:first_launch]
    assert report["verdict"]["verdict"] == "blocking"
    blocking = [r["text"] for r in report["verdict"]["reasons"] if r["level"] == "blocking"]
    assert blocking == [
        "arguments: the old manifest's --swap-space is not accepted by vllm 0.32.0: removed (found before "
        "launching it: --swap-space: not a flag of vllm 0.32.0)"
    ]
    surface = report["comparison"]["manifest"]["surface"]
    assert surface["checked_before_launch"] and surface["launch_refused"] == ""
    assert [p["flag"] for p in surface["old_args"] if p["problem"] == "removed"] == ["--swap-space"]
    infos = [r["text"] for r in report["verdict"]["reasons"] if r["level"] == "info"]
    assert any(t.startswith("arguments: ") and "flags added" in t for t in infos)
    assert any("defaults changed" in t and "--seed None->0" in t for t in infos)
    md = (out / "upgrade.md").read_text()
    assert "| `--swap-space` | **removed** |" in md and "### Flags against the new release's own argument surface" in md
    assert "`--disable-log-requests` → `--enable-log-requests` (inverted)" in md
    assert json.loads((out / "upgrade.json").read_text())["comparison"]["manifest"]["surface"] == json.loads(
        json.dumps(surface)
    )


def test_upgrade_launches_nothing_when_the_new_manifest_carries_a_rejected_flag(tmp_path, staged):
    old = _manifest(tmp_path, "0.11.0", ["--swap-space", "4"], "old-swap")
    new = _manifest(tmp_path, "0.32.0", ["--swap-space", "4"], "new-swap")
    out = tmp_path / "u"
    report = run.run_upgrade(old, new, out, tolerance=0.02, margin=0.1, conformance=False, say=staged.append)
    assert not [line for line in staged if line.startswith("launch ")]
    assert report["verdict"]["verdict"] == "blocking"
    texts = [r["text"] for r in report["verdict"]["reasons"]]
    assert "neither engine was launched (the argument check refused the new manifest)" in texts
    assert any(t.startswith("arguments: the new manifest's server.args are not accepted by vllm 0.32.0: --swap-space")
               for t in texts)  # fmt: skip
    assert report["new"]["launched"] is False and report["old"]["launched"] is False
    assert "**No engine was launched:**" in (out / "upgrade.md").read_text()


def test_an_unreadable_surface_is_said_and_does_not_block(tmp_path, monkeypatch):
    def unavailable(m, *, install, say):
        raise SurfaceUnavailable(f"argument surface of X {m.engine.version} not captured: reasons")

    monkeypatch.setattr(arguments, "release_surface", unavailable)
    from harness.manifest import load_manifest

    found = arguments.check_arguments(load_manifest(MANIFESTS / "vllm-0.11.0-cpu.yaml"),
                                      load_manifest(MANIFESTS / "vllm-0.32.0-cpu.yaml"))  # fmt: skip
    assert found["new_surface"] == {"unavailable": "argument surface of X 0.32.0 not captured: reasons"}
    assert found["old_args"] == [] and found["launch_refused"] == ""
    from harness.upgrade.judge import _surface_reasons

    reasons = _surface_reasons(found)
    assert {r["level"] for r in reasons} == {"info"}
    assert any("0.32.0 not captured: reasons" in r["text"] for r in reasons)


def test_tgi_has_no_surface_here_and_says_why():
    from harness.engines import profile_for

    with pytest.raises(SurfaceUnavailable, match="container image, which cannot be pulled here"):
        profile_for("tgi").argument_surface(Path("/nonexistent"), "3.3.5")
