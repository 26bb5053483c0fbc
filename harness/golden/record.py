"""Record golden outputs from a running OpenAI-compatible engine (non-streaming, temperature 0, one request at a time).

`record_sets(base_url, served_name, sets, api_key=None)` -> ({set: [record]}, {set: seconds}). Requests are sent
sequentially so the engine never batches two golden prompts together (batch shape can change CPU numerics).
An HTTP error or malformed response is an EngineResponseError naming the prompt: a recording is all or nothing.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from harness.client import bearer
from harness import __version__
from harness.errors import HarnessError
from harness.golden.prompts import Prompt, PromptSet

__all__ = ["EngineResponseError", "record_prompt", "record_sets", "normalize_response", "key_paths", "build_meta"]


class EngineResponseError(HarnessError):
    exit_code = 1


def _token_id(tok: Any) -> int | None:
    if isinstance(tok, str) and tok.startswith("token_id:"):
        try:
            return int(tok[len("token_id:") :])
        except ValueError:
            return None
    return None


def key_paths(obj: Any, prefix: str = "") -> set[str]:
    """Dotted key paths of a JSON value (lists become `[]`), with `=null` for keys whose value is null.
    Used to show wire-shape changes (e.g. `system_fingerprint` appearing) between engine versions."""
    out: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = f"{prefix}.{k}" if prefix else k
            if v is None:
                out.add(p + "=null")
            else:
                out.add(p)
                if k not in ("logprobs", "prompt_token_ids", "token_ids", "prompt_logprobs"):
                    out |= key_paths(v, p)
    elif isinstance(obj, list):
        for v in obj:
            out |= key_paths(v, prefix + "[]")
    return out


def _sorted_top(pairs: list[tuple[int, float]]) -> list[list]:
    return [[i, lp] for i, lp in sorted(pairs, key=lambda t: (-t[1], t[0]))]


def _chat_logprobs(ch: dict) -> list[list]:
    content = ((ch.get("logprobs") or {}).get("content")) or []
    rows = []
    for item in content:
        tid = _token_id(item.get("token"))
        tops = [(_token_id(t.get("token")), float(t.get("logprob"))) for t in item.get("top_logprobs") or []]
        rows.append([tid, float(item.get("logprob")), _sorted_top([(i, lp) for i, lp in tops if i is not None])])
    return rows


def _completion_logprobs(ch: dict) -> list[list]:
    lp = ch.get("logprobs") or {}
    toks, vals, tops = lp.get("tokens") or [], lp.get("token_logprobs") or [], lp.get("top_logprobs") or []
    rows = []
    for j, tok in enumerate(toks):
        top = tops[j] if j < len(tops) and isinstance(tops[j], dict) else {}
        pairs = [(_token_id(k), float(v)) for k, v in top.items()]
        val = vals[j] if j < len(vals) and vals[j] is not None else float("-inf")
        rows.append([_token_id(tok), float(val), _sorted_top([(i, v) for i, v in pairs if i is not None])])
    return rows


def normalize_response(prompt: Prompt, set_name: str, resp: dict) -> dict:
    """One golden record from one raw response. Raises ValueError when the response lacks what a record needs."""
    choices = []
    for ch in sorted(resp.get("choices") or [], key=lambda c: c.get("index", 0)):
        if prompt.endpoint == "chat":
            text = (ch.get("message") or {}).get("content") or ""
            rows = _chat_logprobs(ch)
        else:
            text = ch.get("text") or ""
            rows = _completion_logprobs(ch)
        ids = ch.get("token_ids")
        from_logprobs = [r[0] for r in rows]
        if not isinstance(ids, list):
            if any(i is None for i in from_logprobs):
                raise ValueError("no token_ids and logprob tokens are not token_id:N")
            ids = from_logprobs
        if any(r[0] is None for r in rows):
            raise ValueError("logprob tokens are not token_id:N (return_tokens_as_token_ids ignored?)")
        choices.append(
            {
                "index": ch.get("index", 0),
                "text": text,
                "token_ids": [int(i) for i in ids],
                "finish_reason": ch.get("finish_reason"),
                "stop_reason": ch.get("stop_reason"),
                "logprobs": rows,
            }
        )
    n = int(prompt.body()["n"])
    if len(choices) != n:
        raise ValueError(f"expected {n} choices, got {len(choices)}")
    return {
        "id": prompt.id,
        "set": set_name,
        "endpoint": prompt.endpoint,
        "request_sha256": prompt.request_sha256(),
        "request": prompt.body(),
        "choices": choices,
        "usage": resp.get("usage"),
        "system_fingerprint": resp.get("system_fingerprint"),
        "response_keys": sorted(key_paths({k: v for k, v in resp.items() if k not in ("id", "created")})),
    }


def record_prompt(client: httpx.Client, served_name: str, prompt: Prompt, set_name: str) -> dict:
    body = dict(prompt.body(), model=served_name)
    try:
        r = client.post(prompt.path, json=body)
    except httpx.HTTPError as exc:
        raise EngineResponseError(f"prompt {set_name}/{prompt.id}: request failed: {type(exc).__name__}: {exc}") from None
    if 400 <= r.status_code < 500 and r.status_code not in (401, 403, 404, 408, 429):
        # The engine refused this request (e.g. 0.32.0: "n must be 1 when using greedy sampling"): that *is* its
        # golden output; the diff compares it with the other version's answer.
        try:
            err = (r.json() or {}).get("error") or {}
        except ValueError:
            err = {}
        if not isinstance(err, dict):
            err = {"message": str(err)}
        return {"id": prompt.id, "set": set_name, "endpoint": prompt.endpoint,
                "request_sha256": prompt.request_sha256(), "request": prompt.body(), "choices": [],
                "error": {"status": r.status_code, "type": err.get("type"), "message": str(err.get("message", r.text[:300]))},
                "usage": None, "system_fingerprint": None, "response_keys": []}
    if r.status_code != 200:
        raise EngineResponseError(f"prompt {set_name}/{prompt.id}: HTTP {r.status_code}: {r.text[:300]}")
    try:
        return normalize_response(prompt, set_name, r.json())
    except ValueError as exc:
        raise EngineResponseError(f"prompt {set_name}/{prompt.id}: malformed response: {exc}") from None


def record_sets(
    base_url: str, served_name: str, sets: list[PromptSet], *, api_key: str | None = None, timeout: float = 120.0
) -> tuple[dict[str, list[dict]], dict[str, float]]:
    headers = bearer(api_key)
    out: dict[str, list[dict]] = {}
    timing: dict[str, float] = {}
    with httpx.Client(base_url=base_url, headers=headers, timeout=timeout, trust_env=False) as client:
        for s in sets:
            t0 = time.perf_counter()
            out[s.name] = [record_prompt(client, served_name, p, s.name) for p in s.prompts]
            timing[s.name] = round(time.perf_counter() - t0, 3)
    return out, timing


def build_meta(manifest: Any, sets: list[PromptSet], *, identity: dict | None, engine_version: str | None,
               timing: dict[str, float], base_url: str) -> dict:
    """Provenance of a recording: manifest pins, engine /version, lock hash or image digest, model, args, harness."""
    py, dk = manifest.runtime.python, manifest.runtime.docker
    runtime: dict[str, Any] = {}
    if py is not None:
        from harness.hashing import file_sha256

        lock = manifest.lock_path
        runtime = {"kind": "python", "python": py.version, "lock": py.lock,
                   "lock_sha256": file_sha256(lock) if lock and lock.is_file() else None}
    elif dk is not None:
        runtime = {"kind": "docker", "image": dk.image, "digest": dk.digest}
    return {
        "engine": {"kind": manifest.engine.kind, "version": manifest.engine.version, "reported_version": engine_version},
        "manifest": {"name": manifest.name, "path": str(manifest.path) if manifest.path else None,
                     "sha256": manifest.file_sha256()},
        "runtime": runtime,
        "model": {"source": manifest.model.source, "sha256": manifest.model.sha256,
                  "served_name": manifest.model.served_name},
        "server": {"args": list(manifest.server.args), "env": dict(manifest.server.env)},
        "identity": identity or {},
        "harness_version": __version__,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "base_url": base_url,
        "timing_s": timing,
        "sets": {s.name: {"prompt_file": s.path.name if s.path else None, "prompt_file_sha256": s.file_sha256,
                          "ids": s.ids()} for s in sets},
    }
