"""The simulator replays the load-test scenarios in loadtests/ (the requests `harness load` would send)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.blocks import scenario, simulate
from harness.blocks.scenario import _prompt_ids
from harness.cli import main
from harness.load.scenario import load_scenario, plan

LOADTESTS = sorted((Path(__file__).resolve().parents[2] / "loadtests").glob("*.yaml"))


def test_chat_prompt_ids_match_the_engine_count():
    # vLLM 0.11.0 reported 44 prompt tokens for this chat message with the reference model (19 characters).
    assert len(_prompt_ids("Hello, who are you?", "chat")) == 44
    assert _prompt_ids("ab", "completions") == (257, 97, 98)


@pytest.mark.parametrize("path", LOADTESTS, ids=lambda p: p.stem)
def test_every_shipped_load_scenario_replays(path):
    sim, specs = scenario.load_any(path)
    planned = plan(load_scenario(path))
    assert specs is not None and len(specs) == len(planned)
    assert [s.max_tokens for s in specs] == [p.max_tokens for p in planned]
    result = simulate.run(sim, specs=specs).summary()
    assert result["finished"] == len(specs) and result["rejected"] == []
    assert result["generation_tokens"] == sum(p.max_tokens for p in planned)


def test_shared_prefix_hits_and_pressure_through_the_cli(capsys):
    path = next(p for p in LOADTESTS if p.stem == "poisson")  # half the requests share a 12-character prefix
    assert main(["blocks", "simulate", str(path), "--block-size", "16", "--num-blocks", "40"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["finished"] == 60 and out["prefix_cache_hits"] > 0 and out["prefix_cache_hits"] % 16 == 0
