"""Golden prompt sets: `golden/prompts/<name>.yaml`, validated strictly.

A set file has `name`, `description`, optional `defaults` (applied to every prompt) and `prompts`, a list of prompts each
with a stable `id` and either `messages` (-> /v1/chat/completions) or `prompt` (-> /v1/completions). Options a prompt may set:
`max_tokens`, `top_logprobs` (0..5), `stop`, `n`, `seed`, `temperature`. Temperature is 0 (greedy) unless a prompt sets
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
from harness.readers import parse_yaml, read_bytes
from harness.settings import GOLDEN_ROOT

__all__ = ["Prompt", "PromptSet", "PROMPTS_DIR", "load_prompt_set", "resolve_prompt_sets", "canonical_json"]

PROMPTS_DIR = GOLDEN_ROOT / "prompts"
ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
OPTION_KEYS = {"max_tokens", "top_logprobs", "stop", "n", "seed", "temperature"}
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
        if self.endpoint == "chat":
            b["messages"] = self.input
            b["logprobs"] = True
            b["top_logprobs"] = top
        else:
            b["prompt"] = self.input
            b["logprobs"] = top
        return b

    def request_sha256(self) -> str:
        return hashlib.sha256(canonical_json({"path": self.path, "body": self.body()}).encode()).hexdigest()


@dataclass(frozen=True)
class PromptSet:
    name: str
    description: str
    prompts: tuple[Prompt, ...]
    path: Path | None = None
    file_sha256: str = ""

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
    return dict(opts)


def _check_messages(path: Path, where: str, msgs: Any) -> list[dict[str, str]]:
    if not isinstance(msgs, list) or not msgs:
        raise ManifestError(path, where, "must be a non-empty list of {role, content}")
    for j, m in enumerate(msgs):
        if (
            not isinstance(m, dict)
            or set(m) != {"role", "content"}
            or m["role"] not in ("system", "user", "assistant")
            or not isinstance(m["content"], str)
        ):
            raise ManifestError(path, f"{where}[{j}]", "must be {role: system|user|assistant, content: string}")
    return [dict(m) for m in msgs]


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
    extra = set(raw) - {"name", "description", "defaults", "prompts"}
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
        if opts.get("temperature", 0) and "seed" not in item:
            raise ManifestError(p, f"{where}.temperature", "sampling (temperature > 0) needs the prompt's own seed")
        prompts.append(Prompt(id=pid, endpoint=endpoint, input=inp, options=opts))
    return PromptSet(
        name=name,
        description=str(raw.get("description", "")),
        prompts=tuple(prompts),
        path=p.resolve(),
        file_sha256=hashlib.sha256(data).hexdigest(),
    )


def resolve_prompt_sets(names: list[str] | None = None, directory: Path = PROMPTS_DIR) -> list[PromptSet]:
    """Sets by name (a file name stem in `directory`) or path; all sets in `directory` when names is empty."""
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
    return sets
