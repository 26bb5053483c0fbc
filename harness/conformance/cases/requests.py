"""Request features: max_tokens, stop strings, stop token ids, logprobs, forced tool calls, the non-stream shape,
and what the OpenAI Python SDK shows its users."""

from __future__ import annotations

import json

from harness.conformance.context import probe
from harness.conformance.model import Check, Level, failed, info, passed, skipped, status_problem
from harness.conformance.registry import case, shape_cases
from harness.conformance.shape import TOOL_CHECKS, per_index, streamed_text, tool_arguments, tool_calls
from harness.conformance.view import choices, from_trace

CHAT = "/v1/chat/completions"


def _first_choice(t) -> tuple[dict | None, Check | None]:
    doc, err = t.body_json()
    ch = choices(doc)
    if err or not ch:
        return None, failed("non-stream-shape", "JSON with choices", err or doc)
    return ch[0], None


@case("chat.nonstream.shape", "a non-stream chat response has object chat.completion, an assistant message and usage")
async def nonstream_shape(ctx) -> Check:
    t = await ctx.post(CHAT, ctx.chat(max_tokens=5))
    if (p := status_problem(t)) is not None:
        return p
    doc, _ = t.body_json()
    c0, p = _first_choice(t)
    if p:
        return p
    if doc.get("object") != "chat.completion":
        return failed("wrong-object", "chat.completion", doc.get("object"))
    msg = c0.get("message") or {}
    if msg.get("role") != "assistant" or not isinstance(msg.get("content"), str):
        return failed("message-shape", "message {role: assistant, content: str}", msg)
    u = doc.get("usage") or {}
    if not isinstance(u, dict) or u.get("prompt_tokens", 0) + u.get("completion_tokens", 0) != u.get("total_tokens"):
        return failed("usage-shape", "usage with total = prompt + completion", u)
    if not doc.get("id"):
        return failed("empty-id", "a non-empty id", doc.get("id"))
    return passed()


@case("chat.length", "max_tokens ends generation with finish_reason length and completion_tokens = max_tokens")
async def length(ctx) -> Check:
    t = await ctx.post(CHAT, ctx.chat(max_tokens=5, **ctx.extra("long_request")))
    if (p := status_problem(t)) is not None:
        return p
    c0, p = _first_choice(t)
    if p:
        return p
    if c0.get("finish_reason") != "length":
        return failed(f"finish-reason-{c0.get('finish_reason')}", "length", c0.get("finish_reason"))
    ct = (t.body_json()[0].get("usage") or {}).get("completion_tokens")
    if ct != 5:
        return failed("completion-tokens", 5, ct)
    return passed()


@probe("stop.plan")
async def _stop_plan(ctx):
    """A greedy completion long enough to pick a stop string and a stop token from."""
    return await ctx.post(CHAT, ctx.chat(max_tokens=24, **ctx.extra("token_ids")))


def _pick_stop(text: str) -> tuple[str, int] | None:
    """A printable ASCII character whose first occurrence is not at position 0."""
    for i, ch in enumerate(text):
        if i >= 1 and ch.isascii() and ch.isalnum() and text.index(ch) == i:
            return ch, i
    return None


async def _stop_stream(ctx):
    plan = await ctx.probe("stop.plan")
    c0, p = _first_choice(plan)
    if p:
        return None, None, p
    text = (c0.get("message") or {}).get("content") or ""
    pick = _pick_stop(text)
    if pick is None:
        return None, None, skipped(f"no usable stop character in the greedy output {text[:40]!r}")
    stop, at = pick
    if "stop.stream" not in ctx._probes:
        ctx._probes["stop.stream"] = await ctx.post(CHAT, ctx.chat(max_tokens=24, stop=[stop], stream=True))
    return ctx._probes["stop.stream"], (stop, at, text), None


@case("chat.stop.string-finish-reason", "a stop string ends generation with finish_reason stop")
async def stop_finish(ctx) -> Check:
    t, plan, p = await _stop_stream(ctx)
    if p:
        return p
    if (p := status_problem(t)) is not None:
        return p
    frs = [c.get("finish_reason") for _, o in from_trace(t).objects() for c in choices(o) if c.get("finish_reason")]
    if frs != ["stop"]:
        return failed(f"finish-reason-{frs[-1] if frs else 'none'}", ["stop"], frs, note=f"stop={plan[0]!r}")
    return passed(f"stop={plan[0]!r}")


@case("chat.stop.string-cut", "the stop string is not included in the output", Level.SHOULD)
async def stop_cut(ctx) -> Check:
    t, plan, p = await _stop_stream(ctx)
    if p:
        return p
    if (p := status_problem(t)) is not None:
        return p
    stop, at, full = plan
    got = streamed_text(from_trace(t))
    if got == full[:at]:
        return passed(f"cut before {stop!r} at char {at}")
    if full.startswith(got) and len(got) >= at + len(stop):
        return failed("stop-string-kept", full[:at], got, note="output runs through the stop string")
    return failed("stop-text-differs", full[:at], got)


