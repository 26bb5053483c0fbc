"""The parts of a chat tool call both judges read: the scripted ones (tools.py) and the any-model contract
(toolcontract.py). Tolerant of whatever a server sent: lists that are not lists, entries that are not objects."""

from __future__ import annotations

from typing import Any

from harness.client.sse import decode_json
from harness.conformance.view import StreamView, choices
from harness.models.families import CALL_MARKUP

__all__ = [
    "call_function",
    "has_markup",
    "call_list",
    "parse_arguments",
    "call_fragments",
    "streamed_calls",
    "streamed_content",
]


def call_function(call: Any) -> dict[str, Any]:
    """A tool call's (or fragment's) `function` object, {} when it has none."""
    fn = call.get("function") if isinstance(call, dict) else None
    return fn if isinstance(fn, dict) else {}


def has_markup(text: Any) -> bool:
    return isinstance(text, str) and any(m in text for m in CALL_MARKUP)


def call_list(message: dict) -> list[Any]:
    """A message's tool_calls as sent: every entry, objects or not ([] when it has none or they are not a list)."""
    tcs = message.get("tool_calls")
    return tcs if isinstance(tcs, list) else []


def parse_arguments(raw: Any) -> tuple[Any, str | None]:
    """The parsed arguments, or why they are not a JSON object string."""
    if not isinstance(raw, str):
        return None, "arguments-not-string"
    val, err = decode_json(raw)  # bounded in depth: the value may become a check's `actual`
    if err is not None:
        return None, "arguments-not-json"
    return val, None if isinstance(val, dict) else "arguments-not-object"


def call_fragments(view: StreamView) -> list[tuple[int, Any]]:
    """(chunk n, entry) of every delta's tool_calls list, in wire order, objects or not."""
    out = []
    for n, obj in view.objects():
        for c in choices(obj):
            delta: dict[str, Any] = c["delta"] if isinstance(c.get("delta"), dict) else {}
            out += [(n, tc) for tc in call_list(delta)]
    return out


def streamed_calls(view: StreamView) -> dict[int, list[tuple[int, dict]]]:
    """tool-call index -> [(chunk n, fragment)] in wire order."""
    out: dict[int, list[tuple[int, dict]]] = {}
    for n, tc in call_fragments(view):
        if isinstance(tc, dict):
            idx = tc["index"] if isinstance(tc.get("index"), int) else -1
            out.setdefault(idx, []).append((n, tc))
    return out


def streamed_content(view: StreamView) -> str:
    parts = []
    for _, obj in view.objects():
        for c in choices(obj):
            delta: dict[str, Any] = c["delta"] if isinstance(c.get("delta"), dict) else {}
            if isinstance(delta.get("content"), str):
                parts.append(delta["content"])
    return "".join(parts)
