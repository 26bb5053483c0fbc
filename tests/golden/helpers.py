"""Constructed golden recordings for the diff/store tests (no engine)."""

from __future__ import annotations

import copy

from harness.golden.store import write_recording

MODEL = "b61f3544514869e6180da2540c2d671aa3ea2ce629b96d8c8aee1e4588b5e790"


def row(tok: int, lp: float, top: list[tuple[int, float]] | None = None) -> list:
    top = top or [(tok, lp), ((tok + 1) % 256, lp - 2.0)]
    return [tok, lp, [[i, v] for i, v in top]]


def choice(
    tokens: list[int], lps: list[float] | None = None, tops: dict[int, list] | None = None, finish: str = "length"
) -> dict:
    lps = lps or [-0.5 - 0.01 * i for i in range(len(tokens))]
    tops = tops or {}
    return {
        "index": 0,
        "text": bytes(t for t in tokens if t < 256).decode("latin-1"),
        "token_ids": list(tokens),
        "finish_reason": finish,
        "stop_reason": None,
        "logprobs": [row(t, lp, tops.get(i)) for i, (t, lp) in enumerate(zip(tokens, lps))],
    }


def record(pid: str, choices: list[dict], set_name: str = "chat", request_sha: str = "r0") -> dict:
    return {
        "id": pid,
        "set": set_name,
        "endpoint": "chat",
        "request_sha256": request_sha + pid,
        "request": {},
        "choices": choices,
        "usage": {"prompt_tokens": 3, "completion_tokens": len(choices[0]["token_ids"]) if choices else 0},
        "system_fingerprint": None,
        "response_keys": ["choices", "model"],
    }


def meta(model: str = MODEL, version: str = "0.11.0") -> dict:
    return {"engine": {"kind": "vllm", "version": version}, "model": {"sha256": model}, "sets": {}}


def write(path, sets: dict[str, list[dict]], model: str = MODEL, version: str = "0.11.0", force: bool = False):
    return write_recording(path, meta(model, version), copy.deepcopy(sets), force=force)
