"""The Responses and Messages cases against a stand-in on 127.0.0.1 (tests/support/surface_server.py): a server that
speaks both grammars passes every case (through both SDKs too), and each way of breaking a grammar fails its own case
with its own tag, within the suite's bounds. Absence (404 at the route) is its own verdict, end to end."""

from __future__ import annotations

import asyncio
import json

import pytest

from harness.conformance.expectations import load_expectations, resolve
from harness.conformance.model import Verdict, absent_problem
from harness.conformance.runner import new_ctx, run_suite
from tests.support.surface_server import SurfaceServer

SURFACES = ["responses", "messages", "cross", "sdk.openai.responses", "sdk.anthropic"]
STREAM_S = 3.0  # the bound a never-ending stream hits (the suite's default is 45 s; the case's, 60 s)


def _run(url: str, patterns=SURFACES, expect: str = "openai", **kw):
    ctx = new_ctx(url, load_expectations(expect), max_stream_s=STREAM_S, **kw)
    return asyncio.run(run_suite(ctx, patterns=patterns))


def test_a_server_that_speaks_both_grammars_passes_every_case():
    with SurfaceServer() as s:
        rep = _run(s.url)
    res = {r.id: r for r in rep.results}
    bad = [(r.id, r.verdict, r.behaviours, r.note) for r in rep.results if r.verdict not in ("pass", "skip")]
    assert not bad
    # both SDKs read the server (the anthropic one through the httpx2 bridge, with the key in x-api-key)
    assert res["sdk.openai.responses"].verdict == "pass" and res["sdk.anthropic.messages"].verdict == "pass"
    assert "Hello there" in res["sdk.anthropic.messages"].note
    # the skips say why: no cancellation series under the plain reference, no key to check x-api-key with
    assert {r.id for r in rep.results if r.verdict == "skip"} == {
        "responses.cancel.disconnect",
        "messages.auth.x-api-key",
    }
    assert res["cross.same-text"].extra["texts"]["messages"]["text"] == "Hello there"


