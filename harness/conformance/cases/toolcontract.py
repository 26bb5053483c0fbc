"""The tool-call contract that holds for any model (the tools.auto.* cases off the scripted model).

The scripted model's cases compare a call with its script. Another model calls what it likes, so what is judged is
what a client relies on whatever the model: each call is an object with an id, type function and the name of a tool
offered; its arguments are a JSON object that validates against that tool's `parameters`; ids differ; no tool-call
markup in content; finish_reason tool_calls; streamed, the delta contract per index. Where the model did not do what
a case needs (it answered in text; it was cut at max_tokens before a call was complete; it made one call where two
are judged), the verdict is `inconclusive` with what it did, never pass and never fail.

    judge_calls(message, finish_reason, tools, want)   the non-streamed message
    judge_call_stream(view, tools, want)               the streamed delta contract, per tool-call index
    judge_call_values(message, tools, finish_reason)   forced calls (required / named): well formed, schema-valid
"""

from __future__ import annotations

from typing import Any

import jsonschema

from harness.conformance.cases.callparts import (
    call_fragments,
    call_function,
    call_list,
    has_markup,
    parse_arguments,
    streamed_calls,
    streamed_content,
)
from harness.conformance.model import (
    Check,
    Deviations,
    Verdict,
    failed,
    finish_reason_tag,
    inconclusive,
    passed,
)
from harness.conformance.view import StreamView, choices

__all__ = ["schemas_of", "judge_calls", "judge_call_stream", "judge_call_values", "without_call"]

CUT = "length"  # the finish_reason of an answer cut by max_tokens


def schemas_of(tools: list[dict]) -> dict[str, dict[str, Any]]:
    """tool name -> its `parameters` JSON schema, for the tools a request offered."""
    out: dict[str, dict[str, Any]] = {}
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            out[fn["name"]] = params if isinstance(params, dict) else {}
    return out


def _schema_problem(value: Any, schema: dict[str, Any]) -> str | None:
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.absolute_path))
    return errors[0].message if errors else None


def _judge_arguments(dev: Deviations, name: Any, raw: Any, schemas: dict[str, dict], where: int | None) -> bool:
    """Add the deviations of one call's arguments; False when they are not a whole JSON object (a cut may explain)."""
    val, problem = parse_arguments(raw)
    if problem:
        dev.add(problem, "a JSON object as a string", raw, where)
        return False
    if name in schemas and (why := _schema_problem(val, schemas[name])) is not None:
        dev.add("schema-mismatch", schemas[name], val, where, note=f"{name}: {why}")
    return True


def without_call(content: Any, finish_reason: Any, what: str) -> Check:
    """No tool call came back: markup in content is the parser's failure; otherwise the model did not call."""
    if finish_reason == CUT:
        return inconclusive("cut-before-call", content if isinstance(content, str) else repr(content),
                            note=f"cut at max_tokens before {what} was complete")  # fmt: skip
    if has_markup(content):
        return failed("tool-markup-in-content", what, content)
    return inconclusive("answered-in-text", content if not isinstance(content, str) else content[:300],
                        note=f"the model answered without {what} (finish_reason {finish_reason!r})")  # fmt: skip


def judge_calls(message: dict, finish_reason: Any, tools: list[dict], want: int = 1) -> Check:
    """A message with tool calls from any model: each well formed, its arguments valid for the tool called, ids
    distinct, no markup in content, finish_reason tool_calls. No call, or fewer than `want`: inconclusive."""
    schemas = schemas_of(tools)
    calls = call_list(message)
    objs = [tc for tc in calls if isinstance(tc, dict)]
    content = message.get("content")
    if not objs:
        return without_call(content, finish_reason, "a tool call")
    dev = Deviations()
    whole = True
    for i, tc in enumerate(calls):
        if not isinstance(tc, dict):
            dev.add("call-not-object", "each tool call an object", tc, i)
            continue
        fn = call_function(tc)
        if not isinstance(tc.get("id"), str) or not tc.get("id"):
            dev.add("missing-id", "a non-empty id", tc.get("id"), i)
        if tc.get("type") != "function":
            dev.add("missing-type", "type function", tc.get("type"), i)
        if fn.get("name") not in schemas:
            dev.add("wrong-name", f"one of {sorted(schemas)}", fn.get("name"), i)
        whole = _judge_arguments(dev, fn.get("name"), fn.get("arguments"), schemas, i) and whole
    ids = [tc.get("id") for tc in objs if isinstance(tc.get("id"), str) and tc.get("id")]
    if len(set(ids)) != len(ids):
        dev.add("duplicate-ids", "one id per call", ids)
    if has_markup(content):
        dev.add("markup-in-content", "no tool-call markup in content", content)
    if finish_reason == CUT and (not whole or "markup-in-content" in dev.behaviours):
        return inconclusive("cut-in-call", {"content": content, "tool_calls": calls},
                            note="cut at max_tokens inside a tool call")  # fmt: skip
    if finish_reason != "tool_calls":
        dev.add(finish_reason_tag(finish_reason), "finish_reason tool_calls", finish_reason)
    names = [call_function(tc).get("name") for tc in objs]
    out = dev.check(passed(f"any model: calls {names}, arguments valid for their schemas"))
    if out.status is Verdict.PASS and len(objs) < want:
        return inconclusive("fewer-calls", names, note=f"the model made {len(objs)} call(s); the case judges {want}")
    return out


