"""Acceptance 4: malformed server data never crashes the harness; it becomes fail/error verdicts with evidence."""

import asyncio
import json

import httpx
import pytest

from harness.client import make_client, record
from harness.conformance.expectations import load_expectations
from harness.conformance.runner import new_ctx, run_suite

ROLE = {
    "id": "x",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
}
GOOD = b"data: " + json.dumps(ROLE).encode() + b"\n\n"

BODIES = {
    "invalid-json": (GOOD + b'data: {"id": "x", \n\ndata: [DONE]\n\n', "text/event-stream", "chat.stream.json-chunks"),
    "truncated": (GOOD + b'data: {"id": "x"', "text/event-stream", "chat.stream.done-present"),
    "wrong-content-type": (GOOD + b"data: [DONE]\n\n", "application/json", "chat.stream.content-type"),
    "10mb-line": (
        GOOD + b"data: " + b"z" * (10 << 20) + b"\n\ndata: [DONE]\n\n",
        "text/event-stream",
        "chat.stream.json-chunks",
    ),
    "binary-garbage": (bytes(range(256)) * 64, "text/event-stream", "chat.stream.json-chunks"),
}


def handler_for(body: bytes, ctype: str):
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "m", "object": "model"}]})
        if request.url.path == "/health":
            return httpx.Response(200)
        return httpx.Response(200, headers={"content-type": ctype}, content=body)

    return handler


@pytest.mark.parametrize("name", sorted(BODIES))
def test_malformed_stream_gives_verdicts_not_crashes(name):
    body, ctype, case_id = BODIES[name]
    ctx = new_ctx(
        "http://127.0.0.1:1", load_expectations("vllm-0.11"), transport=httpx.MockTransport(handler_for(body, ctype))
    )
    rep = asyncio.run(run_suite(ctx, patterns=["chat.stream", "completions.stream"]))
    res = {r.id: r for r in rep.results}
    assert res[case_id].verdict == "fail", res[case_id]
    assert all(r.verdict in ("pass", "fail", "skip", "info", "error", "quirk") for r in rep.results)
    assert not rep.ok


def test_disconnect_mid_body_is_recorded():
    class Broken(httpx.AsyncByteStream):
        async def __aiter__(self):
            yield GOOD
            raise httpx.ReadError("connection reset")

    def handler(request):
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Broken())

    async def go():
        async with make_client("http://127.0.0.1:1", transport=httpx.MockTransport(handler)) as c:
            return await record(c, "POST", "/v1/chat/completions", json={"stream": True})

    t = asyncio.run(go())
    assert t.ended == "disconnect" and t.events[0].kind == "data" and t.events[-1].kind == "disconnect"
    assert t.events[0].t_ns > 0 and t.events[0].raw == GOOD


class ExitedEngine:
    """A launched engine whose process has exited (the runner asks exit_status(), and for the log tail)."""

    def exit_status(self):
        return 1

    def log_tail(self):
        return "Traceback: out of memory"


def test_dead_engine_marks_the_rest_error_without_hanging():
    def handler(request):
        raise httpx.ConnectError("refused")

    # A port where nothing ever answered is not an engine that died: that message is tested in
    # tests/hostile/test_conformance_hostile.py; here the engine is a launched process that exited.
    ctx = new_ctx(
        "http://127.0.0.1:1",
        load_expectations("vllm-0.11"),
        model="m",
        transport=httpx.MockTransport(handler),
        engine=ExitedEngine(),
    )
    rep = asyncio.run(run_suite(ctx, patterns=["health", "chat.stream.role-first", "errors"]))
    assert rep.aborted == "engine died during health.health"
    assert [r.verdict for r in rep.results] == ["error"] * len(rep.results)
    assert "not run: the engine died during health.health" in rep.results[-1].note
