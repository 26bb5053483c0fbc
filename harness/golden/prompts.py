"""Golden prompt sets: `golden/prompts/<name>.yaml`, validated strictly.

A set file has `name`, `description`, optional `defaults` (applied to every prompt) and `prompts`, a list of prompts each
with a stable `id` and either `messages` (-> /v1/chat/completions) or `prompt` (-> /v1/completions). Options a prompt may set:
`max_tokens`, `top_logprobs` (0..5), `stop`, `n`, `seed`, `temperature`, and for chat prompts the constraints a client
relies on: `response_format` (`{type: json_object}` or `{type: json_schema, json_schema: {name, schema, strict}}`, the
schema checked as a JSON Schema) and `tools` with `tool_choice` (`auto`, `none`, `required` or a named function that must
be one of the tools). A prompt's `constraint()` says what its output must satisfy (harness.golden.constraints checks it
at record time). Temperature is 0 (greedy) unless a prompt sets
it, which needs a `seed` (seeded sampling: reproducible on one engine version; across versions a sampler change shows up
as a divergence). vLLM refuses `n > 1` with greedy sampling (HTTP 400 "n must be 1 when using greedy sampling"), so an
`n: 2` prompt at temperature 0 records that refusal, and `n: 2` outputs come from seeded sampling. Every problem is a ManifestError naming
the file and the field (e.g. `prompts[3].messages`).

`Prompt.body()` is the exact request body without `model`; its sha256 (`request_sha256`) is what a diff uses to decide that
two recordings of the same id asked the same question.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ManifestError
from harness.models.catalog import EMBEDDED_MODELS
from harness.readers import parse_yaml, read_bytes
from harness.settings import GOLDEN_ROOT

__all__ = [
    "Prompt",
    "PromptSet",
    "PROMPTS_DIR",
    "CONSTRAINT_KEYS",
    "load_prompt_set",
    "resolve_prompt_sets",
    "canonical_json",
]

PROMPTS_DIR = GOLDEN_ROOT / "prompts"
ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
CONSTRAINT_KEYS = ("response_format", "tools", "tool_choice")  # chat only; in the body only when the prompt sets them
OPTION_KEYS = {"max_tokens", "top_logprobs", "stop", "n", "seed", "temperature", *CONSTRAINT_KEYS}
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for function names
PROMPT_KEYS = OPTION_KEYS | {"id", "messages", "prompt", "description"}


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Prompt:
    id: str
    endpoint: str  # "chat" | "completions"
    input: Any  # messages list or prompt string
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"

    def body(self) -> dict[str, Any]:
        """Request body without `model`. Token ids are asked for twice: `return_token_ids` (vLLM >= 0.10.2) and
        `return_tokens_as_token_ids` (logprob tokens as "token_id:N"), so an engine without the first still gives ids."""
        o = self.options
        top = int(o.get("top_logprobs", 5))
        b: dict[str, Any] = {
            "max_tokens": int(o.get("max_tokens", 16)),
            "temperature": float(o.get("temperature", 0.0)),
            "n": int(o.get("n", 1)),
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        if "seed" in o:
            b["seed"] = int(o["seed"])
        if "stop" in o:
            b["stop"] = list(o["stop"])
        for k in CONSTRAINT_KEYS:  # absent from every prompt that does not set them: older request hashes unchanged
            if k in o:
                b[k] = o[k]
        if self.endpoint == "chat":
            b["messages"] = self.input
            b["logprobs"] = True
            b["top_logprobs"] = top
        else:
            b["prompt"] = self.input
            b["logprobs"] = top
        return b

    def constraint(self) -> dict[str, Any] | None:
        """What the output must satisfy, or None: {kind: json_schema, schema, strict} | {kind: json_object} |
        {kind: tool_choice, choice: NAME | "required", tools: {name: parameters schema}} (tool_choice auto/none and
        tools without tool_choice constrain nothing a client can check, so None)."""
        o = self.options
        rf = o.get("response_format")
        if rf is not None and rf["type"] == "json_schema":
            js = rf["json_schema"]
            return {"kind": "json_schema", "schema": js["schema"], "strict": bool(js.get("strict", False))}
        if rf is not None and rf["type"] == "json_object":
            return {"kind": "json_object"}
        tc = o.get("tool_choice")
        if "tools" in o and (isinstance(tc, dict) or tc == "required"):
            tools = {t["function"]["name"]: t["function"].get("parameters") for t in o["tools"]}
            choice = tc["function"]["name"] if isinstance(tc, dict) else "required"
            return {"kind": "tool_choice", "choice": choice, "tools": tools}
        return None

    def request_sha256(self) -> str:
        return hashlib.sha256(canonical_json({"path": self.path, "body": self.body()}).encode()).hexdigest()


@dataclass(frozen=True)
class PromptSet:
    name: str
    description: str
    prompts: tuple[Prompt, ...]
    path: Path | None = None
    file_sha256: str = ""
    model: str | None = None  # the embedded model the set is written for: that model's default selection

    def ids(self) -> list[str]:
        return [p.id for p in self.prompts]


def _check_options(path: Path, where: str, opts: dict) -> dict:
    for k, v in opts.items():
        f = f"{where}.{k}"
        if k not in OPTION_KEYS:
            raise ManifestError(path, f, f"unknown option (allowed: {', '.join(sorted(OPTION_KEYS))})")
        if k in ("max_tokens", "n") and not (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1024):
            raise ManifestError(path, f, f"must be an integer 1..1024, got {v!r}")
        if k == "top_logprobs" and not (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 5):
            raise ManifestError(path, f, f"must be an integer 0..5, got {v!r}")
        if k == "seed" and not (isinstance(v, int) and not isinstance(v, bool)):
            raise ManifestError(path, f, f"must be an integer, got {v!r}")
        if k == "temperature" and not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 2):
            raise ManifestError(path, f, f"must be a number 0..2, got {v!r}")
        if k == "stop" and not (isinstance(v, list) and v and all(isinstance(s, str) and s for s in v)):
            raise ManifestError(path, f, "must be a non-empty list of non-empty strings")
        if k == "response_format":
            _check_response_format(path, f, v)
        if k == "tools":
            _check_tools(path, f, v)
        if k == "tool_choice" and not (v in ("auto", "none", "required") or _named_choice(v)):
            raise ManifestError(path, f, "must be auto, none, required or {type: function, function: {name: NAME}}")
    return dict(opts)


def _check_schema(path: Path, where: str, schema: Any) -> None:
    """A JSON Schema the output is validated against: an object that its own metaschema accepts."""
    from jsonschema import exceptions, validators

    if not isinstance(schema, dict):
        raise ManifestError(path, where, "must be a JSON Schema object")
    remote = _non_local_refs(schema)
    if remote:
        raise ManifestError(path, where, f"$ref {remote[0]!r}: only local references (#...); no schema is ever fetched")
    try:
        validators.validator_for(schema).check_schema(schema)
    except exceptions.SchemaError as exc:
        at = "/".join(str(x) for x in exc.path)
        raise ManifestError(
            path, where + (f" ({at})" if at else ""), f"not a valid JSON Schema: {exc.message}"
        ) from None


def _non_local_refs(obj: Any) -> list[str]:
    """$ref / $dynamicRef values that point outside the schema itself (a URL or a file)."""
    out: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ("$ref", "$dynamicRef", "$recursiveRef") and not (isinstance(v, str) and v.startswith("#")):
                out.append(str(v))
            out += _non_local_refs(v)
    elif isinstance(obj, list):
        for v in obj:
            out += _non_local_refs(v)
    return out


def _check_response_format(path: Path, where: str, v: Any) -> None:
    if not isinstance(v, dict) or v.get("type") not in ("json_object", "json_schema"):
        raise ManifestError(path, where, "must be {type: json_object} or {type: json_schema, json_schema: {...}}")
    if v["type"] == "json_object":
        if set(v) != {"type"}:
            raise ManifestError(path, where, "json_object takes no other field")
        return
    if set(v) != {"type", "json_schema"} or not isinstance(v["json_schema"], dict):
        raise ManifestError(path, f"{where}.json_schema", "required: {name, schema, strict (optional)}")
    js = v["json_schema"]
    extra = set(js) - {"name", "schema", "strict", "description"}
    if extra:
        raise ManifestError(path, f"{where}.json_schema.{sorted(extra)[0]}", "unknown field")
    if not isinstance(js.get("name"), str) or not TOOL_NAME_RE.match(js["name"]):
        raise ManifestError(path, f"{where}.json_schema.name", "required: [A-Za-z0-9_-], at most 64 characters")
    if "strict" in js and not isinstance(js["strict"], bool):
        raise ManifestError(path, f"{where}.json_schema.strict", "must be true or false")
    _check_schema(path, f"{where}.json_schema.schema", js.get("schema"))


def _check_tools(path: Path, where: str, v: Any) -> None:
    if not isinstance(v, list) or not v:
        raise ManifestError(path, where, "must be a non-empty list of {type: function, function: {name, parameters}}")
    names: set[str] = set()
    for i, t in enumerate(v):
        w = f"{where}[{i}]"
        if not isinstance(t, dict) or set(t) != {"type", "function"} or t["type"] != "function":
            raise ManifestError(path, w, "must be {type: function, function: {name, description, parameters}}")
        fn = t["function"]
        if not isinstance(fn, dict) or set(fn) - {"name", "description", "parameters"}:
            raise ManifestError(path, f"{w}.function", "must be {name, description (optional), parameters}")
        if not isinstance(fn.get("name"), str) or not TOOL_NAME_RE.match(fn["name"]):
            raise ManifestError(path, f"{w}.function.name", "required: [A-Za-z0-9_-], at most 64 characters")
        if fn["name"] in names:
            raise ManifestError(path, f"{w}.function.name", f"duplicate tool name {fn['name']!r}")
        names.add(fn["name"])
        if "description" in fn and not isinstance(fn["description"], str):
            raise ManifestError(path, f"{w}.function.description", "must be a string")
        _check_schema(path, f"{w}.function.parameters", fn.get("parameters"))


def _named_choice(v: Any) -> bool:
    return (
        isinstance(v, dict)
        and set(v) == {"type", "function"}
        and v["type"] == "function"
        and isinstance(v["function"], dict)
        and set(v["function"]) == {"name"}
        and isinstance(v["function"]["name"], str)
    )


def _tool_turn(m: Any) -> bool:
    """An assistant turn that called tools ({role, content: null, tool_calls: [{id, type, function: {name,
    arguments: a JSON string}}]}) or a tool's result ({role: tool, tool_call_id, content})."""
    if not isinstance(m, dict):
        return False
    if m.get("role") == "tool":
        return set(m) == {"role", "tool_call_id", "content"} and all(isinstance(m[k], str) for k in m)
    calls = m.get("tool_calls")
    return (
        m.get("role") == "assistant"
        and set(m) == {"role", "content", "tool_calls"}
        and m["content"] is None
        and isinstance(calls, list)
        and bool(calls)
        and all(
            isinstance(c, dict) and set(c) == {"id", "type", "function"} and c["type"] == "function"
            and isinstance(c["id"], str) and isinstance(c["function"], dict)
            and set(c["function"]) == {"name", "arguments"}
            and all(isinstance(v, str) for v in c["function"].values())
            for c in calls
        )
    )  # fmt: skip


