"""The Anthropic Messages API (`POST /v1/messages`): the message shape, the stream's event grammar, its request fields,
`count_tokens`, its error envelope, the key in `x-api-key`, and the official `anthropic` SDK.

The message is validated against the vendored schema of the anthropic SDK's own `Message` type (harness.conformance.
apischema). The stream's grammar:

    message_start -> (content_block_start -> content_block_delta... -> content_block_stop)... -> message_delta
    (stop_reason, usage) -> message_stop          `ping` is allowed anywhere before message_stop

An `error` event fails every stream case with `error-event` (chat's chat.stream.no-error-event tag).

A release that does not serve the endpoint gets `absent` on every case (404/405 at the route). `tool_use` blocks and a
`tool_result` turn (`messages.tools.*`) need a scripted model and are selected only for one (`Case.needs`).
"""

from __future__ import annotations

import json
from typing import Any

from harness.client import Trace
from harness.conformance.apischema import MAX_STREAM_NODES, NodeBudget, schema_errors, schema_source
from harness.conformance.case import SCRIPTED_MODEL
from harness.conformance.context import probe
from harness.conformance.model import Check, Deviations, absent_problem, failed, passed, skipped, status_problem
from harness.conformance.registry import case
from harness.conformance.typedstream import (
    TypedStream,
    add_error_events,
    end_problem,
    is_error_event,
    too_large_for_sdk,
    typed_stream,
)

__all__ = [
    "MESSAGES",
    "message_text",
    "judge_order",
    "judge_indexes",
    "judge_final_delta",
    "judge_ends",
    "judge_tool_use_turns",
]

MESSAGES = "/v1/messages"
PROMPT = "Say hello."
MAX_TOKENS = 12
STOP_REASONS = ("end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal")
ANTHROPIC_VERSION = "2023-06-01"


def request(ctx, **kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": ctx.model, "max_tokens": MAX_TOKENS, "temperature": 0,
                            "messages": [{"role": "user", "content": PROMPT}]}  # fmt: skip
    body.update(kw)
    return body


def headers(ctx, *, bearer: bool = True) -> dict[str, str]:
    """As Anthropic's clients send them: the API version, and the key in x-api-key and (bearer) as a bearer token
    too, as the anthropic SDK does given both `api_key` and `auth_token` (Claude Code's ANTHROPIC_AUTH_TOKEN):
    vLLM's key check reads only `Authorization`, and a case about the message must not read the key check's 401.
    x-api-key alone is `messages.auth.x-api-key`'s question."""
    out = {"anthropic-version": ANTHROPIC_VERSION}
    if ctx.api_key:
        out["x-api-key"] = ctx.api_key
        if bearer:
            out["Authorization"] = f"Bearer {ctx.api_key}"
    return out


async def post(ctx, body: dict[str, Any], path: str = MESSAGES, *, bearer: bool = True, **kw: Any) -> Trace:
    """POST as an Anthropic client does: its own client, the key as `headers` puts it."""
    client = ctx.new_client(None)
    try:
        return await ctx.record(client, "POST", path, json=body, headers=headers(ctx, bearer=bearer), **kw)
    finally:
        await client.aclose()


@probe("messages.create")
async def _create(ctx) -> Trace:
    return await post(ctx, request(ctx), sse=False)


@probe("messages.stream")
async def _stream(ctx) -> Trace:
    return await post(ctx, request(ctx, stream=True), sse=True)


def message_text(msg: Any) -> str | None:
    if not isinstance(msg, dict) or not isinstance(msg.get("content"), list):
        return None
    return "".join(b["text"] for b in msg["content"]
                   if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))  # fmt: skip


def _usage(msg: Any) -> tuple[int | None, int | None]:
    """(the prompt's tokens, output tokens). Anthropic's input_tokens leaves out the tokens read from or written to
    a prompt cache (cache_read_input_tokens, cache_creation_input_tokens): the prompt is their sum."""
    u = msg.get("usage") if isinstance(msg, dict) else None
    if not isinstance(u, dict):
        return None, None
    ints = [u.get(k) if type(u.get(k)) is int else None for k in ("input_tokens", "output_tokens")]
    if ints[0] is not None:
        ints[0] += sum(
            u[k] for k in ("cache_read_input_tokens", "cache_creation_input_tokens") if type(u.get(k)) is int
        )
    return ints[0], ints[1]


