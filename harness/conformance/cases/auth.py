"""API key: missing or wrong key is refused with 401; /health and /metrics stay reachable without a key."""

from __future__ import annotations

from harness.client import Trace
from harness.conformance.cases.endpoints import absent_without_profile
from harness.conformance.cases.errors import judge_error
from harness.conformance.model import Check, failed, passed, skipped
from harness.conformance.registry import case

NO_KEY = "no API key configured (manifest server.api_key_env, or --api-key-env when attaching)"


async def _send(ctx, key: str | None, method: str, path: str, body=None):
    async with ctx.new_client(api_key=key) as c:
        return await ctx.record(c, method, path, json=body)


async def _refused(ctx, key: str | None) -> Check:
    if not ctx.api_key:
        return skipped(NO_KEY)
    return judge_refusal(await _send(ctx, key, "POST", "/v1/chat/completions", ctx.chat(max_tokens=2)))


def judge_refusal(t: Trace) -> Check:
    """401 with an OpenAI error object (status and body judged apart: TGI's empty body is `empty-error-body`, vLLM's
    {"error": "Unauthorized"} `plain-error-string`)."""
    return judge_error(t, (401,))


@case("auth.missing-key", "a request without the API key gets 401 with an OpenAI error object")
async def missing(ctx) -> Check:
    return await _refused(ctx, None)


@case("auth.wrong-key", "a request with a wrong API key gets 401 with an OpenAI error object")
async def wrong(ctx) -> Check:
    return await _refused(ctx, "harness-deliberately-wrong-key")  # nothing derived from the real key


async def _open(ctx, path: str) -> Check:
    if not ctx.api_key:
        return skipped(NO_KEY)
    t = await _send(ctx, None, "GET", path)
    return absent_without_profile(ctx, path, t.status) or judge_open(t)


def judge_open(t: Trace) -> Check:
    """A GET without the key answered 200; any other status is `status-<n>`."""
    return passed() if t.status == 200 else failed(f"status-{t.status}", 200, t.status)


@case("auth.health-unguarded", "GET /health needs no API key")
async def health_open(ctx) -> Check:
    return await _open(ctx, "/health")


@case("auth.metrics-unguarded", "GET /metrics needs no API key")
async def metrics_open(ctx) -> Check:
    return await _open(ctx, "/metrics")
