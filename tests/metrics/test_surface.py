"""Metric surface diff, on real /metrics scrapes of vLLM 0.11.0 and 0.32.0 (tiny model, after golden traffic)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import DataError
from harness.metrics.surface import diff_surfaces, names_in_source, surface_from_text

DATA = Path(__file__).parent.parent / "golden" / "data"  # real /metrics captures, shared with the upgrade report tests


@pytest.fixture(scope="module")
def surfaces():
    return (
        surface_from_text((DATA / "metrics-vllm-0.11.0.txt").read_text()),
        surface_from_text((DATA / "metrics-vllm-0.32.0.txt").read_text()),
    )


def test_real_upgrade_surface(surfaces):
    old, new = surfaces
    d = diff_surfaces(old, new)
    removed = {x["name"] for x in d["removed"]}
    added = {x["name"] for x in d["added"]}
    assert "vllm:time_per_output_token_seconds" in removed
    assert {
        "vllm:engine_sleep_state",
        "vllm:num_requests_waiting_by_reason",
        "vllm:prompt_tokens_by_source",
        "vllm:request_prefill_kv_computed_tokens",
        "vllm:admission_rejections",
    } <= added
    assert not any(n.endswith("_created") for n in added | removed)
    cc = next(x for x in d["label_changes"] if x["name"] == "vllm:cache_config_info")
    assert "cpu_kvcache_space_bytes" in cc["removed"] and "kv_cache_size_tokens" in cc["added"]
    vals = {(x["name"], x["label"]): x for x in d["label_value_changes"]}
    assert vals[("vllm:cache_config_info", "kv_cache_memory_bytes")]["new"] == "1073741824"
    assert "error" in vals[("vllm:request_success", "finished_reason")]["new"]


def test_hidden_when_name_still_in_source(surfaces, tmp_path):
    old, new = surfaces
    (tmp_path / "loggers.py").write_text(
        'h = Histogram("vllm:time_per_output_token_seconds")\nx = "vllm:request_time_per_output_token_seconds"\n'
    )
    src = names_in_source(tmp_path, ["vllm:time_per_output_token_seconds", "vllm:gpu_cache_usage_perc"])
    assert src == {"vllm:time_per_output_token_seconds"}
    d = diff_surfaces(old, new, src)
    assert [x["name"] for x in d["hidden"]] == ["vllm:time_per_output_token_seconds"]
    # a longer name that merely contains the removed one is not a match
    (tmp_path / "loggers.py").write_text('x = "vllm:request_time_per_output_token_seconds"\n')
    assert names_in_source(tmp_path, ["vllm:time_per_output_token_seconds"]) == set()


def test_rename_and_type_change():
    a = (
        '# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{engine="0"} 0.1\n'
        "# TYPE vllm:x_total counter\nvllm:x_total 1\n"
    )
    b = (
        '# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine="0"} 0.1\n'
        "# TYPE vllm:x gauge\nvllm:x 1\n"
    )
    d = diff_surfaces(surface_from_text(a), surface_from_text(b))
    assert (
        d["renamed"][0]["old"] == "vllm:gpu_cache_usage_perc" and d["renamed"][0]["new"] == "vllm:kv_cache_usage_perc"
    )
    assert d["type_changed"] == [{"name": "vllm:x", "old": "counter", "new": "gauge"}]
    assert not d["removed"] and not d["added"]


def test_garbage_is_a_data_error():
    with pytest.raises(DataError):
        surface_from_text('vllm:x{a="1" 2\n')
