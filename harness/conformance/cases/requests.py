"""Request features: max_tokens, stop strings, stop token ids, logprobs, forced tool calls, the non-stream shape,
and what the OpenAI Python SDK shows its users.

Each case sends its request and hands what came back to a pure `judge_*` function (a Trace, a StreamView or the SDK's
chunks as dicts in, a Check out), so recorded answers are judged exactly as live ones."""

from __future__ import annotations

from harness.client import Trace
from harness.client.sse import decode_json
from harness.conformance.context import probe
from harness.conformance.model import (
    Check,
    Deviations,
    Level,
    failed,
    finish_reason_tag,
    info,
    passed,
    skipped,
    status_problem,
)
from harness.conformance.registry import case, shape_cases
from harness.conformance.shape import TOOL_CHECKS, is_bare_finish, per_index, streamed_text, tool_arguments, tool_calls
from harness.conformance.view import StreamView, choices, from_trace

CHAT = "/v1/chat/completions"


def _first_choice(t) -> tuple[dict | None, Check | None]:
    doc, err = t.body_json()
    ch = choices(doc)
    if err or not ch:
        return None, failed("non-stream-shape", "JSON with choices", err or doc)
    return ch[0], None


def _usage_adds_up(u: object) -> bool:
    if not isinstance(u, dict):
        return False
    p, c, t = u.get("prompt_tokens", 0), u.get("completion_tokens", 0), u.get("total_tokens")
    return all(type(x) is int for x in (p, c, t)) and p + c == t


def judge_nonstream_shape(t: Trace) -> Check:
    """`id: ""` is `empty-id`, no id at all `missing-id`."""
    if (p := status_problem(t)) is not None:
        return p
    doc, _ = t.body_json()
    c0, p = _first_choice(t)
    if p or c0 is None:
        return p or failed("non-stream-shape", "JSON with choices", doc)
    dev = Deviations()
    if doc.get("object") != "chat.completion":
        dev.add("wrong-object", "chat.completion", doc.get("object"))
    msg = c0.get("message") if isinstance(c0.get("message"), dict) else {}
    if msg.get("role") != "assistant" or not isinstance(msg.get("content"), str):
        dev.add("message-shape", "message {role: assistant, content: str}", msg)
    if not _usage_adds_up(doc.get("usage")):
        dev.add("usage-shape", "usage with total = prompt + completion", doc.get("usage"))
    if doc.get("id") == "":
        dev.add("empty-id", "a non-empty id", "")
    elif not doc.get("id"):
        dev.add("missing-id", "a non-empty id", doc.get("id"))
    return dev.check()


@case("chat.nonstream.shape", "a non-stream chat response has object chat.completion, an assistant message and usage")
async def nonstream_shape(ctx) -> Check:
    return judge_nonstream_shape(await ctx.post(CHAT, ctx.chat(max_tokens=5)))


def judge_length(t: Trace, max_tokens: int) -> Check:
    if (p := status_problem(t)) is not None:
        return p
    c0, p = _first_choice(t)
    if p or c0 is None:
        return p or failed("non-stream-shape", "JSON with choices", None)
    dev = Deviations()
    if c0.get("finish_reason") != "length":
        dev.add(finish_reason_tag(c0.get("finish_reason")), "length", c0.get("finish_reason"))
    usage = t.body_json()[0].get("usage")
    ct = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if ct != max_tokens:
        dev.add("completion-tokens", max_tokens, ct)
    return dev.check()


@case("chat.length", "max_tokens ends generation with finish_reason length and completion_tokens = max_tokens")
async def length(ctx) -> Check:
    return judge_length(await ctx.post(CHAT, ctx.chat(max_tokens=5, **ctx.extra("long_request"))), 5)


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


def judge_stop_finish(view: StreamView, stop: str) -> Check:
    """Exactly one finish_reason, `stop`. Each other value is its `finish_reason_tag` (TGI: stop_sequence)."""
    frs = [c.get("finish_reason") for _, o in view.objects() for c in choices(o) if c.get("finish_reason")]
    dev = Deviations()
    if not frs:
        dev.add("no-finish-reason", ["stop"], frs)
    if len(frs) > 1:
        dev.add("multiple-finish-reasons", ["stop"], frs)
    for fr in frs:
        if fr != "stop":
            dev.add(finish_reason_tag(fr), ["stop"], frs)
    return dev.check(note=f"stop={stop!r}")