FAULTS = {
    "responses-out-of-order": ("responses.stream.order", "event-out-of-order"),
    "responses-seq-back": ("responses.stream.sequence", "sequence-not-increasing"),
    "responses-after-completed": ("responses.stream.ends", "event-after-completed"),
    "responses-deltas-short": ("responses.stream.deltas", "deltas-not-done-text"),
    "responses-never-ends": ("responses.stream.ends", "stream-never-ended"),
    "messages-out-of-order": ("messages.stream.order", "event-out-of-order"),
    "messages-after-stop": ("messages.stream.ends", "event-after-message-stop"),
    "messages-deltas-short": ("messages.stream.matches-create", "stream-text-differs"),
    "messages-never-ends": ("messages.stream.ends", "stream-never-ended"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_broken_grammar_fails_with_its_own_tag(fault):
    case_id, tag = FAULTS[fault]
    surface = case_id.split(".")[0]
    with SurfaceServer(fault=fault) as s:
        rep = _run(s.url, patterns=[f"{surface}.stream"])
    res = {r.id: r for r in rep.results}
    assert res[case_id].verdict == "fail", res[case_id]
    assert res[case_id].behaviour == tag, res[case_id].behaviours
    assert not rep.ok and rep.aborted is None  # judged, and the suite went on: no case timed out or took it down
    # the tag is this fault's alone: no other fault of the table makes this case say it
    others = [f for f, (cid, t) in FAULTS.items() if cid == case_id and t == tag]
    assert others == [fault]


def test_a_stream_that_never_ends_is_cut_by_the_bound_and_says_so():
    with SurfaceServer(fault="responses-never-ends") as s:
        rep = _run(s.url, patterns=["responses.stream.ends", "responses.stream.order"])
    res = {r.id: r for r in rep.results}
    ends = res["responses.stream.ends"]
    assert ends.verdict == "fail" and "stream-never-ended" in ends.behaviours
    assert "did not end within 3s" in json.dumps(ends.to_dict())
    # the other cases over the same (cut) stream say they judged a part of it
    assert "judged" in res["responses.stream.order"].note or res["responses.stream.order"].verdict == "fail"


def test_an_endpoint_not_served_is_absent_not_a_failure(tmp_path, capsys):
    from harness.cli import main

    with SurfaceServer(absent=("/v1/messages",)) as s:
        out = tmp_path / "run"
        code = main(["conform", "--url", s.url, "--expect", "openai", "--out", str(out), "-k", "messages", "-k",
                     "sdk.anthropic", "-k", "cross", "-k", "responses.create"])  # fmt: skip
    assert code == 0  # absent never makes a suite not ok
    doc = json.loads((out / "conformance.json").read_text())
    verdicts = {c["id"]: c["verdict"] for c in doc["cases"]}
    messages = {k: v for k, v in verdicts.items() if k.startswith(("messages.", "sdk.anthropic"))}
    assert messages and set(messages.values()) == {"absent"} | (
        {"skip"} if "messages.auth.x-api-key" in messages else set()
    )
    assert doc["counts"]["absent"] == sum(v == "absent" for v in verdicts.values()) >= 14
    assert verdicts["cross.same-text"] == "pass"  # chat and Responses agree; Messages is left out and named
    assert "not served: messages" in next(c["note"] for c in doc["cases"] if c["id"] == "cross.same-text")
    table = capsys.readouterr().out
    assert "absent=" in table and "absent" in table
    junit = (out / "junit.xml").read_text()
    assert 'message="absent: not served: POST /v1/messages' in junit
    assert 'class="v v-absent"' in (out / "conformance.html").read_text()
    # re-judged from the evidence alone: the same verdicts, absent included
    again = tmp_path / "again"
    assert main(["conform", "--rejudge", str(out), "--expect", "openai", "--out", str(again)]) == 0
    doc2 = json.loads((again / "conformance.json").read_text())
    assert {c["id"]: c["verdict"] for c in doc2["cases"]} == verdicts


class _T:
    def __init__(self, status, body=b"", url="http://127.0.0.1:1/v1/messages"):
        self.status, self.body, self.url = status, body, url


def test_absent_is_a_404_or_405_at_the_route_not_a_refused_model():
    assert absent_problem(_T(404, b'{"detail":"Not Found"}')).status is Verdict.ABSENT
    assert absent_problem(_T(405, b"Method Not Allowed")).status is Verdict.ABSENT
    assert absent_problem(_T(404, b'{"error":{"message":"The model `x` does not exist"}}')) is None
    assert absent_problem(_T(400, b"{}")) is None and absent_problem(_T(200)) is None


def test_absent_survives_resolve_even_where_a_quirk_is_declared():
    from harness.conformance.expectations import Expectations
    from harness.conformance.registry import CASES

    case = next(c for c in CASES if c.id == "messages.create.shape")
    exp = Expectations("x", cases={"messages.create.shape": {"quirk": "status-404", "reason": "r"}})
    r = resolve(case, absent_problem(_T(404, b"Not Found")), exp)
    assert r.verdict == "absent" and not r.unexpected_pass


def test_a_case_that_needs_a_scripted_model_runs_only_for_one():
    from harness.conformance.case import SCRIPTED_MODEL, provided_by
    from harness.conformance.registry import select
    from harness.conformance.suite import all_cases

    gated = {c.id for c in all_cases() if c.needs}
    # issue 33's families (the clients, their bodies, stream-equals-message, the surface depth) are scripted-only too
    issue33 = ("harness.conformance.cases.clients", "harness.conformance.cases.clientrequests",
               "harness.conformance.cases.streamequal", "harness.conformance.cases.surfacedepth")  # fmt: skip
    rest = {c.id for c in all_cases() if c.needs and not c.run.__module__.startswith(issue33)}
    assert rest == {"responses.tools.function-call", "messages.tools.tool-use"}
    assert len(gated - rest) >= 43
    assert not gated & {c.id for c in select(all_cases(), None, frozenset())}
    assert gated <= {c.id for c in select(all_cases(), None, frozenset({SCRIPTED_MODEL}))}
    assert gated <= {c.id for c in select(all_cases(), None)}  # listing (no server) shows them

    class M:
        class model:
            source = "scripted-tiny"

    assert provided_by(M) == {SCRIPTED_MODEL} and provided_by(object()) == frozenset()
    with SurfaceServer() as s:
        rep = _run(s.url, patterns=["responses.tools", "messages.tools"])
    assert rep.results == []  # not selected: the stand-in's model is not scripted


def test_only_the_scripted_manifests_provide_the_scripted_model():
    from harness.conformance.case import SCRIPTED_MODEL, provided_by
    from harness.manifest import load_manifest
    from harness.settings import REPO_ROOT

    m = load_manifest(REPO_ROOT / "manifests" / "vllm-0.11.0-cpu.yaml", require_digest=False)
    assert provided_by(m) == frozenset()
    s = load_manifest(REPO_ROOT / "manifests" / "vllm-0.11.0-cpu-scripted.yaml", require_digest=False)
    assert provided_by(s) == {SCRIPTED_MODEL}
