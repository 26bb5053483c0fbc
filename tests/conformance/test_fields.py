"""Honoured or refused (issue 11, item 2): recorded-shaped answers for each field case: the effect shown (pass), a
4xx with an error object (pass, refused), accepted and ignored (ignored-field naming the field), a refusal without an
error object, and the INFO case for unknown fields; the verdicts under the expectation files."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.client import Trace
from harness.conformance.cases.fields import (
    UNKNOWN_FIELD,
    judge_best_of,
    judge_max_completion_tokens,
    judge_seed,
    judge_temperature,
    judge_token_ids,
    judge_top_p,
    judge_unknown_field,
    refusal,
)
from harness.conformance.expectations import load_expectations, resolve
from harness.conformance.suite import all_cases

CASES = {c.id: c for c in all_cases()}
GREEDY = "ed4;Zx8G&8G}"  # vLLM 0.11.0 and llama.cpp, temperature 0, 12 tokens


def answer(status: int, body: Any, path: str = "/v1/chat/completions") -> Trace:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Trace("POST", f"http://127.0.0.1:1{path}", status=status, body=raw,
                 headers={"content-type": "application/json"}, ended="eof")  # fmt: skip


def chat(text: str, tokens: int = 12, finish: str = "length", **choice: Any) -> Trace:
    return answer(200, {"object": "chat.completion", "id": "chatcmpl-1", "model": "tiny-llama",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                     "finish_reason": finish, **choice}],
                        "usage": {"prompt_tokens": 9, "completion_tokens": tokens, "total_tokens": 9 + tokens}})  # fmt: skip


def completion(tokens: int, finish: str = "length") -> Trace:
    return answer(200, {"object": "text_completion", "id": "cmpl-1", "model": "tiny-llama",
                        "choices": [{"index": 0, "text": "b\u0011h4`", "finish_reason": finish}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens}},
                  "/v1/completions")  # fmt: skip


VLLM_REFUSAL = answer(400, {"error": {"message": "vLLM V1 does not yet support best_of.", "type": "BadRequestError",
                                      "param": None, "code": 400}}, "/v1/completions")  # fmt: skip


def test_refusal_is_a_pass_only_with_an_error_object():
    assert refusal(chat("x"), "seed") is None
    ok = refusal(VLLM_REFUSAL, "best_of")
    assert ok is not None and ok.status.value == "pass" and ok.extra["outcome"] == "refused"
    assert "best_of refused: HTTP 400" in ok.note
    plain = refusal(answer(422, {"error": "bad", "error_type": "validation"}), "seed")
    assert plain is not None and plain.behaviour == "plain-error-string"
    empty = refusal(answer(400, b""), "seed")
    assert empty is not None and empty.behaviour == "no-error-object" and "seed" in empty.note
    server = refusal(answer(500, {"error": {"message": "boom"}}), "seed")
    assert server is not None and server.behaviour == "status-500"


def test_temperature():
    sampled = [chat("DR%9m"), chat(GREEDY), chat("U.J u9")]
    assert judge_temperature(chat(GREEDY), sampled).status.value == "pass"
    ignored = judge_temperature(chat(GREEDY), [chat(GREEDY)] * 3)
    assert ignored.behaviours == ("ignored-field",) and ignored.note.startswith("temperature:")
    assert ignored.extra["field"] == "temperature"
    refused = judge_temperature(chat(GREEDY), [answer(400, {"error": {"message": "no sampling"}})] * 3)
    assert refused.status.value == "pass" and refused.extra["outcome"] == "refused"
    assert judge_temperature(answer(503, b""), sampled).behaviour == "status-503"


def test_top_p():
    assert judge_top_p(chat(GREEDY), chat("U.J u9"), chat(GREEDY)).status.value == "pass"
    ignored = judge_top_p(chat(GREEDY), chat("U.J u9"), chat("U.J u9"))
    assert ignored.behaviour == "ignored-field" and ignored.extra["field"] == "top_p"
    # sampling that never left the greedy text proves nothing about top_p
    assert judge_top_p(chat(GREEDY), chat(GREEDY), chat(GREEDY)).status.value == "skip"
    refused = judge_top_p(chat(GREEDY), chat("U.J u9"), answer(400, {"error": {"message": "top_p must be > 0.01"}}))
    assert refused.status.value == "pass" and "top_p refused" in refused.note


def test_seed():
    assert judge_seed(chat(GREEDY), chat("DR%9m"), chat("DR%9m")).status.value == "pass"
    ignored = judge_seed(chat(GREEDY), chat("DR%9m"), chat("x7!"))
    assert ignored.behaviour == "ignored-field" and "seed:" in ignored.note
    assert judge_seed(chat(GREEDY), chat(GREEDY), chat(GREEDY)).status.value == "skip"


def test_max_completion_tokens():
    assert judge_max_completion_tokens(chat("ed4;Z", 5)).status.value == "pass"
    ignored = judge_max_completion_tokens(chat("ed4;Zx8G" * 12, 96))
    assert ignored.behaviour == "ignored-field" and "5 asked, 96 generated" in ignored.note
    assert judge_max_completion_tokens(chat("ed", 2, "stop")).status.value == "skip"
    refused = judge_max_completion_tokens(answer(400, {"error": {"message": "unknown max_completion_tokens"}}))
    assert refused.status.value == "pass"
    assert judge_max_completion_tokens(chat("ed4", 3, "length")).behaviour == "completion-tokens"


def test_best_of_ignored_refused_and_honoured():
    ignored = judge_best_of(completion(12))  # llama.cpp 0c1e570: HTTP 200, one candidate
    assert ignored.behaviour == "ignored-field" and ignored.note.startswith("best_of:")
    assert judge_best_of(VLLM_REFUSAL).status.value == "pass"  # vLLM 0.11.0
    assert judge_best_of(completion(24)).status.value == "pass"  # usage counts both candidates
    assert judge_best_of(answer(200, {"choices": []}, "/v1/completions")).behaviour == "usage-shape"


def test_best_of_verdicts_under_each_file():
    case = CASES["fields.best-of"]
    assert resolve(case, judge_best_of(completion(12)), load_expectations("llamacpp-0c1e570")).verdict == "quirk"
    assert resolve(case, judge_best_of(completion(12)), load_expectations("vllm-0.11")).verdict == "fail"
    # vLLM's refusal is the reference's "refused": a pass; under llama.cpp's file it would say the quirk went away
    assert resolve(case, judge_best_of(VLLM_REFUSAL), load_expectations("vllm-0.11")).verdict == "pass"
    assert resolve(case, judge_best_of(VLLM_REFUSAL), load_expectations("llamacpp-0c1e570")).verdict == "quirk-absent"


def test_token_ids():
    ok = judge_token_ids(chat("ed4;Z", 5, token_ids=[101, 7, 52, 3, 3]), ["return_token_ids"])
    assert ok.status.value == "pass"
    ignored = judge_token_ids(chat("ed4;Z", 5), ["return_token_ids"])
    assert ignored.behaviour == "ignored-field" and ignored.note.startswith("return_token_ids:")
    assert judge_token_ids(chat("ed4;Z", 5, token_ids=[1, 2]), ["return_token_ids"]).behaviour == "token-ids-count"


@pytest.mark.parametrize(
    "trace, tag",
    [(answer(200, {"choices": []}), "unknown-field-ignored"),
     (answer(400, {"error": {"message": f"extra field {UNKNOWN_FIELD}"}}), "unknown-field-rejected"),
     (answer(422, b"Failed to deserialize"), "unknown-field-rejected")],
)  # fmt: skip
def test_unknown_field_is_info_either_way(trace, tag):
    chk = judge_unknown_field(trace)
    assert chk.status.value == "info" and chk.behaviour == tag
    r = resolve(CASES["fields.unknown-field"], chk, load_expectations("vllm-0.11"))
    assert r.verdict == "info" and r.behaviours == [tag]


def test_unknown_field_5xx_is_not_either_tag():
    chk = judge_unknown_field(answer(500, b"boom"))
    assert chk.behaviour == "status-500"


def test_the_families_run_after_requests():
    from harness.conformance import suite
    from harness.conformance.cases import fields, requests, structured

    order = list(suite.FAMILIES)
    assert order.index(requests) + 1 == order.index(structured) and order.index(structured) + 1 == order.index(fields)
