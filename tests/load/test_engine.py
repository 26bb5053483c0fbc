"""Acceptance against the real vLLM 0.11.0 engine (tiny model): bounded Poisson and concurrency runs, exact token
agreement with the server, and an abort when the engine dies mid-run."""

import threading
from pathlib import Path

import pytest

from harness.load.report import read_events, write_reports
from harness.load.runner import Target, run_scenario
from harness.load.scenario import load_scenario, parse_scenario

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]


def target(engine):
    return Target(engine.base_url, model=getattr(engine, "served_name", None), api_key=getattr(engine, "api_key", None))


@pytest.mark.parametrize("name", ["poisson", "concurrency", "default"])
def test_scenario_completes_within_bounds_and_tokens_agree(vllm_engine, tmp_path, name):
    sc = load_scenario(REPO / "loadtests" / f"{name}.yaml")
    res = run_scenario(sc, target(vllm_engine), tmp_path, progress=False)
    assert res.stop_reason == "max_requests"
    ev = read_events(tmp_path / "events.jsonl")
    assert len(ev["requests"]) == sc.bounds.max_requests + sc.warmup.requests
    s = write_reports(tmp_path)
    assert s["wall_s"] <= sc.bounds.max_duration_s
    tok = s["server"]["tokens"]
    assert tok["output"]["client_usage"] == tok["output"]["server"]
    assert tok["prompt"]["client_usage"] == tok["prompt"]["server"]
    assert s["server"]["requests"]["server_success"] == s["server"]["requests"]["client_ok"]
    assert s["server"]["ttft_histogram"]["server_count"] == len(ev["requests"])
    assert (tmp_path / "report.html").stat().st_size > 5000 and (tmp_path / "summary.md").is_file()
    assert s["ok"], s["slo_checks"]


def test_abort_when_engine_is_killed_mid_run(engine_factory, tmp_path):
    eng = engine_factory(extra_args=("--max-num-seqs", "61"))  # a private engine: this test kills it
    sc = parse_scenario(
        {
            "name": "kill",
            "prompt_unit": "char",
            "ignore_eos": True,
            "scrape_interval_s": 0.5,
            "bounds": {"max_requests": 400, "max_duration_s": 60},
            "arrival": {"kind": "poisson", "rate": 8.0},
            "prompt_tokens": {"kind": "fixed", "value": 16},
            "output_tokens": {"kind": "fixed", "value": 16},
            "abort": {"max_consecutive_failures": 5, "max_error_rate": 0.5, "min_requests": 10},
        },
        "<kill>",
    )
    killer = threading.Timer(4.0, eng.stop)
    killer.start()
    try:
        res = run_scenario(sc, target(eng), tmp_path, progress=False)
    finally:
        killer.cancel()
    assert res.stop_reason == "abort" and res.abort["rule"] in ("max_consecutive_failures", "max_error_rate")
    reqs = read_events(tmp_path / "events.jsonl")["requests"]
    assert 10 < len(reqs) < 400
    assert sum(r["outcome"] == "ok" for r in reqs) >= 10
    assert any(r["outcome"] in ("transport_error", "http_error", "stream_error", "incomplete") for r in reqs)
    s = write_reports(tmp_path)
    assert not s["ok"] and s["abort"]["detail"]
