"""A load scenario with real lengths (issue 36): a prompt mix whose answers end on their own. The scenario's schema (a
mix or made-up prompts, never both), the plan (the mix in turn, max_tokens a cap) and the summary of answers of
different lengths (finish_reason stop): per-request TPOT on each answer's own length, the length distribution and the
finish reasons, the server cross-check's token sums."""

from __future__ import annotations

import pytest

from harness.errors import ManifestError
from harness.load.metrics import aggregate, request_metrics
from harness.load.report import write_reports
from harness.load.runner import Target, run_scenario
from harness.load.scenario import load_scenario, parse_scenario, plan
from harness.settings import REPO_ROOT
from tests.load.fakeserver import FakeServer

REAL = REPO_ROOT / "loadtests" / "real-lengths.yaml"


def mix(**kw):
    d = {
        "name": "mix",
        "endpoint": "chat",
        "scrape_interval_s": 0.2,
        "bounds": {"max_requests": 9, "max_duration_s": 10},
        "arrival": {"kind": "concurrency", "concurrency": 3},
        "prompts": ["short", "a medium question", "a long question please"],
        "output_tokens": {"kind": "fixed", "value": 8},
    }
    d.update(kw)
    return parse_scenario(d, "<test>")


def test_the_committed_scenario_is_a_bounded_mix_that_lets_answers_end():
    sc = load_scenario(REAL)
    assert sc.prompts and sc.prompt_tokens is None and not sc.ignore_eos
    assert sc.bounds.max_requests <= 50 and sc.bounds.max_duration_s <= 300
    reqs = plan(sc)
    assert [r.prompt for r in reqs[: len(sc.prompts)]] == list(sc.prompts)  # in turn
    assert reqs[len(sc.prompts)].prompt == sc.prompts[0]
    assert {r.max_tokens for r in reqs} == {sc.output_tokens.value}  # one cap for all
    assert all(r.prompt_units == len(r.prompt) and not r.prefixed for r in reqs)


@pytest.mark.parametrize(
    ("change", "field_words"),
    [
        ({"prompt_tokens": {"kind": "fixed", "value": 4}}, "exactly one of 'prompt_tokens'"),
        ({"prompts": None}, "exactly one of 'prompt_tokens'"),
        ({"prompts": []}, "prompts"),
        ({"prompts": ["ok", "   "]}, "prompts[1]"),
        ({"prompts": ["x" * 10_001]}, "prompts[0]"),
        ({"shared_prefix": {"share": 0.5, "tokens": 4}}, "shared_prefix"),
    ],
)
def test_a_bad_mix_is_one_line_naming_the_field(change, field_words):
    with pytest.raises(ManifestError) as exc:
        mix(**change)
    assert field_words in exc.value.one_line()


def _rec(rid, tokens, finish, *, step_ns=10_000_000):
    """A request record as the runner writes it: role chunk, `tokens - 1` content chunks, then the end token's step
    (empty content, finish_reason) when the answer stopped, or a last content chunk when it ran to the cap."""
    kinds = "r" + "c" * (tokens - 1) + ("e" if finish == "stop" else "c") + "ud"
    t = [1_000_000] + [1_000_000 + (i + 1) * step_ns for i in range(tokens)] + [1_000_000 + (tokens + 1) * step_ns] * 2
    return {
        "id": rid, "warmup": False, "outcome": "ok", "scheduled_ns": 0, "ready_ns": 0, "sent_ns": 0,
        "first_byte_ns": t[0], "end_ns": t[-1], "ev_t": t, "ev_k": kinds, "finish_reason": finish,
        "usage": {"prompt_tokens": 5, "completion_tokens": tokens},
    }  # fmt: skip


def test_answers_of_different_lengths_are_summarised_each_on_its_own_length():
    recs = [_rec(0, 3, "stop"), _rec(1, 9, "stop"), _rec(2, 16, "length", step_ns=20_000_000)]
    per = [request_metrics(r) for r in recs]
    # TPOT: each request over its own tokens, never over max_tokens: 10 ms steps for the first two, 20 ms for the third
    assert [round(m["tpot_ms"], 6) for m in per] == [10.0, 10.0, 20.0]
    agg = aggregate(recs, 0, None, {"tpot_ms": 15})
    lens = agg["tokens"]["output_per_request"]
    assert (lens["min"], lens["max"], lens["p50"], lens["count"]) == (3, 16, 9, 3)
    assert agg["tokens"]["finish_reasons"] == {"length": 1, "stop": 2}
    assert agg["tokens"]["output"] == 28
    assert agg["goodput"]["good"] == 2 and agg["goodput"]["failing_examples"] == [(2, ["tpot_ms"])]
    assert len(agg["_per_request"][0]["itl_ms"]) == 2  # the end token's step is a step: 3 output events, 2 gaps


def test_a_mix_run_against_a_server_whose_answers_end_on_their_own(tmp_path):
    lengths = {"short": 1, "a medium question": 4, "a long question please": 20}  # 20 > cap 8: cut at the cap

    def answer_len(body):
        return lengths[body["messages"][0]["content"]]

    with FakeServer(answer_len=answer_len) as srv:
        res = run_scenario(mix(warmup={"requests": 1}), Target(srv.url), tmp_path, progress=False)
        generated = srv.generated
    assert res.stop_reason == "max_requests"
    s = write_reports(tmp_path)
    m = s["metrics"]
    assert s["ok"] and m["requests"]["ok"] == 9
    assert m["tokens"]["finish_reasons"] == {"length": 3, "stop": 6}
    lens = m["tokens"]["output_per_request"]
    assert (lens["min"], lens["max"]) == (2, 8)  # one word + its end token; the cap
    # every token the server made is one the client counted, warm-up included (3 x (2 + 5 + 8) + 2)
    assert s["server"]["tokens"]["output"] == {"client_chunks": 47, "client_usage": 47, "server": float(generated)}
    assert "finish reasons: length 3, stop 6" in (tmp_path / "summary.md").read_text()
