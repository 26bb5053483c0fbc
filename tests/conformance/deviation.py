"""A deviation proxy: an httpx transport between the suite's client and the *real* engine that injects exactly one
deviation into what the engine sent. Each deviation names the case id that must catch it."""

from __future__ import annotations

import asyncio
import json
import re

import httpx

__all__ = ["DeviationTransport", "DEVIATIONS"]


def _events(body: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in body.split(b"\n\n") if e.strip()]


def _obj(ev: bytes):
    if not ev.startswith(b"data: ") or ev.startswith(b"data: [DONE]"):
        return None
    try:
        return json.loads(ev[6:])
    except ValueError:
        return None


def _ev(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _map(evs, fn):
    out = []
    for i, e in enumerate(evs):
        o = _obj(e)
        out.append(_ev(fn(i, o)) if o is not None else e)
    return out


def drop_role(evs):
    for i, e in enumerate(evs):
        o = _obj(e)
        if o and o.get("choices") and "role" in o["choices"][0].get("delta", {}):
            return evs[:i] + evs[i + 1 :]
    return evs


def role_every(evs):
    def f(i, o):
        for c in o.get("choices", []):
            c.setdefault("delta", {})["role"] = "assistant"
        return o

    return _map(evs, f)


def usage_choices(evs):
    def f(i, o):
        if o.get("usage") and o.get("choices") == []:
            o["choices"] = [{"index": 0, "delta": {}, "finish_reason": None}]
        return o

    return _map(evs, f)


def usage_totals(evs):
    def f(i, o):
        if isinstance(o.get("usage"), dict):
            o["usage"]["total_tokens"] += 7
        return o

    return _map(evs, f)


def two_finish(evs):
    def f(i, o):
        if i == 2 and o.get("choices"):
            o["choices"][0]["finish_reason"] = "length"
        return o

    return _map(evs, f)


def no_done(evs):
    return [e for e in evs if not e.startswith(b"data: [DONE]")]


def after_done(evs):
    return evs + [evs[1]]


def id_change(evs):
    def f(i, o):
        if i == 3:
            o["id"] = "chatcmpl-other"
        return o

    return _map(evs, f)


def object_name(evs):
    def f(i, o):
        if i == 2:
            o["object"] = "chat.completion"
        return o

    return _map(evs, f)


STREAM = {
    "drop-role": ("chat.stream.role-first", drop_role),
    "role-on-every-chunk": ("chat.stream.role-once", role_every),
    "usage-with-choices": ("chat.stream.usage-last", usage_choices),
    "wrong-usage-totals": ("chat.stream.usage-totals", usage_totals),
    "two-finish-reasons": ("chat.stream.one-finish-reason", two_finish),
    "no-done": ("chat.stream.done-present", no_done),
    "data-after-done": ("chat.stream.nothing-after-done", after_done),
    "id-changes": ("chat.stream.consistent-id", id_change),
    "object-renamed": ("chat.stream.object", object_name),
}
METRICS = {
    "metric-renamed": ("metrics.required", lambda t: t.replace("vllm:generation_tokens", "vllm:generated_tokens")),
    "metric-removed": (
        "metrics.required",
        lambda t: "\n".join(ln for ln in t.splitlines() if "vllm:num_preemptions" not in ln) + "\n",
    ),
    "metric-type-changed": (
        "metrics.required",
        lambda t: t.replace("# TYPE vllm:kv_cache_usage_perc gauge", "# TYPE vllm:kv_cache_usage_perc counter"),
    ),
}
OTHER = {
    "wrong-content-type": "chat.stream.content-type",
    "error-event-as-plain-500": "errors.in-stream",
    "disconnect-not-passed-upstream": "cancel.mid-stream",
}
DEVIATIONS: dict[str, str] = {**{k: v[0] for k, v in STREAM.items()}, **{k: v[0] for k, v in METRICS.items()}, **OTHER}


class _Detached(httpx.AsyncByteStream):
    """A pump reads the upstream body to the end no matter what; the client only sees a queue. When the client
    leaves, the pump keeps going: the disconnect is never passed upstream."""

    def __init__(self, upstream: httpx.Response, tasks: set):
        self.q: asyncio.Queue = asyncio.Queue()

        async def pump():
            try:
                async for chunk in upstream.stream:
                    self.q.put_nowait(chunk)
            finally:
                self.q.put_nowait(None)
                await upstream.stream.aclose()

        t = asyncio.get_running_loop().create_task(pump())
        tasks.add(t)
        t.add_done_callback(tasks.discard)

    async def __aiter__(self):
        while (chunk := await self.q.get()) is not None:
            yield chunk

    async def aclose(self) -> None:
        pass


class DeviationTransport(httpx.AsyncBaseTransport):
    def __init__(self, deviation: str | None):
        self.deviation = deviation
        self.upstream = httpx.AsyncHTTPTransport()
        self.tasks: set = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        d = self.deviation
        resp = await self.upstream.handle_async_request(request)
        path = request.url.path
        try:
            body_req = json.loads(request.content or b"null")
        except ValueError:
            body_req = None
        streaming = isinstance(body_req, dict) and body_req.get("stream") is True
        if d == "disconnect-not-passed-upstream" and streaming:
            return httpx.Response(resp.status_code, headers=resp.headers, stream=_Detached(resp, self.tasks))
        touch = (
            (d in STREAM and streaming and path == "/v1/chat/completions")
            or (d in METRICS and path == "/metrics")
            or (d == "wrong-content-type" and streaming)
            or (d == "error-event-as-plain-500" and streaming)
        )
        if not touch:
            return resp
        body = b"".join([c async for c in resp.stream])
        await resp.stream.aclose()
        ctype = resp.headers.get("content-type", "")
        status = resp.status_code
        if d in STREAM:
            body = b"".join(STREAM[d][1](_events(body)))
        elif d in METRICS:
            body = METRICS[d][1](body.decode()).encode()
        elif d == "wrong-content-type":
            ctype = "application/json"
        elif d == "error-event-as-plain-500" and re.search(rb'^data: \{"error"', body, re.M):
            status, ctype, body = 500, "text/plain", b"Internal Server Error"
        return httpx.Response(status, headers={"content-type": ctype}, content=body)
