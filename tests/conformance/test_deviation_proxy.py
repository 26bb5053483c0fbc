"""Acceptance 2: a proxy between the suite and the real engine injects one deviation at a time; the right case catches it."""

import asyncio

import pytest

from harness.conformance.expectations import load_expectations
from harness.conformance.runner import new_ctx, run_suite

from .deviation import DEVIATIONS, DeviationTransport

pytestmark = pytest.mark.engine


def run_cases(live, case_ids, deviation):
    async def go():
        tr = DeviationTransport(deviation)
        ctx = new_ctx(
            live.base_url, load_expectations("vllm-0.11"), model=live.model, api_key=live.api_key, transport=tr
        )
        rep = await run_suite(ctx, patterns=case_ids)
        for t in list(tr.tasks):
            await t
        return {r.id: r for r in rep.results}

    return asyncio.run(go())


def test_at_least_twelve_deviations():
    assert len(DEVIATIONS) >= 12


def test_no_deviation_all_target_cases_pass(live):
    res = run_cases(live, sorted(set(DEVIATIONS.values())), None)
    assert {k: r.verdict for k, r in res.items()} == {k: "pass" for k in res}


@pytest.mark.parametrize("deviation", sorted(DEVIATIONS))
def test_deviation_is_caught_by_the_right_case(live, deviation):
    case_id = DEVIATIONS[deviation]
    res = run_cases(live, [case_id], deviation)
    r = res[case_id]
    assert r.verdict == "fail", (deviation, r)
