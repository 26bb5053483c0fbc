"""The Responses API (`POST /v1/responses`): the response resource, the stream's event grammar, its request fields,
its store, and the OpenAI SDK's Responses helpers.

The resource is validated against the vendored schema of the OpenAI SDK's own `Response` type (harness.conformance.
apischema; one `schema:<path>:<keyword>` tag per break). The stream is judged on its named events:

    response.created -> response.in_progress -> (response.output_item.added -> [response.content_part.added ->
    response.output_text.delta... -> response.output_text.done -> response.content_part.done] ->
    response.output_item.done)... -> response.completed | response.incomplete | response.failed

with `sequence_number` strictly increasing, `item_id`/`output_index` naming the item they belong to, the deltas adding
up to the done text, the part and the final response, and nothing after the terminal event. An `error` event fails
every stream case with `error-event` (chat's chat.stream.no-error-event tag). A release that does not
serve the endpoint gets `absent` on every case (404/405 at the route), which the matrix shows as data.
Function tools (`responses.tools.*`) need a scripted model and are selected only for one (`Case.needs`).
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

from harness.client import Trace
from harness.client.sse import decode_json
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
    "RESPONSES",
    "response_text",
    "judge_order",
    "judge_sequence",
    "judge_ids",
    "judge_deltas",
    "judge_ends",
    "judge_stream_matches",
    "judge_function_call",
]

RESPONSES = "/v1/responses"
PROMPT = "Say hello."
MAX_OUTPUT = 12
TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def request(ctx, **kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": ctx.model, "input": PROMPT, "max_output_tokens": MAX_OUTPUT, "temperature": 0}
    body.update(kw)
    return body


@probe("responses.create")
async def _create(ctx) -> Trace:
    return await ctx.post(RESPONSES, request(ctx), sse=False)


@probe("responses.stream")
async def _stream(ctx) -> Trace:
    return await ctx.post(RESPONSES, request(ctx, stream=True), sse=True)


def response_text(resp: Any) -> str | None:
    """The concatenated `output_text` parts of the message items (None when the resource has no output list)."""
    if not isinstance(resp, dict) or not isinstance(resp.get("output"), list):
        return None
    parts = []
    for item in resp["output"]:
        if isinstance(item, dict) and item.get("type") == "message" and isinstance(item.get("content"), list):
            parts += [p["text"] for p in item["content"]
                      if isinstance(p, dict) and p.get("type") == "output_text" and isinstance(p.get("text"), str)]  # fmt: skip
    return "".join(parts)


def _usage(resp: Any) -> tuple[int | None, int | None]:
    u = resp.get("usage") if isinstance(resp, dict) else None
    if not isinstance(u, dict):
        return None, None
    ints = [u.get(k) if type(u.get(k)) is int else None for k in ("input_tokens", "output_tokens")]
    return ints[0], ints[1]


def _answer(trace: Trace) -> tuple[Any, Check | None]:
    """The JSON resource of a 200, or the verdict that stands instead (absent, a status, a body that is not JSON)."""
    problem = absent_problem(trace, f"POST {RESPONSES}") or status_problem(trace)
    if problem is not None:
        return None, problem
    doc, err = trace.body_json()
    if err or not isinstance(doc, dict):
        return None, failed("non-json-body", "a JSON response object", trace.body[:200].decode("utf-8", "replace"))
    return doc, None


def judge_schema(doc: Any, which: str = "response") -> Check:
    dev = Deviations()
    for tag, message in schema_errors("responses", which, doc):
        dev.add(tag, f"valid per {schema_source('responses')}", message)
    return dev.check()


def judge_resource(resp: dict[str, Any], max_output: int) -> Check:
    dev = Deviations()
    if resp.get("object") != "response":
        dev.add("wrong-object", "object: response", resp.get("object"))
    if not isinstance(resp.get("id"), str) or not resp.get("id"):
        dev.add("no-id", "a non-empty id", resp.get("id"))
    if resp.get("status") not in ("completed", "incomplete"):
        dev.add("bad-status", "status completed or incomplete", resp.get("status"))
    text = response_text(resp)
    if not text:
        dev.add("no-output-text", "a message item with output_text", resp.get("output"))
    if "output_text" in resp and resp["output_text"] != text:  # the SDK's convenience field, when a server sends it
        dev.add("output-text-mismatch", text, resp["output_text"])
    inp, out = _usage(resp)
    if inp is None or out is None:
        dev.add("no-usage", "usage.input_tokens and usage.output_tokens", resp.get("usage"))
    elif out > max_output or inp <= 0:
        dev.add("usage-implausible", f"0 < input_tokens, output_tokens <= {max_output}", {"input": inp, "output": out})
    return dev.check()


@case("responses.create.schema", "the response resource validates against the Responses schema (the OpenAI SDK's type)")
async def create_schema(ctx) -> Check:
    doc, problem = _answer(await ctx.probe("responses.create"))
    return problem or judge_schema(doc)


@case("responses.create.resource",
      "the response: object response, an id, status completed/incomplete, a message with output_text, usage tokens")  # fmt: skip
async def create_resource(ctx) -> Check:
    doc, problem = _answer(await ctx.probe("responses.create"))
    return problem or judge_resource(doc, MAX_OUTPUT)


# -- the stream ----------------------------------------------------------------------------------------------------


def _stream_answer(trace: Trace) -> tuple[TypedStream | None, Check | None]:
    problem = absent_problem(trace, f"POST {RESPONSES} (stream)") or status_problem(trace)
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


def _key(v: Any) -> Any:
    """`v` as a dict key: a list or an object a server sent in place of an id or an index, by its repr."""
    return repr(v) if isinstance(v, (list, dict)) else v


def judge_order(s: TypedStream) -> Check:
    """The grammar of event kinds: created, in_progress, then items (each added .. done, a message's parts inside it,
    each part's text deltas then its text done), then the terminal event. Events this grammar does not name
    (reasoning, tool calls) are allowed inside an item. Which item or part an event names is `judge_ids`'s."""
    dev = Deviations()
    add_error_events(s, dev)
    evs = [e for e in s.events if not is_error_event(e)]
    names = [e.type for e in evs]
    if names[:1] != ["response.created"]:
        dev.add("no-created-first", "response.created first", names[:1], 0)
    if "response.in_progress" in names and names.index("response.in_progress") != 1:
        dev.add("in-progress-not-second", "response.in_progress second", names.index("response.in_progress"))
    in_item = in_part = text_done = False
    for e in evs[1:]:
        t = e.type
        if t in TERMINAL:
            if in_item or in_part:
                dev.add("terminal-inside-item", "every item done before the terminal event", t, e.n)
            break
        if t == "response.in_progress":
            continue
        if t == "response.output_item.added":
            if in_item:
                dev.add("item-not-done", "response.output_item.done of the open item first", t, e.n)
            in_item = True
        elif t == "response.output_item.done":
            if not in_item or in_part:
                dev.add("event-out-of-order", "response.output_item.done after its parts, of an open item", t, e.n)
            in_item = False
        elif t == "response.content_part.added":
            if not in_item or in_part:
                dev.add("event-out-of-order", "response.content_part.added inside an item, outside a part", t, e.n)
            in_part, text_done = True, False
        elif t in ("response.output_text.delta", "response.output_text.done"):
            if not in_part or text_done:
                dev.add("event-out-of-order", f"{t} inside an open content part, before its text is done", t, e.n)
            text_done = text_done or t.endswith(".done")
        elif t == "response.content_part.done":
            if not in_part:
                dev.add("event-out-of-order", "response.content_part.done of an open part", t, e.n)
            in_part = False
        elif t.startswith("response.") and not in_item:
            dev.add("event-out-of-order", "an item's event inside an item", t, e.n)
    return dev.check()


def judge_sequence(s: TypedStream) -> Check:
    dev = Deviations()
    add_error_events(s, dev)
    last: int | None = None
    for e in s.events:
        seq = e.obj.get("sequence_number") if isinstance(e.obj, dict) else None
        if type(seq) is not int:
            dev.add("no-sequence-number", "an integer sequence_number", seq, e.n)
            continue
        if last is not None and seq <= last:
            dev.add("sequence-not-increasing", f"> {last}", seq, e.n)
        last = seq
    return dev.check()


def judge_ids(s: TypedStream) -> Check:
    """item_id and output_index of every part/text event name the item added at that output_index."""
    dev = Deviations()
    add_error_events(s, dev)
    items: dict[Any, Any] = {}  # output_index -> the item's id
    part: Any = None  # content_index of the open content part
    for e in s.events:
        o = e.obj if isinstance(e.obj, dict) else {}
        oi = o.get("output_index")
        if e.type.startswith(("response.output_item.", "response.content_part.", "response.output_text.")) and (
            type(oi) is not int
        ):
            dev.add("no-output-index", "an integer output_index", oi, e.n)
            # go by position: a new item is the next one, any other event belongs to the last one added
            oi = len(items) if e.type == "response.output_item.added" else max(items, default=0)
        if e.type == "response.output_item.added":
            item = _obj(o.get("item"))
            if oi in items:
                dev.add("output-index-reused", "a new output_index per item", oi, e.n)
            elif oi != len(items):
                dev.add("output-index-gap", len(items), oi, e.n)
            items[oi] = item.get("id")
        elif e.type == "response.output_item.done":
            item = _obj(o.get("item"))
            if oi not in items:
                dev.add("output-index-unknown", f"one of {sorted(items)}", oi, e.n)
            elif item.get("id") != items[oi]:
                dev.add("item-id-changed", items[oi], item.get("id"), e.n)
        elif "item_id" in o or e.type.startswith(("response.content_part.", "response.output_text.")):
            if type(oi) is not int or oi not in items:  # (another event's output_index may be a list)
                dev.add("output-index-unknown", f"one of {sorted(items)}", oi, e.n)
            elif o.get("item_id") != items[oi]:
                dev.add("item-id-mismatch", items[oi], o.get("item_id"), e.n)
            ci = o.get("content_index")
            if e.type == "response.content_part.added":
                part = ci
            elif e.type.startswith(("response.output_text.", "response.content_part.")) and ci != part:
                # every event of a part names the part's content_index (not a counter of its deltas)
                dev.add("content-index-mismatch", part, ci, e.n)
    return dev.check()


def _terminal(s: TypedStream) -> Any:
    for e in s.events:
        if e.type in TERMINAL:
            return e.obj.get("response") if isinstance(e.obj, dict) else None
    return None


def streamed_text(s: TypedStream) -> str:
    return "".join(str(e.obj.get("delta", "")) for e in s.events
                   if e.type == "response.output_text.delta" and isinstance(e.obj, dict))  # fmt: skip


def judge_deltas(s: TypedStream) -> Check:
    """The deltas of each part add up to its output_text.done text, its content_part.done part and the terminal
    response's text."""
    dev = Deviations()
    add_error_events(s, dev)
    acc: dict[tuple[Any, Any], str] = {}
    part: Any = None  # a part's text events belong to it whatever content_index they name (that is judge_ids's)
    for e in s.events:
        o = e.obj if isinstance(e.obj, dict) else {}
        if e.type == "response.content_part.added":
            part = o.get("content_index")
        item_id = o.get("item_id")
        if e.type.startswith(("response.output_text.", "response.content_part.")) and not isinstance(item_id, str):
            dev.add("item-id-not-text", "a string item_id", item_id, e.n)
        key = (_key(item_id), _key(part))  # a list or an object from the server is a key too, never a crash
        if e.type == "response.output_text.delta":
            if not isinstance(o.get("delta"), str):
                dev.add("delta-not-text", "a string delta", o.get("delta"), e.n)
                continue
            acc[key] = acc.get(key, "") + o["delta"]
        elif e.type == "response.output_text.done" and o.get("text") != acc.get(key, ""):
            dev.add("deltas-not-done-text", acc.get(key, ""), o.get("text"), e.n)
        elif e.type == "response.content_part.done":
            done = _obj(o.get("part"))
            if done.get("type") == "output_text" and done.get("text") != acc.get(key, ""):
                dev.add("deltas-not-part-text", acc.get(key, ""), done.get("text"), e.n)
    final = _terminal(s)
    if final is not None and response_text(final) != "".join(acc.values()):
        dev.add("deltas-not-final-text", "".join(acc.values()), response_text(final))
    return dev.check()


def judge_ends(s: TypedStream) -> Check:
    """One terminal event, nothing after it, and the server closing the stream (no bound of the harness hit)."""
    dev = Deviations()
    # how the stream ended first: a stream the harness had to cut is the primary finding, not what it lacked
    ended = end_problem(s)
    if ended is not None:
        dev.add(ended[0], "the server closes the stream after its last event", s.ended, note=ended[1])
    add_error_events(s, dev)
    at = next((i for i, e in enumerate(s.events) if e.type in TERMINAL), None)
    if at is None:
        dev.add("no-terminal-event", f"one of {', '.join(TERMINAL)}", s.events[-1].type if s.events else None)
    else:
        after = s.events[at + 1 :]
        if after:
            dev.add("event-after-completed", "nothing after the terminal event", after[0].type, after[0].n)
    if s.done_markers:
        dev.add("done-sentinel", "no [DONE] (the Responses stream ends with its terminal event)", "[DONE]",
                s.done_markers[0])  # fmt: skip
    return dev.check()


def judge_event_names(s: TypedStream) -> Check:
    """Each event's `event:` line names its data's type, and each event validates against the stream-event schema."""
    dev = Deviations()
    add_error_events(s, dev)
    budget = NodeBudget(MAX_STREAM_NODES)
    for e in s.events:
        if e.obj is None:
            dev.add("event-not-json", "JSON data", e.error, e.n)
            continue
        if e.name != e.type:
            dev.add("event-name-mismatch", e.type, e.name, e.n)
        for tag, message in schema_errors("responses", "stream_event", e.obj, budget):
            dev.add(tag, f"{e.type or 'event'} valid per {schema_source('responses')}", message, e.n)
    return dev.check()


def _stream_case(name: str, requirement: str, judge: Any) -> None:
    @case(f"responses.stream.{name}", requirement)
    async def run(ctx) -> Check:
        trace = await ctx.probe("responses.stream")
        s, problem = _stream_answer(trace)
        chk = problem or judge(s)
        if trace.ended in ("timeout", "limit"):  # say which bound cut the stream this verdict judges
            chk.note = "; ".join(x for x in (chk.note, f"judged on the part of the stream read before the "
                                             f"harness's bound: {trace.error}") if x)  # fmt: skip
        return chk


_stream_case("order", "the stream's events come in the Responses grammar (created, in_progress, items, terminal)",
             judge_order)  # fmt: skip
_stream_case("sequence", "sequence_number is an integer on every event, strictly increasing", judge_sequence)
_stream_case("ids", "item_id and output_index of every event name the item they belong to", judge_ids)
_stream_case("deltas", "the text deltas add up to the done text, the part and the final response", judge_deltas)
_stream_case("ends", "the stream ends with one terminal event and nothing after it; the server closes it", judge_ends)
_stream_case("events", "each event's `event:` line is its type, and each event validates against the schema",
             judge_event_names)  # fmt: skip


@case("responses.stream.matches-create", "at temperature 0 the streamed text is the non-streamed text")
async def stream_matches(ctx) -> Check:
    stream = await ctx.probe("responses.stream")
    return judge_stream_matches(stream, await ctx.probe("responses.create"))


def judge_stream_matches(stream: Trace, create: Trace) -> Check:
    """`stream`: the streamed answer to the prompt; `create`: the non-streamed one."""
    s, problem = _stream_answer(stream)
    doc, problem2 = _answer(create)
    if problem or problem2:
        return problem or problem2  # type: ignore[return-value]
    assert s is not None
    dev = Deviations()
    add_error_events(s, dev)
    want, got = response_text(doc), streamed_text(s)
    if want != got:
        dev.add("stream-text-differs", want, got)
    return dev.check()


# -- request fields ------------------------------------------------------------------------------------------------


@case("responses.max-output-tokens", "max_output_tokens cuts the output: status incomplete, reason max_output_tokens")
async def max_output(ctx) -> Check:
    return judge_max_output(await ctx.post(RESPONSES, request(ctx, max_output_tokens=CUT), sse=False))


CUT = 3  # shorter than any scripted answer with its end token: an answer ending on the last allowed step is not a cut


def judge_max_output(trace: Trace) -> Check:
    """The answer to max_output_tokens CUT."""
    doc, problem = _answer(trace)
    if problem:
        return problem
    dev = Deviations()
    _, out = _usage(doc)
    if out is not None and out > CUT:
        dev.add("over-max-output-tokens", f"<= {CUT} output tokens", out)
    if out == CUT:  # the cut happened: the resource must say so
        if doc.get("status") != "incomplete":
            dev.add("not-incomplete", "status incomplete", doc.get("status"))
        details = doc.get("incomplete_details")
        if not isinstance(details, dict) or details.get("reason") != "max_output_tokens":
            dev.add("no-incomplete-reason", {"reason": "max_output_tokens"}, details)
    return dev.check(passed(f"output_tokens {out}"))


@case("responses.instructions", "instructions reach the model (other input tokens) and are echoed on the resource")
async def instructions(ctx) -> Check:
    plain, problem = _answer(await ctx.probe("responses.create"))
    if problem:
        return problem
    t = await ctx.post(RESPONSES, request(ctx, instructions=INSTRUCTIONS), sse=False)
    return judge_instructions(plain, t)


INSTRUCTIONS = "Answer in one short sentence."


def judge_instructions(plain: Any, trace: Trace) -> Check:
    """`trace`: the answer with INSTRUCTIONS; `plain`: the resource without them."""
    text = INSTRUCTIONS
    doc, problem = _answer(trace)
    if problem:
        return problem
    dev = Deviations()
    (a, _), (b, _) = _usage(plain), _usage(doc)
    # not "more": a template with a default system prompt (SmolLM2's ChatML) replaces it by the instructions
    if a is not None and b is not None and b == a:
        dev.add("ignored-field", f"input_tokens != {a} (instructions)", b, note="instructions had no effect")
    if doc.get("instructions") != text:
        dev.add("instructions-not-echoed", text, doc.get("instructions"))
    return dev.check()


@case("responses.multi-turn", "an input list of user/assistant turns is read whole (more input tokens than one turn)")
async def multi_turn(ctx) -> Check:
    plain, problem = _answer(await ctx.probe("responses.create"))
    if problem:
        return problem
    turns = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello, how can I help?"},
             {"role": "user", "content": PROMPT}]  # fmt: skip
    return judge_multi_turn(plain, await ctx.post(RESPONSES, request(ctx, input=turns), sse=False))