def _check_messages(path: Path, where: str, msgs: Any) -> list[dict[str, Any]]:
    if not isinstance(msgs, list) or not msgs:
        raise ManifestError(path, where, "must be a non-empty list of {role, content}")
    for j, m in enumerate(msgs):
        plain = (
            isinstance(m, dict)
            and set(m) == {"role", "content"}
            and m["role"] in ("system", "user", "assistant")
            and isinstance(m["content"], str)
        )
        if not plain and not _tool_turn(m):
            raise ManifestError(path, f"{where}[{j}]", "must be {role: system|user|assistant, content: string}, an "
                                "assistant turn {role, content: null, tool_calls} or {role: tool, tool_call_id, "
                                "content}")  # fmt: skip
    return [dict(m) for m in msgs]


def _check_constraints(path: Path, where: str, endpoint: str, opts: dict) -> None:
    """response_format and tools are chat fields; tool_choice needs tools, and a named one must be one of them."""
    for k in CONSTRAINT_KEYS:
        if k in opts and endpoint != "chat":
            raise ManifestError(path, f"{where}.{k}", "a chat field: only prompts with messages may set it")
    if "tool_choice" in opts and "tools" not in opts:
        raise ManifestError(path, f"{where}.tool_choice", "needs tools")
    tc = opts.get("tool_choice")
    if isinstance(tc, dict):
        names = [t["function"]["name"] for t in opts["tools"]]
        if tc["function"]["name"] not in names:
            raise ManifestError(
                path,
                f"{where}.tool_choice",
                f"names {tc['function']['name']!r}, not one of the tools ({', '.join(names)})",
            )
    if "response_format" in opts and "tools" in opts:
        raise ManifestError(path, f"{where}.response_format", "one constraint per prompt: response_format or tools")