def judge_call_values(message: dict, tools: list[dict], finish_reason: Any) -> Check | None:
    """The calls a server forced (tool_choice required or named): each an object whose arguments are a JSON object
    valid for the tool called. None when they are; inconclusive when the answer was cut inside a call."""
    schemas = schemas_of(tools)
    dev = Deviations()
    whole = True
    for i, tc in enumerate(call_list(message)):
        if not isinstance(tc, dict):
            dev.add("call-not-object", "each tool call an object", tc, i)
            continue
        fn = call_function(tc)
        whole = _judge_arguments(dev, fn.get("name"), fn.get("arguments"), schemas, i) and whole
    if not whole and finish_reason == CUT:
        return inconclusive("cut-in-call", message.get("tool_calls"), note="cut at max_tokens inside a forced call")
    return dev.check() if dev else None


def judge_call_stream(view: StreamView, tools: list[dict], want: int = 1) -> Check:
    """The streamed delta contract for any model: per index, the first fragment carries id, type function and an
    offered tool's name, later ones only argument fragments (the same id or none, no name again); each index's
    fragments concatenate to a JSON object valid for its tool; indexes 0..n-1; ids distinct; no markup in content;
    one finish_reason, tool_calls. No call delta, or fewer calls than `want`: inconclusive."""
    if view.status is not None and view.status != 200:
        return failed(f"status-{view.status}", 200, view.status)
    schemas = schemas_of(tools)
    per_index = streamed_calls(view)
    content = streamed_content(view)
    finish = [(n, c.get("finish_reason")) for n, obj in view.objects() for c in choices(obj) if c.get("finish_reason")]
    last_finish = finish[-1][1] if finish else None
    if not per_index:
        return without_call(content, last_finish, "a streamed tool call")
    dev = Deviations()
    if sorted(per_index) != list(range(len(per_index))):
        dev.add("wrong-indexes", list(range(len(per_index))), sorted(per_index))
    junk = [(n, tc) for n, tc in call_fragments(view) if not isinstance(tc, dict)]
    if junk:
        dev.add("fragment-not-object", "each tool-call fragment an object", junk[0][1], junk[0][0])
    whole, ids = True, []
    for _, frags in sorted(per_index.items()):
        n0, first = frags[0]
        fn0 = call_function(first)
        if not isinstance(first.get("id"), str) or not first.get("id"):
            dev.add("first-delta-without-id", "id on the first fragment", first, n0)
        else:
            ids.append(first["id"])
        if first.get("type") != "function":
            dev.add("first-delta-without-type", "type function on the first fragment", first, n0)
        if fn0.get("name") not in schemas:
            tag = "first-delta-without-name" if not fn0.get("name") else "wrong-name"
            dev.add(tag, f"one of {sorted(schemas)}", first, n0)
        for n, tc in frags[1:]:
            if tc.get("id") not in (None, "", first.get("id")):
                dev.add("id-changed", first.get("id"), tc.get("id"), n)
            if call_function(tc).get("name") not in (None, ""):
                dev.add("name-repeated", "only arguments after the first fragment", tc, n)
        text = "".join(f["function"]["arguments"] for _, f in frags
                       if isinstance(f.get("function"), dict) and isinstance(f["function"].get("arguments"), str))  # fmt: skip
        val, problem = parse_arguments(text)
        if problem in ("arguments-not-json", "arguments-not-string"):
            dev.add("fragments-not-json", "fragments that concatenate to a JSON object", text, frags[-1][0])
            whole = False
        elif problem:
            dev.add(problem, "a JSON object", text)
        elif fn0.get("name") in schemas and (why := _schema_problem(val, schemas[fn0["name"]])) is not None:
            dev.add("schema-mismatch", schemas[fn0["name"]], val, note=f"{fn0['name']}: {why}")
    if len(set(ids)) != len(ids):
        dev.add("duplicate-ids", "one id per call", ids)
    if has_markup(content):
        dev.add("markup-in-content", "no tool-call markup in content", content[:300])
    if last_finish == CUT and (not whole or "markup-in-content" in dev.behaviours):
        return inconclusive("cut-in-call", content[:300], note="cut at max_tokens inside a streamed tool call")
    if len(finish) > 1:
        dev.add("finish-reason-repeated", "one finish_reason", [f for _, f in finish], finish[1][0])
    elif last_finish != "tool_calls":
        dev.add(
            finish_reason_tag(last_finish), "finish_reason tool_calls", last_finish, finish[0][0] if finish else None
        )
    out = dev.check(passed(f"any model: {len(per_index)} call(s), {sum(len(f) for f in per_index.values())} fragments"))
    if out.status is Verdict.PASS and len(per_index) < want:
        return inconclusive("fewer-calls", len(per_index), note=f"the model streamed {len(per_index)} call(s); "
                            f"the case judges {want}")  # fmt: skip
    return out
