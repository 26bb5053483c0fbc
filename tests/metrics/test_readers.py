"""What the load cross-check and the live block checks read through the one model, on the real /metrics captures
(the live checks against a mocked engine; the real engine runs in tests/blocks/test_live.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from harness.blocks import live
from harness.load.crosscheck import server_crosscheck, timeline
from harness.load.runner import SCRAPE_PREFIXES
from harness.metrics import parse_exposition
from tests.support.models import TINY_CONFIG

DATA = Path(__file__).parent.parent / "golden" / "data"
V011 = (DATA / "metrics-vllm-0.11.0.txt").read_text()
V032 = (DATA / "metrics-vllm-0.32.0.txt").read_text()
URL = "http://127.0.0.1:1"
MS = 1_000_000


def stored(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith(SCRAPE_PREFIXES))


def with_value(text: str, sample: str, value: float) -> str:
    """The capture with every series of `sample` set to `value` (the test's own edit of a fixture)."""
    return re.sub(rf"^({re.escape(sample)}(?:\{{[^}}]*\}})?) \S+$", rf"\g<1> {value}", text, flags=re.MULTILINE)


# ---------------------------------------------------------------- load cross-check


def _request(i: int, ttft_ms: int) -> dict:
    return {
        "id": i,
        "sent_ns": 0,
        "end_ns": 2 * ttft_ms * MS,
        "ev_t": [ttft_ms * MS, ttft_ms * MS + 1],
        "ev_k": "rc",
        "outcome": "ok",
        "usage": {"completion_tokens": 1, "prompt_tokens": 3},
    }


def test_crosscheck_reads_counters_histogram_and_preemptions_from_stored_scrapes():
    before = stored(V011)
    after = V011
    for name, v in (
        ("vllm:generation_tokens_total", 1405.0),
        ("vllm:prompt_tokens_total", 1468.0),
        ("vllm:num_preemptions_total", 2.0),
    ):
        after = with_value(after, name, v)
    after = with_value(after, 'vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"}', 30.0)
    for le in (
        "0.06",
        "0.08",
        "0.1",
        "0.25",
        "0.5",
        "0.75",
        "1.0",
        "2.5",
        "5.0",
        "7.5",
        "10.0",
        "20.0",
        "40.0",
        "80.0",
        "160.0",
        "640.0",
        "2560.0",
        "+Inf",
    ):  # one more first token, in (0.04, 0.06]
        old = parse_exposition(V011).value("vllm:time_to_first_token_seconds_bucket", le=le)
        line = f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{le}",model_name="tiny"}}'
        after = with_value(after, line, old + 1)
    after = with_value(after, "vllm:time_to_first_token_seconds_count", 67.0)
    after = with_value(after, "vllm:time_to_first_token_seconds_sum", 49.524545669555664 + 0.05)
    res = server_crosscheck(
        [_request(0, 50)],
        [{"phase": "before", "text": before, "t_ns": 0}, {"phase": "after", "text": stored(after), "t_ns": 9 * MS}],
    )
    assert res["available"]
    assert res["tokens"]["output"]["server"] == 1.0 and res["tokens"]["prompt"]["server"] == 3.0
    assert res["requests"] == {"client_ok": 1, "server_success": 1.0}
    th = res["ttft_histogram"]
    assert th["server_count"] == 1.0 and th["client_count"] == 1
    p50 = th["quantiles"]["p50"]
    assert p50["server_bucket_s"] == [0.04, 0.06] and p50["client_vs_bucket"] == "inside"
    assert res["scheduler"]["preemptions"] == 2.0
    assert res["flags"] == ["the engine preempted 2 request(s) during the run (KV cache pressure)"]


def test_crosscheck_on_a_scrape_that_is_not_the_format_is_a_flag():
    res = server_crosscheck(
        [_request(0, 50)],
        [
            {"phase": "before", "text": 'vllm:x{a="1" 2', "t_ns": 0},
            {"phase": "after", "text": stored(V011), "t_ns": 9 * MS},
        ],
    )
    assert res["available"] is False and "not Prometheus text" in res["flags"][0]


def test_timeline_reads_the_gauges_and_shows_none_for_a_broken_scrape():
    busy = with_value(with_value(stored(V011), "vllm:kv_cache_usage_perc", 0.5), "vllm:num_requests_running", 3.0)
    tl = timeline(
        [_request(0, 50)],
        [
            {"phase": "during", "text": busy, "t_ns": MS},
            {"phase": "during", "text": "vllm:x{", "t_ns": 2 * MS},
            {"phase": "during", "text": stored(V032), "t_ns": 3 * MS},
        ],
        0,
        10 * MS,
    )
    g = tl["gauges"]
    assert g["kv_usage"] == [0.5, None, 0.0] and g["running"] == [3.0, None, 0.0] and g["waiting"] == [0.0, None, 0.0]


# ---------------------------------------------------------------- live block checks against a mocked engine


class MockEngine:
    """/metrics from a real capture, with the prefix-cache counters moved as vLLM's KV cache manager would."""

    def __init__(self, text: str, block: int = 128):
        self.text, self.block = text, block
        self.queries, self.hits, self.seen = 1465.0, 0.0, []

    def __call__(self, req: httpx.Request) -> httpx.Response:
        if req.url.path == "/metrics":
            t = with_value(self.text, "vllm:prefix_cache_queries_total", self.queries)
            return httpx.Response(200, text=with_value(t, "vllm:prefix_cache_hits_total", self.hits))
        if req.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "tiny", "max_model_len": 2048}]})
        prompt = json.loads(req.content)["prompt"]
        common = max(
            (
                next((i for i, (a, b) in enumerate(zip(p, prompt)) if a != b), min(len(p), len(prompt)))
                for p in self.seen
            ),
            default=0,
        )
        self.queries += len(prompt)
        self.hits += common // self.block * self.block
        self.seen.append(prompt)
        return httpx.Response(200, json={"choices": [{"text": "x"}]})


