"""Whether a golden answer satisfies its prompt's constraint, as a client would check it (pure; no engine).

`check_output(constraint, text, tool_calls, finish_reason)` -> {"kind", "held", "detail"} for the constraint of
`Prompt.constraint()`:

    json_schema   the message content parses as JSON and validates against the schema (jsonschema)
    json_object   the message content parses as a JSON object
    tool_choice   a named choice: a tool call of that name whose arguments parse as JSON and validate against the tool's
                  parameters; `required`: at least one call, each naming a declared tool with valid arguments

`held` is False with the first reason in `detail` (not JSON, which schema rule at which path, no tool call and the plain
text it gave instead, ...); a cut-off answer says its finish_reason. JSON is read as a client's strict parser reads it:
NaN/Infinity are not JSON. Schemas never fetch anything: a reference outside the schema is unresolvable (the prompt loader
already refuses one).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["check_output", "tool_call_view", "show_calls"]

MAX_DETAIL = 300


def _loads(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def _schema_problem(schema: dict, value: Any) -> str | None:
    """The best-matching validation error of `value` against `schema` (path: message), or None when it validates."""
    from jsonschema import exceptions, validators
    from referencing import Registry

    try:
        cls = validators.validator_for(schema)
        # an empty registry: a reference outside the schema is unresolvable (jsonschema's default would fetch URLs)
        err = exceptions.best_match(cls(schema, registry=Registry()).iter_errors(value))
    except Exception as exc:  # any failure to apply a schema to engine output is that output's verdict
        return f"schema could not be applied: {type(exc).__name__}: {str(exc)[:160]}"
    if err is None:
        return None
    at = "/" + "/".join(str(p) for p in err.absolute_path)
    return f"at {at}: {err.message}"


def _short(text: str) -> str:
    return repr(text[:80]) + ("…" if len(text) > 80 else "")


def _cut(finish_reason: str | None) -> str:
    return f" (finish_reason {finish_reason})" if finish_reason not in ("stop", "tool_calls", None) else ""


def _json_problem(text: str, schema: dict | None, want_object: bool) -> str | None:
    try:
        value = _loads(text)
    except (ValueError, RecursionError) as exc:
        return f"not JSON: {str(exc)[:120]}: {_short(text)}"
    if want_object and not isinstance(value, dict):
        return f"JSON but not an object ({type(value).__name__}): {_short(text)}"
    return _schema_problem(schema, value) if schema is not None else None


def tool_call_view(raw: Any) -> list[dict[str, Any]]:
    """What a client sees of a message's tool_calls: [{type, name, arguments}] (the volatile call id is not kept).
    Arguments that are not a string are kept as canonical JSON text with `arguments_type` naming what was sent."""
    if not isinstance(raw, list):
        return []
    out = []
    for raw_call in raw:
        call: dict = raw_call if isinstance(raw_call, dict) else {}
        fn: dict = call["function"] if isinstance(call.get("function"), dict) else {}
        args = fn.get("arguments")
        item: dict[str, Any] = {
            "type": call.get("type") if isinstance(call.get("type"), str) else None,
            "name": fn.get("name") if isinstance(fn.get("name"), str) else None,
            "arguments": args
            if isinstance(args, str)
            else json.dumps(args, sort_keys=True, separators=(",", ":"), default=str),
        }
        if not isinstance(args, str):
            item["arguments_type"] = type(args).__name__
        out.append(item)
    return out


def show_calls(calls: list[dict] | None) -> str:
    """One line for a list of tool calls: `name(arguments)` (arguments JSON-escaped), or `none`."""
    if not calls:
        return "none"

    def args(c: dict) -> str:  # escaped (one line: arguments may hold newlines), cut at 80 characters
        text = json.dumps(str(c.get("arguments")), ensure_ascii=False)[1:-1]
        return text[:80] + ("…" if len(text) > 80 else "")

    return ", ".join(f"{c.get('name')}({args(c)})" for c in calls)


def _tool_problem(c: dict, calls: list[dict], text: str) -> str | None:
    tools: dict[str, Any] = c["tools"]
    if not calls:
        return f"no tool call; plain text instead: {_short(text)}" if text else "no tool call and no text"
    if c["choice"] != "required" and not any(k.get("name") == c["choice"] for k in calls):
        return f"no call of {c['choice']!r} (calls: {show_calls(calls)})"
    for k in calls:
        name = k.get("name")
        if name not in tools:
            return f"call of {name!r}, not a declared tool ({', '.join(tools)})"
        if k.get("arguments_type"):
            return f"{name}: arguments sent as {k['arguments_type']}, not a JSON string"
        problem = _json_problem(k["arguments"], tools[name], want_object=False)
        if problem:
            return f"{name} arguments {problem}"
    return None


def check_output(
    constraint: dict[str, Any], text: str, tool_calls: list[dict], finish_reason: str | None
) -> dict[str, Any]:
    kind = constraint["kind"]
    if kind == "json_schema":
        problem = _json_problem(text, constraint["schema"], want_object=False)
    elif kind == "json_object":
        problem = _json_problem(text, None, want_object=True)
    elif kind == "tool_choice":
        problem = _tool_problem(constraint, tool_calls, text)
    else:
        raise ValueError(f"unknown constraint kind {kind!r}")
    if problem is None:
        return {"kind": kind, "held": True, "detail": ""}
    return {"kind": kind, "held": False, "detail": (problem + _cut(finish_reason))[:MAX_DETAIL]}
