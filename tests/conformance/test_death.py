"""Engine death (the opt-in fault case): the pure judge over recorded-shaped runs (vLLM's error event then [DONE],
llama.cpp's closed connections), finding the worker from the profile's pattern, the expectation file's `fault`
section, and how the case is selected (never by default, always last)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from harness.client import Trace, TraceEvent
from harness.client.sse import parse_sse_bytes
from harness.conformance.cases.death import DeathRun, Poll, find_workers, judge_engine_death, stream_end
from harness.conformance.cli import with_faults
from harness.conformance.expectations import load_expectations
from harness.conformance.model import Verdict
from harness.conformance.runner import new_ctx, run_suite_sync
from harness.engines import profile_for
from harness.errors import ManifestError

KILL = 1_000_000_000_000  # the kill, in monotonic ns
S = 1_000_000_000


def text(t: str) -> dict:
    return {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "text": t, "logprobs": None, "finish_reason": None}]}  # fmt: skip


ERROR = {"error": {"message": "EngineCore encountered an issue.", "type": "InternalServerError", "code": 500}}


def stream(before: int = 3, after: list[Any] | None = None, *, done: bool = False, ended: str = "eof",
           end_s: float = 0.5, error: str | None = None, failure: str = "", status: int = 200) -> Trace:  # fmt: skip
    """A stream that had `before` chunks when the worker died, then `after` (JSON objects or raw SSE bytes)."""
    t = Trace("POST", "http://127.0.0.1:1/v1/completions", status=status, sse=True, ended=ended, error=error,
              failure=failure, headers={"content-type": "text/event-stream"})  # fmt: skip
    for i in range(before):
        blob = b"data: " + json.dumps(text(f"t{i}")).encode() + b"\n\n"
        t.events += [TraceEvent(KILL - (before - i) * S // 10, e.kind, e.raw, e.data) for e in parse_sse_bytes(blob)]
    tail = b"".join(e if isinstance(e, bytes) else b"data: " + json.dumps(e).encode() + b"\n\n" for e in after or [])
    tail += b"data: [DONE]\n\n" if done else b""
    end = KILL + int(end_s * S)
    t.events += [TraceEvent(end, e.kind, e.raw, e.data) for e in parse_sse_bytes(tail)]
    t.events.append(TraceEvent(end, ended))
    t.t_end_ns = end
    return t


def closed(end_s: float = 0.01) -> Trace:
    """llama.cpp's: the server process is gone, the connection breaks mid-body."""
    msg = "RemoteProtocolError: peer closed connection without sending complete message body (incomplete chunked read)"
    return stream(ended="disconnect", error=msg, failure="protocol", end_s=end_s)


def errored_stream(end_s: float = 0.3) -> Trace:
    """vLLM's: an error event, then [DONE], then the server closes the stream."""
    return stream(after=[ERROR], done=True, end_s=end_s)


