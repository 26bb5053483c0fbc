"""Which expectation file a manifest is judged by (the engine profile's choice: exact version, then its series), and
the refusal when there is none: `run_upgrade` and `harness conform` refuse before any launch, naming the files they
looked for and `--expect openai`, and never fall back to the plain OpenAI reference silently. No engine runs here:
the launcher is replaced by one that fails the test if it is ever reached."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import harness.upgrade.run as run
from harness.cli import main
from harness.conformance.expectations import default_expectation, load_expectations
from harness.errors import UsageError
from harness.manifest import DEFAULT_MANIFEST, load_manifest
from harness.settings import REPO_ROOT

MANIFESTS = REPO_ROOT / "manifests"
LLAMACPP = MANIFESTS / "llamacpp-0c1e570-cpu.yaml"
TGI = MANIFESTS / "tgi-3.3.5.yaml"


def variant(tmp_path: Path, base: Path, name: str, **engine) -> Path:
    """`base` with engine fields changed, written to tmp_path/name; a python lock made absolute, a docker digest
    filled in (the committed TGI manifest has none: it cannot be pinned here)."""
    data = yaml.safe_load(base.read_text())
    data["engine"].update(engine)
    rt = data["runtime"]
    if "python" in rt:
        rt["python"]["lock"] = str((base.parent / rt["python"]["lock"]).resolve())
    if rt.get("source", {}).get("build_lock"):
        rt["source"]["build_lock"] = str((base.parent / rt["source"]["build_lock"]).resolve())
    if "docker" in rt:
        rt["docker"]["digest"] = "sha256:" + "b" * 64
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


@pytest.fixture
def no_launch(monkeypatch):
    """Every way to start an engine fails the test: the launcher's prepare/launch and the upgrade's collection."""
    reached: list[str] = []

    def fail(what):
        def f(*a, **k):
            reached.append(what)
            raise AssertionError(f"{what} was reached: an engine would have been launched")

        return f

    import harness.launch.session as session
    import harness.run  # noqa: F401  bound to the real launch first: a first import under the patch would keep the fake

    for name in ("launch", "prepare", "start_verified"):
        monkeypatch.setattr(session, name, fail(f"harness.launch.session.{name}"))
    monkeypatch.setattr(run, "collect_side", fail("harness.upgrade.run.collect_side"))
    monkeypatch.setattr("harness.models.resolve_model", fail("harness.models.resolve_model"))
    return reached


@pytest.mark.parametrize(
    "kind, version, name",
    [
        ("tgi", "3.3.5", "tgi-3.3.5"),  # exact file (there is no tgi-3.3.yaml)
        ("vllm", "0.11.0", "vllm-0.11"),  # its series
        ("vllm", "0.11.7", "vllm-0.11"),
        ("vllm", "0.32.0", "vllm-0.32"),
        ("llamacpp", "0c1e570", "llamacpp-0c1e570"),  # a commit has no series: exact only
    ],
)
def test_the_profile_chooses_the_exact_file_then_its_series(kind, version, name):
    assert default_expectation(kind, version) == name
    assert load_expectations(name).path == str(REPO_ROOT / "manifests" / "expectations" / f"{name}.yaml")


@pytest.mark.parametrize(
    "kind, version, looked",
    [
        ("vllm", "0.99.0", "expectations/vllm-0.99.0.yaml or expectations/vllm-0.99.yaml"),
        ("tgi", "3.4.0", "expectations/tgi-3.4.0.yaml or expectations/tgi-3.4.yaml"),
        ("llamacpp", "deadbee", "expectations/llamacpp-deadbee.yaml"),
    ],
)
def test_no_file_is_a_refusal_naming_what_was_looked_for(kind, version, looked):
    with pytest.raises(UsageError) as e:
        default_expectation(kind, version)
    msg = str(e.value)
    assert "\n" not in msg and f"no expectation file for {kind} {version}: looked for {looked};" in msg
    assert "--expect openai" in msg


def _manifests(tmp_path):
    return {
        "tgi": variant(tmp_path, TGI, "tgi-3.3.5.yaml"),
        "tgi-next": variant(tmp_path, TGI, "tgi-3.3.6.yaml", version="3.3.6"),
        "vllm": DEFAULT_MANIFEST,
        "vllm-0.99": variant(tmp_path, DEFAULT_MANIFEST, "vllm-0.99.0.yaml", version="0.99.0"),
        "llamacpp": LLAMACPP,
        "llamacpp-deadbee": variant(tmp_path, LLAMACPP, "llamacpp-deadbee.yaml", version="deadbee"),
    }


def test_a_tgi_upgrade_is_judged_by_tgi_3_3_5(tmp_path, no_launch, monkeypatch):
    m = _manifests(tmp_path)
    seen: list[tuple[str, str]] = []

    class Stop(Exception):
        pass

    def collect(manifest, out, sets, *, expectations, conformance, say):
        seen.append((manifest.engine.version, expectations))
        if len(seen) == 2:
            raise Stop  # both sides' choices seen; nothing is launched
        return {"wall_seconds": 0.0, "ok": True}

    monkeypatch.setattr(run, "collect_side", collect)
    with pytest.raises(Stop):
        run.run_upgrade(m["tgi"], m["tgi-next"], tmp_path / "u", tolerance=0.02, margin=0.1, say=lambda s: None)
    # an upgrade judges both sides by the old engine's file (what its clients rely on), never the series fallback
    assert seen == [("3.3.5", "tgi-3.3.5"), ("3.3.6", "tgi-3.3.5")]
    assert no_launch == []


@pytest.mark.parametrize(
    "old, new, missing",
    [
        ("vllm-0.99", "vllm", "vllm 0.99.0: looked for expectations/vllm-0.99.0.yaml or expectations/vllm-0.99.yaml"),
        ("llamacpp-deadbee", "vllm", "llamacpp deadbee: looked for expectations/llamacpp-deadbee.yaml"),
        # an engine migration judges each side by its own engine's file: the new side's missing file refuses too
        ("vllm", "llamacpp-deadbee", "llamacpp deadbee: looked for expectations/llamacpp-deadbee.yaml"),
    ],
)
def test_upgrade_without_an_expectation_file_is_refused_before_any_launch(tmp_path, no_launch, old, new, missing):
    m = _manifests(tmp_path)
    with pytest.raises(UsageError) as e:
        run.run_upgrade(m[old], m[new], tmp_path / "u", tolerance=0.02, margin=0.1, say=lambda s: None)
    msg = str(e.value)
    assert f"no expectation file for {missing};" in msg and "--expect openai" in msg and "\n" not in msg
    assert no_launch == [] and not (tmp_path / "u" / "upgrade.json").exists()


def test_upgrade_command_refuses_in_one_line(tmp_path, no_launch, capsys):
    m = _manifests(tmp_path)
    rc = main(["upgrade", str(m["vllm-0.99"]), str(m["vllm"]), "--out", str(tmp_path / "u")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("harness: error: no expectation file for vllm 0.99.0")
    assert "--expect openai" in err[0] and no_launch == []


@pytest.mark.parametrize("which, missing", [
    ("vllm-0.99", "vllm 0.99.0: looked for expectations/vllm-0.99.0.yaml or expectations/vllm-0.99.yaml"),
    ("llamacpp-deadbee", "llamacpp deadbee: looked for expectations/llamacpp-deadbee.yaml"),
])  # fmt: skip
def test_conform_without_an_expectation_file_is_refused_before_any_launch(tmp_path, no_launch, capsys, which,
                                                                          missing):  # fmt: skip
    path = _manifests(tmp_path)[which]
    rc = main(["conform", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"harness: error: no expectation file for {missing};") and "--expect openai" in err[0]
    assert no_launch == []


def test_conform_with_expect_openai_goes_on_to_launch(tmp_path, no_launch):
    """--expect openai is the one way past the refusal: the next step is the launch (which fails this test's
    stand-in), so the refusal above is the missing file and nothing else."""
    path = _manifests(tmp_path)["vllm-0.99"]
    with pytest.raises(AssertionError, match="harness.launch.session.launch was reached"):
        main(["conform", str(path), "--expect", "openai"])
    assert no_launch == ["harness.launch.session.launch"]


def test_the_committed_manifests_resolve(tmp_path):
    m = _manifests(tmp_path)
    got = {}
    for key in ("tgi", "vllm", "llamacpp"):
        man = load_manifest(m[key])
        got[key] = default_expectation(man.engine.kind, man.engine.version)
    assert got == {"tgi": "tgi-3.3.5", "vllm": "vllm-0.11", "llamacpp": "llamacpp-0c1e570"}


def test_run_without_an_expectation_file_names_what_run_takes(tmp_path, no_launch, monkeypatch, capsys):
    import harness.run

    monkeypatch.setattr(harness.run, "launch", lambda *a, **k: no_launch.append("harness.run.launch"))
    rc = main(["run", str(_manifests(tmp_path)["vllm-0.99"])])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("harness: error: no expectation file for vllm 0.99.0")
    assert "run with --skip conformance" in err[0] and "or pass --expect" not in err[0]  # run has no --expect
    assert no_launch == []