def judge_multi_turn(plain: Any, trace: Trace) -> Check:
    doc, problem = _answer(trace)
    if problem:
        return problem
    (a, _), (b, _) = _usage(plain), _usage(doc)
    if a is not None and b is not None and b <= a:
        return failed("turns-ignored", f"input_tokens > {a}", b)
    return judge_resource(doc, MAX_OUTPUT)


def _refused(trace: Trace) -> Check | None:
    """A pass when the server refused the request clearly (4xx with an error object), else None."""
    from harness.conformance.cases.errors import error_shapes

    if trace.status is not None and 400 <= trace.status < 500:
        doc, _ = trace.body_json()
        tags = error_shapes(doc)
        if tags:
            return failed(tags, '{"error": {"message", "type"}}', trace.body[:200].decode("utf-8", "replace"))
        return passed(f"refused clearly: HTTP {trace.status} {_message(doc)}")
    return None


def _message(doc: Any) -> str:
    e = doc.get("error") if isinstance(doc, dict) else None
    return str(e.get("message", ""))[:120] if isinstance(e, dict) else ""


@probe("responses.stored")
async def _stored(ctx) -> Trace:
    return await ctx.post(RESPONSES, request(ctx, store=True), sse=False)


@case("responses.store", "store: true keeps the response (GET /v1/responses/{id} returns it), or is refused clearly")
async def store(ctx) -> Check:
    t = await ctx.probe("responses.stored")
    if (absent := absent_problem(t, f"POST {RESPONSES}")) or (refused := _refused(t)):
        return absent or refused  # type: ignore[return-value]
    doc, problem = _answer(t)
    if problem:
        return problem
    path, bad_id = _resource_path(doc)
    return bad_id or judge_stored(doc, await ctx.get(path, sse=False))