def _answer(trace: Trace) -> tuple[Any, Check | None]:
    problem = absent_problem(trace, f"POST {MESSAGES}") or status_problem(trace)
    if problem is not None:
        return None, problem
    doc, err = trace.body_json()
    if err or not isinstance(doc, dict):
        return None, failed("non-json-body", "a JSON message", trace.body[:200].decode("utf-8", "replace"))
    return doc, None


def judge_schema(doc: Any, which: str = "message") -> Check:
    dev = Deviations()
    for tag, message in schema_errors("messages", which, doc):
        dev.add(tag, f"valid per {schema_source('messages')}", message)
    return dev.check()


def judge_message(msg: dict[str, Any], max_tokens: int) -> Check:
    dev = Deviations()
    if msg.get("type") != "message":
        dev.add("wrong-type", "type: message", msg.get("type"))
    if msg.get("role") != "assistant":
        dev.add("wrong-role", "role: assistant", msg.get("role"))
    if not isinstance(msg.get("id"), str) or not msg.get("id"):
        dev.add("no-id", "a non-empty id", msg.get("id"))
    blocks = msg.get("content")
    if not isinstance(blocks, list) or not any(isinstance(b, dict) and b.get("type") == "text" for b in blocks):
        dev.add("no-text-block", "content with a text block", blocks)
    if msg.get("stop_reason") not in STOP_REASONS:
        dev.add("bad-stop-reason", f"one of {', '.join(STOP_REASONS)}", msg.get("stop_reason"))
    inp, out = _usage(msg)
    if inp is None or out is None:
        dev.add("no-usage", "usage.input_tokens and usage.output_tokens", msg.get("usage"))
    elif out > max_tokens or inp <= 0:
        dev.add("usage-implausible", f"0 < input_tokens, output_tokens <= {max_tokens}", {"input": inp, "output": out})
    return dev.check()


@case("messages.create.schema", "the message validates against the Messages schema (the anthropic SDK's type)")
async def create_schema(ctx) -> Check:
    doc, problem = _answer(await ctx.probe("messages.create"))
    return problem or judge_schema(doc)


@case("messages.create.shape",
      "the message: an id, type message, role assistant, text content blocks, a stop_reason, usage tokens")  # fmt: skip
async def create_shape(ctx) -> Check:
    doc, problem = _answer(await ctx.probe("messages.create"))
    return problem or judge_message(doc, MAX_TOKENS)


# -- the stream ----------------------------------------------------------------------------------------------------


def _stream_answer(trace: Trace) -> tuple[TypedStream | None, Check | None]:
    problem = absent_problem(trace, f"POST {MESSAGES} (stream)") or status_problem(trace)
    if problem is not None:
        return None, problem
    s = typed_stream(trace)
    if "text/event-stream" not in s.content_type:
        return None, failed("not-event-stream", "text/event-stream", s.content_type)
    if not s.events:
        return None, failed("no-events", ">= 1 event", 0, note=s.error)
    return s, None


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def judge_order(s: TypedStream) -> Check:
    dev = Deviations()
    add_error_events(s, dev)
    evs = [e for e in s.events if e.type != "ping" and not is_error_event(e)]
    if [e.type for e in evs[:1]] != ["message_start"]:
        dev.add("no-message-start-first", "message_start first", evs[0].type if evs else None, 0)
    open_block: Any = None
    delta_seen = False
    for e in evs[1:]:
        t, o = e.type, e.obj if isinstance(e.obj, dict) else {}
        if t == "message_stop":
            if not delta_seen:
                dev.add("no-message-delta", "message_delta before message_stop", t, e.n)
            break
        if delta_seen:
            dev.add("event-out-of-order", "only message_stop after message_delta", t, e.n)
        elif t == "content_block_start":
            if open_block is not None:
                dev.add("event-out-of-order", f"content_block_stop of block {open_block} first", t, e.n)
            open_block = o.get("index")
        elif t == "content_block_delta":
            if open_block is None:
                dev.add("event-out-of-order", "content_block_delta inside a started block", t, e.n)
        elif t == "content_block_stop":
            if open_block is None:
                dev.add("event-out-of-order", "content_block_stop of a started block", t, e.n)
            open_block = None
        elif t == "message_delta":
            if open_block is not None:
                dev.add("event-out-of-order", "every block stopped before message_delta", t, e.n)
            delta_seen = True
        elif t == "message_start":
            dev.add("message-start-repeated", "one message_start", t, e.n)
        else:
            dev.add("unknown-event", "a Messages stream event", t, e.n)
    return dev.check()


