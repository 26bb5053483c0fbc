"""Error bodies across an upgrade: an error case's result keeps the error object it saw (extra["error_body"], whatever
the verdict), and the upgrade compares those objects field by field (type, code, param, status, shape, message),
not only the verdicts; the changes show in upgrade.md and the verdict's reasons (review, or info for wording)."""

from __future__ import annotations

import json

from harness.client import Trace
from harness.conformance.cases.auth import judge_refusal
from harness.conformance.cases.errors import error_body, judge_error
from harness.upgrade.compare import conformance_changes, error_body_changes
from harness.upgrade.judge import _error_bodies, conformance
from harness.upgrade.render import _conformance


def trace(status: int, body: bytes, ctype: str = "application/json") -> Trace:
    return Trace("POST", "http://127.0.0.1:1/v1/chat/completions", status=status, headers={"content-type": ctype},
                 body=body)  # fmt: skip


OPENAI = {"error": {"message": "The model `x` does not exist.", "type": "NotFoundError", "param": None, "code": 404}}


def test_error_body_is_kept_whatever_the_verdict():
    ok = judge_error(trace(404, json.dumps(OPENAI).encode()), (404,))
    assert ok.status.value == "pass"
    assert ok.extra["error_body"] == {
        "status": 404, "shape": "object", "keys": ["code", "message", "param", "type"], "type": "NotFoundError",
        "code": 404, "param": None, "message": "str", "message_prefix": "The model `x` does not exist.",
    }  # fmt: skip
    plain = judge_error(trace(400, b'{"error": "Input validation error: bad"}'), (400,))
    assert plain.status.value == "fail" and plain.extra["error_body"]["shape"] == "string"
    assert judge_error(trace(401, b"", ""), (401,)).extra["error_body"] == {"status": 401, "shape": "empty"}
    assert judge_error(trace(400, b"<html>", "text/html"), (400,)).extra["error_body"]["shape"] == "non-json"
    assert judge_refusal(trace(401, json.dumps(OPENAI).encode())).extra["error_body"]["type"] == "NotFoundError"
    assert error_body({"detail": "x"}, 422)["shape"] == "no-error-object"


def case(verdict: str, body: dict) -> dict:
    return {"verdict": verdict, "level": "MUST", "behaviour": "", "note": "", "error_body": body}


def test_the_upgrade_compares_error_objects_field_by_field_even_when_both_pass():
    old = error_body(OPENAI, 404)
    new = error_body({"error": {**OPENAI["error"], "type": "invalid_request_error", "code": "model_not_found",
                                "message": "Model x is not served here"}}, 404)  # fmt: skip
    oc = {"available": True, "expectations": "e", "cases": {"errors.unknown-model": case("pass", old),
          "errors.malformed-json": case("pass", old), "health.version": {"verdict": "pass"}}}  # fmt: skip
    nc = {"available": True, "expectations": "e", "cases": {"errors.unknown-model": case("pass", new),
          "errors.malformed-json": case("pass", old), "health.version": {"verdict": "pass"}}}  # fmt: skip
    changes = error_body_changes(oc["cases"], nc["cases"])
    assert [c["id"] for c in changes] == ["errors.unknown-model"]  # an identical body is no change
    fields = {f["field"]: (f["old"], f["new"], f["level"]) for f in changes[0]["fields"]}
    assert fields == {
        "type": ("NotFoundError", "invalid_request_error", "review"),
        "code": (404, "model_not_found", "review"),
        "message_prefix": ("The model `x` does not exist.", "Model x is not served here", "info"),
    }
    cmp = {"conformance": conformance_changes(oc, nc)}
    assert cmp["conformance"]["error_bodies"] == changes
    reasons = _error_bodies(cmp)
    assert [r["level"] for r in reasons] == ["review", "info"]
    assert reasons[0]["text"] == (
        "error bodies changed: errors.unknown-model type 'NotFoundError'->'invalid_request_error', "
        "code 404->'model_not_found'"
    )
    # the conformance rule gives them (both verdicts pass, so no verdict-change reason)
    assert conformance({}, {}, cmp) == reasons
    md = "\n".join(_conformance(cmp["conformance"]))
    assert (
        "**Error bodies**" in md
        and "| errors.unknown-model | type | `NotFoundError` | `invalid_request_error` | review |" in md
    )


def test_a_shape_change_is_review_and_no_bodies_no_section():
    oc = {"errors.context-length": case("pass", error_body(OPENAI, 400))}
    nc = {"errors.context-length": case("quirk", error_body({"error": "too long"}, 400))}
    (c,) = error_body_changes(oc, nc)
    assert {"field": "shape", "old": "object", "new": "string", "level": "review"} in c["fields"]
    assert _error_bodies({"conformance": {"error_bodies": []}}) == []
    assert error_body_changes({"a": {"verdict": "pass"}}, {"a": {"verdict": "fail"}}) == []