def _resource_path(doc: dict[str, Any]) -> tuple[str, Check | None]:
    """(GET /v1/responses/{id} of the response `doc`, None), or ("", the fail) for an id a client cannot put in that
    path as it is (none, a control character, a space, a `/`): the SDK builds the URL from the id it was given."""
    rid = doc.get("id")
    if not isinstance(rid, str) or not rid:
        return "", failed("no-id", "a non-empty id", rid)
    if not rid.isprintable() or any(c in rid for c in " /?#%"):
        return "", failed("id-not-url-safe", "an id that is one URL path segment as it is", rid)
    return f"{RESPONSES}/{quote(rid, safe='')}", None


def judge_stored(doc: dict[str, Any], got: Trace) -> Check:
    """`got`: GET /v1/responses/{id} of the response `doc` stored with store: true."""
    back, _ = got.body_json()
    if got.status == 200 and isinstance(back, dict) and back.get("id") == doc.get("id"):
        return passed()
    if got.status == 200:
        return failed(
            "stored-other-response", f"the response {doc.get('id')}", back.get("id") if isinstance(back, dict) else back
        )
    return failed("store-ignored", "GET /v1/responses/{id} -> 200 with the stored response",
                  f"HTTP {got.status} {got.body[:160].decode('utf-8', 'replace')}",
                  note="store: true was accepted (HTTP 200) but the response was not kept")  # fmt: skip


