"""The metric section of an upgrade read from the engine profiles: hidden metrics searched where the NEW side's
profile says its source lives (or why nowhere), an engine migration reported as one engine change (not every family
"removed") that is not blocking on its own, and the key packages of both sides' profiles."""

from __future__ import annotations

from pathlib import Path

from harness.engines import profile_for
from harness.metrics.surface import surface_from_text
from harness.shown import md_text
from harness.upgrade import judge as J
from harness.upgrade.compare import MAPPED_SERIES, hidden_metric_search, metric_changes
from harness.upgrade.render import _metrics
from tests.load.fakeserver import llamacpp_metrics

DATA = Path(__file__).parent.parent / "golden" / "data"
V011 = surface_from_text((DATA / "metrics-vllm-0.11.0.txt").read_text())
V032 = surface_from_text((DATA / "metrics-vllm-0.32.0.txt").read_text())
LLAMA = surface_from_text(llamacpp_metrics(prompt=120, cached=40, predicted=64, decode=70))
GONE = "vllm:time_per_output_token_seconds"  # in 0.11.0's /metrics, not in 0.32.0's


def side(kind: str, metrics: dict, **kw) -> dict:
    return {"name": f"{kind}-side", "ok": True, "engine": {"kind": kind, "version": "x"}, "metrics": metrics, **kw}


def env_with(tmp_path: Path, package: str, text: str) -> Path:
    pkg = tmp_path / "env" / "lib" / "python3.11" / "site-packages" / package
    pkg.mkdir(parents=True)
    (pkg / "loggers.py").write_text(text)
    return tmp_path / "env"


# ---------------------------------------------------------------- hidden metrics, looked up by the new side's profile


def test_hidden_metrics_are_searched_in_the_new_profiles_source_package(tmp_path):
    env = env_with(tmp_path, "vllm", f'h = Histogram("{GONE}")\n')
    m = metric_changes(side("vllm", V011), side("vllm", V032, env_dir=str(env)))
    assert [x["name"] for x in m["hidden"]] == [GONE] and GONE not in {x["name"] for x in m["removed"]}
    assert (
        m["hidden_search"] == "hidden metrics searched for in the new environment's lib/python3.11/site-packages/vllm"
    )


def test_a_package_the_profile_does_not_name_is_not_searched(tmp_path):
    env = env_with(tmp_path, "someone_else", f'h = Histogram("{GONE}")\n')
    m = metric_changes(side("vllm", V011), side("vllm", V032, env_dir=str(env)))
    assert m["hidden"] == [] and GONE in {x["name"] for x in m["removed"]}
    assert m["hidden_search"] == f"hidden metrics not searched: no site-packages/vllm in {env}"


def test_without_an_environment_the_report_says_there_was_nowhere_to_look():
    m = metric_changes(side("vllm", V011), side("vllm", V032))  # a container image: no env_dir
    assert m["hidden_search"] == "hidden metrics not searched: the new vLLM has no Python environment here"


def test_an_engine_without_source_packages_says_why_from_its_notes(tmp_path):
    for kind in ("tgi", "llamacpp"):
        env = env_with(tmp_path / kind, "vllm", f'"{GONE}"\n')  # there, but not this engine's source
        found, line = hidden_metric_search(side(kind, {}, env_dir=str(env)), [GONE])
        assert found == set()
        assert line == f"hidden metrics not searched: {profile_for(kind).notes['hidden_metrics']}"


def test_the_hidden_search_line_is_rendered():
    m = metric_changes(side("vllm", V011), side("vllm", V032))
    assert "(hidden metrics not searched: the new vLLM has no Python environment here.)" in _metrics(m)


# ---------------------------------------------------------------- an engine migration


def test_a_migration_is_one_engine_change_with_the_series_mapped():
    m = metric_changes(side("vllm", V011), side("llamacpp", LLAMA))
    assert set(m) == {"engine_change", "counts"}  # no removed / added / renamed lists
    ec = m["engine_change"]
    assert ec["old"] == {"kind": "vllm", "title": "vLLM"} and ec["new"] == {"kind": "llamacpp", "title": "llama.cpp"}
    assert m["counts"] == {"old": len(V011), "new": len(LLAMA)} and len(LLAMA) == 12
    mapped = {x["series"]: x for x in ec["mapped"]}
    assert list(mapped) == [f for f in MAPPED_SERIES if f in mapped]
    assert mapped["running"] == {
        "series": "running",
        "old": "vllm:num_requests_running",
        "new": "llamacpp:requests_processing",
        "old_seen": True,
        "new_seen": True,
        "note": "",
    }
    assert (
        mapped["generation_tokens"]["new"] == "llamacpp:tokens_predicted_total"
        and mapped["generation_tokens"]["new_seen"]
    )
    assert mapped["kv_usage"]["new"] is None
    assert mapped["kv_usage"]["note"] == profile_for("llamacpp").notes["kv_usage"]
    assert mapped["prompt_tokens_cached"]["old"] is None and mapped["prompt_tokens_cached"]["new_seen"]
    assert ec["line"].startswith(
        f"metric families: engine change vLLM -> llama.cpp: {len(V011)} families on the old side, {len(LLAMA)} on "
        "the new; mapped series: kv_usage vllm:kv_cache_usage_perc -> none, running vllm:num_requests_running -> "
        "llamacpp:requests_processing, waiting vllm:num_requests_waiting -> llamacpp:requests_deferred, "
        "ttft vllm:time_to_first_token_seconds -> none, "
    )


