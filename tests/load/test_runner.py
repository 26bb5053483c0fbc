import json
import socket
import subprocess
import sys
import time

import pytest

from harness.errors import RefusedError
from harness.load.report import read_events, write_reports
from harness.load.runner import Target, check_target, run_scenario
from harness.load.scenario import parse_scenario
from tests.load.fakeserver import FakeServer


def scenario(**kw):
    d = {
        "name": "t",
        "endpoint": "chat",
        "prompt_unit": "char",
        "scrape_interval_s": 0.2,
        "bounds": {"max_requests": 12, "max_duration_s": 10},
        "arrival": {"kind": "concurrency", "concurrency": 3},
        "prompt_tokens": {"kind": "fixed", "value": 8},
        "output_tokens": {"kind": "fixed", "value": 5},
    }
    d.update(kw)
    return parse_scenario(d, "<test>")


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1:8000",
        "http://example.com",
        "https://8.8.8.8",
        "http://[2001:db8::1]:80",
        "http://127.0.0.1.nip.io:80",
        "http://0.0.0.0:8000",
    ],
)
def test_non_loopback_refused_before_any_socket(url, monkeypatch, tmp_path):
    def no_sockets(*a, **k):
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(socket.socket, "connect", no_sockets)
    monkeypatch.setattr(socket, "create_connection", no_sockets)
    monkeypatch.setattr(socket, "getaddrinfo", no_sockets)
    with pytest.raises(RefusedError, match="not a loopback"):
        check_target(url)
    with pytest.raises(RefusedError):
        run_scenario(scenario(), Target(url), tmp_path / "o", progress=False)
    assert not (tmp_path / "o").exists()