@case("chat.stop.string-finish-reason", "a stop string ends generation with finish_reason stop")
async def stop_finish(ctx) -> Check:
    t, plan, p = await _stop_stream(ctx)
    if p:
        return p
    if (p := status_problem(t)) is not None:
        return p
    return judge_stop_finish(from_trace(t), plan[0])


def _content_pieces(view: StreamView) -> list[str]:
    """The non-empty content pieces of choice 0, in order."""
    pieces = []
    for _, _, c in per_index(view).get(0, []):
        d = c.get("delta") if isinstance(c.get("delta"), dict) else {}
        v = d.get("content") if "delta" in c else c.get("text")
        if isinstance(v, str) and v:
            pieces.append(v)
    return pieces


def judge_stop_cut(view: StreamView, stop: str, at: int, full: str) -> Check:
    """The output ends right before the stop string (`full` is the greedy text, whose first `stop` is at `at`).
    `stop-string-kept` is TGI's shape: the output runs through the stop string and ends in the chunk that completed
    it; output that runs on past that chunk is `stop-string-ignored`; anything else `stop-text-differs`."""
    got = streamed_text(view)
    if got == full[:at]:
        return passed(f"cut before {stop!r} at char {at}")
    through = at + len(stop)
    if full.startswith(got) and len(got) >= through:
        pieces = _content_pieces(view)
        before_last = len(got) - len(pieces[-1]) if pieces else 0
        if before_last < through:
            return failed("stop-string-kept", full[:at], got, note="output runs through the stop string")
        return failed("stop-string-ignored", full[:at], got, note="output runs on past the chunk with the stop string")
    return failed("stop-text-differs", full[:at], got)


@case("chat.stop.string-cut", "the stop string is not included in the output", Level.SHOULD)
async def stop_cut(ctx) -> Check:
    t, plan, p = await _stop_stream(ctx)
    if p:
        return p
    if (p := status_problem(t)) is not None:
        return p
    stop, at, full = plan
    return judge_stop_cut(from_trace(t), stop, at, full)


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
    dev = Deviations()
    if c1.get("finish_reason") != "stop":
        dev.add(finish_reason_tag(c1.get("finish_reason")), "stop", c1.get("finish_reason"), note=f"stop id {ids[k]}")
    if got != ids[: k + 1]:
        dev.add("stopped-elsewhere", ids[: k + 1], got)
    return dev.check(passed(f"stopped at token {ids[k]} (position {k}), stop_reason={c1.get('stop_reason')!r}"))


@case(
    "chat.logprobs.shape",
    "logprobs=true, top_logprobs=2: each content chunk has logprobs.content entries with 2 alternatives",
)
async def logprobs(ctx) -> Check:
    t = await ctx.post(CHAT, ctx.chat(max_tokens=6, stream=True, logprobs=True, top_logprobs=TOP_LOGPROBS))
    if (p := status_problem(t)) is not None:
        return p
    return judge_logprobs(from_trace(t))


TOP_LOGPROBS = 2


def _logprob_entries(view: StreamView, dev: Deviations) -> list[tuple[int, dict]]:
    """(chunk n, entry) for every well-formed entry after each choice's first delta; the rest go to `dev`."""
    out = []
    for seq in per_index(view).values():
        for n, _, c in seq[1:]:
            lp = c.get("logprobs")
            if is_bare_finish(c):
                continue  # a finish chunk without output has no token to give logprobs for
            if not isinstance(lp, dict) or not isinstance(lp.get("content"), list):
                dev.add("no-logprobs", "logprobs.content list", lp, n)
                continue
            for e in lp["content"]:
                ok = (
                    isinstance(e, dict)
                    and isinstance(e.get("token"), str)
                    and isinstance(e.get("logprob"), (int, float))
                )
                if ok:
                    out.append((n, e))
                else:
                    dev.add("entry-shape", "{token, logprob, bytes, top_logprobs}", e, n)
    return out