def test_a_migration_is_one_review_reason_and_never_blocking_on_its_own():
    old, new = side("vllm", V011), side("llamacpp", LLAMA)
    m = metric_changes(old, new)
    (r,) = J.metrics(old, new, {"metrics": m})
    assert r["level"] == "review" and r["text"].startswith("metric families: engine change vLLM -> llama.cpp: ")
    assert J.arguments(old, new, {"metrics": m}) == []  # no *_info label diff across engines
    v = J.judge(old, new, {"metrics": m, "conformance": {"cases": []}})
    assert v["verdict"] == "review" and [x["level"] for x in v["reasons"]] == ["review"]


def test_the_migration_is_rendered_as_a_table_of_mapped_series():
    lines = _metrics(metric_changes(side("vllm", V011), side("llamacpp", LLAMA)))
    text = "\n".join(lines)
    assert text.startswith(f"**Engine change** vLLM → llama.cpp: {len(V011)} metric families on the old side, 12 on")
    assert "| running | `vllm:num_requests_running` | `llamacpp:requests_processing` |  |" in text
    note = profile_for("llamacpp").notes["kv_usage"]
    assert f"| kv\\_usage | `vllm:kv_cache_usage_perc` | none | {md_text(note)} |" in text  # Markdown-escaped text
    assert "Removed" not in text


def test_a_mapped_series_missing_from_its_scrape_is_marked():
    without = {k: v for k, v in LLAMA.items() if k != "llamacpp:requests_processing"}
    m = metric_changes(side("vllm", V011), side("llamacpp", without))
    running = next(x for x in m["engine_change"]["mapped"] if x["series"] == "running")
    assert running["new_seen"] is False
    assert "`llamacpp:requests_processing` (not in its /metrics)" in "\n".join(_metrics(m))


def test_the_same_engine_kind_is_still_a_family_diff():
    m = metric_changes(side("vllm", V011), side("vllm", V032))
    assert "engine_change" not in m and GONE in {x["name"] for x in m["removed"]}


# ---------------------------------------------------------------- key packages


def test_key_packages_are_both_profiles():
    vllm, llama = {"engine": {"kind": "vllm"}}, {"engine": {"kind": "llamacpp"}}
    assert J.key_packages(vllm, llama) == profile_for("vllm").key_packages + profile_for("llamacpp").key_packages
    assert J.key_packages(llama, llama) == profile_for("llamacpp").key_packages
    lock = {"changed": {"vllm": ["0.11.0", "0.32.0"]}, "added": {}, "removed": {}}
    (r,) = J.packages(vllm, vllm, {"manifest": {"lock": lock}})
    assert r["text"].endswith("(vllm 0.11.0->0.32.0)")
    (r,) = J.packages(llama, llama, {"manifest": {"lock": lock}})
    assert r["text"].endswith("()")  # not a llama.cpp key package


# ---------------------------------------------------------------- end to end: vLLM -> llama.cpp on collected sides


def test_a_migration_report_has_one_engine_change_in_its_verdict_and_metric_section(tmp_path, monkeypatch):
    import harness.upgrade.run as run
    from harness.settings import REPO_ROOT
    from tests.golden.helpers import choice, record, write

    surfaces = {"vllm": V011, "llamacpp": LLAMA}

    def fake_collect(manifest, out, sets, *, expectations, conformance, say):
        rec = out / manifest.name / "golden"
        write(rec, {"chat": [record("p", [choice([72, 101, 108])])]})
        return {
            **side(manifest.engine.kind, surfaces[manifest.engine.kind]),
            "name": manifest.name,
            "golden_dir": str(rec),
            "conformance": {"available": False, "reason": "not run (--no-conformance)"},
            "wall_seconds": 0.1,
        }

    monkeypatch.setattr(run, "collect_side", fake_collect)
    manifests = REPO_ROOT / "manifests"
    new = next(manifests.glob("llamacpp-*-cpu.yaml"))
    report = run.run_upgrade(
        manifests / "vllm-0.11.0-cpu.yaml", new, tmp_path / "u", tolerance=0.02, margin=0.1, conformance=False,
        say=lambda s: None,
    )  # fmt: skip
    texts = [r["text"] for r in report["verdict"]["reasons"]]
    engine_change = [t for t in texts if t.startswith("metric families: engine change vLLM -> llama.cpp: ")]
    assert len(engine_change) == 1 and not any(t.startswith("metrics removed") for t in texts)
    assert report["verdict"]["verdict"] == "review"  # golden identical; the engine change and unrun conformance review
    md = (tmp_path / "u" / "upgrade.md").read_text()
    assert "**Engine change** vLLM → llama.cpp" in md and "| running | `vllm:num_requests_running` |" in md
