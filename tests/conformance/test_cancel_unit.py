"""cancel.*: a stream that never connected is the harness's problem (error); a connection the server reset before
answering is the server's (fail)."""

import asyncio

import httpx
import pytest

from harness.conformance.expectations import load_expectations
from harness.conformance.runner import new_ctx, run_suite

IDLE_METRICS = (
    '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0",model_name="m"} 0.0\n'
    '# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.0\n'
    '# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{engine="0",model_name="m"} 0.0\n'
)


def handler_raising(exc_type):
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "m", "object": "model"}]})
        if request.url.path in ("/health", "/metrics"):
            return httpx.Response(200, text=IDLE_METRICS, headers={"content-type": "text/plain; version=0.0.4"})
        raise exc_type("boom", request=request)

    return handler


def run_cancel_cases(exc_type) -> dict:
    ctx = new_ctx(
        "http://127.0.0.1:1", load_expectations("vllm-0.11"), transport=httpx.MockTransport(handler_raising(exc_type))
    )
    report = asyncio.run(run_suite(ctx, patterns=["cancel.mid-stream", "cancel.concurrent-32"]))
    got = {r.id: r for r in report.results}
    assert set(got) == {"cancel.mid-stream", "cancel.concurrent-32"}
    return got


@pytest.mark.parametrize("exc_type", [httpx.ConnectTimeout, httpx.PoolTimeout])
def test_streams_that_never_connected_are_an_error(exc_type):
    got = run_cancel_cases(exc_type)  # what a starved client process sees
    assert got["cancel.concurrent-32"].verdict == "error", got["cancel.concurrent-32"]
    assert f"32 of 32 streams got no response: {exc_type.__name__}" in got["cancel.concurrent-32"].note
    assert got["cancel.mid-stream"].verdict == "error" and "1 of 1" in got["cancel.mid-stream"].note


@pytest.mark.parametrize("exc_type", [httpx.ReadError, httpx.RemoteProtocolError, httpx.ConnectError])
def test_connections_the_server_dropped_are_a_failure(exc_type):
    got = run_cancel_cases(exc_type)
    for r in got.values():
        assert r.verdict == "fail" and r.behaviour == "stream-ended-early", r
