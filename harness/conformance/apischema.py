"""The JSON Schemas of the Responses and Messages surfaces, as data: vendored from the official SDKs' own types
(`scripts/vendor_api_schemas.py` says why those and how), each file pinned here by its sha256, validated with
`jsonschema`. A failed validation is a list of tags, one per place the document breaks the schema:
`schema:<path>:<keyword>` (array indices shown as `[]`, so the tag is the same for every output item).
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any

from harness.errors import DataError
from harness.readers import parse_json, read_bytes

__all__ = ["SCHEMAS", "schema_errors", "schema_source"]

_DIR = Path(__file__).resolve().parent / "schemas"
# file -> sha256: a vendored schema that changed is refused until its pin changes with it (on purpose, in review)
SCHEMAS = {
    "responses": ("openai-3.57.0-responses.json", "1f31fd16b16baf3fc6fb70b3c303b2bf99dde7c3c183e2eff5b5156a0becd6cb"),
    "messages": ("anthropic-2.15.0-messages.json", "212cb6dae211a913d699a43a1b1e745f6cf7b3941627adcf3c09ddeaacf7c566"),
}
MAX_SCHEMA_BYTES = 4 << 20
MAX_TAGS = 12  # a body that is nothing like the schema still gives a short, readable list


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
    parts = list(err.absolute_path)
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


def schema_errors(surface: str, which: str, doc: Any) -> list[tuple[str, str]]:
    """(tag, message) for each way `doc` breaks the schema ([] when it validates). A union of events is judged by the
    branch of the event's own `type` (`schema:type:unknown-event` when none has it); another union (`oneOf`/`anyOf`)
    by the error of the branch that fits best (jsonschema's best_match)."""
    from jsonschema import exceptions

    event_type = ""
    branches = _branches(surface, which)
    if branches:
        t = doc.get("type") if isinstance(doc, dict) else None
        event_type = t if isinstance(t, str) else ""
        if event_type not in branches:
            return [("schema:type:unknown-event", f"no event of type {event_type!r} in the schema")]
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