@case("responses.previous-response-id",
      "previous_response_id continues the stored conversation (more input tokens), or is refused clearly")  # fmt: skip
async def previous(ctx) -> Check:
    t = await ctx.probe("responses.stored")
    if absent_problem(t) is None and _refused(t) is not None:  # no store: a response the server never kept
        t = await ctx.probe("responses.create")
    first, problem = _answer(t)
    if problem:
        return problem
    nxt = await ctx.post(RESPONSES, request(ctx, previous_response_id=first.get("id"), store=True), sse=False)
    if (refused := _refused(nxt)) is not None:
        return refused
    doc, problem = _answer(nxt)
    if problem:
        return problem
    (a, _), (b, _) = _usage(first), _usage(doc)
    if a is not None and b is not None and b <= a:
        return failed("previous-ignored", f"input_tokens > {a} (the previous turn included)", b,
                      note="previous_response_id was accepted and had no effect")  # fmt: skip
    return passed()


@case("responses.background", "background: true answers queued/in_progress and the response completes or cancels, "
      "or is refused clearly", timeout_s=60)  # fmt: skip
async def background(ctx) -> Check:
    t = await ctx.post(RESPONSES, request(ctx, background=True, store=True, max_output_tokens=200), sse=False)
    started = judge_background_start(t)
    if started.status.value != "pass" or started.note:
        return started
    doc, _ = t.body_json()
    path, bad_id = _resource_path(doc)
    if bad_id is not None:
        return bad_id
    c = await ctx.post(f"{path}/cancel", {}, sse=False)
    for _ in range(50):  # bounded: 50 polls, 0.2 s apart
        g = await ctx.get(path, sse=False)
        now, _ = g.body_json()
        status = now.get("status") if isinstance(now, dict) else None
        if status in ("cancelled", "completed", "incomplete", "failed"):
            return passed(f"cancel -> HTTP {c.status}; status {status}")
        await asyncio.sleep(0.2)
    return failed("background-never-ends", "a final status within 10 s", status)


