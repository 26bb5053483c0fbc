"""The load cross-check reads the engine profile's series (harness/engines/): llama.cpp's `llamacpp:` series from a
llama-server-shaped /metrics, what it cannot check said as "not available on llama.cpp: <why>", and where the profile
came from (manifest, --engine, default) in every report."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.engines import profile_for
from harness.load.crosscheck import server_crosscheck, timeline
from harness.load.report import read_events, render_markdown, write_reports
from harness.load.runner import Target, run_scenario
from harness.load.scenario import parse_scenario
from harness.metrics import keep_series
from tests.load.fakeserver import FakeServer, llamacpp_metrics

MS = 1_000_000
LLAMA = profile_for("llamacpp")
NOT_CHECKED = {"requests", "ttft", "preemptions", "queue_time"}  # what llama-server exports no series for


def stored(text: str) -> str:
    return keep_series(text, ("llamacpp:",))


def req(i: int, ttft_ms: int, completion: int, prompt: int = 3) -> dict:
    return {
        "id": i,
        "outcome": "ok",
        "sent_ns": 0,
        "end_ns": 3 * ttft_ms * MS,
        "ev_t": [ttft_ms * MS, ttft_ms * MS + 1] + [ttft_ms * MS + 2 + j for j in range(completion - 1)],
        "ev_k": "r" + "c" * completion,
        "usage": {"completion_tokens": completion, "prompt_tokens": prompt},
    }


def scenario(**kw):
    d = {
        "name": "t",
        "endpoint": "chat",
        "prompt_unit": "char",
        "scrape_interval_s": 0.05,
        "bounds": {"max_requests": 8, "max_duration_s": 10},
        "arrival": {"kind": "concurrency", "concurrency": 2},
        "prompt_tokens": {"kind": "fixed", "value": 8},
        "output_tokens": {"kind": "fixed", "value": 4},
    }
    d.update(kw)
    return parse_scenario(d, "<test>")


# ---------------------------------------------------------------- the pure cross-check on llama-server scrapes


def test_llamacpp_tokens_are_checked_from_its_own_counters():
    reqs = [req(0, 20, 4), req(1, 30, 5)]
    scrapes = [
        {"phase": "before", "text": stored(llamacpp_metrics(prompt=10, cached=0, predicted=7)), "t_ns": 0},
        {"phase": "during", "text": stored(llamacpp_metrics(13, 0, 9, processing=2, deferred=1)), "t_ns": 5 * MS},
        # 6 prompt tokens: 4 evaluated + 2 reused from a slot's cache (counted apart by llama-server)
        {"phase": "after", "text": stored(llamacpp_metrics(prompt=14, cached=2, predicted=16)), "t_ns": 9 * MS},
    ]
    res = server_crosscheck(reqs, scrapes, "llamacpp", source="manifest")
    assert res["available"] and res["flags"] == []
    assert res["engine"] == {"kind": "llamacpp", "title": "llama.cpp", "source": "manifest"}
    assert res["tokens"]["output"] == {"client_chunks": 9, "client_usage": 9, "server": 9.0}
    assert res["tokens"]["prompt"] == {"client_usage": 6, "server": 6.0}
    assert any("llamacpp:prompt_tokens_total + llamacpp:prompt_tokens_cached_total" in n for n in res["notes"])
    assert res["scheduler"]["max_waiting_seen"] == 1.0  # llamacpp:requests_deferred
    # never a silent skip, never a pass: each check without a series says so, with the profile's reason
    assert set(res["not_available"]) == NOT_CHECKED
    assert res["not_available"]["ttft"] == f"TTFT histogram: not available on llama.cpp: {LLAMA.notes['ttft']}"
    assert res["not_available"]["requests"].startswith("finished requests: not available on llama.cpp: ")
    assert "ttft_histogram" not in res
    assert res["requests"]["server_success"] is None and res["scheduler"]["preemptions"] is None


def test_llamacpp_disagreements_are_flags_with_the_numbers():
    scrapes = [
        {"phase": "before", "text": stored(llamacpp_metrics(prompt=0, predicted=0)), "t_ns": 0},
        {"phase": "after", "text": stored(llamacpp_metrics(prompt=3, cached=0, predicted=7)), "t_ns": 9 * MS},
    ]
    res = server_crosscheck([req(0, 20, 4, prompt=5)], scrapes, LLAMA)
    assert res["flags"] == [
        "output tokens: server counted 7, client usage sums to 4 (diff +3): unexplained",
        "prompt tokens: server counted 3, client usage sums to 5 (diff -2)",
    ]


def test_a_series_the_profile_names_but_the_scrape_lacks_is_a_note():
    """llama-server without --metrics answers nothing; one that sends other series only: said per series."""
    scrapes = [
        {"phase": "before", "text": "llamacpp:requests_processing 0", "t_ns": 0},
        {"phase": "after", "text": "llamacpp:requests_processing 0", "t_ns": 9 * MS},
    ]
    res = server_crosscheck([req(0, 20, 4)], scrapes, "llamacpp")
    assert res["tokens"]["output"]["server"] is None and res["flags"] == []
    assert any(n.startswith("llamacpp:tokens_predicted_total is not in the scrapes") for n in res["notes"])


def test_the_vllm_profile_on_llamacpp_scrapes_says_which_profile_would_read_them():
    scrapes = [
        {"phase": "before", "text": llamacpp_metrics(prompt=0), "t_ns": 0},
        {"phase": "after", "text": llamacpp_metrics(prompt=3, predicted=4), "t_ns": 9 * MS},
    ]
    res = server_crosscheck([req(0, 20, 4)], scrapes)  # no engine named: the default profile, said so
    assert res["engine"]["kind"] == "vllm" and res["engine"]["source"] == "default"
    assert any("no vllm: series but those of llamacpp" in f and "--engine llamacpp" in f for f in res["flags"])


def test_timeline_follows_the_profile_gauges_and_has_no_kv_usage_on_llamacpp():
    scrapes = [
        {"phase": "during", "text": stored(llamacpp_metrics(processing=2, deferred=1)), "t_ns": MS},
        {"phase": "during", "text": stored(llamacpp_metrics(processing=1)), "t_ns": 2 * MS},
    ]
    g = timeline([req(0, 1, 2)], scrapes, 0, 10 * MS, engine="llamacpp")["gauges"]
    assert g["running"] == [2.0, 1.0] and g["waiting"] == [1.0, 0.0] and g["kv_usage"] == [None, None]


# ---------------------------------------------------------------- a run: what it keeps, records and reports


def test_a_llamacpp_run_keeps_its_series_and_reports_what_it_cannot_check(tmp_path):
    with FakeServer(delay=0.002, metrics="llamacpp") as srv:
        run_scenario(
            scenario(warmup={"requests": 1}),
            Target(srv.url, engine="llamacpp", engine_source="manifest"),
            tmp_path,
            progress=False,
        )
        generated = srv.generated
    ev = read_events(tmp_path / "events.jsonl")
    assert ev["run"]["engine"] == "llamacpp" and ev["run"]["engine_source"] == "manifest"
    lines = [ln for s in ev["scrapes"] for ln in s["text"].splitlines()]
    assert lines and all(ln.startswith(("llamacpp:", "# TYPE llamacpp:")) for ln in lines)
    s = write_reports(tmp_path)
    assert s["ok"] and s["engine"] == {"kind": "llamacpp", "title": "llama.cpp", "source": "manifest"}
    sv = s["server"]
    assert sv["flags"] == []
    assert sv["tokens"]["output"] == {"client_chunks": 36, "client_usage": 36, "server": float(generated)}
    assert sv["tokens"]["prompt"] == {"client_usage": 27, "server": 27.0}  # evaluated + reused
    assert set(sv["not_available"]) == NOT_CHECKED
    md = (tmp_path / "summary.md").read_text()
    assert "Series read with the llama.cpp profile (manifest)." in md
    assert f"- TTFT histogram: not available on llama.cpp: {LLAMA.notes['ttft']}" in md
    assert f"- preemptions: not available on llama.cpp: {LLAMA.notes['preemptions']}" in md
    html = (tmp_path / "report.html").read_text()
    assert "Server queue (scraped)" in html and "Server KV cache usage" not in html
    # the saved JSON re-renders to the same report
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["server"]["not_available"] == sv["not_available"]
    assert render_markdown(saved) == md


def test_a_url_run_without_engine_keeps_every_profile_and_report_can_rejudge_it(tmp_path):
    with FakeServer(metrics="llamacpp") as srv:
        run_scenario(scenario(), Target(srv.url), tmp_path, progress=False)
    assert read_events(tmp_path / "events.jsonl")["run"]["engine"] is None
    s = write_reports(tmp_path)
    assert s["engine"]["kind"] == "vllm" and s["engine"]["source"].startswith("default: the run named no engine")
    assert any("--engine llamacpp" in f for f in s["server"]["flags"])
    s = write_reports(tmp_path, "llamacpp")  # `harness report DIR --engine llamacpp`
    assert s["engine"] == {"kind": "llamacpp", "title": "llama.cpp", "source": "--engine (report)"}
    assert s["server"]["flags"] == [] and s["server"]["tokens"]["prompt"]["server"] == 24.0


def test_events_written_before_engine_profiles_are_read_with_the_default_profile(tmp_path):
    with FakeServer() as srv:
        run_scenario(scenario(), Target(srv.url), tmp_path, progress=False)
    path = tmp_path / "events.jsonl"
    lines = path.read_text().splitlines()
    head = json.loads(lines[0])
    del head["engine"], head["engine_source"]
    path.write_text("\n".join([json.dumps(head)] + lines[1:]) + "\n")
    s = write_reports(tmp_path)
    assert s["engine"]["kind"] == "vllm" and "recorded no engine" in s["engine"]["source"]
    assert s["server"]["flags"] == []


def test_an_unknown_engine_in_the_run_header_is_a_data_error(tmp_path):
    from harness.errors import DataError

    with FakeServer() as srv:
        run_scenario(scenario(), Target(srv.url, engine="vllm"), tmp_path, progress=False)
    path = tmp_path / "events.jsonl"
    path.write_text(path.read_text().replace('"engine":"vllm"', '"engine":"nope"', 1))
    with pytest.raises(DataError, match="run.engine: unknown engine kind 'nope'"):
        read_events(path)


def test_cli_load_url_with_engine_names_the_profile_and_what_it_cannot_check(tmp_path, capsys):
    sc = tmp_path / "s.yaml"
    sc.write_text(
        "name: t\nbounds: {max_requests: 3, max_duration_s: 10}\narrival: {kind: concurrency, concurrency: 1}\n"
        "prompt_tokens: {kind: fixed, value: 4}\noutput_tokens: {kind: fixed, value: 2}\n"
    )
    with FakeServer(metrics="llamacpp") as srv:
        code = main(["load", "--url", srv.url, str(sc), "--out", str(tmp_path / "o"), "--engine", "llamacpp",
                     "--no-progress"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert (
        "server cross-check (llama.cpp profile): not available: finished requests, TTFT histogram, preemptions, "
        "queue time (see summary.md)" in out
    )
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["engine"]["source"] == "--engine"


def test_cli_load_refuses_an_engine_that_is_not_the_manifests(tmp_path, capsys):
    from harness.manifest import DEFAULT_MANIFEST, load_manifest

    kind = load_manifest(DEFAULT_MANIFEST).engine.kind
    other = next(k for k in ("llamacpp", "vllm") if k != kind)
    sc = tmp_path / "s.yaml"
    sc.write_text(
        "name: t\nbounds: {max_requests: 1, max_duration_s: 1}\narrival: {kind: concurrency, concurrency: 1}\n"
        "prompt_tokens: {kind: fixed, value: 1}\noutput_tokens: {kind: fixed, value: 1}\n"
    )
    code = main(["load", str(DEFAULT_MANIFEST), str(sc), "--out", str(tmp_path / "o"), "--engine", other])
    assert code == 2 and f"--engine {other}: the manifest runs" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