def _client(handler) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(handler))  # the test's own client; the product builds none here


@pytest.fixture
def tiny_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_CONFIG))
    return tmp_path


def test_num_blocks_from_the_real_cache_config(tiny_config):
    with _client(MockEngine(V011)) as c:
        v = live.check_num_blocks(c, URL, tiny_config, dtype="float32")
    assert v.agree is True and v.measured == 8192 and v.details["cache_config"]["block_size"] == "128"
    with _client(MockEngine(V032)) as c:  # 0.32 no longer reports its KV space in bytes
        v = live.check_num_blocks(c, URL, tiny_config, dtype="float32")
    assert v.agree is None and "cpu_kvcache_space_bytes" in v.explanation


def test_prefix_hits_are_read_as_counter_deltas():
    engine = MockEngine(V011)
    with _client(engine) as c:
        v = live.check_prefix_hits(c, URL, shared_tokens=300, suffix_tokens=20, requests=4, seed=1)
    assert v.agree is True and v.predicted == v.measured == 3 * 256 and v.details["queries"] == 4 * 320


def test_the_usage_check_reads_the_scheduler_gauges():
    with _client(MockEngine(with_value(V011, "vllm:num_requests_running", 1.0))) as c:
        v = live.check_usage_single_stream(c, URL)
    assert v.agree is None and "busy" in v.explanation


def test_the_preemption_check_reads_the_override_label():
    with _client(MockEngine(V011)) as c:
        v = live.check_preemptions(c, URL)
    assert v.agree is None and "--num-gpu-blocks-override" in v.explanation


def test_a_live_scrape_that_is_not_the_format_is_a_data_error():
    from harness.errors import DataError

    with _client(lambda req: httpx.Response(200, text='vllm:x{a="1" 2\n')) as c, pytest.raises(DataError):
        live.scrape(c, URL)