def judge_background_start(t: Trace) -> Check:
    """The answer to background: true: refused clearly (a pass, with a note), or queued/in_progress (a plain pass:
    the case goes on to cancel it), else what it was."""
    if (absent := absent_problem(t, f"POST {RESPONSES}")) or (refused := _refused(t)):
        return absent or refused  # type: ignore[return-value]
    doc, problem = _answer(t)
    if problem:
        return problem
    if doc.get("status") not in ("queued", "in_progress"):
        return failed("background-ignored", "status queued or in_progress", doc.get("status"),
                      note="background: true was accepted and the request ran in the foreground")  # fmt: skip
    return passed()


@case("responses.errors.shape", "an unknown model gives a 4xx with the Responses error object")
async def error_shape(ctx) -> Check:
    return judge_error_shape(await ctx.post(RESPONSES, request(ctx, model="no-such-model-xyz"), sse=False))


def judge_error_shape(t: Trace) -> Check:
    """The answer to an unknown model."""
    if (absent := absent_problem(t, f"POST {RESPONSES}")) is not None:
        return absent
    if t.status == 200:
        return failed("accepted-unknown-model", "a 4xx", 200)
    refused = _refused(t)
    return refused if refused is not None else failed(f"status-{t.status}", "a 4xx", t.status)


