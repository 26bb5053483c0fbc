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


class _SlowStream(httpx.AsyncByteStream):
    """A completion stream that sends `chunks` data events, then nothing more (a starved server)."""

    def __init__(self, chunks: int):
        self.chunks = chunks

    async def __aiter__(self):
        for k in range(self.chunks):
            yield b'data: {"choices": [{"index": 0, "text": "t%d", "finish_reason": null}]}\n\n' % k
        await asyncio.sleep(30)

    async def aclose(self):
        pass


def run_slow_mid_stream(chunks: int):
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/completions" and b'"stream": true' in request.content:
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_SlowStream(chunks))
        if request.url.path == "/v1/completions":
            return httpx.Response(200, json={"choices": [{"text": "abcd"}], "usage": {"completion_tokens": 4}})
        return handler_raising(httpx.ConnectError)(request)

    ctx = new_ctx("http://127.0.0.1:1", load_expectations("vllm-0.11"), transport=httpx.MockTransport(handler),
                  max_stream_s=0.5)  # fmt: skip
    [r] = asyncio.run(run_suite(ctx, patterns=["cancel.mid-stream"])).results
    return r


def test_a_stream_the_harness_bound_closed_after_data_was_left_mid_stream():
    r = run_slow_mid_stream(3)  # cut point 20, but only 3 events came before the bound: the client left mid-stream
    assert r.verdict == "pass", r
    assert r.extra["cut_by_bound"] == 1


def test_a_stream_with_no_data_by_the_bound_fails_and_says_what_it_saw():
    r = run_slow_mid_stream(0)
    assert r.verdict == "fail" and r.behaviour == "stream-ended-early", r
    assert "stream 0 of 1 (cut after 20 data events): timeout after" in r.note and "with 0 data event(s)" in r.note