def test_cli_refuses_remote_without_flag(tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text(
        "name: t\nbounds: {max_requests: 1, max_duration_s: 1}\narrival: {kind: concurrency, concurrency: 1}\n"
        "prompt_tokens: {kind: fixed, value: 1}\noutput_tokens: {kind: fixed, value: 1}\n"
    )
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "load",
            "--url",
            "http://192.0.2.7:8000",
            str(sc),
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and "not a loopback" in p.stderr and "--allow-remote" in p.stderr


@pytest.mark.parametrize("url", ["http://127.0.0.1:1", "http://127.9.9.9:1", "http://localhost:1", "http://[::1]:1"])
def test_loopback_forms_accepted(url):
    assert check_target(url) == url


def test_concurrency_run_records_everything(tmp_path):
    with FakeServer(delay=0.002) as srv:
        res = run_scenario(scenario(warmup={"requests": 2}), Target(srv.url), tmp_path, progress=False)
        generated = srv.generated
    assert res.stop_reason == "max_requests"
    ev = read_events(tmp_path / "events.jsonl")
    reqs = ev["requests"]
    assert len(reqs) == 14 and sum(r["warmup"] for r in reqs) == 2
    assert all(r["outcome"] == "ok" and r["ev_k"] == "rcccccud" for r in reqs)
    assert {s["phase"] for s in ev["scrapes"]} >= {"before", "after"}
    s = write_reports(tmp_path)
    assert s["ok"] and s["metrics"]["requests"]["ok"] == 12
    assert s["server"]["tokens"]["output"] == {"client_chunks": 70, "client_usage": 70, "server": float(generated)}
    assert s["server"]["flags"] == []
    assert (tmp_path / "report.html").read_text().count("<svg") >= 4
    # the load loop's wait for a CPU, the kernel's count (Linux): recorded raw, carried into the self-check
    end = ev["end"]
    assert isinstance(end["client_cpu_wait_s"], float) and 0 <= end["client_cpu_wait_s"] < 60
    assert s["client"]["client_cpu_wait_s"] == end["client_cpu_wait_s"]
    assert "waited for a CPU" in (tmp_path / "summary.md").read_text()


def test_a_client_that_waited_for_a_cpu_is_named_client_bound():
    from harness.load.crosscheck import client_selfcheck

    starved = client_selfcheck([], 0.2, 10.0, client_cpu_wait_s=4.0)
    assert starved["client_bound"] and starved["client_cpu_wait_fraction"] == 0.4
    assert "waited 4.00 s for a CPU (40% of the measured phase)" in starved["warnings"][0]
    scheduled = client_selfcheck([], 0.2, 10.0, client_cpu_wait_s=0.05)
    assert not scheduled["client_bound"] and scheduled["warnings"] == []
    # no count from the kernel, or a measured phase too short to judge: nothing is claimed either way
    assert not client_selfcheck([], 0.2, 10.0, client_cpu_wait_s=None)["client_bound"]
    assert client_selfcheck([], 0.01, 0.5, client_cpu_wait_s=0.4)["client_cpu_wait_fraction"] is None


def test_open_loop_poisson_sends_on_schedule(tmp_path):
    sc = scenario(arrival={"kind": "poisson", "rate": 40.0}, bounds={"max_requests": 20, "max_duration_s": 10})
    with FakeServer() as srv:
        run_scenario(sc, Target(srv.url), tmp_path, progress=False)
    s = write_reports(tmp_path)
    assert s["metrics"]["requests"]["ok"] == 20
    assert s["client"]["send_lag_ms"]["p99"] < 50  # generous: the 2 CI cores are shared
    # Records are written as requests finish, so order them by id (the planned order) before comparing.
    reqs = sorted(read_events(tmp_path / "events.jsonl")["requests"], key=lambda r: r["id"])
    sched = [r["scheduled_ns"] for r in reqs]
    assert [r["id"] for r in reqs] == list(range(20))
    assert sched == sorted(sched) and sched[-1] - sched[0] > 0.1e9  # spread out, not all at once


def test_duration_bound_cancels_in_flight_and_keeps_them(tmp_path):
    sc = scenario(bounds={"max_requests": 50, "max_duration_s": 0.6}, output_tokens={"kind": "fixed", "value": 100})
    t = time.monotonic()
    with FakeServer(delay=0.02) as srv:
        res = run_scenario(sc, Target(srv.url), tmp_path, progress=False)
    assert time.monotonic() - t < 8
    assert res.stop_reason == "max_duration"
    reqs = read_events(tmp_path / "events.jsonl")["requests"]
    cancelled = [r for r in reqs if r["outcome"] == "cancelled"]
    assert len(cancelled) == 3 and all(r["error"] == "max_duration" and r["ev_k"].startswith("r") for r in cancelled)
    s = write_reports(tmp_path)
    assert s["stop_reason"] == "max_duration"


def test_abort_on_failing_server_stops_early_and_says_why(tmp_path, capsys):
    sc = scenario(
        bounds={"max_requests": 200, "max_duration_s": 20},
        abort={"max_consecutive_failures": 4, "max_error_rate": 0.9, "min_requests": 50},
    )
    with FakeServer(fail_after=6) as srv:
        res = run_scenario(sc, Target(srv.url), tmp_path, progress=False)
    assert res.stop_reason == "abort" and res.abort["rule"] == "max_consecutive_failures"
    reqs = read_events(tmp_path / "events.jsonl")["requests"]
    assert 10 <= len(reqs) < 30
    assert sum(r["outcome"] == "ok" for r in reqs) == 6
    assert all(
        r["status"] == 500 and r["outcome"] == "http_error" for r in reqs if r["outcome"] not in ("ok", "cancelled")
    )
    s = write_reports(tmp_path)
    assert not s["ok"] and "consecutive failed requests" in s["abort"]["detail"]
    assert "Aborted" in (tmp_path / "summary.md").read_text()


def test_cli_exit_codes_and_report_rerender(tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text(
        "name: t\nprompt_unit: char\nbounds: {max_requests: 4, max_duration_s: 10}\n"
        "arrival: {kind: concurrency, concurrency: 2}\nprompt_tokens: {kind: fixed, value: 4}\n"
        "output_tokens: {kind: fixed, value: 3}\nslo: {e2e_ms: {p50: 0.001}}\n"
    )
    with FakeServer() as srv:
        p = subprocess.run(
            [sys.executable, "-m", "harness", "load", "--url", srv.url, str(sc), "--out", str(tmp_path / "o")],
            capture_output=True,
            text=True,
        )
    assert p.returncode == 1 and "SLO failed: e2e_ms.p50" in p.stdout
    (tmp_path / "o" / "summary.json").unlink()
    (tmp_path / "o" / "report.html").unlink()
    p = subprocess.run([sys.executable, "-m", "harness", "report", str(tmp_path / "o")], capture_output=True, text=True)
    assert p.returncode == 1 and (tmp_path / "o" / "report.html").is_file()
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["metrics"]["requests"]["ok"] == 4
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: t\nbounds: {max_requests: 4}\n")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "load",
            "--url",
            "http://127.0.0.1:9",
            str(bad),
            "--out",
            str(tmp_path / "b"),
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and "bounds.max_duration_s" in p.stderr


def test_clients_come_from_the_seam_with_the_fast_transport_injected(tmp_path, monkeypatch):
    import harness.load.runner as runner
    from harness.load.transport import FastTransport

    made = []
    real = runner.make_client
    monkeypatch.setattr(runner, "make_client", lambda url, **kw: made.append((url, kw)) or real(url, **kw))
    with FakeServer() as srv:
        run_scenario(scenario(bounds={"max_requests": 2, "max_duration_s": 10}), Target(srv.url, api_key="k"), tmp_path,
                     progress=False)  # fmt: skip
    assert len(made) == 2  # the request client and the side client (discovery, scrapes)
    assert all(
        url == srv.url and isinstance(kw["transport"], FastTransport) and kw["api_key"] == "k" for url, kw in made
    )


@pytest.mark.parametrize(
    "kind, outcome",
    [
        ("unsent", "timeout"),
        ("timeout", "timeout"),
        ("connect", "transport_error"),
        ("protocol", "transport_error"),
        ("other", "transport_error"),
    ],
)
def test_transport_failures_are_named_by_the_seam(kind, outcome):
    from harness.load.runner import OUTCOME_OF_FAILURE

    assert OUTCOME_OF_FAILURE.get(kind, "transport_error") == outcome
