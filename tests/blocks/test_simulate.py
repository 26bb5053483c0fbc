"""Simulator: vLLM 0.11.0 scheduling rules (FCFS, recompute preemption of the last running request)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.blocks import scenario as sc_mod
from harness.blocks.scenario import EngineSettings, SimRequestSpec
from harness.blocks.simulate import SimResult, Simulator, run
from harness.cli import main
from harness.errors import ManifestError

SCEN = Path(__file__).resolve().parents[2] / "harness" / "blocks" / "scenarios"


def spec(i, plen, out, base=0):
    return SimRequestSpec(f"r{i}", 0.0, tuple(range(base + 1000 * i, base + 1000 * i + plen)), out)


def test_preempts_last_running_and_prepends_without_admitting():
    eng = EngineSettings(num_blocks=5, block_size=4, max_model_len=64, max_num_batched_tokens=64)
    sim = Simulator(eng, debug=True)
    res = SimResult("t", eng)
    for i in range(3):
        sim.add(spec(i, 4, 20))  # each prompt fills one block
    sim.add(spec(3, 4, 20))
    sim.step(res)  # 4 usable blocks: all four admitted (one block each)
    assert [r.request_id for r in sim.running] == ["r0", "r1", "r2", "r3"]
    sim.step(res)  # each needs a 2nd block: r0 needs one -> preempt r3; r1 -> preempt r2
    assert res.preemptions == 2
    assert [r.request_id for r in sim.running] == ["r0", "r1"]
    assert [r.request_id for r in sim.waiting] == ["r2", "r3"]  # prepended: latest victim first
    assert all(r.num_computed_tokens == 0 for r in sim.waiting)
    assert res.timeline[-1].preempted == 2
    # a step that preempted admits nothing even though r2's blocks could be found again
    assert len(sim.running) == 2


def test_self_preemption_stops_the_running_loop():
    eng = EngineSettings(num_blocks=3, block_size=4, max_model_len=64, max_num_batched_tokens=64)
    sim = Simulator(eng, debug=True)
    res = SimResult("t", eng)
    sim.add(spec(0, 8, 5))  # needs both usable blocks after prefill + growth
    sim.step(res)
    assert res.preemptions == 0 and sim.running[0].num_output_tokens == 1
    sim.step(res)  # 9 tokens need a 3rd block: only victim is itself
    assert res.preemptions == 1 and not sim.running and sim.waiting[0].request_id == "r0"


def test_fcfs_waiting_blocks_behind_head():
    eng = EngineSettings(num_blocks=4, block_size=4, max_model_len=64, max_num_batched_tokens=64)
    sim = Simulator(eng, debug=True)
    res = SimResult("t", eng)
    sim.add(spec(0, 8, 5))
    sim.add(spec(1, 12, 5))  # does not fit beside r0
    sim.add(spec(2, 2, 5))  # would fit, but FCFS stops at r1
    sim.step(res)
    assert [r.request_id for r in sim.running] == ["r0"]
    assert [r.request_id for r in sim.waiting] == ["r1", "r2"]


def test_max_num_seqs_and_token_budget():
    eng = EngineSettings(num_blocks=100, block_size=4, max_model_len=64, max_num_seqs=2, max_num_batched_tokens=10)
    sim = Simulator(eng, debug=True)
    res = SimResult("t", eng)
    for i in range(3):
        sim.add(spec(i, 6, 3))
    sim.step(res)
    assert len(sim.running) == 2 and res.timeline[-1].scheduled_tokens == 10  # r1 chunked: 4 of 6
    assert sim.running[1].num_computed_tokens == 4


@pytest.mark.parametrize("name", ["preempt-small-cache.yaml", "shared-prefix.yaml"])
def test_sample_scenarios_finish_and_free_everything(name):
    sc = sc_mod.load(SCEN / name)
    res = run(sc, debug=True)
    assert res.finished == sc.requests
    assert res.generation_tokens == sum(s.max_tokens for s in sc_mod.expand(sc))
    assert res.timeline[-1].used_blocks == 0


def test_preempt_scenario_predicts_preemptions_and_shared_prefix_hits():
    res = run(sc_mod.load(SCEN / "preempt-small-cache.yaml"))
    assert res.preemptions > 0 and res.peak_used_blocks == 15
    sp = sc_mod.load(SCEN / "shared-prefix.yaml")
    res = run(sp)
    shared = sum(1 for r in sc_mod.expand(sp) if r.prompt[0] == 0)
    assert res.preemptions == 0
    assert res.prefix_hits == (shared - 1) * 256  # every later sharer hits all 16 full prefix blocks


def test_no_prefix_caching_means_no_hits():
    res = run(sc_mod.load(SCEN / "shared-prefix.yaml"), enable_prefix_caching=False)
    assert res.prefix_hits == 0 and res.prefix_queries == 0


def test_scenario_reader_accepts_loadtest_shape_and_rejects_junk(tmp_path):
    doc = {
        "name": "x",
        "bounds": {"max_requests": 3, "max_duration_s": 10},
        "arrival": {"kind": "constant", "rate": 2},
        "prompt_tokens": {"kind": "fixed", "value": 10},
        "output_tokens": {"kind": "uniform", "min": 1, "max": 4},
        "slo": {"ttft_ms": {"p50": 100}},
        "endpoint": "completions",
    }
    sc = sc_mod.parse(doc)
    assert sc.requests == 3 and [r.arrival_s for r in sc_mod.expand(sc)] == [0.0, 0.5, 1.0]
    for bad in (
        {**doc, "arrival": {"kind": "poisson", "rate": 1}},
        {**doc, "engine": {"nope": 1}},
        {**doc, "prompt_tokens": {"kind": "fixed"}},
        {**doc, "bounds": {}},
    ):
        with pytest.raises(ManifestError):
            sc_mod.parse(bad)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(doc))
    assert main(["blocks", "simulate", str(p)]) == 0
    assert main(["blocks", "simulate", str(tmp_path / "missing.yaml")]) == 2
