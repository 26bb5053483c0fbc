"""Error statuses and body shapes; an error inside a stream.

Reference body (OpenAI): {"error": {"message": str, "type": str, "param": ..., "code": ...}}. A refusal reports every
deviation at once, each its own tag: the status (`status-422`), then the body: `empty-error-body` (no bytes at all),
`non-json-error-body` (text that is not JSON), `plain-error-string` ({"error": "text"}), `no-error-object`,
`no-error-message`, `no-error-type`; an error event inside a stream also `no-error-code`.
"""

from __future__ import annotations

from harness.client import Trace
from harness.conformance.model import Check, Deviations, failed, passed
from harness.conformance.registry import case
from harness.conformance.view import StreamView, from_trace

CHAT = "/v1/chat/completions"


ERROR_OBJECT = '{"error": {"message", "type", ...}}'


def error_shapes(doc: object) -> list[str]:
    """Every way `doc` differs from an OpenAI error object ([] when it is one)."""
    if not isinstance(doc, dict) or "error" not in doc:
        return ["no-error-object"]
    e = doc["error"]
    if isinstance(e, str):
        return ["plain-error-string"]
    if not isinstance(e, dict):
        return ["no-error-object"]
    tags = []
    if not isinstance(e.get("message"), str) or not e.get("message"):
        tags.append("no-error-message")
    if "type" not in e:
        tags.append("no-error-type")
    return tags


def error_body(doc: object, status: int | None = None, raw: bytes | None = None) -> dict[str, object]:
    """What an error looked like, field by field (kept in the result's extra["error_body"], so an upgrade can compare
    it): shape (object / string / no-error-object / empty / non-json), type, code, param, and the message's shape."""
    out: dict[str, object] = {"status": status}
    if raw is not None and not raw:
        return {**out, "shape": "empty"}
    if doc is None:
        return {**out, "shape": "non-json"}
    e = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(e, str):
        return {**out, "shape": "string", "message_prefix": e[:32]}
    if not isinstance(e, dict):
        return {**out, "shape": "no-error-object", "keys": sorted(doc)[:10] if isinstance(doc, dict) else []}
    msg = e.get("message")
    return {
        **out,
        "shape": "object",
        "keys": sorted(e)[:10],
        "type": e.get("type"),
        "code": e.get("code"),
        "param": e.get("param"),
        "message": type(msg).__name__ if msg is not None else "absent",
        "message_prefix": msg[:32] if isinstance(msg, str) else None,
    }


def judge_error(t: Trace, statuses: tuple[int, ...]) -> Check:
    """A refusal with one of `statuses` and an OpenAI error object; the status and the body are judged apart. The
    error seen is kept in extra["error_body"] whatever the verdict."""
    c = _judge_error(t, statuses)
    if t.status is not None:
        doc, err = t.body_json()
        c.extra["error_body"] = error_body(None if err else doc, t.status, t.body)
    return c


def _judge_error(t: Trace, statuses: tuple[int, ...]) -> Check:
    if t.status is None:
        return failed("no-response", statuses, t.error)
    dev = Deviations()
    text = t.body[:200].decode("utf-8", "replace")
    if t.status not in statuses:
        dev.add(f"status-{t.status}", list(statuses), t.status, note=text)
    doc, err = t.body_json()
    if not t.body:
        dev.add("empty-error-body", "a JSON error object", "", note=f"content-type {t.content_type or '(none)'}")
    elif err:
        dev.add("non-json-error-body", "a JSON error object", text, note=f"content-type {t.content_type}")
    else:
        for tag in error_shapes(doc):
            dev.add(tag, ERROR_OBJECT, doc)
    if dev:
        return dev.check()
    return passed(f"{t.status} {doc['error'].get('type')}: {doc['error']['message'][:80]}")


@case("errors.unknown-model", "an unknown model gives 404 with an OpenAI error object")
async def unknown_model(ctx) -> Check:
    return judge_error(await ctx.post(CHAT, {**ctx.chat(max_tokens=2), "model": "no-such-model-xyz"}), (404,))


@case("errors.context-length", "a prompt over the context length gives 400 with an OpenAI error object")
async def context_length(ctx) -> Check:
    long = "hello " * 2000
    return judge_error(
        await ctx.post(CHAT, ctx.chat(max_tokens=2, messages=[{"role": "user", "content": long}])), (400,)
    )


@case(
    "errors.invalid-parameter", "an invalid sampling parameter (temperature -1) gives 400 with an OpenAI error object"
)
async def invalid_parameter(ctx) -> Check:
    return judge_error(await ctx.post(CHAT, ctx.chat(max_tokens=2, temperature=-1)), (400,))


@case("errors.malformed-json", "a malformed JSON body gives 400 with an OpenAI error object")
async def malformed(ctx) -> Check:
    t = await ctx.post(
        CHAT, None, content=b'{"model": "x", "messages": [', headers={"Content-Type": "application/json"}
    )
    return judge_error(t, (400,))


@case("errors.content-type", "a body sent as text/plain gives 400 or 415 with an OpenAI error object")
async def wrong_ct(ctx) -> Check:
    import json

    t = await ctx.post(
        CHAT, None, content=json.dumps(ctx.chat(max_tokens=2)).encode(), headers={"Content-Type": "text/plain"}
    )
    return judge_error(t, (400, 415))


@case(
    "errors.in-stream",
    "an error after streaming started is an SSE error event (OpenAI error object) then [DONE], HTTP 200",
)
async def in_stream(ctx) -> Check:
    # A token id outside every vocabulary: engines validate it only when generation starts.
    body = {"model": ctx.model, "prompt": [2_000_000_000], "max_tokens": 4, "stream": True}
    return judge_in_stream(await ctx.post("/v1/completions", body))


def judge_in_stream(t: Trace) -> Check:
    """A 4xx before streaming is judged as a refusal; a 200 stream needs an error event with message, type and
    code (each missing one its own tag: TGI's event lacks type and code) and then [DONE]."""
    if t.status is not None and 400 <= t.status < 500:
        r = judge_error(t, (t.status,))
        if r.status.value == "pass":
            r.note = "rejected before streaming: " + r.note
        return r
    if t.status != 200:
        return failed(
            f"status-{t.status}",
            "200 + error event (or a 4xx error object)",
            t.status,
            note=t.body[:200].decode("utf-8", "replace"),
        )
    v = from_trace(t)
    errs = [(n, o) for n, o in v.objects() if "error" in o]
    if not errs:
        return failed("no-error-event", "an SSE error event", [c.obj for c in v.chunks][:3])
    n, doc = errs[0]
    c = _judge_stream_error(v, n, doc)
    c.extra["error_body"] = {**error_body(doc, t.status), "in_stream": True}
    return c


def _judge_stream_error(v: StreamView, n: int, doc: dict) -> Check:
    dev = Deviations()
    for tag in error_shapes(doc):
        dev.add(tag, '{"error": {"message","type","code"}}', doc, n)
    if isinstance(doc["error"], dict) and "code" not in doc["error"]:
        dev.add("no-error-code", '{"error": {"message","type","code"}}', doc, n)
    if "done" not in v.kinds:
        dev.add("no-done-after-error", "[DONE] after the error event", v.kinds)
    if dev:
        return dev.check()
    return passed(f"code={doc['error'].get('code')}: {doc['error']['message'][:60]}")
