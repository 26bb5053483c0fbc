"""Structured outputs with the schemas clients really send (`structured.client.*`), on the scripted model.

`structured.*` checks one small schema through every way an engine is asked; these send what a new user's code
sends: the OpenAI SDK's `parse()` of a pydantic model (the SDK turns it into a strict json_schema with
`additionalProperties: false` and every field required), and a schema with an enum, a nested object and an array.
On the scripted model (outside its scripts its weights write short values and close every string) a constrained
answer ends well inside max_tokens, so any failure is the server's. Another model may run long: an answer cut at
max_tokens before its document closed is `inconclusive` there (the model's, not the server's); a refusal, a complete
document that breaks the schema, or an SDK that cannot parse a complete answer is judged as on the scripted model.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from harness.client.sse import decode_json
from harness.conformance.cases.tools import message_of
from harness.conformance.model import Check, failed, finish_reason_tag, inconclusive, passed, skipped
from harness.conformance.registry import case

__all__ = ["NESTED_SCHEMA", "judge_document"]

CHAT = "/v1/chat/completions"
MAX_TOKENS = 128
ASK = [{"role": "user", "content": "Describe an item as JSON."}]
NESTED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kind": {"type": "string", "enum": ["tool", "part", "kit"]},
        "size": {"type": "object", "properties": {"width": {"type": "integer"}, "unit": {"type": "string"}},
                 "required": ["width", "unit"], "additionalProperties": False},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["kind", "size", "tags"],
    "additionalProperties": False,
}  # fmt: skip


def judge_document(text: Any, finish: Any, schema: dict[str, Any]) -> Check:
    """The content is one JSON document that validates against `schema`, and the answer ended by itself."""
    if not isinstance(text, str):
        return failed("no-content", "a JSON document in content", text)
    doc, err = decode_json(text)  # bounded in depth, as every JSON a judge parses (the document is `actual` below)
    if err is not None:
        tag = "truncated" if finish == "length" else "not-json"
        return failed(tag, "a JSON document", text[:300], note=err)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        return failed("schema-violated", errors[0].message, doc)
    if finish != "stop":
        return failed(finish_reason_tag(finish), "stop", finish)
    return passed(json.dumps(doc)[:120])


@case("structured.client.nested", "response_format json_schema (strict) with an enum, a nested object and an array")
async def nested(ctx) -> Check:
    rf = {"type": "json_schema", "json_schema": {"name": "item", "strict": True, "schema": NESTED_SCHEMA}}
    t = await ctx.post(CHAT, ctx.chat(messages=ASK, max_tokens=MAX_TOKENS, response_format=rf,
                                      chat_template_kwargs={"enable_thinking": False}), sse=False)  # fmt: skip
    msg, finish, problem = message_of(t)
    if problem is not None:
        return problem
    chk = judge_document((msg or {}).get("content"), finish, NESTED_SCHEMA)
    if not ctx.scripted and chk.behaviour == "truncated":  # another model ran past max_tokens: its, not the server's
        return inconclusive("truncated", chk.actual, note=f"cut at max_tokens {MAX_TOKENS} before the document closed")
    return chk


@case("structured.client.sdk-parse", "the OpenAI SDK's parse() of a pydantic model (name: str, count: int)")
async def sdk_parse(ctx) -> Check:
    try:
        import openai
        from pydantic import BaseModel
    except ImportError:
        return skipped("openai SDK or pydantic not installed")

    class Item(BaseModel):
        name: str
        count: int

    client = openai.AsyncOpenAI(base_url=ctx.base_url + "/v1", api_key=ctx.api_key or "none", max_retries=0,
                                http_client=ctx.new_client(ctx.api_key))  # fmt: skip
    try:
        done = await client.chat.completions.parse(
            model=ctx.model,
            messages=ASK,  # type: ignore[arg-type]
            response_format=Item,
            max_tokens=MAX_TOKENS,
            temperature=0,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )
    except openai.APIStatusError as exc:  # the server's refusal: its status and what it said
        return failed(f"status-{exc.status_code}", 200, exc.status_code, note=str(exc.message)[:300])
    except openai.LengthFinishReasonError as exc:  # the SDK refuses to parse an answer cut at max_tokens
        if ctx.scripted:
            return failed("sdk-error", "a parsed Item", f"{type(exc).__name__}: {exc}"[:400])
        content = exc.completion.choices[0].message.content if exc.completion.choices else None
        return inconclusive("truncated", content, note=f"cut at max_tokens {MAX_TOKENS}: the SDK parses no cut answer")
    except Exception as exc:  # noqa: BLE001 - the SDK's own parsing of what the server sent: a verdict
        return failed("sdk-error", "a parsed Item", f"{type(exc).__name__}: {exc}"[:400])
    finally:
        await client.close()
    choice = done.choices[0] if done.choices else None
    parsed = choice.message.parsed if choice is not None else None
    if parsed is None:
        return failed("not-parsed", "message.parsed an Item", choice.message.content if choice else None)
    return passed(f"parsed {parsed!r}"[:120])
