"""The upgrade names, by field, each request field or constraint the new engine accepts and ignores."""

from __future__ import annotations

from harness.upgrade.judge import conformance


def _row(cid: str, old: str, new: str, behaviour: str, note: str, level: str = "MUST") -> dict:
    return {"id": cid, "level": level, "old": old, "new": new, "old_behaviour": "", "new_behaviour": behaviour,
            "new_note": note}  # fmt: skip


def test_fields_accepted_and_ignored_are_named_by_field():
    conf = {"expectations": "vllm-0.11", "cases": [
        _row("structured.engine.json.stream", "pass", "fail", "constraint-ignored", "guided_json: HTTP 200 but not JSON"),
        _row("structured.engine.json.nonstream", "pass", "fail", "constraint-ignored", "guided_json: HTTP 200 but ..."),
        _row("fields.best-of", "pass", "fail", "ignored-field", "best_of: accepted, one candidate's worth", "SHOULD"),
        _row("errors.unknown-model", "pass", "fail", "status-200", "answered 200"),  # loud-ish: not a field ignored
    ]}  # fmt: skip
    reasons = conformance({}, {}, {"conformance": conf})
    fail_open = [r for r in reasons if r["text"].startswith("accepted and ignored")]
    assert len(fail_open) == 1 and fail_open[0]["level"] == "blocking"  # a MUST case among them
    text = fail_open[0]["text"]
    assert "guided_json (structured.engine.json.stream, structured.engine.json.nonstream)" in text
    assert "best_of (fields.best-of)" in text and "unknown-model" not in text


def test_nothing_ignored_says_nothing_and_an_old_failure_is_not_new():
    conf = {"expectations": "x", "cases": [_row("fields.seed", "fail", "fail", "ignored-field", "seed: ignored")]}
    assert not [r for r in conformance({}, {}, {"conformance": conf}) if r["text"].startswith("accepted and ignored")]