def load_prompt_set(path: str | Path) -> PromptSet:
    p = Path(path)
    data = read_bytes(p, "prompt set")  # bounded; refuses FIFOs, devices, directories
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ManifestError(p, f"line {line}", "prompt set is not UTF-8 text") from None
    raw = parse_yaml(text, p, "prompt set")  # duplicate keys, nesting, .nan/.inf: ManifestError with the line
    if not isinstance(raw, dict):
        raise ManifestError(p, "(top level)", "must be a mapping with name, description, prompts")
    extra = set(raw) - {"name", "description", "defaults", "prompts", "model"}
    if extra:
        raise ManifestError(p, sorted(extra)[0], "unknown field")
    name = raw.get("name")
    if not isinstance(name, str) or not ID_RE.match(name):
        raise ManifestError(p, "name", "required: lowercase letters, digits, '.', '_' or '-'")
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise ManifestError(p, "defaults", "must be a mapping")
    defaults = _check_options(p, "defaults", defaults)
    items = raw.get("prompts")
    if not isinstance(items, list) or not items:
        raise ManifestError(p, "prompts", "required: a non-empty list")
    prompts: list[Prompt] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        where = f"prompts[{i}]"
        if not isinstance(item, dict):
            raise ManifestError(p, where, "must be a mapping")
        unknown = set(item) - PROMPT_KEYS
        if unknown:
            raise ManifestError(p, f"{where}.{sorted(unknown)[0]}", "unknown field")
        pid = item.get("id")
        if not isinstance(pid, str) or not ID_RE.match(pid):
            raise ManifestError(p, f"{where}.id", f"required: a stable id of [a-z0-9._-], got {pid!r}")
        if pid in seen:
            raise ManifestError(p, f"{where}.id", f"duplicate id {pid!r}")
        seen.add(pid)
        if ("messages" in item) == ("prompt" in item):
            raise ManifestError(p, where, "exactly one of messages (chat) or prompt (completions) is required")
        if "messages" in item:
            endpoint, inp = "chat", _check_messages(p, f"{where}.messages", item["messages"])
        else:
            if not isinstance(item["prompt"], str) or not item["prompt"]:
                raise ManifestError(p, f"{where}.prompt", "must be a non-empty string")
            endpoint, inp = "completions", item["prompt"]
        opts = dict(defaults)
        opts.update(_check_options(p, where, {k: v for k, v in item.items() if k in OPTION_KEYS}))
        _check_constraints(p, where, endpoint, opts)
        if opts.get("temperature", 0) and "seed" not in item:
            raise ManifestError(p, f"{where}.temperature", "sampling (temperature > 0) needs the prompt's own seed")
        prompts.append(Prompt(id=pid, endpoint=endpoint, input=inp, options=opts))
    model = raw.get("model")
    if model is not None and model not in EMBEDDED_MODELS:
        raise ManifestError(
            p, "model", f"an embedded model the set is written for: one of {', '.join(EMBEDDED_MODELS)}"
        )
    return PromptSet(
        name=name,
        model=model,
        description=str(raw.get("description", "")),
        prompts=tuple(prompts),
        path=p.resolve(),
        file_sha256=hashlib.sha256(data).hexdigest(),
    )


