"""Hostile input for `harness load` and `harness report` (issue 12: findings 1, 2, 7, 10, 11, 20, 22, 23, 26, 27, 28).

Network cases use tests/support/badserver.py on 127.0.0.1. The CLI runs in a subprocess with a timeout, so a hang
fails the test instead of stalling the suite; every test asserts a bound on its wall time where time is the point.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.errors import ManifestError, RefusedError, UsageError
from harness.load.scenario import parse_scenario
from tests.load.fakeserver import FakeServer
from tests.support import netguard
from tests.support.badserver import BadServer

REPO = Path(__file__).resolve().parents[2]
CLOSING_S = 3.0  # the runner's CLOSING_ALLOWANCE_S: a pause after cancellations and the closing scrape
SLACK_S = 3.0  # process start-up and two shared CPU cores


def scenario(tmp_path: Path, **kw) -> Path:
    d = {"name": "hostile", "prompt_unit": "char", "scrape_interval_s": None,
         "bounds": {"max_requests": 3, "max_duration_s": 10}, "arrival": {"kind": "concurrency", "concurrency": 1},
         "prompt_tokens": {"kind": "fixed", "value": 4}, "output_tokens": {"kind": "fixed", "value": 3}}  # fmt: skip
    d.update(kw)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def harness(*args: str, timeout: float = 40) -> tuple[int, str, str, float]:
    t = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=timeout,
                           cwd=REPO)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"harness {' '.join(args)} did not finish within {timeout} s")
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t


def load(url: str, sc: Path, out: Path, *extra: str, timeout: float = 40):
    return harness("load", "--url", url, str(sc), "--out", str(out), "--no-progress", *extra, timeout=timeout)


def one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error: "), err
    assert "Traceback" not in err
    return lines[0]


def records(out: Path, kind: str = "request") -> list[dict]:
    return [r for r in map(json.loads, (out / "events.jsonl").read_text().splitlines()) if r["type"] == kind]


# ---------------------------------------------------------------- #1 one loopback rule


def test_load_uses_the_shared_loopback_rule(monkeypatch):
    import harness.load.runner as runner

    seen = []
    real = runner.loopback_url
    monkeypatch.setattr(runner, "loopback_url", lambda url, **kw: seen.append((url, kw)) or real(url, **kw))
    assert runner.check_target("http://127.0.0.1:8000/") == "http://127.0.0.1:8000"
    assert seen == [("http://127.0.0.1:8000/", {"allow_remote": False, "what": "--url"})]


@pytest.mark.parametrize("url, error", [
    ("http://127.0.0.1:99999", UsageError),  # port out of range: was accepted, then failed at connect
    ("http://127.0.0.1:8000\n", UsageError),
    ("ftp://127.0.0.1:21", UsageError),
    ("http://192.0.2.7:8000", RefusedError),
    ("http://127.0.0.1.nip.io:80", RefusedError),  # resolves to loopback, but the rule is on the parsed address
])  # fmt: skip
def test_load_refuses_on_the_parsed_address_before_any_socket(url, error, tmp_path, monkeypatch):
    from harness.cli import main

    def no_sockets(*a, **k):
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(socket, "getaddrinfo", no_sockets)
    before = list(netguard.ATTEMPTS)
    sc = scenario(tmp_path)
    import harness.load.runner as runner

    with pytest.raises(error):
        runner.check_target(url)
    assert main(["load", "--url", url, str(sc), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert netguard.ATTEMPTS == before and not (tmp_path / "o").exists()


def test_allow_remote_still_checks_the_shape():
    import harness.load.runner as runner

    with pytest.raises(UsageError, match="port 99999"):
        runner.check_target("http://192.0.2.7:99999", allow_remote=True)


# ---------------------------------------------------------------- #2 no password in any output


def test_password_in_url_is_never_stored_or_printed(tmp_path):
    sc = scenario(tmp_path)
    with BadServer("ok") as s:
        url = s.url.replace("http://", "http://user:s3cretpw@")
        rc, out, err, _ = load(url, sc, tmp_path / "o")
        rc2, out2, err2, _ = harness("report", str(tmp_path / "o"))
    assert rc == 0 and rc2 == 0, out + err  # the real URL (with its userinfo) was used to connect
    assert "s3cretpw" not in out + err + out2 + err2
    for f in (tmp_path / "o").iterdir():
        assert "s3cretpw" not in f.read_text(), f.name
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["target"] == s.url.replace("http://", "http://***@")
    assert summary["metrics"]["requests"]["ok"] == 3


def test_password_in_an_old_events_file_is_redacted_in_reports(tmp_path):
    out = tmp_path / "o"
    with BadServer("ok") as s:
        assert load(s.url, scenario(tmp_path), out)[0] == 0
    lines = (out / "events.jsonl").read_text().splitlines()
    head = json.loads(lines[0])
    head["target"] = s.url.replace("http://", "http://user:s3cretpw@")  # as a file written before the fix holds it
    (out / "events.jsonl").write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    rc, stdout, err, _ = harness("report", str(out))
    assert rc == 0, err
    for name in ("summary.json", "summary.md", "report.html"):
        assert "s3cretpw" not in (out / name).read_text()


def test_password_in_url_is_not_in_error_messages(tmp_path):
    with BadServer({"/v1/models": "http500", "*": "ok"}) as s:
        rc, out, err, _ = load(s.url.replace("http://", "http://user:s3cretpw@"), scenario(tmp_path), tmp_path / "o")
    line = one_error_line(err)
    assert rc == 2 and "s3cretpw" not in out + err and "***@" in line


# ---------------------------------------------------------------- #7 never over an earlier result without --force


def test_existing_events_are_kept_without_force(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "events.jsonl").write_text("precious\n")
    with BadServer("ok") as s:
        rc, _, err, _ = load(s.url, scenario(tmp_path), out)
        hits = sum(s.hits.values())
    assert rc == 2 and "--force" in one_error_line(err) and "events.jsonl" in err
    assert (out / "events.jsonl").read_text() == "precious\n" and hits == 0  # refused before any request


def test_force_replaces_but_a_run_that_fails_at_once_keeps_the_old_result(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "events.jsonl").write_text("precious\n")
    with BadServer({"/v1/models": "http500", "*": "ok"}) as s:  # no model name: the run cannot start
        rc, _, err, _ = load(s.url, scenario(tmp_path), out, "--force")
    assert rc == 2 and "/v1/models" in one_error_line(err)
    assert (out / "events.jsonl").read_text() == "precious\n"
    assert not (out / "events.jsonl.partial").exists()
    with BadServer("ok") as s:
        rc, _, err, _ = load(s.url, scenario(tmp_path), out, "--force")
    assert rc == 0, err
    assert len(records(out)) == 3


# ---------------------------------------------------------------- #10 every request ends as exactly one outcome


@pytest.mark.parametrize("mode, outcome", [
    ("garbage", "transport_error"),  # not HTTP at all
    ("badchunk", "transport_error"),  # a chunk-size line that is not hex
    ("hugeheaders", "transport_error"),  # 1 MiB of headers
    ("close", "transport_error"),
    ("empty", "incomplete"),  # HTTP 200, no events, no [DONE]
    ("doneonly", "no_output"),  # a complete stream without a single token
    ("http500", "http_error"),
])  # fmt: skip
def test_malformed_replies_are_error_outcomes_and_every_request_is_sent(mode, outcome, tmp_path):
    sc = scenario(tmp_path, slo={"max_error_rate": 0.0})
    with BadServer({"/v1/chat": mode, "*": "ok"}) as s:
        rc, stdout, err, elapsed = load(s.url, sc, tmp_path / "o")
        sent = s.hits["/v1/chat/completions"]
    assert rc == 1 and "FAIL" in stdout and "0/3 ok" in stdout, stdout + err
    assert "Traceback" not in err
    reqs = records(tmp_path / "o")
    assert sorted(r["id"] for r in reqs) == [0, 1, 2] and sent == 3  # none lost, none sent twice
    assert {r["outcome"] for r in reqs} == {outcome}
    end = records(tmp_path / "o", "end")[0]
    assert (end["stop_reason"], end["planned"], end["sent"]) == ("max_requests", 3, 3)
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert not summary["ok"] and summary["metrics"]["requests"]["error_rate"] == 1.0
    assert elapsed < 10 + SLACK_S


def test_transport_turns_every_malformed_head_into_a_protocol_error():
    import httpx

    from harness.load.transport import _chunk_size, _parse_head

    for head in (b"\x00\x01SSH-2.0", b"HTTP/1.1 abc OK", b"HTTP/1.1", b"HTTP/1.1 200 OK\r\nno-colon-here",
                 b"HTTP/1.1 200 OK\r\ncontent-length: -5", b"HTTP/1.1 200 OK\r\ncontent-length: 1e3",
                 b"ICY 200 OK", b"HTTP/1.1 099 x"):  # fmt: skip
        with pytest.raises(httpx.RemoteProtocolError):
            _parse_head(head)
    for line in (b"ZZZ", b"", b"-1", b"0x10", b"f" * 40, b" ; ext"):
        with pytest.raises(httpx.RemoteProtocolError):
            _chunk_size(line)
    assert _chunk_size(b"1a;name=v") == 26
    assert _parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked")[:3] == (
        200,
        [("Transfer-Encoding", "chunked")],
        True,
    )


@pytest.mark.parametrize("payload", [
    b'data: {"choices": [1, 2]}\n\n',
    b'data: {"choices": [{"delta": "x"}]}\n\n',
    b'data: {"choices": [{"delta": {"content": 5, "tool_calls": "x"}}]}\n\n',
    b'data: {"choices": [], "usage": {"completion_tokens": NaN, "prompt_tokens": "7"}}\n\n',
    b'data: {"choices": [], "usage": {"completion_tokens": 1e999}}\n\n',
    b'data: ' + b"[" * 5000 + b"]" * 5000 + b"\n\n",
    b'data: {"choices":[{"index":0,"delta":{"content":"\xff\xfe"},"finish_reason":null}]}\n\n',
    b'data: {"choices":[{"index":0,"finish_reason":"stop',
])  # fmt: skip
def test_stream_parser_never_raises_and_keeps_only_integer_usage(payload):
    from harness.load.stream import parse_stream

    ps = parse_stream([(1, payload + b"data: [DONE]\n\n")])
    assert ps.usage is None or all(type(v) is int for v in ps.usage.values())
    json.dumps(ps.usage, allow_nan=False)


# ---------------------------------------------------------------- #11 failed requests are never a silent PASS


def test_no_slo_and_every_request_failed_is_a_fail(tmp_path):
    with BadServer({"/v1/chat": "http500", "*": "ok"}) as s:
        rc, stdout, err, _ = load(s.url, scenario(tmp_path), tmp_path / "o")
    assert rc == 1 and "FAIL" in stdout and "PASS" not in stdout, stdout + err
    assert "failed_requests" in stdout and "ok_requests" in stdout


@pytest.mark.parametrize("slo, passes", [
    ({}, False),  # 2 of 4 failed and the scenario tolerates none
    ({"max_failed_requests": 1}, False),
    ({"max_failed_requests": 2}, True),
    ({"max_error_rate": 0.5}, True),  # a rate also says how many failures are tolerated
    ({"max_error_rate": 0.25}, False),
])  # fmt: skip
def test_failures_pass_only_within_what_the_scenario_tolerates(slo, passes, tmp_path):
    sc = scenario(tmp_path, bounds={"max_requests": 4, "max_duration_s": 10}, slo=slo)
    with FakeServer(fail_after=2) as srv:
        rc, stdout, err, _ = load(srv.url, sc, tmp_path / "o")
    assert "2/4 ok" in stdout, stdout + err
    assert (rc, "PASS" in stdout) == ((0, True) if passes else (1, False))


def test_a_run_with_no_ok_request_never_passes(tmp_path):
    sc = scenario(tmp_path, slo={"max_failed_requests": 100})
    with BadServer({"/v1/chat": "http500", "*": "ok"}) as s:
        rc, stdout, _, _ = load(s.url, sc, tmp_path / "o")
    assert rc == 1 and "ok_requests = 0" in stdout


def test_failure_tolerance_is_documented():
    text = (REPO / "harness" / "load" / "DEFINITIONS.md").read_text()
    assert "max_failed_requests" in text and "no_output" in text and "bound_step" in text


# ---------------------------------------------------------------- #20 max_duration_s is wall-clock for the whole run


@pytest.mark.parametrize("modes, extra, step", [
    ({"/metrics": "drip", "*": "ok"}, {}, "scrape before"),
    ({"/v1/chat": "drip", "*": "ok"}, {"warmup": {"requests": 2}}, "warm-up"),
    ({"/v1/chat": "drip", "*": "ok"}, {}, "measured"),
    ({"/metrics": "drip", "*": "ok"}, {"scrape_interval_s": 0.2}, "scrape before"),
])  # fmt: skip
def test_a_dripping_server_cannot_stretch_the_run(modes, extra, step, tmp_path):
    sc = scenario(tmp_path, bounds={"max_requests": 3, "max_duration_s": 1.5}, **extra)
    with BadServer(modes) as s:
        rc, stdout, err, elapsed = load(s.url, sc, tmp_path / "o", timeout=30)
    assert elapsed < 1.5 + CLOSING_S + SLACK_S, stdout + err
    assert rc == 1 and f"stopped by max_duration (during {step})" in stdout, stdout + err
    end = records(tmp_path / "o", "end")[0]
    assert end["stop_reason"] == "max_duration" and end["bound_step"] == step


def test_model_discovery_is_inside_the_bound_and_says_so(tmp_path):
    sc = scenario(tmp_path, bounds={"max_requests": 3, "max_duration_s": 1.0})
    with BadServer({"/v1/models": "drip", "*": "ok"}) as s:
        rc, _, err, elapsed = load(s.url, sc, tmp_path / "o", timeout=30)
    assert elapsed < 1.0 + SLACK_S
    line = one_error_line(err)
    assert rc == 2 and "/v1/models" in line and "model discovery" in line and "--model" in line


def test_request_timeout_is_for_the_whole_request_not_each_read(tmp_path):
    # drip sends a byte a second, so a per-read timeout of 1.5 s never fires
    sc = scenario(tmp_path, bounds={"max_requests": 2, "max_duration_s": 20}, request_timeout_s=1.5,
                  arrival={"kind": "concurrency", "concurrency": 2})  # fmt: skip
    with BadServer({"/v1/chat": "drip", "*": "ok"}) as s:
        rc, stdout, err, elapsed = load(s.url, sc, tmp_path / "o", timeout=40)
    assert elapsed < 1.5 + SLACK_S + 2, stdout + err
    assert {r["outcome"] for r in records(tmp_path / "o")} == {"timeout"}


def test_an_endless_stream_is_cut_by_size(tmp_path):
    sc = scenario(tmp_path, bounds={"max_requests": 1, "max_duration_s": 20})
    with BadServer({"/v1/chat": "endless", "*": "ok"}) as s:
        rc, stdout, err, elapsed = load(s.url, sc, tmp_path / "o", timeout=40)
    [req] = records(tmp_path / "o")
    assert req["outcome"] == "too_large" and elapsed < 15, stdout + err


# ---------------------------------------------------------------- #22 planned work is bounded and built lazily


BASE = {
    "name": "t",
    "bounds": {"max_requests": 10, "max_duration_s": 5},
    "arrival": {"kind": "poisson", "rate": 2.0},
    "prompt_tokens": {"kind": "fixed", "value": 8},
    "output_tokens": {"kind": "fixed", "value": 4},
}


def with_(**kw) -> dict:
    return {**BASE, **kw}


@pytest.mark.parametrize("raw", [
    with_(bounds={"max_requests": 100_000, "max_duration_s": 60}, prompt_tokens={"kind": "fixed", "value": 1_000_000},
          prompt_unit="char"),
    with_(bounds={"max_requests": 1000, "max_duration_s": 60}, prompt_tokens={"kind": "uniform", "min": 1, "max": 100_000}),
    with_(bounds={"max_requests": 300, "max_duration_s": 60}, shared_prefix={"share": 0.1, "tokens": 1_000_000},
          prompt_unit="char"),
])  # fmt: skip
def test_planned_prompt_bytes_are_bounded(raw):
    t = time.monotonic()
    with pytest.raises(ManifestError) as ei:
        parse_scenario(raw, "s.yaml")
    assert ei.value.field == "bounds.max_requests" and "bytes of prompt text" in str(ei.value)
    assert time.monotonic() - t < 1.0  # refused from the numbers, nothing built


def test_warmup_counts_towards_the_prompt_bound():
    ok = with_(bounds={"max_requests": 200, "max_duration_s": 60}, prompt_unit="char",
               prompt_tokens={"kind": "fixed", "value": 1_000_000})  # fmt: skip
    parse_scenario(ok, "s.yaml")  # 200 MB: under the limit
    with pytest.raises(ManifestError, match="warm-up included"):
        parse_scenario({**ok, "warmup": {"requests": 100}}, "s.yaml")


def test_plan_is_built_one_request_at_a_time():
    from harness.load.scenario import iter_plan

    sc = parse_scenario(with_(bounds={"max_requests": 100_000, "max_duration_s": 60}), "s.yaml")
    it = iter_plan(sc)
    t = time.monotonic()
    first = [next(it) for _ in range(3)]
    assert time.monotonic() - t < 1.0 and [p.index for p in first] == [0, 1, 2]
    assert not isinstance(it, list)


def test_lengths_file_is_read_bounded_and_values_capped(tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(with_(prompt_tokens={"kind": "file", "path": "lens.txt"})))
    (tmp_path / "lens.txt").write_text("5\n1000000000000\n")
    from harness.load.scenario import load_scenario

    with pytest.raises(ManifestError, match="line 2"):
        load_scenario(sc)
    (tmp_path / "lens.txt").unlink()
    os.mkfifo(tmp_path / "lens.txt")
    with pytest.raises(ManifestError, match="not a regular file"):
        load_scenario(sc)  # a FIFO would block forever


# ---------------------------------------------------------------- #28 absurd numbers


@pytest.mark.parametrize("raw, field", [
    (with_(arrival={"kind": "gamma", "rate": 1e-300, "burstiness": 1.0}), "arrival.rate"),
    (with_(arrival={"kind": "gamma", "rate": 1.0, "burstiness": 1e-300}), "arrival.burstiness"),
    (with_(arrival={"kind": "gamma", "rate": 1.0, "burstiness": 1e300}), "arrival.burstiness"),
    (with_(arrival={"kind": "constant", "rate": 1e-300}), "arrival.rate"),
    (with_(arrival={"kind": "poisson", "rate": 1e300}), "arrival.rate"),
    (with_(arrival={"kind": "ramp", "start_rate": 1e-300, "end_rate": 1.0, "ramp_s": 1.0}), "arrival.start_rate"),
    (with_(arrival={"kind": "ramp", "start_rate": 1.0, "end_rate": 2.0, "ramp_s": 1e300}), "arrival.ramp_s"),
    (with_(arrival={"kind": "concurrency", "concurrency": 10**9}), "arrival.concurrency"),
    (with_(arrival={"kind": "concurrency", "concurrency": -1}), "arrival.concurrency"),
    (with_(scrape_interval_s=1e-9), "scrape_interval_s"),
    (with_(request_timeout_s=0), "request_timeout_s"),
    (with_(bounds={"max_requests": 10, "max_duration_s": -1}), "bounds.max_duration_s"),
    (with_(bounds={"max_requests": 1e9, "max_duration_s": 1}), "bounds.max_requests"),
    (with_(bounds={"max_requests": 2.5, "max_duration_s": 1}), "bounds.max_requests"),
    (with_(seed=10**30), "seed"),
    (with_(abort={"min_requests": 10**12}), "abort.min_requests"),
    (with_(slo={"max_failed_requests": -1}), "slo.max_failed_requests"),
    (with_(model=""), "model"),
])  # fmt: skip
def test_absurd_numbers_are_refused_naming_the_field(raw, field):
    with pytest.raises(ManifestError) as ei:
        parse_scenario(raw, "s.yaml")
    assert ei.value.field == field


def test_near_zero_gamma_rate_is_one_clear_line(tmp_path):
    sc = scenario(tmp_path, arrival={"kind": "gamma", "rate": 1e-300, "burstiness": 1.0})
    with BadServer("ok") as s:
        rc, _, err, _ = load(s.url, sc, tmp_path / "o")
        hits = sum(s.hits.values())
    line = one_error_line(err)
    assert rc == 2 and "arrival.rate" in line and str(sc) in line and hits == 0


@pytest.mark.parametrize("arrival", [
    {"kind": "gamma", "rate": 0.001, "burstiness": 0.01},
    {"kind": "constant", "rate": 0.001},
    {"kind": "ramp", "start_rate": 0.001, "end_rate": 1e6, "ramp_s": 86400},
    {"kind": "poisson", "rate": 1e6},
])  # fmt: skip
def test_extreme_but_valid_arrivals_plan_finite_offsets(arrival):
    import math

    from harness.load.scenario import iter_plan

    sc = parse_scenario(with_(arrival=arrival, bounds={"max_requests": 2000, "max_duration_s": 1}), "s.yaml")
    assert all(math.isfinite(p.offset_s) for p in iter_plan(sc))


# ---------------------------------------------------------------- #23 / #26 bounded, checked readers


def test_deeply_nested_scenario_is_one_line(tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text("name: " + "[" * 20000 + "]" * 20000 + "\n")
    rc, _, err, _ = harness("load", "--url", "http://127.0.0.1:9", str(sc), "--out", str(tmp_path / "o"))
    line = one_error_line(err)
    assert rc == 2 and str(sc) in line and not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> list[str]:
    out = tmp_path_factory.mktemp("good")
    with BadServer("ok") as s:
        rc, stdout, err, _ = load(s.url, scenario(out), out / "o")
    assert rc == 0, stdout + err
    return (out / "o" / "events.jsonl").read_text().splitlines()


def _edit(lines: list[str], kind: str, fn) -> list[str]:
    done, out = False, []
    for line in lines:
        obj = json.loads(line)
        if not done and obj["type"] == kind:
            res = fn(obj)
            line = res if isinstance(res, str) else json.dumps(obj)
            done = True
        out.append(line)
    return out


def _set(key, value):
    return lambda o: o.__setitem__(key, value)


def _del(key):
    return lambda o: o.pop(key)


REPORT_CASES = [
    ("request", lambda o: '{"type": "request", "sent_ns": NaN}', "NaN"),
    ("request", lambda o: json.dumps(o).replace('"sent_ns":', '"sent_ns": NaN, "x":'), "line"),
    ("request", _del("sent_ns"), "request.sent_ns"),
    ("request", _set("sent_ns", "soon"), "request.sent_ns"),
    ("request", _set("outcome", 5), "request.outcome"),
    ("request", _set("outcome", "great"), "request.outcome"),
    ("request", _set("ev_t", "fast"), "request.ev_t"),
    ("request", _set("ev_t", [1]), "ev_t has 1 entries"),
    ("request", _set("usage", {"prompt_tokens": "7"}), "request.usage"),
    ("request", _set("end_ns", 1.5), "request.end_ns"),
    ("request", lambda o: "[" * 20000 + "]" * 20000, "nested"),
    ("request", lambda o: "[1, 2]", "JSON object"),
    ("run", _del("scenario"), "run.scenario"),
    ("run", lambda o: o["scenario"].__setitem__("slo", "fast"), "run.scenario.slo"),
    ("run", _set("target", None), "run.target"),
    ("end", _set("abort", {"rule": 1}), "end.abort"),
    ("scrape", _set("text", ["x"]), "scrape.text"),
    ("scrape", _set("type", "weird"), "unknown record type"),
]


@pytest.mark.parametrize(
    "kind, edit, needle", REPORT_CASES, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(REPORT_CASES)]
)
def test_report_on_a_corrupt_events_file_is_one_line(kind, edit, needle, good_run, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    lines = _edit(good_run, kind, edit)
    (out / "events.jsonl").write_text("\n".join(lines) + "\n")
    rc, _, err, _ = harness("report", str(out))
    line = one_error_line(err)
    assert rc == 2 and str(out / "events.jsonl") in line and "line " in line and needle in line, line


def test_report_keeps_a_torn_last_line(good_run, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "events.jsonl").write_text("\n".join(good_run[:-1]) + "\n" + good_run[-1][:20])
    rc, stdout, err, _ = harness("report", str(out))
    assert rc == 1 and "killed" in stdout + json.dumps(json.loads((out / "summary.json").read_text())), err


@pytest.mark.parametrize("make, needle", [
    (lambda d: None, "no such directory"),
    (lambda d: d.write_text("x"), "not a directory"),
    (lambda d: d.mkdir(), "no events file"),
    (lambda d: (d.mkdir(), (d / "events.jsonl").mkdir()), "directory"),
    (lambda d: (d.mkdir(), os.mkfifo(d / "events.jsonl")), "not a regular file"),
    (lambda d: (d.mkdir(), (d / "events.jsonl.partial").write_text("{}\n")), "events.jsonl.partial"),
    (lambda d: (d.mkdir(), (d / "events.jsonl").write_bytes(b"\xff\xfe\n")), "UTF-8"),
])  # fmt: skip
def test_report_on_a_bad_directory_is_one_line(make, needle, tmp_path):
    d = tmp_path / "o"
    make(d)
    rc, _, err, elapsed = harness("report", str(d), timeout=20)  # a FIFO must not block
    assert rc == 2 and needle in one_error_line(err) and elapsed < 15


# ---------------------------------------------------------------- #27 bad output paths


@pytest.mark.parametrize("make, needle", [
    (lambda t: (t / "o").write_text("a file"), "not a directory"),
    (lambda t: (t / "f").write_text("a file"), "cannot create"),  # --out f/o: under a file
    (lambda t: ((t / "o").mkdir(), (t / "o" / "events.jsonl").mkdir()), "is a directory"),
    (lambda t: ((t / "o").mkdir(), (t / "o" / "report.html").write_text("old")), "--force"),
])  # fmt: skip
def test_bad_output_paths_are_one_line(make, needle, tmp_path):
    make(tmp_path)
    out = tmp_path / "f" / "o" if (tmp_path / "f").exists() else tmp_path / "o"
    with BadServer("ok") as s:
        rc, _, err, _ = load(s.url, scenario(tmp_path), out)
        hits = sum(s.hits.values())
    assert rc == 2 and needle in one_error_line(err) and hits == 0


def test_out_equal_to_the_scenario_file_is_refused(tmp_path):
    sc = scenario(tmp_path)
    before = sc.read_text()
    rc, _, err, _ = load("http://127.0.0.1:9", sc, sc)
    assert rc == 2 and "not a directory" in one_error_line(err) and sc.read_text() == before


# ---------------------------------------------------------------- --api-key-env must name a variable that is set


@pytest.mark.parametrize(
    "value, needle", [("HARNESS_TEST_UNSET_KEY_VAR", "not set"), ("sk-abc123", "not the key itself")]
)
def test_api_key_env_unset_or_a_key_is_refused(value, needle, tmp_path):
    with BadServer("ok") as s:
        rc, _, err, _ = load(s.url, scenario(tmp_path), tmp_path / "o", "--api-key-env", value)
        hits = sum(s.hits.values())
    line = one_error_line(err)
    assert rc == 2 and needle in line and "abc123" not in line and hits == 0  # a key given by mistake is not echoed
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- properties: whatever the bytes, one kind of error

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HEADISH = st.one_of(st.binary(max_size=200), st.builds(lambda a, b: b"HTTP/1.1 " + a + b"\r\n" + b, st.binary(max_size=8),
                                                       st.binary(max_size=120)))  # fmt: skip


@FUZZ
@given(HEADISH)
def test_any_reply_head_is_parsed_or_a_protocol_error(raw):
    import httpx

    from harness.load.transport import _parse_head

    try:
        status, headers, chunked, length, keep = _parse_head(raw)
    except httpx.RemoteProtocolError:
        return
    assert 100 <= status <= 999 and (length is None or length >= 0)


@FUZZ
@given(st.lists(st.binary(max_size=64), max_size=8), st.booleans())
def test_any_body_is_decoded_or_a_protocol_error(pieces, chunked):
    import asyncio

    import httpx

    from harness.load.transport import FastTransport, _Body, _Conn

    async def go():
        reader = asyncio.StreamReader()
        for p in pieces:
            reader.feed_data(p)
        reader.feed_eof()

        class W:
            def close(self):
                pass

        body = _Body(FastTransport(), _Conn(reader, W(), ("127.0.0.1", 1)), b"", chunked, None, True, 1.0)
        try:
            async for _ in body:
                pass
        except httpx.RemoteProtocolError:
            pass

    asyncio.run(go())


SSEISH = st.lists(st.one_of(
    st.binary(max_size=80),
    st.sampled_from([b"data: [DONE]\n\n", b"data: {\"choices\": []}\n\n", b"\n\n", b"data: ", b"{\"usage\": {\"completion_tokens\": ",
                     b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"", b"\"}}]}\n\n", b"NaN", b"1e999", b"\r\n"]),
), max_size=12)  # fmt: skip


@FUZZ
@given(SSEISH)
def test_any_stream_is_classified_without_raising(parts):
    from harness.load.stream import parse_stream

    reads = [(i, p) for i, p in enumerate(parts)]
    ps = parse_stream(reads)
    assert len(ps.kinds) == len(ps.t) == len(ps.nbytes) == len(ps.chars)
    assert set(ps.kinds) <= set("rceuxd?")
    json.dumps({"usage": ps.usage, "finish_reason": ps.finish_reason, "error": ps.error}, allow_nan=False)
