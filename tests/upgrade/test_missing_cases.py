"""A case run on one side only (a scripted manifest against a plain one: other case sets) is `missing` there, never
`absent`: `absent` is the verdict for an endpoint not served, and the judge blocks on a MUST endpoint that went away."""

from __future__ import annotations

from harness.upgrade.compare import conformance_changes
from harness.upgrade.judge import conformance, judge
from harness.upgrade.render import render_markdown
from tests.upgrade.saved_conformance import report, result, save, side

WHY = "(the sides ran other case sets, e.g. another model or manifest)"
UNCHANGED_METRICS = {"counts": {"old": 1, "new": 1}}  # a metric surface compared and unchanged: no reason of its own


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
    assert reasons == [
        {"level": "info", "text": f"conformance: not run on the new side {WHY}: reasoning.field, tools.auto.stream"}
    ]


def test_two_saved_conformance_results_one_lacking_cases(tmp_path):
    # two conformance.json as `conform --out` saves them: the old (scripted) ran the scripted-only cases, the plain new
    # one did not, and serves no /v1/responses on either side; the new one ran a case the old did not
    old = side(save(tmp_path / "old-scripted.json", [
        result("chat.basic", "pass"), result("tools.scripted.call", "pass"), result("reasoning.scripted", "quirk", "x"),
        result("responses.create", "absent"),
    ]))  # fmt: skip
    new = side(save(tmp_path / "new-plain.json", [
        result("chat.basic", "pass"), result("responses.create", "absent"), result("chat.logprobs", "fail", "no-logprobs"),
    ]))  # fmt: skip
    cmp = {"conformance": conformance_changes(old["conformance"], new["conformance"]), "metrics": UNCHANGED_METRICS}
    rows = {r["id"]: (r["old"], r["new"]) for r in cmp["conformance"]["cases"]}
    assert rows == {"chat.basic": ("pass", "pass"), "chat.logprobs": ("missing", "fail"),
                    "reasoning.scripted": ("quirk", "missing"), "responses.create": ("absent", "absent"),
                    "tools.scripted.call": ("pass", "missing")}  # fmt: skip
    v = judge(old, new, cmp)
    assert v == {"verdict": "safe", "reasons": [
        {"level": "info", "text": f"conformance: not run on the new side {WHY}: reasoning.scripted, tools.scripted.call"},
        {"level": "info", "text": f"conformance: not run on the old side {WHY}: chat.logprobs"},
    ]}  # fmt: skip
    md = render_markdown(report(old, new, cmp, v))  # the report re-renders from the saved document
    assert "| tools.scripted.call | MUST | pass | missing |" in md
    assert "`missing`: the case was not run on that side" in md and "no longer serves" not in md


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
    assert conformance({}, {}, cmp) == [{"level": "info", "text": f"conformance: not run on the old side {WHY}: x.y"}]