def judge_logprobs(view: StreamView) -> Check:
    """Every entry has bytes and TOP_LOGPROBS alternatives. No entry with bytes is `no-bytes` (TGI); bytes on some
    entries but not all is `bytes-missing-on-some`."""
    dev = Deviations()
    entries = _logprob_entries(view, dev)
    lacking = sum(1 for _, e in entries if "bytes" not in e)
    bytes_tag = "no-bytes" if lacking == len(entries) else "bytes-missing-on-some"
    for n, e in entries:
        if "bytes" not in e:
            dev.add(bytes_tag, "bytes field on each entry", sorted(e), n)
        if not isinstance(e.get("top_logprobs"), list) or len(e["top_logprobs"]) != TOP_LOGPROBS:
            dev.add("top-logprobs-count", TOP_LOGPROBS, e.get("top_logprobs"), n)
    if not entries and not dev:
        return failed("no-logprobs", "at least one entry", 0)
    return dev.check(passed(f"{len(entries)} entries"))


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


def judge_tools_present(t: Trace) -> Check:
    # The shape checks below skip a stream without tool calls (right for recorded streams); a forced call must have them.
    if (p := status_problem(t)) is not None:
        return p
    view = from_trace(t)
    dev = Deviations()
    for n, obj in view.objects():
        if "error" in obj:
            dev.add("error-event", "tool-call fragments", obj["error"], n)
    calls = tool_calls(view)
    if not calls:
        dev.add("no-tool-calls", "at least one tool-call fragment", streamed_text(view)[:120] or "(nothing)")
    return dev.check(passed(f"{len(calls)} fragments"))


@case("chat.tools.present", "a named tool_choice streams tool-call fragments (not plain text, not an error event)")
async def tools_present(ctx) -> Check:
    if getattr(ctx, "scripted", False):  # its template and parser make this another request: tools.auto.named
        return skipped(
            "a forced tool_choice on the reference model's template; tools.auto.named judges the scripted one"
        )
    return judge_tools_present(await ctx.probe("chat.tools"))


shape_cases("chat.tools", "chat.tools", TOOL_CHECKS, "chat")


def judge_arguments_schema(t: Trace) -> Check:
    if (p := status_problem(t)) is not None:
        return p
    text = tool_arguments(from_trace(t))
    val, err = decode_json(text)  # bounded in depth, as every JSON a judge parses
    if err is not None:
        return failed("arguments-not-json", "JSON", text[:200], note=err)
    if val not in TOOL_SCHEMA["enum"]:
        return failed("schema-mismatch", TOOL_SCHEMA, val)
    return passed(repr(val))


@case("chat.tools.arguments-schema", "the forced tool call's arguments match the tool's JSON schema")
async def tools_schema(ctx) -> Check:
    if getattr(ctx, "scripted", False):
        return skipped(
            "a forced tool_choice on the reference model's template; tools.auto.named judges the scripted one"
        )
    return judge_arguments_schema(await ctx.probe("chat.tools"))


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
    return judge_sdk_chunks([c.model_dump() for c in seen])


def _shown(d: object) -> object:
    return {k: v for k, v in d.items() if v is not None} if isinstance(d, dict) else d


def judge_sdk_chunks(chunks: list[dict]) -> Check:
    """What the SDK parsed (its chunks as dicts, `model_dump()`): a role-only first delta (role assistant with content
    is `no-role-only-chunk`, TGI), and a last chunk with choices [] and usage."""
    if not chunks:
        return failed("sdk-no-chunks", ">= 1 chunk", 0)
    dev = Deviations()
    want = "first delta role-only (role assistant, content '')"
    first_choices = choices(chunks[0])
    d = first_choices[0].get("delta") if first_choices else None
    if not isinstance(d, dict):
        dev.add("no-first-delta", want, chunks[0].get("choices"), 0)
    elif d.get("role") is None:
        dev.add("missing-role", want, _shown(d), 0)
    elif d.get("role") != "assistant":
        dev.add("wrong-role", want, _shown(d), 0)
    else:
        if isinstance(d.get("content"), str) and d["content"] != "":
            dev.add("no-role-only-chunk", want, _shown(d), 0)
        if d.get("tool_calls"):
            dev.add("tool-call-on-role-chunk", want, _shown(d), 0)
    last, n = chunks[-1], len(chunks) - 1
    usage = last.get("usage")
    if not isinstance(usage, dict):
        dev.add("no-usage-chunk", "last chunk choices [] with usage", _shown(last), n)
    elif last.get("choices"):
        dev.add("usage-with-choices", "last chunk choices [] with usage", _shown(last), n)
    total = usage.get("total_tokens") if isinstance(usage, dict) else None
    return dev.check(passed(f"{len(chunks)} SDK chunks; usage={total}"))


_ = info