def judge_indexes(s: TypedStream) -> Check:
    """Blocks are numbered 0, 1, ... in order, and every delta and stop names the block that is open."""
    dev = Deviations()
    add_error_events(s, dev)
    started = -1
    open_index: Any = None
    for e in s.events:
        o = e.obj if isinstance(e.obj, dict) else {}
        if e.type == "content_block_start":
            if o.get("index") != started + 1:
                dev.add("block-index-gap", started + 1, o.get("index"), e.n)
            index = o.get("index")
            started = index if isinstance(index, int) else started + 1
            open_index = o.get("index")
        elif e.type in ("content_block_delta", "content_block_stop") and o.get("index") != open_index:
            dev.add("block-index-mismatch", open_index, o.get("index"), e.n)
    return dev.check()


def streamed_text(s: TypedStream) -> str:
    out = []
    for e in s.events:
        d = e.obj.get("delta") if isinstance(e.obj, dict) and e.type == "content_block_delta" else None
        if isinstance(d, dict) and d.get("type") == "text_delta" and isinstance(d.get("text"), str):
            out.append(d["text"])
    return "".join(out)


def judge_final_delta(s: TypedStream) -> Check:
    """message_delta carries the stop_reason and the usage (output_tokens), as clients read them from it."""
    dev = Deviations()
    add_error_events(s, dev)
    deltas = [e for e in s.events if e.type == "message_delta"]
    if not deltas:
        dev.add("no-message-delta", "a message_delta", [e.type for e in s.events][-3:])
        return dev.check()
    o = _obj(deltas[-1].obj)
    d = _obj(o.get("delta"))
    if d.get("stop_reason") not in STOP_REASONS:
        dev.add("no-stop-reason-in-delta", f"one of {', '.join(STOP_REASONS)}", d.get("stop_reason"), deltas[-1].n)
    u = _obj(o.get("usage"))
    if type(u.get("output_tokens")) is not int:
        dev.add("no-usage-in-delta", "usage.output_tokens", o.get("usage"), deltas[-1].n)
    return dev.check()


def judge_ends(s: TypedStream) -> Check:
    dev = Deviations()
    # how the stream ended first: a stream the harness had to cut is the primary finding, not what it lacked
    ended = end_problem(s)
    if ended is not None:
        dev.add(ended[0], "the server closes the stream after message_stop", s.ended, note=ended[1])
    add_error_events(s, dev)
    at = next((i for i, e in enumerate(s.events) if e.type == "message_stop"), None)
    if at is None:
        dev.add("no-message-stop", "message_stop", s.events[-1].type if s.events else None)
    else:
        after = s.events[at + 1 :]
        if after:
            dev.add("event-after-message-stop", "nothing after message_stop", after[0].type, after[0].n)
    if s.done_markers:
        dev.add("done-sentinel", "no [DONE] (the stream ends with message_stop)", "[DONE]", s.done_markers[0])
    return dev.check()


def judge_event_names(s: TypedStream) -> Check:
    dev = Deviations()
    add_error_events(s, dev)
    budget = NodeBudget(MAX_STREAM_NODES)
    for e in s.events:
        if e.obj is None:
            dev.add("event-not-json", "JSON data", e.error, e.n)
            continue
        if e.name != e.type:
            dev.add("event-name-mismatch", e.type, e.name, e.n)
        if e.type in ("ping", "error"):
            continue  # not part of the SDK's stream-event union (it handles them itself)
        for tag, message in schema_errors("messages", "stream_event", e.obj, budget):
            dev.add(tag, f"{e.type or 'event'} valid per {schema_source('messages')}", message, e.n)
    return dev.check()


def _stream_case(name: str, requirement: str, judge: Any) -> None:
    @case(f"messages.stream.{name}", requirement)
    async def run(ctx) -> Check:
        trace = await ctx.probe("messages.stream")
        s, problem = _stream_answer(trace)
        chk = problem or judge(s)
        if trace.ended in ("timeout", "limit"):  # say which bound cut the stream this verdict judges
            chk.note = "; ".join(x for x in (chk.note, f"judged on the part of the stream read before the "
                                             f"harness's bound: {trace.error}") if x)  # fmt: skip
        return chk


