"""The golden set on the trained model (issue 36): golden/prompts/smollm2.yaml, selected by the manifest's model (data,
not a branch), and its committed baselines per engine and release. The `engine` test records it on the session's vLLM
0.11.0 smollm2 engine and holds it to the committed baseline within the diff's tolerance."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from harness.errors import RefusedError
from harness.golden.diff import diff_recordings
from harness.golden.prompts import PROMPTS_DIR, load_prompt_set, resolve_prompt_sets
from harness.golden.store import default_recording_dir, load_recording
from harness.manifest import DEFAULT_MANIFEST, load_manifest
from harness.settings import REPO_ROOT

SET = PROMPTS_DIR / "smollm2.yaml"
VLLM_011 = REPO_ROOT / "manifests" / "vllm-0.11.0-cpu-smollm2.yaml"
SMOLLM2_MANIFESTS = [
    VLLM_011,
    REPO_ROOT / "manifests" / "vllm-0.32.0-cpu-smollm2.yaml",
    REPO_ROOT / "manifests" / "llamacpp-0c1e570-cpu-smollm2.yaml",
]
# what a committed file must never hold: a path of the machine that recorded it, a terminal escape
MACHINE_PATH = re.compile(r"(/root/|/home/|/tmp/|/work/|/Users/|[A-Z]:\\\\)")


def _baselines():
    return [default_recording_dir(load_manifest(p)) for p in SMOLLM2_MANIFESTS]


def test_the_set_is_well_formed_and_written_for_the_trained_model():
    s = load_prompt_set(SET)
    assert s.name == "smollm2" and s.model == "smollm2-135m"
    assert 25 <= len(s.prompts) <= 40
    kinds = {p.endpoint for p in s.prompts}
    assert kinds == {"chat", "completions"}
    assert any(len(p.input) > 2 for p in s.prompts if p.endpoint == "chat")  # a multi-turn prompt
    assert any(p.input[0]["role"] == "system" for p in s.prompts if p.endpoint == "chat")
    assert all("stop" in p.options for p in s.prompts if p.endpoint == "completions")  # ended by a stop string
    sampled = [p for p in s.prompts if p.options.get("temperature")]
    assert sampled and all("seed" in p.options for p in sampled)  # the diff's `resampled` class has prompts
    assert all(p.options["max_tokens"] <= 96 for p in s.prompts)  # a cap on short answers, never the length


def test_selection_is_the_manifests_model():
    smol = load_manifest(VLLM_011)
    assert [s.name for s in resolve_prompt_sets(model=smol.model.source)] == ["smollm2"]
    ref = load_manifest(DEFAULT_MANIFEST)
    default = [s.name for s in resolve_prompt_sets(model=ref.model.source)]
    assert "smollm2" not in default and "agentic" not in default and default == [s.name for s in resolve_prompt_sets()]
    assert [s.name for s in resolve_prompt_sets(model="scripted-tiny")] == ["agentic"]  # data: the sets' `model:`
    assert [s.name for s in resolve_prompt_sets(["smollm2", "chat"], model=ref.model.source)] == ["smollm2", "chat"]


@pytest.mark.parametrize("manifest", SMOLLM2_MANIFESTS, ids=lambda p: p.stem)
def test_committed_baseline_is_well_formed_and_names_no_path(manifest):
    d = default_recording_dir(load_manifest(manifest))
    rec = load_recording(d)  # strict reader: every line valid, set files match meta.json's hashes
    assert list(rec.sets) == ["smollm2"]
    s = load_prompt_set(SET)
    assert rec.meta["sets"]["smollm2"]["prompt_file_sha256"] == hashlib.sha256(SET.read_bytes()).hexdigest()
    by_id = {p.id: p for p in s.prompts}
    assert set(rec.sets["smollm2"]) == set(by_id)
    for pid, r in rec.sets["smollm2"].items():
        assert r["request_sha256"] == by_id[pid].request_sha256(), pid
        (ch,) = r["choices"]
        # every answer ended on its own (end token or stop string), inside the cap
        assert ch["finish_reason"] == "stop" and len(ch["token_ids"]) < r["request"]["max_tokens"], pid
    for f in d.iterdir():
        text = f.read_text()
        assert not MACHINE_PATH.search(text), (f.name, MACHINE_PATH.search(text))
        assert "\x1b" not in text
    assert json.loads((d / "meta.json").read_text())["manifest"]["path"] == f"manifests/{manifest.name}"


def test_the_engines_recordings_are_comparable_but_not_with_another_model():
    v011, v032, llama = (load_recording(d) for d in _baselines())
    assert v011.model_sha256 != llama.model_sha256  # safetensors for vLLM, the GGUF for llama.cpp: one model
    assert diff_recordings(v011, llama).prompts and diff_recordings(v011, v032).prompts
    tiny = load_recording(default_recording_dir(load_manifest(DEFAULT_MANIFEST)))
    with pytest.raises(RefusedError, match="different models"):
        diff_recordings(tiny, v011)


@pytest.mark.engine
def test_recorded_on_vllm_0_11_0_matches_the_committed_baseline(engine_factory, tmp_path):
    from harness.golden.record import record_with_engine

    m = load_manifest(VLLM_011)
    engine = engine_factory(manifest=m)
    record_with_engine(engine, m, resolve_prompt_sets(model=m.model.source), tmp_path / "rec")
    d = diff_recordings(load_recording(default_recording_dir(m)), load_recording(tmp_path / "rec"))
    bad = [(p.id, p.status, p.reason) for p in d.prompts if p.status not in ("identical", "equivalent")]
    assert d.ok and d.within_tolerance and not bad, (d.hardware["line"], bad)
    assert max(p.max_logprob_drift for p in d.prompts) <= d.tolerance
