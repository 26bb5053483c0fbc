"""`harness run`'s conformance stage keeps its evidence beside its report (issue 21, seen by hand: its page said "no
evidence beside this report"), so `harness conform --rejudge RUN_DIR/conformance` judges the run again with no engine.
The engine is the TGI stand-in on 127.0.0.1 behind a fake launched engine (no vLLM starts)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.cli import main
from harness.conformance.stage import run_stage
from harness.manifest import load_manifest
from harness.settings import REPO_ROOT
from harness.stages import StageContext
from tests.support.standin_server import MODEL_ID, serve

KEY = "run-evidence-key-5c1d9e"
CASES = ["health", "chat.length", "chat.stream"]  # a few cases, each with its own exchanges


@dataclass
class FakeEngine:
    """What the stage reads of a launched, verified engine."""

    base_url: str
    api_key: str
    served_name: str = MODEL_ID

    def exit_status(self) -> int | None:
        return None

    def log_tail(self) -> str:
        return ""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """run_dir after the conformance stage of a `harness run` of the TGI manifest (a few cases, to stay quick)."""
    import harness.conformance.runner as runner

    run_dir = tmp_path_factory.mktemp("run")
    srv = serve(0, api_key=KEY)
    mp = pytest.MonkeyPatch()
    whole_suite = runner.run_suite_sync
    mp.setattr(runner, "run_suite_sync", lambda ctx, **kw: whole_suite(ctx, patterns=CASES, **kw))
    try:
        m = load_manifest(REPO_ROOT / "manifests" / "tgi-3.3.5.yaml", require_digest=False)  # never launched here
        ctx = StageContext(engine=FakeEngine(srv.base_url, KEY), manifest=m, run_dir=run_dir,  # type: ignore[arg-type]
                           identity={"engine": "tgi", "version": "3.3.5"})  # fmt: skip
        result = run_stage(ctx)
    finally:
        mp.undo()
        srv.shutdown()
    assert result.data["counts"]["pass"] >= 3, result.summary
    return run_dir, result


def _verdicts(d: Path) -> dict[str, str]:
    return {c["id"]: c["verdict"] for c in json.loads((d / "conformance.json").read_text())["cases"]}


def test_the_stage_keeps_its_evidence_beside_its_report(run_dir):
    d, result = run_dir
    out = d / "conformance"
    index = json.loads((out / "evidence" / "index.json").read_text())
    assert {c["id"] for c in index["cases"]} == set(_verdicts(out)) and len(index["cases"]) >= 3
    assert result.data["evidence"] == str(out / "evidence")
    stored = "".join(p.read_text() for p in (out / "evidence").iterdir())
    assert KEY not in stored and "/v1/chat/completions" in stored  # the exchanges are there, the key is not
    assert "no evidence beside this report" not in (out / "conformance.html").read_text()


def test_the_runs_conformance_can_be_rejudged(run_dir, tmp_path, capsys):
    d, _ = run_dir
    live = _verdicts(d / "conformance")
    code = main(
        ["conform", "--rejudge", str(d / "conformance"), "--expect", "tgi-3.3.5", "--out", str(tmp_path / "rj")]
    )
    text = capsys.readouterr().out
    assert _verdicts(tmp_path / "rj") == live, text
    rj = json.loads((tmp_path / "rj" / "conformance.json").read_text())["engine"]["rejudge"]
    assert rj["same"] == rj["cases"] == len(live) and rj["not_rejudged"] == [] and rj["different"] == []
    assert code == (0 if not {"fail", "error"} & set(live.values()) else 1)