DISCONNECT_S = 120.0  # the case's time; its cancellation attempts get all but cancel.MARGIN_S of it


@case("responses.cancel.disconnect", "a client that leaves a Responses stream stops the engine's work",
      timeout_s=DISCONNECT_S)  # fmt: skip
async def cancel_disconnect(ctx) -> Check:
    from harness.conformance.cases.cancel import LONG_TOKENS, MARGIN_S, run_cancellation

    t = await ctx.probe("responses.create")
    if (absent := absent_problem(t, f"POST {RESPONSES}")) is not None:
        return absent
    # cut after the preamble (created, in_progress, item and part added) and a few deltas
    body = request(ctx, max_output_tokens=LONG_TOKENS, stream=True)
    return await run_cancellation(ctx, [8], RESPONSES, body, budget_s=DISCONNECT_S - MARGIN_S)


# -- the OpenAI SDK ------------------------------------------------------------------------------------------------


@case("sdk.openai.responses", "the OpenAI SDK's responses.create and responses.stream read the server; the stream's "
      "final response has the streamed text")  # fmt: skip
async def sdk_responses(ctx) -> Check:
    try:
        import openai
    except ImportError:
        return skipped("openai SDK not installed")
    probe_t = await ctx.probe("responses.create")
    if (absent := absent_problem(probe_t, f"POST {RESPONSES}")) is not None:
        return absent
    if (big := too_large_for_sdk(probe_t, await ctx.probe("responses.stream"))) is not None:
        return big
    client = openai.AsyncOpenAI(base_url=ctx.base_url + "/v1", api_key=ctx.api_key or "none", max_retries=0,
                                http_client=ctx.new_client(ctx.api_key))  # fmt: skip
    dev = Deviations()
    try:
        created = await client.responses.create(model=ctx.model, input=PROMPT, max_output_tokens=MAX_OUTPUT,
                                                temperature=0)  # fmt: skip
        deltas: list[str] = []
        async with client.responses.stream(model=ctx.model, input=PROMPT, max_output_tokens=MAX_OUTPUT,
                                           temperature=0) as stream:  # fmt: skip
            async for event in stream:
                if event.type == "response.output_text.delta":
                    deltas.append(event.delta)
                elif event.type == "error":  # this SDK hands an error event on, as an event (anthropic's raises)
                    dev.add("error-event", "no error event for a valid request", getattr(event, "message", None))
            final = await stream.get_final_response()
    except openai.OpenAIError as exc:
        return failed("sdk-error", "no SDK exception", f"{type(exc).__name__}: {str(exc)[:300]}")
    except Exception as exc:  # the SDK's own parsing breaks on what the server sent: a client cannot read it
        return failed("sdk-parse-error", "the SDK parses the stream", f"{type(exc).__name__}: {str(exc)[:300]}")
    finally:
        await client.close()
    if final.output_text != "".join(deltas):
        dev.add("sdk-final-not-deltas", "".join(deltas), final.output_text)
    if created.output_text != final.output_text:
        dev.add("sdk-stream-differs", created.output_text, final.output_text)
    return dev.check(passed(f"text {final.output_text!r}"))


