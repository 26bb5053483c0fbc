"""The upgrade gate's comparison, verdict and report on constructed sides (no engines)."""

from __future__ import annotations

from pathlib import Path

from harness.manifest import load_manifest
from harness.metrics.surface import surface_from_text
from harness.settings import REPO_ROOT
from harness.upgrade.compare import compare_sides
from harness.upgrade.judge import judge
from harness.upgrade.render import render_markdown

from .helpers import choice, record, write

DATA = Path(__file__).parent / "data"
OLD = REPO_ROOT / "manifests" / "vllm-0.11.0-cpu.yaml"
NEW = REPO_ROOT / "manifests" / "vllm-0.32.0-cpu.yaml"
TOKS = [72, 101, 108, 108, 111]


def _side(tmp_path, name, recs, metrics_file, fp=None, conformance=None):
    d = tmp_path / name
    for r in recs.get("chat", []):
        r["system_fingerprint"] = fp
        r["response_keys"] = ["choices", "model"] + (["system_fingerprint"] if fp else [])
    write(d, recs)
    return {
        "name": name,
        "ok": True,
        "engine": {"kind": "vllm", "version": name},
        "golden_dir": str(d),
        "metrics": surface_from_text((DATA / metrics_file).read_text()),
        "conformance": conformance or {"available": False, "reason": "not run (--no-conformance)"},
    }


def _conf(cases):
    return {
        "available": True,
        "expectations": "vllm-0.11",
        "cases": {k: {"verdict": v, "level": "MUST"} for k, v in cases.items()},
    }


def test_report_shows_the_acceptance_items(tmp_path):
    old = _side(
        tmp_path,
        "0.11.0",
        {"chat": [record("p", [choice(TOKS)])]},
        "metrics-vllm-0.11.0.txt",
        conformance=_conf({"chat.a": "pass", "chat.b": "quirk", "chat.c": "pass"}),
    )
    new = _side(
        tmp_path,
        "0.32.0",
        {"chat": [record("p", [choice(TOKS)])]},
        "metrics-vllm-0.32.0.txt",
        fp="vllm-0.32.0-ee46e240",
        conformance=_conf({"chat.a": "pass", "chat.b": "pass", "chat.c": "pass"}),
    )
    cmp = compare_sides(load_manifest(OLD), load_manifest(NEW), old, new, tolerance=0.02, margin=0.1)
    v = judge(old, new, cmp)
    assert v["verdict"] == "review"
    text = " ".join(r["text"] for r in v["reasons"])
    assert "vllm:time_per_output_token_seconds" in text and "system_fingerprint appears: vllm-0.32.0-ee46e240" in text
    assert "chat.b quirk->pass" in text
    report = {
        "old": old,
        "new": new,
        "comparison": cmp,
        "verdict": v,
        "created_at": "now",
        "wall_seconds": 1.0,
        "settings": {"tolerance": 0.02, "margin": 0.1, "prompt_sets": ["chat"], "expectations": "vllm-0.11"},
    }
    md = render_markdown(report)
    assert "Verdict: **REVIEW**" in md
    assert "`vllm:time_per_output_token_seconds` (histogram)" in md
    assert "`vllm:engine_sleep_state`" in md and "cpu_kvcache_space_bytes" in md and "kv_cache_size_tokens" in md
    assert "system_fingerprint" in md and "torch" in md and "2.13.0+cpu" in md


def test_golden_regression_and_conformance_break_are_blocking(tmp_path):
    gap = {2: [(108, -0.1), (120, -3.0)]}
    old = _side(
        tmp_path,
        "0.11.0",
        {"chat": [record("p", [choice(TOKS, tops=gap)])]},
        "metrics-vllm-0.11.0.txt",
        conformance=_conf({"chat.a": "pass"}),
    )
    new = _side(
        tmp_path,
        "0.32.0",
        {"chat": [record("p", [choice(TOKS[:2] + [120, 1, 2])])]},
        "metrics-vllm-0.32.0.txt",
        conformance=_conf({"chat.a": "fail"}),
    )
    cmp = compare_sides(load_manifest(OLD), load_manifest(NEW), old, new, tolerance=0.02, margin=0.1)
    v = judge(old, new, cmp)
    assert v["verdict"] == "blocking"
    levels = [(r["level"], r["text"].split(":")[0]) for r in v["reasons"]]
    assert ("blocking", "golden") in levels and ("blocking", "conformance (old expectations)") in levels


def test_new_engine_failure_is_blocking(tmp_path):
    old = _side(tmp_path, "0.11.0", {"chat": [record("p", [choice(TOKS)])]}, "metrics-vllm-0.11.0.txt")
    new = {
        "name": "0.32.0",
        "ok": False,
        "engine": {},
        "error": "StartupTimeout: not ready in 420 s",
        "conformance": {"available": False, "reason": "engine failed"},
    }
    cmp = compare_sides(load_manifest(OLD), load_manifest(NEW), old, new, tolerance=0.02, margin=0.1)
    v = judge(old, new, cmp)
    assert v["verdict"] == "blocking" and "StartupTimeout" in v["reasons"][0]["text"]