_stream_case("order", "the stream's events come in the Messages grammar (message_start, blocks, message_delta, "
             "message_stop; ping anywhere)", judge_order)  # fmt: skip
_stream_case("indexes", "content blocks are numbered in order and every delta/stop names the open block",
             judge_indexes)  # fmt: skip
_stream_case("final-delta", "message_delta carries stop_reason and usage", judge_final_delta)
_stream_case("ends", "the stream ends with message_stop and nothing after it; the server closes it", judge_ends)
_stream_case("events", "each event's `event:` line is its type, and each event validates against the schema",
             judge_event_names)  # fmt: skip


@case("messages.stream.matches-create", "at temperature 0 the streamed text deltas add up to the non-streamed text")
async def stream_matches(ctx) -> Check:
    s, problem = _stream_answer(await ctx.probe("messages.stream"))
    doc, problem2 = _answer(await ctx.probe("messages.create"))
    if problem or problem2:
        return problem or problem2  # type: ignore[return-value]
    assert s is not None
    dev = Deviations()
    add_error_events(s, dev)
    want, got = message_text(doc), streamed_text(s)
    if want != got:
        dev.add("stream-text-differs", want, got)
    return dev.check()


# -- request fields ------------------------------------------------------------------------------------------------


CUT = 3  # max_tokens of messages.max-tokens


@case("messages.max-tokens", "max_tokens cuts the output: stop_reason max_tokens")
async def max_tokens(ctx) -> Check:
    # 3: shorter than any scripted answer with its end token ("Hello! How can I help?" is 3 tokens and the end), so
    # an answer that ends on the last allowed step (end_turn there is right) is not taken for a cut one
    doc, problem = _answer(await post(ctx, request(ctx, max_tokens=CUT), sse=False))
    if problem:
        return problem
    _, out = _usage(doc)
    dev = Deviations()
    if out is not None and out > CUT:
        dev.add("over-max-tokens", f"<= {CUT} output tokens", out)
    if out == CUT and doc.get("stop_reason") != "max_tokens":
        dev.add("not-max-tokens", "stop_reason max_tokens", doc.get("stop_reason"))
    return dev.check(passed(f"output_tokens {out}"))


@case("messages.stop-sequences", "a stop sequence ends the output: stop_reason stop_sequence, stop_sequence named")
async def stop_sequences(ctx) -> Check:
    plain, problem = _answer(await ctx.probe("messages.create"))
    if problem:
        return problem
    text = message_text(plain) or ""
    # a character the greedy output reaches after its first few: the same request stops right before it
    stop = next((ch for ch in text[2:] if ch.strip() and ch not in text[:2]), None)
    if stop is None:
        return skipped(f"the greedy output {text!r} has no character to stop on")
    return judge_stop_sequence(await post(ctx, request(ctx, stop_sequences=[stop]), sse=False), stop)


def judge_stop_sequence(trace: Trace, stop: str) -> Check:
    """The answer to stop_sequences [stop], a character the greedy output reaches."""
    doc, problem = _answer(trace)
    if problem:
        return problem
    dev = Deviations()
    if doc.get("stop_reason") != "stop_sequence":
        dev.add("not-stop-sequence", "stop_reason stop_sequence", doc.get("stop_reason"))
    if doc.get("stop_sequence") != stop:
        dev.add("stop-sequence-not-named", stop, doc.get("stop_sequence"))
    got = message_text(doc) or ""
    if stop in got:
        dev.add("ignored-field", f"output without {stop!r}", got, note="stop_sequences had no effect")
    return dev.check(passed(f"stopped on {stop!r}: {got!r}"))


@case("messages.system", "system reaches the model (other input tokens than without)")
async def system(ctx) -> Check:
    plain, problem = _answer(await ctx.probe("messages.create"))
    if problem:
        return problem
    doc, problem = _answer(await post(ctx, request(ctx, system="Answer in one short sentence."), sse=False))
    if problem:
        return problem
    (a, _), (b, _) = _usage(plain), _usage(doc)
    # not "more": a template with a default system prompt (SmolLM2's ChatML) replaces it by this one
    if a is not None and b is not None and b == a:
        return failed("ignored-field", f"input_tokens != {a} (system)", b, note="system had no effect")
    return passed()