def run(streams: list[Trace], *, health: list[Poll] | None = None, in_flight: list[bool] | None = None) -> DeathRun:
    down = [Poll(KILL + S // 100, None, "ConnectError: All connection attempts failed")]
    return DeathRun(workers=[{"pid": 42, "cmdline": "VLLM::EngineCore"}], t_kill_ns=KILL, streams=streams,
                    in_flight=in_flight or [True] * len(streams), health=down if health is None else health,
                    server_exit=0, server_exit_s=6.2)  # fmt: skip


def judge(r: DeathRun, **spec: Any):
    return judge_engine_death(r, spec)


# -- the judge ------------------------------------------------------------------------------------------------------


def test_closed_connections_and_a_dead_health_pass():
    chk = judge(run([closed() for _ in range(4)]))
    assert chk.status is Verdict.PASS, chk
    assert "closed x4" in chk.note and "/health down after 0.01s" in chk.note
    assert [s["end"] for s in chk.extra["streams"]] == ["closed"] * 4
    assert chk.extra["streams"][0]["chunks_before_kill"] == 3
    assert chk.extra["health"]["down_after_s"] == 0.01


def test_an_error_event_then_done_passes():
    health = [Poll(KILL + S // 10, 200), Poll(KILL + 2 * S, 503)]
    chk = judge(run([errored_stream(), closed()], health=health))
    assert chk.status is Verdict.PASS, chk
    assert [s["end"] for s in chk.extra["streams"]] == ["error-event", "closed"]
    assert chk.extra["health"] == {"down_after_s": 2.0, "answered": 503, "error": "", "polls": 2}


def test_an_error_response_counts_as_an_error():
    t = stream(before=0, status=500, end_s=0.2)
    assert stream_end(t, KILL) == ("error-event", 0.2)


def test_a_stream_that_hangs_fails():
    hung = stream(ended="timeout", error="BoundExceeded: the exchange did not end within 65s", end_s=35)
    chk = judge(run([closed(), hung]))
    assert chk.status is Verdict.FAIL and chk.behaviours == ("stream-hung",)
    assert chk.chunk == 1  # the stream's index
    # a read that timed out on the harness's side is a hang too, not a closed connection
    read_timeout = stream(ended="disconnect", error="ReadTimeout: ", failure="timeout", end_s=65)
    assert stream_end(read_timeout, KILL)[0] == "hung"


def test_a_stream_that_ends_after_the_bound_fails():
    chk = judge(run([closed(end_s=40)]), streams_end_within_s=30)
    assert chk.status is Verdict.FAIL and chk.behaviours == ("stream-ended-late",)
    assert judge(run([closed(end_s=40)]), streams_end_within_s=60).status is Verdict.PASS


def test_a_stream_that_ends_as_if_complete_fails():
    chk = judge(run([stream(done=True, end_s=0.2)]))
    assert chk.status is Verdict.FAIL and chk.behaviours == ("stream-ended-as-complete",)


def finished_stream(end_s: float = 0.2) -> Trace:
    """Every token asked for had been generated before the kill; the client read the end of it after (it was behind)."""
    return stream(after=[{**text("end"), "choices": [{**text("end")["choices"][0], "finish_reason": "length"}]}],
                  done=True, end_s=end_s)  # fmt: skip


def test_a_stream_generated_whole_before_the_kill_is_not_judged():
    assert stream_end(finished_stream(), KILL) == ("finished", 0.2)
    chk = judge(run([finished_stream(), errored_stream()]))
    assert chk.status is Verdict.PASS, chk
    assert [s["end"] for s in chk.extra["streams"]] == ["finished", "error-event"]
    assert "error-event x1, finished x1" in chk.note
    # an answer cut by the death that still claims [DONE] without that finish is the failure it always was
    assert judge(run([finished_stream(), stream(done=True)])).behaviours == ("stream-ended-as-complete",)


def test_when_every_stream_was_generated_whole_before_the_kill_nothing_is_judged():
    chk = judge(run([finished_stream(), finished_stream()]))
    assert chk.status is Verdict.ERROR and "none was in flight at the engine" in chk.note


def test_the_expectation_narrows_the_allowed_endings():
    only_errors = judge(run([closed()]), stream_ends=["error-event"])
    assert only_errors.behaviours == ("stream-closed-without-error",)
    only_closed = judge(run([errored_stream()]), stream_ends=["closed"])
    assert only_closed.behaviours == ("stream-ended-by-error-event",)


def test_data_after_the_error_event_fails():
    chk = judge(run([stream(after=[ERROR, text("more")], done=True)]))
    assert chk.status is Verdict.FAIL and chk.behaviours == ("data-after-error",)


def test_health_that_keeps_answering_200_fails():
    up = [Poll(KILL + k * S, 200) for k in range(1, 31)]
    chk = judge(run([closed()], health=up))
    assert chk.status is Verdict.FAIL and chk.behaviours == ("health-still-up",)
    late = [Poll(KILL + 45 * S, None, "ConnectError")]
    assert judge(run([closed()], health=late)).behaviours == ("health-still-up",)
    assert judge(run([closed()], health=late), health_down_within_s=60).status is Verdict.PASS


def test_every_deviation_is_reported():
    hung = stream(ended="timeout", end_s=66)
    chk = judge(run([hung, stream(done=True)], health=[Poll(KILL + S, 200)]))
    assert chk.behaviours == ("stream-hung", "stream-ended-as-complete", "health-still-up")


def test_no_stream_in_flight_is_not_judged():
    chk = judge(run([stream(done=True, end_s=-1)], in_flight=[False]))
    assert chk.status is Verdict.ERROR and "no stream was in flight" in chk.note


def test_only_the_streams_in_flight_are_judged():
    chk = judge(run([stream(done=True, end_s=-1), closed()], in_flight=[False, True]))
    assert chk.status is Verdict.PASS and len(chk.extra["streams"]) == 1


def test_what_the_server_said_meanwhile_is_kept():
    r = run([closed()])
    r.meanwhile = {"right_after_kill": {"/version": {"status": 200, "body": {"version": "0.11.0"}}}}
    chk = judge(r)
    assert chk.extra["meanwhile"] == r.meanwhile and chk.extra["server_exit"] == 0


# -- finding the worker ---------------------------------------------------------------------------------------------

VLLM_PROCS = {
    100: "/env/bin/python -m vllm.entrypoints.openai.api_server --enforce-eager --model /m --port 5",
    101: "VLLM::EngineCore",
    102: "/env/bin/python -c from multiprocessing.resource_tracker import main;main(6)",
}


def test_the_worker_is_found_by_the_profiles_pattern():
    assert find_workers(VLLM_PROCS, 100, profile_for("vllm").worker_match) == [101]
    with_dp = {**VLLM_PROCS, 103: "VLLM::EngineCore_DP1"}
    assert find_workers(with_dp, 100, profile_for("vllm").worker_match) == [101, 103]
    # the server itself never matches, even when its command line would
    assert find_workers({100: "python ::EngineCore"}, 100, profile_for("vllm").worker_match) == []


def test_no_worker_pattern_means_the_server_itself():
    assert profile_for("llamacpp").worker_match is None
    assert find_workers({7: "/b/llama-server --port 5"}, 7, None) == [7]
    assert find_workers({8: "other"}, 7, None) == []
    assert find_workers(VLLM_PROCS, 100, r"no-such-title") == []


# -- the expectation file's fault section ---------------------------------------------------------------------------


def _exp(tmp_path, text: str):
    p = tmp_path / "e.yaml"
    p.write_text("name: e\n" + text)
    return load_expectations(p)


def test_the_fault_section_is_read(tmp_path):
    e = _exp(tmp_path, "fault:\n  engine-death: {streams_end_within_s: 20, stream_ends: [closed], streams: 2}\n")
    assert e.fault == {"engine-death": {"streams_end_within_s": 20, "stream_ends": ["closed"], "streams": 2}}
    assert _exp(tmp_path, "fault:\n  engine-death:\n").fault == {"engine-death": {}}
    assert load_expectations("openai").fault == {}


@pytest.mark.parametrize(
    "text, where",
    [
        ("fault:\n  engine-life: {}\n", "fault.engine-life"),
        ("fault:\n  engine-death: {bound: 3}\n", "fault.engine-death.bound"),
        ("fault:\n  engine-death: {streams_end_within_s: 0}\n", "fault.engine-death.streams_end_within_s"),
        ("fault:\n  engine-death: {health_down_within_s: forever}\n", "fault.engine-death.health_down_within_s"),
        ("fault:\n  engine-death: {streams: 100}\n", "fault.engine-death.streams"),
        ("fault:\n  engine-death: {stream_ends: [hung]}\n", "fault.engine-death.stream_ends"),
        ("fault:\n  engine-death: {stream_ends: []}\n", "fault.engine-death.stream_ends"),
        ("fault:\n  engine-death: {request: [1]}\n", "fault.engine-death.request"),
        ("fault: [engine-death]\n", "fault"),
    ],
)
def test_a_bad_fault_section_names_the_field(tmp_path, text, where):
    with pytest.raises(ManifestError) as err:
        _exp(tmp_path, text)
    assert where in str(err.value)


@pytest.mark.parametrize("name", ["vllm-0.11", "llamacpp-0c1e570"])
def test_the_engines_expectation_files_declare_the_fault(name):
    spec = load_expectations(name).fault["engine-death"]
    assert 0 < spec["streams_end_within_s"] <= 60 and 0 < spec["health_down_within_s"] <= 60
    assert spec["stream_ends"] and spec.get("reason")


# -- selection ------------------------------------------------------------------------------------------------------


def test_fault_option_runs_the_default_suite_then_the_fault():
    assert with_faults(None, []) is None
    assert with_faults(None, ["engine-death"]) == ["*", "fault.engine-death"]
    assert with_faults(["chat"], ["engine-death"]) == ["chat", "fault.engine-death"]


def _server(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/v1/models":
        return httpx.Response(200, json={"object": "list", "data": [{"id": "m", "object": "model"}]})
    return httpx.Response(200, json={"version": "x"})


def test_the_runner_runs_the_fault_case_last_and_only_when_named():
    ctx = new_ctx("http://127.0.0.1:9", load_expectations("openai"), transport=httpx.MockTransport(_server))
    r = run_suite_sync(ctx, patterns=["health", "fault.engine-death"])
    ids = [c.id for c in r.results]
    assert ids[-1] == "fault.engine-death" and len(ids) > 1
    assert r.results[-1].verdict == "skip" and "attached" in r.results[-1].note  # no launched engine to kill
    ctx = new_ctx("http://127.0.0.1:9", load_expectations("openai"), transport=httpx.MockTransport(_server))
    assert not [c.id for c in run_suite_sync(ctx, patterns=["health"]).results if c.id.startswith("fault")]


def test_the_cli_refuses_an_unknown_fault(capsys):
    from harness.cli import main

    with pytest.raises(SystemExit) as err:
        main(["conform", "manifests/llamacpp-0c1e570-cpu.yaml", "--fault", "power-cut"])
    assert err.value.code == 2
    assert "invalid choice: 'power-cut'" in capsys.readouterr().err
