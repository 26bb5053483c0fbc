"""Issue 36's declared quirks (the stop.* cases on SmolLM2-135M-Instruct) as rows of test_exact_quirks.TABLE: (judge,
the shape the engine answered with, another shape, the tag that other shape fails with). The shapes are the runs'
answers (harness conform on the smollm2 manifests), cut to what the judges read; each judge is the case's own."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from harness.client import Trace
from harness.conformance.cases.stop import (
    Answer,
    judge_max_tokens_at_eos,
    judge_min_tokens,
    judge_n_lengths,
    judge_stop_string,
)
from harness.conformance.model import Check

__all__ = ["ISSUE_36"]

Row = tuple[Callable[[Any], Check], Any, Any, str]
NATURAL = "The answer to this classic math problem is 4."  # greedy, "What is 2+2?", on vLLM 0.11.0 and llama.cpp
USAGE = {"prompt_tokens": 37, "completion_tokens": 12, "total_tokens": 49}
NATURAL_ANSWER = Answer(NATURAL, "stop", USAGE)


def _reply(text: str, finish: str, completion: int) -> Trace:
    doc = {"object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
           "finish_reason": finish}], "usage": {**USAGE, "completion_tokens": completion}}  # fmt: skip
    return Trace("POST", "/v1/chat/completions", status=200, body=json.dumps(doc).encode())


def _both(text: str) -> tuple[Answer, Answer]:
    return Answer(text, "stop", USAGE), Answer(text, "stop", USAGE)


def _choices(lengths: list[int], usage: int) -> list[Answer]:
    return [Answer("x", "stop", {"completion_tokens": usage}, k) for k in lengths]


ISSUE_36: dict[tuple[str, str], Row] = {
    ("llamacpp-0c1e570", "stop.string.include"): (
        lambda pair: judge_stop_string(NATURAL, "classic", 19, *pair, include=True),
        _both("The answer to this "), _both(NATURAL), "stop-string-ignored",
    ),
    ("llamacpp-0c1e570", "stop.min-tokens"): (
        lambda t: judge_min_tokens(NATURAL_ANSWER, t, 20),
        _reply(NATURAL, "stop", 12), _reply(NATURAL + " Four.", "stop", 14), "min-tokens-short",
    ),
    ("llamacpp-0c1e570", "stop.n-lengths"): (
        lambda got: judge_n_lengths(got, 4, 64),
        _choices([7, 51, 41, 57], 7), _choices([7], 8), "n-ignored",
    ),
    ("vllm-0.11", "stop.max-tokens-at-eos"): (
        lambda got: judge_max_tokens_at_eos(NATURAL_ANSWER, got),
        Answer(NATURAL, "length", USAGE), Answer(NATURAL[:-3], "length", USAGE), "text-differs",
    ),
}  # fmt: skip
