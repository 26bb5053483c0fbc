"""Structured outputs, streaming and not: OpenAI `response_format` (`json_object`; `json_schema` with and without
`strict`) and the engine's own constraint fields, declared as expectation-file probes (data, never code):

    probes:
      constraint.json:                     # one entry per way the engine is asked for this kind of constraint;
        guided_json: {guided_json: $value} #   key = the field's name in reports, value = the request extras,
        structured_outputs.json:           #   with the constraint itself where `$value` stands
          structured_outputs: {json: $value}
      constraint.regex: {...}              # likewise: regex, choice (a list of strings), grammar (GBNF text)

The tiny reference model emits garbage text, so only a constraint the server really applies makes the output valid.
Each case validates the output against the constraint (`jsonschema` for JSON): a 200 whose output does not satisfy it
is `constraint-ignored` and the note names the field; a document cut off at max_tokens (finish_reason length, the part
sent still a prefix of a valid output) is `truncated`, not ignored: inconclusive, for the server kept the constraint
and the model did not finish. A refusal is its status (`status-400`, ...), named
by field too. A kind the expectation file declares no probe for is skipped: the engine has no such field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema

from harness.client import Trace
from harness.client.sse import decode_json
from harness.conformance.model import (
    Check,
    Deviations,
    Level,
    Verdict,
    errored,
    failed,
    finish_reason_tag,
    inconclusive,
    passed,
    skipped,
    status_problem,
)
from harness.conformance.registry import case
from harness.conformance.shape import per_index, streamed_text
from harness.conformance.view import choices, from_trace

__all__ = [
    "SCHEMA",
    "REGEX",
    "CHOICES",
    "GRAMMAR",
    "MAX_TOKENS",
    "Constraint",
    "CONSTRAINTS",
    "json_prefix",
    "output_of",
    "judge_constrained",
    "judge_ways",
    "engine_ways",
]

CHAT = "/v1/chat/completions"
# The valid documents below take 4 to 26 tokens on the tiny model (vLLM 0.11.0, llama.cpp); vLLM 0.32.0's JSON grammar
# lets it write runs of whitespace around every token: 50 tokens for {"a": 3}.
MAX_TOKENS = 96
# Small, and closed: an enum leaves no room for an endless number, additionalProperties false no room for more keys.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"a": {"type": "integer", "enum": [1, 2, 3]}},
    "required": ["a"],
    "additionalProperties": False,
}
REGEX = "[a-c]{3}-[0-9]{2}"
_REGEX_PREFIX = re.compile("[a-c]{0,3}|[a-c]{3}-[0-9]{0,2}")  # every prefix of a REGEX match (hand-made for it)
CHOICES = ["yes", "no"]
GRAMMAR = 'root ::= "yes" | "no"'  # GBNF: llama.cpp's grammar and vLLM's (xgrammar) both read it
VALUE = "$value"  # where a probe template takes the constraint


def json_prefix(text: str) -> bool:
    """True when `text` is a prefix of some JSON document (a document cut short); a whole document is one too."""
    stack: list[str] = []  # open containers: "{" / "["
    want = "value"  # value | key | colon | comma | end | key-or-close | value-or-close
    i, n = 0, len(text)

    def after_value() -> str:
        return "comma" if stack else "end"

    while i < n:
        ch = text[i]
        if ch in " \t\r\n":
            i += 1
            continue
        if want == "end":
            return False
        if ch == '"' and want in ("value", "value-or-close", "key", "key-or-close"):
            is_key = want in ("key", "key-or-close")
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    if i + 1 < n and text[i + 1] not in '"\\/bfnrtu':
                        return False
                    if i + 1 < n and text[i + 1] == "u":
                        hexpart = text[i + 2 : i + 6]
                        if not re.fullmatch("[0-9a-fA-F]*", hexpart):
                            return False
                        i += 6
                        continue
                    i += 2
                    continue
                if ord(text[i]) < 0x20:
                    return False
                i += 1
            if i >= n:
                return True  # cut inside a string
            i += 1
            want = "colon" if is_key else after_value()
            continue
        if want in ("value", "value-or-close"):
            if ch == "]" and want == "value-or-close":
                stack.pop()
                want = after_value()
                i += 1
            elif ch in "{[":
                stack.append(ch)
                want = "key-or-close" if ch == "{" else "value-or-close"
                i += 1
            elif ch == "-" or ch.isdigit():
                m = re.match(r"-?[0-9]*\.?[0-9]*(?:[eE][+-]?[0-9]*)?", text[i:])
                tok = m.group(0) if m else ch
                i += len(tok)
                whole = re.fullmatch(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?", tok)
                if i >= n:
                    return bool(re.fullmatch(r"-?(?:0|[1-9][0-9]*)?(?:\.[0-9]*)?(?:[eE][+-]?[0-9]*)?", tok))
                if not whole:
                    return False
                want = after_value()
            elif ch.isalpha():
                m = re.match("[a-z]+", text[i:])
                word = m.group(0) if m else ch
                i += len(word)
                if not any(lit.startswith(word) for lit in ("true", "false", "null")):
                    return False
                if i >= n:
                    return True
                if word not in ("true", "false", "null"):
                    return False
                want = after_value()
            else:
                return False
            continue
        if want == "key-or-close" and ch == "}":
            stack.pop()
            want = after_value()
        elif want == "colon" and ch == ":":
            want = "value"
        elif want == "comma" and ch == ",":
            want = "key" if stack[-1] == "{" else "value"
        elif want == "comma" and ch in "}]" and stack[-1] == {"}": "{", "]": "["}[ch]:
            stack.pop()
            want = after_value()
        else:
            return False
        i += 1
    return True


@dataclass(frozen=True)
class Constraint:
    """One kind of constraint: the value sent, how to judge an output, and what a cut-off output may look like."""

    kind: str  # json | json-object | regex | choice | grammar
    value: Any  # what goes where the probe template says $value
    describe: str
    validate: Callable[[str], str | None]  # None when the output satisfies it, else why not
    prefix: Callable[[str], bool]  # could this be the start of a valid output (cut off by max_tokens)?


def _validate_json(schema: dict[str, Any]) -> Callable[[str], str | None]:
    validator = jsonschema.Draft202012Validator(schema)

    def check(text: str) -> str | None:
        doc, err = decode_json(text)  # bounded in depth (NaN refused), as every JSON a judge parses
        if err is not None:
            return f"is not JSON ({err})"
        errs = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        return f"violates the schema: {errs[0].message}" if errs else None

    return check


def _validate_regex(text: str) -> str | None:
    return None if re.fullmatch(REGEX, text) else f"does not match {REGEX!r}"


def _validate_choice(text: str) -> str | None:
    return None if text in CHOICES else f"is not one of {CHOICES}"


def _choice_prefix(text: str) -> bool:
    return any(c.startswith(text) for c in CHOICES)


CONSTRAINTS: dict[str, Constraint] = {
    "json": Constraint("json", SCHEMA, f"JSON matching {json.dumps(SCHEMA)}", _validate_json(SCHEMA), json_prefix),
    "json-object": Constraint("json-object", None, "a JSON object", _validate_json({"type": "object"}), json_prefix),
    "regex": Constraint("regex", REGEX, f"text matching {REGEX!r}", _validate_regex,
                        lambda s: bool(_REGEX_PREFIX.fullmatch(s))),
    "choice": Constraint("choice", CHOICES, f"one of {CHOICES}", _validate_choice, _choice_prefix),
    "grammar": Constraint("grammar", GRAMMAR, f"the language of {GRAMMAR!r}", _validate_choice, _choice_prefix),
}  # fmt: skip


def output_of(t: Trace) -> tuple[str, str | None, Check | None]:
    """(text, finish_reason, problem) of choice 0, from a non-stream body or a stream. A stream's error event, a body
    without choices or a stream without chunks is the problem."""
    if t.sse or "text/event-stream" in t.content_type:
        view = from_trace(t)
        objs = view.objects()
        for n, obj in objs:
            if "error" in obj:
                return "", None, failed("error-event", "chunks of output", obj.get("error"), n)
        if not objs:
            return "", None, failed("no-chunks", "at least one data chunk", "none", note=f"stream ended: {t.ended}")
        frs = [c.get("finish_reason") for _, _, c in per_index(view).get(0, []) if c.get("finish_reason")]
        return streamed_text(view), (frs[-1] if frs else None), None
    doc, err = t.body_json()
    ch = choices(doc)
    if err or not ch:
        return "", None, failed("non-stream-shape", "JSON with choices", err or doc)
    msg = ch[0].get("message")
    text = (msg.get("content") if isinstance(msg, dict) else None) if "message" in ch[0] else ch[0].get("text")
    return (text if isinstance(text, str) else ""), ch[0].get("finish_reason"), None


def judge_constrained(t: Trace, c: Constraint, field: str) -> Check:
    """One constrained answer: valid output ended by `stop` passes; anything else fails with the tag of what it did,
    the note naming `field` (the request field that asked for the constraint)."""
    if (p := status_problem(t)) is not None:
        p.note = f"{field}: refused or failed: {p.note}"
        p.extra["field"] = field
        return p
    text, finish, p = output_of(t)
    if p is not None:
        p.note = f"{field}: {p.note}" if p.note else field
        p.extra["field"] = field
        return p
    why = c.validate(text)
    if why is None:
        if finish == "stop":
            return passed(f"{field}: {text!r}", field=field)
        return failed(finish_reason_tag(finish), "stop", finish, note=f"{field}: valid output {text!r}", field=field)
    if finish == "length" and c.prefix(text):
        # the server kept the constraint as far as the model went; the model did not close the document within
        # max_tokens (SmolLM2 nests {"smol": {"smol": ... until the bound, on every engine): not the server's verdict
        return inconclusive("truncated", text[:200], field=field,
                            note=f"{field}: cut off at max_tokens; what was sent keeps to the constraint")  # fmt: skip
    return failed("constraint-ignored", c.describe, text[:200], field=field,
                  note=f"{field}: HTTP 200 but the output {why} (finish_reason {finish})")  # fmt: skip


def judge_ways(results: list[tuple[str, Check]]) -> Check:
    """Every declared way of asking for one constraint, judged together: a pass when each passed; else one fail with
    every tag seen, whose note names each field and what it did."""
    dev = Deviations()
    notes = []
    for field, chk in results:
        dev.merge(chk)
        notes.append(chk.note if chk.note.startswith(field) else f"{field}: {chk.note}")
    fields = {field: (chk.behaviour or chk.status.value) for field, chk in results}
    out = dev.check(passed("; ".join(notes)))
    undecided = [c for _, c in results if c.status is Verdict.INCONCLUSIVE]
    if out.status is Verdict.PASS and undecided:  # no way failed, one was not judged: neither is the whole
        out = inconclusive(undecided[0].behaviour, undecided[0].actual, note="; ".join(notes))
    if out.status is Verdict.FAIL:
        out.note = "; ".join(n for (_, c), n in zip(results, notes) if c.status is Verdict.FAIL)
    out.extra["fields"] = fields
    return out


def _fill(template: Any, value: Any) -> Any:
    if template == VALUE:
        return value
    if isinstance(template, dict):
        return {k: _fill(v, value) for k, v in template.items()}
    if isinstance(template, list):
        return [_fill(v, value) for v in template]
    return template


def _has_value(template: Any) -> bool:
    if template == VALUE:
        return True
    if isinstance(template, dict):
        return any(_has_value(v) for v in template.values())
    if isinstance(template, list):
        return any(_has_value(v) for v in template)
    return False


def engine_ways(probes: dict[str, Any], kind: str) -> tuple[dict[str, dict[str, Any]], str]:
    """The declared ways (field name -> request extras, $value filled) for one kind, or the problem with the data."""
    key = f"constraint.{kind}"
    raw = probes.get(key)
    if raw is None:
        return {}, ""
    if not isinstance(raw, dict) or not raw:
        return {}, f"probes.{key}: must map a field name to the request extras that ask for the constraint"
    ways = {}
    for name, template in raw.items():
        if not isinstance(template, dict) or not _has_value(template):
            return (
                {},
                f"probes.{key}.{name}: must be a mapping of request fields with {VALUE} where the constraint goes",
            )
        ways[str(name)] = _fill(template, CONSTRAINTS[kind].value)
    return ways, ""


# -- the cases -----------------------------------------------------------------------------------------------------

RESPONSE_FORMATS: dict[str, tuple[str, dict[str, Any], str]] = {
    # case name -> (constraint, response_format, field as reports name it)
    "json-object": ("json-object", {"type": "json_object"}, "response_format.json_object"),
    "json-schema-strict": (
        "json",
        {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True}},
        "response_format.json_schema (strict)",
    ),
    "json-schema": (
        "json",
        {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}},
        "response_format.json_schema",
    ),
}

MODES = (("nonstream", False), ("stream", True))


def _response_format_case(name: str, stream: bool) -> None:
    kind, rf, field = RESPONSE_FORMATS[name]
    mode = "stream" if stream else "nonstream"

    @case(f"structured.{name}.{mode}", f"{field}{' (streamed)' if stream else ''}: a 200 answer satisfies it")
    async def run(ctx: Any) -> Check:
        body = ctx.chat(max_tokens=MAX_TOKENS, response_format=rf, stream=stream)
        return judge_constrained(await ctx.post(CHAT, body), CONSTRAINTS[kind], field)


def _engine_case(kind: str, stream: bool) -> None:
    mode = "stream" if stream else "nonstream"
    level = Level.MUST if kind == "json" else Level.SHOULD

    @case(
        f"structured.engine.{kind}.{mode}",
        f"each of the engine's own {kind} constraint fields (probes.constraint.{kind}){' streamed' if stream else ''}: "
        f"a 200 answer satisfies it",
        level,
    )
    async def run(ctx: Any) -> Check:
        ways, problem = engine_ways(ctx.exp.probes, kind)
        if problem:
            return errored(f"expectation file {ctx.exp.name}: {problem}")
        if not ways:
            return skipped(f"{ctx.exp.name} declares no probes.constraint.{kind}: the engine has no such field")
        results = []
        for field, extras in ways.items():
            t = await ctx.post(CHAT, ctx.chat(max_tokens=MAX_TOKENS, stream=stream, **extras))
            results.append((field, judge_constrained(t, CONSTRAINTS[kind], field)))
        return judge_ways(results)


for _name in RESPONSE_FORMATS:
    for _, _stream in MODES:
        _response_format_case(_name, _stream)
for _kind in ("json", "regex", "choice", "grammar"):
    for _, _stream in MODES:
        _engine_case(_kind, _stream)