# -- function tools: only with a scripted model (its greedy output is a tool call when tools are offered) -----------

WEATHER_TOOL = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}  # fmt: skip


def judge_function_call(trace: Trace) -> Check:
    """The answer with the tool offered: a function_call item with a call_id and JSON arguments."""
    resp, problem = _answer(trace)
    if problem:
        return problem
    output = resp.get("output") if isinstance(resp, dict) else None
    items = [i for i in output if isinstance(i, dict)] if isinstance(output, list) else []
    calls = [i for i in items if i.get("type") == "function_call"]
    if not calls:
        return failed("no-function-call", "a function_call output item", [i.get("type") for i in items])
    dev = Deviations()
    for c in calls:
        if not isinstance(c.get("call_id"), str) or not c.get("call_id"):
            dev.add("no-call-id", "a call_id", c.get("call_id"))
        if decode_json(c.get("arguments"))[1] is not None:  # bounded in depth, as every JSON a judge parses
            dev.add("arguments-not-json", "arguments as a JSON string", c.get("arguments"))
    return dev.check()


@case(
    "responses.tools.function-call",
    "with tools offered, a scripted model's tool call is a function_call item",
    needs=(SCRIPTED_MODEL,),
)
async def tools_call(ctx) -> Check:
    return judge_function_call(await ctx.post(RESPONSES, request(ctx, tools=[WEATHER_TOOL], max_output_tokens=64),
                                              sse=False))  # fmt: skip