@case("messages.count-tokens", "POST /v1/messages/count_tokens counts what messages.create's usage says")
async def count_tokens(ctx) -> Check:
    plain, problem = _answer(await ctx.probe("messages.create"))
    if problem:
        return problem
    body = {"model": ctx.model, "messages": [{"role": "user", "content": PROMPT}]}
    t = await post(ctx, body, path=f"{MESSAGES}/count_tokens", sse=False)
    if (absent := absent_problem(t, f"POST {MESSAGES}/count_tokens")) or (bad := status_problem(t)):
        return absent or bad  # type: ignore[return-value]
    doc, _ = t.body_json()
    got = doc.get("input_tokens") if isinstance(doc, dict) else None
    want, _ = _usage(plain)
    return passed(f"input_tokens {got}") if got == want else failed("count-differs", want, got)


def envelope_problems(doc: Any) -> list[str]:
    """Every way `doc` differs from Anthropic's error envelope {"type": "error", "error": {"type", "message"}}."""
    if not isinstance(doc, dict):
        return ["no-error-envelope"]
    tags = []
    if doc.get("type") != "error":
        tags.append("no-type-error")
    e = doc.get("error")
    if not isinstance(e, dict):
        return [*tags, "no-error-object"]
    if not isinstance(e.get("type"), str) or not e.get("type"):
        tags.append("no-error-type")
    if not isinstance(e.get("message"), str) or not e.get("message"):
        tags.append("no-error-message")
    return tags


@case("messages.errors.envelope", "an unknown model gives a 4xx in Anthropic's error envelope")
async def envelope(ctx) -> Check:
    return judge_envelope(await post(ctx, request(ctx, model="no-such-model-xyz"), sse=False))


def judge_envelope(t: Trace) -> Check:
    """The answer to an unknown model."""
    if (absent := absent_problem(t, f"POST {MESSAGES}")) is not None:
        return absent
    if t.status is None or not 400 <= t.status < 500:
        return failed("accepted-unknown-model" if t.status == 200 else f"status-{t.status}", "a 4xx", t.status)
    doc, _ = t.body_json()
    tags = envelope_problems(doc)
    if tags:
        return failed(tags, '{"type": "error", "error": {"type", "message"}}',
                      t.body[:200].decode("utf-8", "replace"))  # fmt: skip
    return passed(f"HTTP {t.status} {doc['error']['type']}")


@case("messages.auth.x-api-key", "the key in x-api-key is accepted, and a request without it is refused with 401")
async def x_api_key(ctx) -> Check:
    if not ctx.api_key:
        return skipped("the server is checked without an API key")
    served = await ctx.probe("messages.create")  # with the key as a bearer token too: is the route there at all
    if (absent := absent_problem(served, f"POST {MESSAGES}")) is not None:
        return absent
    ok = await post(ctx, request(ctx), bearer=False, sse=False)  # the key in x-api-key alone
    dev = Deviations()
    if ok.status != 200:
        dev.add("x-api-key-refused", 200, ok.status, note=ok.body[:160].decode("utf-8", "replace"))
    client = ctx.new_client(None)
    try:
        none = await ctx.record(client, "POST", MESSAGES, json=request(ctx), sse=False,
                                headers={"anthropic-version": ANTHROPIC_VERSION})  # fmt: skip
    finally:
        await client.aclose()
    if none.status != 401:
        dev.add("no-key-accepted" if none.status == 200 else f"no-key-status-{none.status}", 401, none.status)
    return dev.check()


# -- the anthropic SDK ---------------------------------------------------------------------------------------------


@case("sdk.anthropic.messages", "the anthropic SDK's messages.create and messages.stream read the server (a key as "
      "its auth_token); the stream's final message has the streamed text")  # fmt: skip
