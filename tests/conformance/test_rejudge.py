"""`harness conform --rejudge RUN_DIR --expect NAME --out DIR`: the saved exchanges judged again by every case's own
code through a replay transport, with no engine, give the live run's verdict case by case: against the TGI stand-in
(unit) and a real llama.cpp (engine). A request the evidence has no answer for is said in the case's note and counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.settings import REPO_ROOT
from tests.support.standin_server import serve

KEY = "rejudge-test-key-77aa"
KEY_ENV = "HARNESS_REJUDGE_TEST_KEY"


def verdicts(run: Path) -> dict[str, str]:
    return {c["id"]: c["verdict"] for c in json.loads((run / "conformance.json").read_text())["cases"]}


def rejudge(capsys, run: Path, out: Path, expect: str) -> tuple[int, str, dict]:
    code = main(["conform", "--rejudge", str(run), "--expect", expect, "--out", str(out)])
    text = capsys.readouterr().out
    return code, text, json.loads((out / "conformance.json").read_text())


@pytest.fixture(scope="module")
def standin_run(tmp_path_factory):
    srv = serve(0, api_key=KEY)
    out = tmp_path_factory.mktemp("rj") / "live"
    mp = pytest.MonkeyPatch()
    mp.setenv(KEY_ENV, KEY)
    try:
        main(["conform", "--url", srv.base_url, "--expect", "tgi-3.3.5", "--api-key-env", KEY_ENV, "--out", str(out)])
    finally:
        mp.undo()
        srv.shutdown()
    return out


def test_rejudge_gives_the_live_verdict_per_case(standin_run, tmp_path, capsys):
    live = verdicts(standin_run)
    assert len(live) >= 40 and {"pass", "quirk"} <= set(live.values())
    code, text, doc = rejudge(capsys, standin_run, tmp_path / "again", "tgi-3.3.5")
    assert verdicts(tmp_path / "again") == live
    rj = doc["engine"]["rejudge"]
    assert rj["same"] == rj["cases"] == len(live) and rj["different"] == [] and rj["not_rejudged"] == []
    assert f"rejudged {len(live)} cases" in text and "0 not re-judgeable" in text
    for c in doc["cases"]:
        assert c["extra"]["rejudge"] == {**c["extra"]["rejudge"], "saved_verdict": live[c["id"]], "same": True}
    assert code == (0 if not {"fail", "error"} & set(live.values()) else 1)
    # what was replayed is saved too: a re-judged run judges again the same
    _, _, doc2 = rejudge(capsys, tmp_path / "again", tmp_path / "third", "tgi-3.3.5")
    assert verdicts(tmp_path / "third") == live and doc2["engine"]["rejudge"]["not_rejudged"] == []
    assert (tmp_path / "again" / "conformance.html").is_file()


def test_rejudge_under_other_expectations_judges_the_same_bytes_differently(standin_run, tmp_path, capsys):
    rejudge(capsys, standin_run, tmp_path / "v", "vllm-0.11")
    v = verdicts(tmp_path / "v")
    assert verdicts(standin_run)["chat.stream.role-once"] == "quirk" and v["chat.stream.role-once"] == "fail"


def test_missing_evidence_is_said_and_counted(standin_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "cut"
    shutil.copytree(standin_run, run)
    f = run / "evidence" / "chat.length.json"
    doc = json.loads(f.read_text())
    doc["exchanges"] = []
    f.write_text(json.dumps(doc))
    _, text, out = rejudge(capsys, run, tmp_path / "o", "tgi-3.3.5")
    case = next(c for c in out["cases"] if c["id"] == "chat.length")
    assert (
        "not re-judged from the evidence: 1 request(s) had no saved answer (POST /v1/chat/completions)" in case["note"]
    )
    assert out["engine"]["rejudge"]["not_rejudged"] == ["chat.length"] and "1 not re-judgeable" in text
    assert case["extra"]["rejudge"]["rejudged"] is False


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--expect", "openai"], "--out must differ"),
        ([], "--expect NAME is required"),
    ],
)
def test_rejudge_refusals(standin_run, capsys, argv, needle):
    extra = ["--out", str(standin_run)] if "openai" in argv else []
    code = main(["conform", "--rejudge", str(standin_run), *argv, *extra])
    err = capsys.readouterr().err
    assert code == 2 and needle in err


def test_rejudge_of_a_directory_without_evidence(tmp_path, capsys):
    code = main(["conform", "--rejudge", str(tmp_path), "--expect", "openai"])
    assert code == 2 and "no evidence/index.json" in capsys.readouterr().err


@pytest.mark.engine
def test_rejudge_real_llamacpp_run_gives_the_same_verdicts(tmp_path, capsys, monkeypatch):
    """A real llama-server (with an API key, so the auth cases run), the whole suite, then the re-judge."""
    from tests.llamacpp.conftest import manifest_variant

    monkeypatch.setenv(KEY_ENV, KEY)
    manifest = manifest_variant(tmp_path, "llamacpp-keyed.yaml", server__api_key_env=KEY_ENV)
    assert (REPO_ROOT / "manifests" / "llamacpp-0c1e570-cpu.yaml").is_file()
    live_dir = tmp_path / "live"
    main(["conform", str(manifest), "--expect", "llamacpp-0c1e570", "--out", str(live_dir)])
    capsys.readouterr()
    live = verdicts(live_dir)
    assert len(live) >= 40 and live["auth.missing-key"] in ("pass", "quirk")  # the key was used: auth cases ran
    assert not [i for i, v in live.items() if v == "error"], live
    _, text, doc = rejudge(capsys, live_dir, tmp_path / "again", "llamacpp-0c1e570")
    assert verdicts(tmp_path / "again") == live, text
    assert doc["engine"]["rejudge"]["not_rejudged"] == []
    for p in live_dir.rglob("*"):
        if p.is_file():  # bytes: the engine's log may hold bytes that are not UTF-8 (a token cut mid-character)
            assert KEY.encode() not in p.read_bytes(), p