@case("chat.stop.token-ids", "stop_token_ids ends generation at that token with finish_reason stop", Level.SHOULD)
async def stop_token_ids(ctx) -> Check:
    plan = await ctx.probe("stop.plan")
    c0, p = _first_choice(plan)
    if p:
        return p
    ids = c0.get("token_ids")
    if not isinstance(ids, list) or len(ids) < 4:
        return skipped("the engine does not report generated token ids (needed to choose a stop token)")
    k = next((i for i in range(2, len(ids)) if ids[i] not in ids[:i]), None)
    if k is None:
        return skipped("no token that first occurs after position 2")
    t = await ctx.post(CHAT, ctx.chat(max_tokens=24, stop_token_ids=[ids[k]], **ctx.extra("token_ids")))
    if (p := status_problem(t)) is not None:
        return p
    c1, p = _first_choice(t)
    if p:
        return p
    got = c1.get("token_ids") or []
    if c1.get("finish_reason") != "stop":
        return failed(
            f"finish-reason-{c1.get('finish_reason')}", "stop", c1.get("finish_reason"), note=f"stop id {ids[k]}"
        )
    if got != ids[: k + 1]:
        return failed("stopped-elsewhere", ids[: k + 1], got)
    return passed(f"stopped at token {ids[k]} (position {k}), stop_reason={c1.get('stop_reason')!r}")


@case(
    "chat.logprobs.shape",
    "logprobs=true, top_logprobs=2: each content chunk has logprobs.content entries with 2 alternatives",
)
async def logprobs(ctx) -> Check:
    t = await ctx.post(CHAT, ctx.chat(max_tokens=6, stream=True, logprobs=True, top_logprobs=2))
    if (p := status_problem(t)) is not None:
        return p
    seen = 0
    for seq in per_index(from_trace(t)).values():
        for n, _, c in seq[1:]:
            lp = c.get("logprobs")
            if not isinstance(lp, dict) or not isinstance(lp.get("content"), list):
                return failed("no-logprobs", "logprobs.content list", lp, n)
            for e in lp["content"]:
                if (
                    not isinstance(e, dict)
                    or not isinstance(e.get("token"), str)
                    or not isinstance(e.get("logprob"), (int, float))
                ):
                    return failed("entry-shape", "{token, logprob, bytes, top_logprobs}", e, n)
                if "bytes" not in e:
                    return failed("no-bytes", "bytes field on each entry", sorted(e), n)
                if not isinstance(e.get("top_logprobs"), list) or len(e["top_logprobs"]) != 2:
                    return failed("top-logprobs-count", 2, e.get("top_logprobs"), n)
                seen += 1
    return passed(f"{seen} entries") if seen else failed("no-logprobs", "at least one entry", 0)


TOOL_SCHEMA = {"enum": ["celsius", "fahrenheit"]}  # no room for free whitespace: see engine-notes.md


@probe("chat.tools")
async def _tools(ctx):
    tools = [
        {
            "type": "function",
            "function": {"name": "pick_unit", "description": "Pick a unit.", "parameters": TOOL_SCHEMA},
        }
    ]
    body = ctx.chat(
        max_tokens=24, stream=True, tools=tools, tool_choice={"type": "function", "function": {"name": "pick_unit"}}
    )
    return await ctx.post(CHAT, body)


@case("chat.tools.present", "a named tool_choice streams tool-call fragments (not plain text, not an error event)")
async def tools_present(ctx) -> Check:
    # The shape checks below skip a stream without tool calls (right for recorded streams); a forced call must have them.
    t = await ctx.probe("chat.tools")
    if (p := status_problem(t)) is not None:
        return p
    view = from_trace(t)
    for n, obj in view.objects():
        if isinstance(obj, dict) and "error" in obj:
            return failed("error-event", "tool-call fragments", obj["error"], n)
    calls = tool_calls(view)
    if not calls:
        return failed("no-tool-calls", "at least one tool-call fragment", streamed_text(view)[:120] or "(nothing)")
    return passed(f"{len(calls)} fragments")


shape_cases("chat.tools", "chat.tools", TOOL_CHECKS, "chat")


@case("chat.tools.arguments-schema", "the forced tool call's arguments match the tool's JSON schema")
async def tools_schema(ctx) -> Check:
    t = await ctx.probe("chat.tools")
    if (p := status_problem(t)) is not None:
        return p
    text = tool_arguments(from_trace(t))
    try:
        val = json.loads(text)
    except ValueError:
        return failed("arguments-not-json", "JSON", text[:200])
    if val not in TOOL_SCHEMA["enum"]:
        return failed("schema-mismatch", TOOL_SCHEMA, val)
    return passed(repr(val))


@case(
    "sdk.openai.stream",
    "the OpenAI Python SDK reads the stream: role-only delta first, usage chunk with choices [] last",
)
async def sdk(ctx) -> Check:
    try:
        import openai
    except ImportError:
        return skipped("openai SDK not installed")
    client = openai.AsyncOpenAI(
        base_url=ctx.base_url + "/v1",
        api_key=ctx.api_key or "none",
        max_retries=0,
        http_client=ctx.new_client(ctx.api_key),
    )
    seen = []
    try:
        stream = await client.chat.completions.create(
            model=ctx.model,
            messages=[{"role": "user", "content": "Say hello."}],
            max_tokens=6,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in stream:
            seen.append(chunk)
    except openai.OpenAIError as exc:
        return failed("sdk-error", "no SDK exception", f"{type(exc).__name__}: {exc}")
    finally:
        await client.close()
    if not seen:
        return failed("sdk-no-chunks", ">= 1 chunk", 0)
    first = seen[0].choices[0].delta if seen[0].choices else None
    if first is None or first.role != "assistant" or (first.content or "") != "":
        return failed("no-role-only-chunk", "first delta role-only", first and first.model_dump(exclude_none=True), 0)
    last = seen[-1]
    if last.choices or last.usage is None:
        return failed(
            "usage-chunk", "last chunk choices [] with usage", last.model_dump(exclude_none=True), len(seen) - 1
        )
    return passed(f"{len(seen)} SDK chunks; usage={last.usage.total_tokens}")


_ = info
