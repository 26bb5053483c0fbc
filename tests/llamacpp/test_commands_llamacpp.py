"""The harness commands on llama.cpp: `golden record` + `golden diff` against the committed recording, a small
`load` run whose server cross-check reads the `llamacpp:` series, and `blocks crosscheck` saying it does not apply."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from harness.engines import profile_for
from harness.golden.store import default_recording_dir
from harness.manifest import load_manifest
from harness.settings import REPO_ROOT
from tests.llamacpp.conftest import KEY_ENV, LLAMACPP_MANIFEST

pytestmark = pytest.mark.engine

HARNESS = [sys.executable, "-m", "harness"]
LLAMA = profile_for("llamacpp")


def harness(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*HARNESS, *argv], capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT)


def test_golden_record_matches_the_committed_recording_by_the_diffs_own_tolerance(tmp_path):
    committed = default_recording_dir(load_manifest(LLAMACPP_MANIFEST))
    assert committed == REPO_ROOT / "golden" / "llamacpp-0c1e570" / "f62248ee9698"
    assert (committed / "meta.json").is_file(), f"no committed recording at {committed}"
    rec = tmp_path / "rec"
    r = harness("golden", "record", str(LLAMACPP_MANIFEST), "--out", str(rec))
    assert r.returncode == 0, r.stderr[-3000:]
    meta = json.loads((rec / "meta.json").read_text())
    assert meta["engine"] == {"kind": "llamacpp", "version": "0c1e570", "reported_version": "0c1e570"}
    committed_sets = {p.stem for p in committed.glob("*.jsonl")}
    assert committed_sets <= {p.stem for p in rec.glob("*.jsonl")}  # every committed prompt set recorded again

    out = tmp_path / "diff.json"
    r = harness("golden", "diff", str(committed), str(rec), "--json", str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = json.loads(out.read_text())
    # the diff's own verdict is the pass, not bit-identity: another machine's float kernels may differ in the last bits
    assert d["ok"] and d["within_tolerance"], d["hardware"]
    # every committed prompt compared (a prompt set newer than the recording is the diff's to report, not this test's)
    n_committed = sum(len(f.read_text().splitlines()) for f in committed.glob("*.jsonl"))
    assert len(d["prompts"]) == n_committed >= 19 and d["sets_only_in_a"] == []
    assert {p["set"] for p in d["prompts"]} == committed_sets
    bad = [(p["set"], p["id"], p["status"], p["reason"]) for p in d["prompts"]
           if p["status"] not in ("identical", "equivalent")]  # fmt: skip
    assert not bad, (d["hardware"]["line"], bad)
    assert max(p["max_logprob_drift"] for p in d["prompts"]) <= d["tolerance"]
    assert sum(d["counts"].values()) == n_committed


def _scenario(path):
    path.write_text(
        yaml.safe_dump(
            {
                "name": "llamacpp-small",
                "endpoint": "chat",
                "prompt_unit": "char",
                "ignore_eos": True,
                "scrape_interval_s": 0.5,
                "bounds": {"max_requests": 8, "max_duration_s": 30},
                "arrival": {"kind": "concurrency", "concurrency": 2},
                "prompt_tokens": {"kind": "fixed", "value": 24},
                "output_tokens": {"kind": "fixed", "value": 16},
                "warmup": {"requests": 1},
                "slo": {"max_error_rate": 0.0},
            }
        )
    )
    return path


def test_load_run_cross_checks_the_llamacpp_series(llamacpp_engine, tmp_path):
    """Through the CLI against the keyed session engine: llama-server guards /metrics with the key too, so the
    scrapes only succeed when the load runner sends it."""
    eng = llamacpp_engine
    out = tmp_path / "load"
    r = harness("load", "--url", eng.base_url, "--engine", "llamacpp", "--api-key-env", KEY_ENV,
                str(_scenario(tmp_path / "small.yaml")), "--out", str(out), "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["ok"] and s["stop_reason"] == "max_requests", s["slo_checks"]
    server = s["server"]
    assert server["available"] and server["engine"] == {"kind": "llamacpp", "title": "llama.cpp", "source": "--engine"}
    # what llama-server has no series for is said, by name and why, never silently passed
    na = server["not_available"]
    assert set(na) == {"requests", "ttft", "preemptions", "queue_time"}
    assert na["ttft"] == f"TTFT histogram: not available on llama.cpp: {LLAMA.notes['ttft']}"
    assert all("not available on llama.cpp: " in why for why in na.values())
    # what it has agrees with the client exactly
    tok = server["tokens"]
    assert tok["output"]["server"] == tok["output"]["client_usage"] == 9 * 16  # warm-up + 8, ignore_eos
    assert tok["prompt"]["server"] == tok["prompt"]["client_usage"] > 0
    assert any(n.startswith("server prompt tokens = llamacpp:prompt_tokens_total + llamacpp:prompt_tokens_cached_total")
               for n in server["notes"])  # fmt: skip
    # the scrapes kept are llama.cpp's own series, each one answered (with the key)
    scrapes = [
        json.loads(line) for line in (out / "events.jsonl").read_text().splitlines() if '"type":"scrape"' in line
    ]
    assert len(scrapes) >= 2 and all(sc["status"] == 200 for sc in scrapes)
    series = {ln.split("{")[0].split()[0] for sc in scrapes for ln in sc["text"].splitlines() if ln[:1] not in "#"}
    assert series and all(n.startswith("llamacpp:") for n in series), series
    assert {LLAMA.metrics.prompt_tokens, LLAMA.metrics.generation_tokens, LLAMA.metrics.running} <= series


def test_blocks_crosscheck_says_plainly_it_does_not_apply(llamacpp_engine):
    eng = llamacpp_engine
    r = harness("blocks", "crosscheck", "--url", eng.base_url, "--engine", "llamacpp",
                "--model", str(eng.spec.model_dir))  # fmt: skip
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"harness: blocks crosscheck does not apply to llama.cpp: {LLAMA.notes['blocks']}\n"
