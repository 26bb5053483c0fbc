"""Issue 34 item 6: the upgrade gate blocks only on a difference stable on both sides. A case that changed where either
side is intermittent (more than one outcome over its samples, `conform --repeat N`, or an outcome the expectation lists
as known intermittent) is review, with both sides' rates; one sample is stable 1/1. The sides are saved conformance.json
files; the verdict is a pure function of them and of the saved comparison."""

from __future__ import annotations

import json

from harness.shown import md_text
from harness.upgrade.compare import conformance_changes
from harness.upgrade.html import render_html
from harness.upgrade.judge import judge
from harness.upgrade.model import changed, intermittent, rates
from harness.upgrade.render import render_markdown
from tests.upgrade.saved_conformance import repeated, report, result, save, side

CASE = "chat.stream.consistent-created"
TAG = "created-changes"
UNCHANGED_METRICS = {"counts": {"old": 1, "new": 1}}  # a metric surface compared and unchanged: no reason of its own


def upgrade(tmp_path, old_results, new_results):
    old = side(save(tmp_path / "old.json", old_results))
    new = side(save(tmp_path / "new.json", new_results))
    cmp = {"conformance": conformance_changes(old["conformance"], new["conformance"]), "metrics": UNCHANGED_METRICS}
    return old, new, cmp, judge(old, new, cmp)


def flaky(old: str, new: str) -> dict:
    return {"level": "review", "text": f"conformance: {CASE} [MUST] changed where it is intermittent (review, not a "
                                       f"stable change): {old} on old; {new} on new"}  # fmt: skip


def test_a_race_on_the_old_side_against_a_stable_failure_is_review_with_both_rates(tmp_path):
    # the most severe sample is `fail` on both sides: one sample each would say nothing changed
    old, new, cmp, v = upgrade(tmp_path, [repeated(CASE, [("pass",)] * 7 + [("fail", TAG)] * 3)],
                               [repeated(CASE, [("fail", TAG)] * 10)])  # fmt: skip
    assert old["conformance"]["cases"][CASE]["repeat"] == {
        "n": 10, "class": "intermittent", "k": 3,
        "outcomes": [{"verdict": "pass", "behaviours": [], "count": 7},
                     {"verdict": "fail", "behaviours": [TAG], "count": 3}],
    }  # fmt: skip
    assert v == {"verdict": "review", "reasons": [flaky(f"pass 7/10, fail {TAG} 3/10", f"fail {TAG} 10/10")]}


def test_a_must_case_failing_in_some_samples_of_the_new_side_is_review_not_blocking(tmp_path):
    # the old side judged once (a plain `conform` run); the new one's most severe sample is a MUST failure
    _o, _n, _c, v = upgrade(tmp_path, [result(CASE, "pass")], [repeated(CASE, [("pass",)] * 8 + [("fail", TAG)] * 2)])
    assert v == {"verdict": "review", "reasons": [flaky("pass 1/1", f"pass 8/10, fail {TAG} 2/10")]}


def test_a_difference_stable_on_both_sides_still_blocks(tmp_path):
    old, new, cmp, v = upgrade(tmp_path, [repeated(CASE, [("pass",)] * 10)], [repeated(CASE, [("fail", TAG)] * 10)])
    assert v == {"verdict": "blocking",
                 "reasons": [{"level": "blocking", "text": f"conformance (old expectations): now failing: {CASE} ({TAG})"}]}  # fmt: skip
    md = render_markdown(report(old, new, cmp, v))
    assert f"| {CASE} | MUST | {md_text('pass (pass 10/10)')} | {md_text(f'fail (fail {TAG} 10/10)')} | {TAG} |" in md


def test_one_sample_each_is_judged_as_before(tmp_path):
    _o, _n, _c, v = upgrade(tmp_path, [result(CASE, "pass")], [result(CASE, "fail", TAG)])
    assert v["verdict"] == "blocking"
    _o, _n, _c, v = upgrade(tmp_path, [result(CASE, "pass", level="SHOULD")], [result(CASE, "fail", level="SHOULD")])
    assert v["verdict"] == "review" and "SHOULD-level cases now failing" in v["reasons"][0]["text"]


def test_an_outcome_declared_intermittent_makes_the_side_intermittent(tmp_path):
    # one sample whose outcome the old expectation lists as known intermittent: not a stable state to block against
    _o, _n, _c, v = upgrade(tmp_path, [result(CASE, "expected-intermittent")], [result(CASE, "fail", TAG)])
    assert v == {"verdict": "review", "reasons": [flaky("expected-intermittent 1/1", f"fail {TAG} 1/1")]}
    # ten samples all of the declared intermittent outcome: stable as a class, still declared intermittent
    _o, _n, _c, v = upgrade(tmp_path, [repeated(CASE, [("pass",)] * 10)],
                            [repeated(CASE, [("expected-intermittent", TAG)] * 10)])  # fmt: skip
    assert v["reasons"] == [flaky("pass 10/10", f"expected-intermittent {TAG} 10/10")]


def test_an_endpoint_absent_in_every_new_sample_blocks_whatever_the_old_race(tmp_path):
    _o, _n, _c, v = upgrade(tmp_path, [repeated(CASE, [("pass",)] * 7 + [("fail", TAG)] * 3)],
                            [repeated(CASE, [("absent",)] * 10)])  # fmt: skip
    assert v["verdict"] == "blocking" and "no longer serves" in v["reasons"][0]["text"]


def test_the_same_outcomes_at_other_rates_are_no_change(tmp_path):
    _o, _n, cmp, v = upgrade(tmp_path, [repeated(CASE, [("pass",)] * 7 + [("fail", TAG)] * 3)],
                             [repeated(CASE, [("fail", TAG)] * 4 + [("pass",)] * 6)])  # fmt: skip
    assert v == {"verdict": "safe", "reasons": []}
    assert not changed(cmp["conformance"]["cases"][0])


def test_the_verdict_and_both_pages_come_again_from_the_saved_report(tmp_path):
    old, new, cmp, v = upgrade(tmp_path, [repeated(CASE, [("pass",)] * 7 + [("fail", TAG)] * 3)],
                               [repeated(CASE, [("fail", TAG)] * 10)])  # fmt: skip
    saved = json.loads(json.dumps(report(old, new, cmp, v)))
    assert judge(saved["old"], saved["new"], saved["comparison"]) == v
    cell_old, cell_new = f"fail (pass 7/10, fail {TAG} 3/10)", f"fail (fail {TAG} 10/10)"
    md = render_markdown(saved)
    # the same verdict on both sides, shown as a change
    assert f"| {CASE} | MUST | {md_text(cell_old)} | {md_text(cell_new)} |" in md
    assert "1 of 1 cases change" in md and "A rate (`pass 7/10, fail 3/10`)" in md
    page = render_html(saved)
    assert f"<td>{cell_old}</td><td>{cell_new}</td>" in page


def test_a_row_read_as_samples():
    row = {"id": CASE, "old": "pass", "new": "fail", "old_behaviour": "", "new_behaviour": TAG}
    assert (rates(row, "old"), rates(row, "new")) == ("pass 1/1", f"fail {TAG} 1/1")
    assert changed(row) and not intermittent(row, "old") and not intermittent(row, "new")
    row["new"] = "expected-intermittent"
    assert intermittent(row, "new")