async def sdk_messages(ctx) -> Check:
    try:
        import anthropic
    except ImportError:
        return skipped("anthropic SDK not installed")
    probe_t = await ctx.probe("messages.create")
    if (absent := absent_problem(probe_t, f"POST {MESSAGES}")) is not None:
        return absent
    if (big := too_large_for_sdk(probe_t, await ctx.probe("messages.stream"))) is not None:
        return big
    from harness.client.bridge import httpx2_client

    # the SDK wants an httpx2 client: one that sends through this suite's own (recorded, bounded) client
    # with a key, as the SDK's auth_token (a bearer token, Claude Code's ANTHROPIC_AUTH_TOKEN): this SDK takes one
    # credential, and vLLM's key check reads only `Authorization`; x-api-key alone is messages.auth.x-api-key's
    credential = {"auth_token": ctx.api_key} if ctx.api_key else {"api_key": "none"}
    client = anthropic.AsyncAnthropic(base_url=ctx.base_url, **credential,
                                      max_retries=0, http_client=httpx2_client(ctx.new_client(None)))  # fmt: skip
    dev = Deviations()
    msgs: Any = [{"role": "user", "content": PROMPT}]
    try:
        # this SDK (2.15.0) has no `temperature` argument any more: sent as an extra body field, as a client would
        greedy = {"temperature": 0}
        created = await client.messages.create(model=ctx.model, max_tokens=MAX_TOKENS, messages=msgs,
                                               extra_body=greedy)  # fmt: skip
        deltas: list[str] = []
        async with client.messages.stream(model=ctx.model, max_tokens=MAX_TOKENS, messages=msgs,
                                          extra_body=greedy) as stream:  # fmt: skip
            async for text in stream.text_stream:
                deltas.append(text)
            final = await stream.get_final_message()
    except anthropic.AnthropicError as exc:
        return failed("sdk-error", "no SDK exception", f"{type(exc).__name__}: {str(exc)[:300]}")
    except Exception as exc:  # the SDK's own parsing breaks on what the server sent: a client cannot read it
        return failed("sdk-parse-error", "the SDK parses the stream", f"{type(exc).__name__}: {str(exc)[:300]}")
    finally:
        await client.close()
    final_text = "".join(b.text for b in final.content if b.type == "text")
    created_text = "".join(b.text for b in created.content if b.type == "text")
    if final_text != "".join(deltas):
        dev.add("sdk-final-not-deltas", "".join(deltas), final_text)
    if created_text != final_text:
        dev.add("sdk-stream-differs", created_text, final_text)
    if final.stop_reason is None:
        dev.add("sdk-no-stop-reason", "a stop_reason on the final message", None)
    return dev.check(passed(f"text {final_text!r}, stop_reason {final.stop_reason}"))


# -- tool use: only with a scripted model --------------------------------------------------------------------------

WEATHER_TOOL = {"name": "get_weather", "description": "The weather in a city.",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}  # fmt: skip


def judge_tool_use(msg: Any) -> Check:
    blocks = [b for b in (msg.get("content") or []) if isinstance(b, dict)] if isinstance(msg, dict) else []
    uses = [b for b in blocks if b.get("type") == "tool_use"]
    if not uses:
        return failed("no-tool-use", "a tool_use block", [b.get("type") for b in blocks])
    dev = Deviations()
    if msg.get("stop_reason") != "tool_use":
        dev.add("not-tool-use-stop", "stop_reason tool_use", msg.get("stop_reason"))
    for b in uses:
        if not isinstance(b.get("id"), str) or not b.get("id"):
            dev.add("no-tool-use-id", "an id", b.get("id"))
        if not isinstance(b.get("input"), dict):
            dev.add("input-not-object", "input as an object", b.get("input"))
    return dev.check()


@case("messages.tools.tool-use", "with tools offered, a scripted model's tool call is a tool_use block, and a "
      "tool_result turn is accepted", needs=(SCRIPTED_MODEL,))  # fmt: skip
async def tool_use(ctx) -> Check:
    first = await post(ctx, request(ctx, tools=[WEATHER_TOOL], max_tokens=64), sse=False)
    chk = judge_tool_use_turns(first)
    if chk.status.value != "pass":
        return chk
    doc, _ = first.body_json()
    use = next(b for b in doc["content"] if isinstance(b, dict) and b.get("type") == "tool_use")
    turn = [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": doc["content"]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"],
                                          "content": json.dumps({"weather": "sunny"})}]}]  # fmt: skip
    return judge_tool_use_turns(first, await post(ctx, request(ctx, tools=[WEATHER_TOOL], messages=turn), sse=False))


def judge_tool_use_turns(first: Trace, second: Trace | None = None) -> Check:
    """`first`: the answer with the tool offered (a tool_use turn); `second`: the answer to its tool_result turn,
    judged once the first passes (None: not sent yet, the first's verdict stands)."""
    doc, problem = _answer(first)
    if problem:
        return problem
    chk = judge_tool_use(doc)
    if chk.status.value != "pass" or second is None:
        return chk
    nxt, problem = _answer(second)
    return problem or judge_message(nxt, MAX_TOKENS)
