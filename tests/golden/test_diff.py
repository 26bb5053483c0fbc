"""Diff classification on constructed recordings: identical, equivalent, near-tie, regression, sets, missing, models."""

from __future__ import annotations

import copy
import json

import pytest

from harness.cli import main
from harness.errors import RefusedError
from harness.golden.diff import DEFAULT_MARGIN, DEFAULT_TOLERANCE, classify_choice, diff_recordings
from harness.golden.store import load_recording

from .helpers import choice, record, write

TOKS = [72, 101, 108, 108, 111, 33]


def _pair(tmp_path, a_recs, b_recs, b_model=None):
    from .helpers import MODEL

    write(tmp_path / "a", a_recs)
    write(tmp_path / "b", b_recs, model=b_model or MODEL, version="0.32.0")
    return load_recording(tmp_path / "a"), load_recording(tmp_path / "b")


def _status(tmp_path, ca, cb, **kw):
    a, b = _pair(tmp_path, {"chat": [record("p", [ca])]}, {"chat": [record("p", [cb])]})
    d = diff_recordings(a, b, **kw)
    assert len(d.prompts) == 1
    return d, d.prompts[0]


def test_identical(tmp_path):
    d, p = _status(tmp_path, choice(TOKS), choice(TOKS))
    assert p.status == "identical" and d.ok


def test_equivalent_within_tolerance(tmp_path):
    lps = [-0.5 - 0.01 * i for i in range(len(TOKS))]
    drifted = [x + 0.005 for x in lps]
    d, p = _status(tmp_path, choice(TOKS, lps), choice(TOKS, drifted))
    assert p.status == "equivalent" and d.ok
    assert p.max_logprob_drift == pytest.approx(0.005)


def test_drift_beyond_tolerance_is_regression(tmp_path):
    lps = [-0.5] * len(TOKS)
    d, p = _status(tmp_path, choice(TOKS, lps), choice(TOKS, [x - 0.5 for x in lps]))
    assert p.status == "regression" and not d.ok
    assert "drift" in p.reason


def test_near_tie_at_first_divergence(tmp_path):
    # Baseline at position 3: top-1 = 108 (-0.70), top-2 = 120 (-0.72): within the margin; B picks 120.
    tie = {3: [(108, -0.70), (120, -0.72), (5, -3.0)]}
    a = choice(TOKS, tops=tie)
    b = choice(TOKS[:3] + [120, 1, 2])
    d, p = _status(tmp_path, a, b)
    assert p.status == "near-tie" and d.ok
    assert p.position == 3 and p.a_token[0] == 108 and p.b_token[0] == 120
    assert p.context_ids == TOKS[:3]


def test_divergence_without_tie_is_regression(tmp_path):
    gap = {3: [(108, -0.1), (120, -3.0)]}
    d, p = _status(tmp_path, choice(TOKS, tops=gap), choice(TOKS[:3] + [120, 1, 2]))
    assert p.status == "regression" and p.position == 3 and not d.ok


def test_near_tie_but_other_token_is_regression(tmp_path):
    tie = {3: [(108, -0.70), (120, -0.72)]}
    d, p = _status(tmp_path, choice(TOKS, tops=tie), choice(TOKS[:3] + [99, 1, 2]))
    assert p.status == "regression"


def test_margin_option_changes_the_class(tmp_path):
    tie = {3: [(108, -0.70), (120, -0.90)]}
    a, b = choice(TOKS, tops=tie), choice(TOKS[:3] + [120, 1, 2])
    assert classify_choice(a, b, DEFAULT_TOLERANCE, 0.1)["status"] == "regression"
    assert classify_choice(a, b, DEFAULT_TOLERANCE, 0.25)["status"] == "near-tie"


def test_early_end_is_regression(tmp_path):
    d, p = _status(tmp_path, choice(TOKS), choice(TOKS[:4], finish="stop"))
    assert p.status == "regression" and p.position == 4 and p.b_token == "<end:stop>"


def test_same_tokens_different_finish_is_regression(tmp_path):
    d, p = _status(tmp_path, choice(TOKS, finish="length"), choice(TOKS, finish="stop"))
    assert p.status == "regression"


def test_worst_choice_decides_n2(tmp_path):
    tie = {3: [(108, -0.70), (120, -0.72)]}
    a = [choice(TOKS), choice(TOKS, tops=tie)]
    b = [choice(TOKS), choice(TOKS[:3] + [120, 1, 2])]
    x, y = _pair(tmp_path, {"chat": [record("p", a)]}, {"chat": [record("p", b)]})
    p = diff_recordings(x, y).prompts[0]
    assert p.status == "near-tie" and p.choice == 1


def test_missing_added_and_different_sets(tmp_path):
    a = {
        "chat": [record("p1", [choice(TOKS)]), record("p2", [choice(TOKS)])],
        "completions": [record("c1", [choice(TOKS)], set_name="completions")],
    }
    b = {
        "chat": [record("p1", [choice(TOKS)]), record("p3", [choice(TOKS)])],
        "extra": [record("e1", [choice(TOKS)], set_name="extra")],
    }
    x, y = _pair(tmp_path, a, b)
    d = diff_recordings(x, y)
    st = {(p.set, p.id): p.status for p in d.prompts}
    assert st == {
        ("chat", "p1"): "identical",
        ("chat", "p2"): "missing",
        ("completions", "c1"): "missing",
        ("chat", "p3"): "added",
        ("extra", "e1"): "added",
    }
    assert d.sets_only_in_a == ["completions"] and d.sets_only_in_b == ["extra"]
    assert not d.ok


