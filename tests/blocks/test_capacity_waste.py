"""Capacity planner and waste calculator figures (seed + vLLM 0.11.0 §8 + engine notes)."""

from __future__ import annotations

import json

import pytest

from harness.blocks import capacity as c
from harness.blocks.waste import waste_report
from harness.cli import main
from tests.support.models import TINY_CONFIG

TINY = TINY_CONFIG
SEC8 = {
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "hidden_size": 896,
    "torch_dtype": "bfloat16",
}  # head_dim derived: 896 / 14 = 64


@pytest.fixture
def tiny_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    return tmp_path


def test_tiny_model_num_blocks_at_1gib():
    shape = c.model_shape(TINY)
    assert c.plan(shape, 1 << 30, 128, dtype="float32").num_blocks == 8192
    assert c.plan(shape, 1 << 30, 128).num_blocks == 16384  # auto: float32 checkpoint -> bf16 on CPU
    assert c.plan(shape, 1 << 30, 128, dtype="bfloat16").num_tokens == 2_097_152
    assert c.plan(shape, 2 << 30, 128, dtype="float32").num_blocks == 16384
    assert c.plan(shape, 1 << 30, 16, dtype="float32").num_blocks == 65536
    assert c.plan(shape, 1 << 30, 128, dtype="float32", kv_cache_dtype="fp8").num_blocks == 32768


def test_section8_example():
    cap = c.plan(c.model_shape(SEC8), 4 << 30, 128)
    assert cap.page_size_bytes == 65536
    assert cap.num_blocks == 2730 and cap.usable_blocks == 2729
    assert cap.num_tokens == 2730 * 128


def test_override_and_tp():
    shape = c.model_shape(SEC8)
    assert c.plan(shape, 4 << 30, 128, num_gpu_blocks_override=16).num_blocks == 16
    assert c.plan(shape, 4 << 30, 128, tensor_parallel_size=2).num_blocks == 5461  # 1 KV head per rank


def test_max_concurrency():
    cap = c.plan(c.model_shape(TINY), 1 << 30, 128, dtype="float32")
    mc = c.max_concurrency(cap, [1024])
    assert mc["vllm_logged"] == 1024.0 and mc["worst_case"] == 8191 // 8


@pytest.mark.parametrize("text,n", [("1GiB", 1 << 30), ("1073741824", 1 << 30), ("512 MiB", 1 << 29)])
def test_parse_bytes(text, n):
    assert c.parse_bytes(text) == n


def test_cli_capacity(tiny_dir, capsys):
    assert (
        main(
            [
                "blocks",
                "capacity",
                "--model",
                str(tiny_dir),
                "--kv-bytes",
                "1GiB",
                "--block-size",
                "128",
                "--dtype",
                "float32",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["num_blocks"] == 8192
    assert main(["blocks", "capacity", "--model", str(tiny_dir / "nope"), "--kv-bytes", "1", "--block-size", "1"]) == 2
    assert main(["blocks", "capacity", "--model", str(tiny_dir), "--kv-bytes", "lots", "--block-size", "1"]) == 2


def test_seed_waste_figures():
    r = waste_report(200, 2000, 16, [2000, 4096])
    assert r.mean_length == 1100
    assert r.mean_waste == pytest.approx(7.5, abs=0.02)
    assert r.paged.ratio_of_expectations == pytest.approx(0.993, abs=5e-4)
    assert r.reserves[2000].ratio_of_expectations == pytest.approx(0.55)
    assert round(r.reserves[4096].ratio_of_expectations * 100, 2) == 26.86
    # the three ratios are not the same thing
    assert r.paged.mean_of_ratios < r.paged.ratio_of_expectations
    s = waste_report(200, 2000, 16, sample_size=500, seed=3)
    assert s.paged.sample_aggregate != s.paged.ratio_of_expectations


def test_cli_waste_prints_all_three_ratios(capsys):
    assert (
        main(
            [
                "blocks",
                "waste",
                "--min",
                "200",
                "--max",
                "2000",
                "--block-size",
                "16",
                "--reserve",
                "2000",
                "--reserve",
                "4096",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    for needle in (
        "mean length 1100",
        "mean waste 7.48",
        "99.32",
        "55.0000%",
        "26.8555%",
        "ratio of expectations",
        "sample aggregate",
        "mean of per-request ratios",
    ):
        assert needle in out
    assert main(["blocks", "waste", "--min", "20", "--max", "10", "--block-size", "16"]) == 2
