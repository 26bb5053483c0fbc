"""Live cross-checks of the block model against the real vLLM 0.11.0 engine (and a mocked /metrics)."""

from __future__ import annotations

import json

import httpx
import pytest

from harness.blocks import live
from harness.errors import RefusedError
from tests.support.models import TINY_CONFIG

METRICS = """# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="auto",cpu_kvcache_space_bytes="1073741824",enable_prefix_caching="True",engine="0",num_gpu_blocks="8192",num_gpu_blocks_override="None"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0
"""


def _mock_client(text):
    return httpx.Client(transport=httpx.MockTransport(lambda req: httpx.Response(200, text=text)))


@pytest.fixture
def tiny_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_CONFIG))
    return tmp_path


def test_num_blocks_verdict_from_mocked_metrics(tiny_config):
    with _mock_client(METRICS) as c:
        v = live.check_num_blocks(c, "http://127.0.0.1:1", tiny_config, dtype="float32")
        assert v.agree is True and v.predicted == v.measured == 8192
        v = live.check_num_blocks(c, "http://127.0.0.1:1", tiny_config, dtype="auto")  # bf16 predicts 16384
        assert v.agree is False and v.predicted == 16384 and "--dtype" in v.explanation
    with _mock_client("") as c:
        assert live.check_num_blocks(c, "http://127.0.0.1:1", tiny_config).agree is None


def test_refuses_non_loopback(tiny_config):
    with pytest.raises(RefusedError):
        live.crosscheck("http://10.0.0.1:8000", tiny_config)


def test_predict_prefix_hits():
    shared = list(range(300))
    prompts = [shared + [1000 + i] * 20 for i in range(3)]
    assert live.predict_prefix_hits(prompts, 4, 128) == [0, 256, 256]
    assert live.predict_prefix_hits([list(range(256))] * 2, 1, 128) == [0, 128]  # last block recomputed


@pytest.mark.engine
def test_live_default_engine(vllm_engine):
    """Default manifest: tiny model, --dtype float32, VLLM_CPU_KVCACHE_SPACE=1 -> 8192 blocks."""
    url, model = vllm_engine.base_url, vllm_engine.spec.model_dir
    verdicts = live.crosscheck(
        url, model, served_name=vllm_engine.served_name, dtype="float32", checks=["num_blocks", "usage", "prefix_hits"]
    )
    by = {v.check: v for v in verdicts}
    assert by["num_blocks"].measured == 8192, by["num_blocks"]
    for v in verdicts:
        assert v.agree is True, v.to_dict()


@pytest.mark.engine
def test_live_second_kv_size(engine_factory):
    """Another KV size: 2 GiB in float32 -> 16384 blocks."""
    eng = engine_factory(extra_env={"VLLM_CPU_KVCACHE_SPACE": "2"})
    v = live.crosscheck(
        eng.base_url, eng.spec.model_dir, served_name=eng.served_name, dtype="float32", checks=["num_blocks"]
    )[0]
    assert v.agree is True and v.measured == 16384, v.to_dict()


@pytest.mark.engine
def test_live_preemptions_on_small_cache(engine_factory):
    eng = engine_factory(extra_args=("--num-gpu-blocks-override", "16"), extra_env={"VLLM_CPU_KVCACHE_SPACE": "2"})
    v = live.crosscheck(
        eng.base_url, eng.spec.model_dir, served_name=eng.served_name, dtype="float32", checks=["preemptions"]
    )[0]
    assert v.agree is not None, v.explanation
    assert v.details["both_preempt"], v.to_dict()  # both see preemption on this scenario
    assert v.agree is True, v.to_dict()