def test_only_added_prompts_pass(tmp_path):
    x, y = _pair(
        tmp_path,
        {"chat": [record("p1", [choice(TOKS)])]},
        {"chat": [record("p1", [choice(TOKS)]), record("p9", [choice(TOKS)])]},
    )
    assert diff_recordings(x, y).ok


def test_edited_prompt_is_incomparable(tmp_path):
    x, y = _pair(
        tmp_path, {"chat": [record("p", [choice(TOKS)])]}, {"chat": [record("p", [choice(TOKS)], request_sha="other")]}
    )
    p = diff_recordings(x, y).prompts[0]
    assert p.status == "incomparable"


def test_other_model_hash_refused(tmp_path):
    x, y = _pair(
        tmp_path, {"chat": [record("p", [choice(TOKS)])]}, {"chat": [record("p", [choice(TOKS)])]}, b_model="0" * 64
    )
    with pytest.raises(RefusedError, match="different models.*b61f35445148.*000000000000"):
        diff_recordings(x, y)


def test_cli_diff_exit_codes_and_json(tmp_path, capsys):
    tie = {3: [(108, -0.70), (120, -0.72)]}
    write(tmp_path / "a", {"chat": [record("p", [choice(TOKS, tops=tie)]), record("q", [choice(TOKS)])]})
    write(tmp_path / "b", {"chat": [record("p", [choice(TOKS[:3] + [120, 1, 2])]), record("q", [choice(TOKS)])]})
    assert main(["golden", "diff", str(tmp_path / "a"), str(tmp_path / "b"), "--json", str(tmp_path / "d.json")]) == 0
    out = capsys.readouterr().out
    assert "near-tie" in out and "at token 3" in out
    j = json.loads((tmp_path / "d.json").read_text())
    assert j["counts"] == {"identical": 1, "near-tie": 1} and j["ok"]
    # with a tighter margin the same divergence is a regression -> exit 1
    assert main(["golden", "diff", str(tmp_path / "a"), str(tmp_path / "b"), "--margin", "0.001"]) == 1


def test_cli_diff_other_model_exit_2(tmp_path, capsys):
    write(tmp_path / "a", {"chat": [record("p", [choice(TOKS)])]})
    write(tmp_path / "b", {"chat": [record("p", [choice(TOKS)])]}, model="f" * 64)
    assert main(["golden", "diff", str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    assert "refusing to compare recordings of different models" in capsys.readouterr().err


def test_defaults_documented():
    from harness.golden import diff

    assert f"{DEFAULT_MARGIN}" and "DEFAULT_TOLERANCE" in diff.__doc__ and "DEFAULT_MARGIN" in diff.__doc__
    assert copy.copy(DEFAULT_TOLERANCE) < DEFAULT_MARGIN


def _sampled(rec):
    rec["request"] = {"temperature": 0.8, "seed": 7}
    return rec


def test_seeded_sampling_draw_change_is_resampled(tmp_path):
    # same distribution at the divergence (baseline top-3 present in B's list, logprobs equal); different draw
    top = [(144, -1.09), (139, -1.61), (54, -3.1), (210, -3.3), (220, -3.4)]
    a = choice([144, 1, 2], tops={0: top})
    b = choice([139, 5, 6], tops={0: top[:4] + [(139, -1.61)]})
    x, y = _pair(tmp_path, {"chat": [_sampled(record("s", [a]))]}, {"chat": [_sampled(record("s", [b]))]})
    d = diff_recordings(x, y)
    assert d.prompts[0].status == "resampled" and d.ok


def test_seeded_sampling_with_changed_distribution_is_regression(tmp_path):
    top = [(144, -1.09), (139, -1.61), (54, -3.1)]
    a = choice([144, 1, 2], tops={0: top})
    b = choice([139, 5, 6], tops={0: [(144, -2.0), (139, -0.5), (54, -3.1)]})
    x, y = _pair(tmp_path, {"chat": [_sampled(record("s", [a]))]}, {"chat": [_sampled(record("s", [b]))]})
    assert diff_recordings(x, y).prompts[0].status == "regression"


def _refusal(pid, msg="n must be 1 when using greedy sampling, got 2."):
    r = record(pid, [])
    r["error"] = {"status": 400, "type": "BadRequestError", "message": msg}
    return r


def test_http_refusals_compared(tmp_path):
    a = {"chat": [_refusal("same"), _refusal("reworded"), _refusal("now-ok"), record("now-refused", [choice(TOKS)])]}
    b = {
        "chat": [
            _refusal("same"),
            _refusal("reworded", "n must be 1"),
            record("now-ok", [choice(TOKS)]),
            _refusal("now-refused"),
        ]
    }
    x, y = _pair(tmp_path, a, b)
    st = {p.id: p.status for p in diff_recordings(x, y).prompts}
    assert st == {"same": "identical", "reworded": "equivalent", "now-ok": "regression", "now-refused": "regression"}