def resolve_prompt_sets(
    names: list[str] | None = None, directory: Path = PROMPTS_DIR, *, model: str | None = None
) -> list[PromptSet]:
    """Sets by name (a file name stem in `directory`) or path; when names is empty, the default selection for the
    manifest's `model` (its model.source): the sets written for that model (their `model:` field), or, when none is,
    every set that names no model. The choice is the sets' data: a set written for one model is never recorded on
    another unless named."""
    if not names:
        files = sorted(directory.glob("*.yaml"))
        if not files:
            raise ManifestError(directory, "(directory)", "no prompt sets (*.yaml) found")
    else:
        files = []
        for n in names:
            cand = Path(n)
            if not (cand.suffix in (".yaml", ".yml") and cand.is_file()):
                cand = directory / f"{n}.yaml"
            if not cand.is_file():
                known = ", ".join(sorted(f.stem for f in directory.glob("*.yaml")))
                raise ManifestError(cand, "(file)", f"no prompt set named {n!r} (known: {known})")
            files.append(cand)
    sets = [load_prompt_set(f) for f in files]
    names_seen: dict[str, Path] = {}
    for s in sets:
        if s.name in names_seen:
            raise ManifestError(s.path, "name", f"set name {s.name!r} also used by {names_seen[s.name]}")
        names_seen[s.name] = s.path
    if not names:
        own = [s for s in sets if model is not None and s.model == model]
        sets = own or [s for s in sets if s.model is None]
    return sets
