"""update-expectations: fails become quirks to review, unexpected passes are dropped, errors are never written."""

from __future__ import annotations

import json

import yaml

from harness.cli import main
from harness.conformance.expectations import load_expectations
from harness.conformance.update import propose
from harness.settings import EXPECTATIONS_DIR

RESULTS = {
    "cases": [
        {
            "id": "chat.stream.role-once",
            "verdict": "fail",
            "level": "MUST",
            "behaviour": "role-on-every-chunk",
            "expected": "role only on the first delta",
            "actual": "role on chunk 1",
            "unexpected_pass": False,
        },
        {
            "id": "completions.stream.no-extra-fields",
            "verdict": "pass",
            "level": "SHOULD",
            "behaviour": None,
            "unexpected_pass": True,
        },
        {
            "id": "cancel.mid-stream",
            "verdict": "error",
            "level": "MUST",
            "note": "engine died",
            "unexpected_pass": False,
        },
        {"id": "health.health", "verdict": "pass", "level": "MUST", "unexpected_pass": False},
    ]
}


def test_propose_adds_fails_drops_unexpected_passes_and_skips_errors():
    raw = yaml.safe_load((EXPECTATIONS_DIR / "vllm-0.11.yaml").read_text())
    new, changes = propose(RESULTS, raw, note="test")
    assert new["cases"]["chat.stream.role-once"]["quirk"] == "role-on-every-chunk"
    assert "REVIEW" in new["cases"]["chat.stream.role-once"]["reason"]
    assert "completions.stream.no-extra-fields" not in new["cases"]
    assert "cancel.mid-stream" not in new["cases"]
    assert new["metrics"] == raw["metrics"] and new["cancellation"] == raw["cancellation"]
    assert any(c.startswith("! cancel.mid-stream") for c in changes)


def test_cli_writes_a_loadable_file_and_never_overwrites_without_force(tmp_path, capsys):
    res = tmp_path / "conformance.json"
    res.write_text(json.dumps(RESULTS))
    out = tmp_path / "proposed.yaml"
    assert main(["update-expectations", str(res), "--expect", "vllm-0.11", "--out", str(out)]) == 0
    exp = load_expectations(out)
    assert exp.quirks("chat.stream.role-once") == ["role-on-every-chunk"]
    before = out.read_bytes()
    assert main(["update-expectations", str(res), "--expect", "vllm-0.11", "--out", str(out)]) == 2
    assert "exists" in capsys.readouterr().err and out.read_bytes() == before
