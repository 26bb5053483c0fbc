"""The JSON Schemas of the Responses and Messages surfaces, as data: vendored from the official SDKs' own types
(`scripts/vendor_api_schemas.py` says why those and how), each file pinned here by its sha256, validated with
`jsonschema`. A failed validation is a list of tags, one per place the document breaks the schema:
`schema:<path>:<keyword>` (array indices shown as `[]`, so the tag is the same for every output item). A document
too large to validate within the harness's bound is `schema-too-large` (not validated, so never a pass).
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any

from harness.errors import DataError
from harness.readers import parse_json, read_bytes

__all__ = ["SCHEMAS", "MAX_NODES", "MAX_STREAM_NODES", "TOO_LARGE", "NodeBudget", "schema_errors", "schema_source"]

_DIR = Path(__file__).resolve().parent / "schemas"
# file -> sha256: a vendored schema that changed is refused until its pin changes with it (on purpose, in review)
SCHEMAS = {
    "responses": ("openai-3.57.0-responses.json", "1f31fd16b16baf3fc6fb70b3c303b2bf99dde7c3c183e2eff5b5156a0becd6cb"),
    "messages": ("anthropic-2.15.0-messages.json", "212cb6dae211a913d699a43a1b1e745f6cf7b3941627adcf3c09ddeaacf7c566"),
}
MAX_SCHEMA_BYTES = 4 << 20
MAX_TAGS = 12  # a body that is nothing like the schema still gives a short, readable list
# Validation costs up to ~2 ms of CPU per JSON value (a list item judged against every branch of a union), inside the
# event loop where no deadline reaches it: a judge validates at most this many values, a recorded response or event
# holds < 100 (tests/fixtures/surfaces), a recorded stream < 300. More is `schema-too-large`, never a pass.
MAX_NODES = 1000  # one document (~2 s at most)
MAX_STREAM_NODES = 2000  # all the events of one stream
TOO_LARGE = "schema-too-large"


class NodeBudget:
    """The JSON values a judge may still validate, shared by the documents it validates (the events of a stream)."""

    def __init__(self, total: int = MAX_NODES) -> None:
        self.total = self.left = total


def json_size(doc: Any, limit: int) -> int:
    """How many JSON values (objects, lists, scalars) `doc` holds, counted up to `limit` + 1 at most."""
    n, todo = 0, [doc]
    while todo and n <= limit:
        v = todo.pop()
        n += 1
        if isinstance(v, dict):
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
    return n


@cache
def _document(surface: str) -> dict[str, Any]:
    name, sha = SCHEMAS[surface]
    path = _DIR / name
    data = read_bytes(path, "API schema", max_bytes=MAX_SCHEMA_BYTES, error=DataError)
    got = hashlib.sha256(data).hexdigest()
    if got != sha:
        raise DataError(f"{path}: sha256 {got} is not the pinned {sha} (harness/conformance/apischema.py)")
    doc = parse_json(data.decode("utf-8"), path, "API schema", max_depth=256, error=DataError)
    if not isinstance(doc, dict) or not isinstance(doc.get("schemas"), dict):
        raise DataError(f"{path}: schemas: must be an object of named schemas")
    return doc


def schema_source(surface: str) -> str:
    """How a note names the schema: "openai 3.57.0 (PyPI openai (openai.types.responses))"."""
    doc = _document(surface)
    return f"{SCHEMAS[surface][0]} ({doc.get('source')} {doc.get('version')})"


@cache
def _validator(surface: str, which: str, event_type: str = "") -> Any:
    """The validator of one named schema; for a union of events, of the branch whose `type` is `event_type` (a
    discriminated union: judging an event by the branch that fits best would name another event's fields)."""
    from jsonschema import validators
    from referencing import Registry

    schema = _document(surface)["schemas"][which]
    if event_type:
        schema = {"$defs": schema.get("$defs", {}), "$ref": _branches(surface, which)[event_type]}
    cls = validators.validator_for(schema)
    return cls(schema, registry=Registry())  # an empty registry: nothing outside the schema is ever fetched


@cache
def _branches(surface: str, which: str) -> dict[str, str]:
    """type -> $ref of each branch of a union schema whose branches fix `type` to one value."""
    schema = _document(surface)["schemas"][which]
    defs = schema.get("$defs", {})
    out: dict[str, str] = {}
    for branch in schema.get("anyOf") or schema.get("oneOf") or []:
        ref = branch.get("$ref", "") if isinstance(branch, dict) else ""
        spec = defs.get(ref.rsplit("/", 1)[-1], {}) if ref.startswith("#/$defs/") else {}
        t = (spec.get("properties") or {}).get("type") or {}
        value = t.get("const", (t.get("enum") or [None])[0] if len(t.get("enum") or []) == 1 else None)
        if isinstance(value, str):
            out[value] = ref
    return out


def _path(parts: Any) -> str:
    return ".".join("[]" if isinstance(p, int) else str(p) for p in parts) or "(root)"


def _tag(err: Any) -> str:
    # a key the schema names stays; a key the server chose (an open map such as `metadata`) is `*`: a tag is the
    # harness's word, never the server's text
    named = set(err.absolute_schema_path)
    parts = [p if isinstance(p, int) or p in named else "*" for p in err.absolute_path]
    if err.validator == "required" and "'" in err.message:  # name the missing property: one tag per field
        parts.append(err.message.split("'")[1])
    return f"schema:{_path(parts)}:{err.validator}"


def _same_type_branches(err: Any, context: list[Any]) -> list[Any]:
    """The errors of the union's branches whose own `type` the value has (a thinking block is judged as a thinking
    block, not by the text block's fields); all of them when no branch takes the value's `type`."""
    inst = err.instance
    if not (isinstance(inst, dict) and isinstance(inst.get("type"), str)):
        return context
    depth = len(err.absolute_path)
    wrong = {
        c.relative_schema_path[0]
        for c in context
        if list(c.absolute_path)[depth:] == ["type"] and c.relative_schema_path
    }
    kept = [c for c in context if c.relative_schema_path and c.relative_schema_path[0] not in wrong]
    return kept or context


def schema_errors(surface: str, which: str, doc: Any, budget: NodeBudget | None = None) -> list[tuple[str, str]]:
    """(tag, message) for each way `doc` breaks the schema ([] when it validates). A union of events is judged by the
    branch of the event's own `type` (`schema:type:unknown-event` when none has it); another union (`oneOf`/`anyOf`)
    by the error of the branch that fits best (jsonschema's best_match). A document over MAX_NODES, or over what is
    left of `budget` (then spent: the rest of a stream is not validated either), is not validated: `schema-too-large`."""
    from jsonschema import exceptions

    event_type = ""
    branches = _branches(surface, which)
    if branches:
        t = doc.get("type") if isinstance(doc, dict) else None
        event_type = t if isinstance(t, str) else ""
        if event_type not in branches:
            return [("schema:type:unknown-event", f"no event of type {event_type!r} in the schema")]
    budget = budget or NodeBudget()
    limit = min(MAX_NODES, budget.left)
    size = json_size(doc, limit)
    if size > limit:
        if limit < MAX_NODES:  # the budget is spent: the rest of the stream is not validated either
            budget.left = 0
            return [(TOO_LARGE, f"not validated: the stream's events hold more than {budget.total} JSON values "
                                "(the harness's bound)")]  # fmt: skip
        return [(TOO_LARGE, f"not validated: more than {MAX_NODES} JSON values (the harness's bound)")]
    budget.left -= size
    out: dict[str, str] = {}
    for err in _validator(surface, which, event_type).iter_errors(doc):
        if err.validator in ("oneOf", "anyOf") and err.context:
            # an optional field is a union with null: a value that is not null is judged by the other branch
            context = [c for c in err.context if not (c.validator == "type" and c.validator_value == "null")]
            context = _same_type_branches(err, context or list(err.context))
            err = exceptions.best_match(context)
        out.setdefault(_tag(err), err.message[:200])
        if len(out) >= MAX_TAGS:
            break
    return sorted(out.items())
