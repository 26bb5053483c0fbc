"""A case run on one side only (a scripted manifest against a plain one: other case sets) is `missing` there, never
`absent`: `absent` is the verdict for an endpoint not served, and the judge blocks on a MUST endpoint that went away."""

from __future__ import annotations

from harness.upgrade.compare import conformance_changes
from harness.upgrade.judge import conformance


def _side(cases: dict[str, str]) -> dict:
    return {"available": True, "expectations": "e",
            "cases": {cid: {"verdict": v, "level": "MUST", "behaviour": "", "note": ""} for cid, v in cases.items()}}  # fmt: skip


def test_an_upgrade_from_a_scripted_to_a_plain_manifest_reports_no_endpoint_removed():
    scripted = _side({"chat.basic": "pass", "tools.auto.stream": "pass", "reasoning.field": "pass"})
    plain = _side({"chat.basic": "pass"})
    cmp = {"conformance": conformance_changes(scripted, plain)}
    rows = {r["id"]: (r["old"], r["new"]) for r in cmp["conformance"]["cases"]}
    assert rows["tools.auto.stream"] == ("pass", "missing")
    reasons = conformance({}, {}, cmp)
    assert [r["level"] for r in reasons] == ["info"]
    assert reasons[0]["text"] == "conformance: cases run on the old side only: reasoning.field, tools.auto.stream"
    assert not any("no longer serves" in r["text"] for r in reasons)


def test_an_endpoint_that_went_absent_still_blocks():
    cmp = {
        "conformance": conformance_changes(_side({"responses.create": "pass"}), _side({"responses.create": "absent"}))
    }
    (reason,) = conformance({}, {}, cmp)
    assert reason["level"] == "blocking" and "no longer serves" in reason["text"]


def test_cases_new_on_the_new_side_are_information():
    cmp = {
        "conformance": conformance_changes(_side({"chat.basic": "pass"}), _side({"chat.basic": "pass", "x.y": "fail"}))
    }
    assert conformance({}, {}, cmp) == [{"level": "info", "text": "conformance: cases run on the new side only: x.y"}]
