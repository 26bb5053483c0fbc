"""The cross-machine rule on copies of the committed recording: float drift within the tolerance passes (equivalent),
beyond it fails; the diff says when hardware differs or is unknown; the committed file holds no machine's path."""

from __future__ import annotations

import copy
import json
import re

import pytest

from harness.cli import main
from harness.golden.diff import DEFAULT_TOLERANCE, diff_recordings, render_text
from harness.golden.store import default_recording_dir, load_recording, write_recording
from harness.hardware import UNKNOWN_BEFORE_PROVENANCE
from harness.manifest import DEFAULT_MANIFEST, load_manifest
from harness.settings import REPO_ROOT

COMMITTED = default_recording_dir(load_manifest(DEFAULT_MANIFEST))
HOST_A = {
    "cpu": {
        "model": "AMD EPYC",
        "machine": "x86_64",
        "isa": ["avx2", "avx512f", "avx512_bf16"],
        "cpus": 2,
        "usable_cpus": 2,
    },
    "torch": {"version": "2.8.0+cu128", "cpu_capability": "AVX512", "blas": "mkl", "libraries": []},
    "gpu": None,
}
HOST_B = copy.deepcopy(HOST_A)
HOST_B["cpu"].update(model="Intel(R) Xeon(R) Platinum 8480+", isa=["avx2", "avx512f", "avx512_bf16", "amx_tile"])


def _shift(rec: dict, delta: float) -> None:
    """Move every stored logprob of a record by `delta` (order and tokens unchanged, as last-bit drift would)."""
    for ch in rec["choices"]:
        for row in ch["logprobs"]:
            row[1] += delta
            for top in row[2]:
                top[1] += delta


def _copy(tmp_path, name: str, *, delta: float = 0.0, only: str | None = None, hardware=None):
    """A copy of the committed recording, logprobs shifted by delta (all prompts, or only prompt `only`)."""
    base = load_recording(COMMITTED)
    sets = {s: [copy.deepcopy(r) for r in recs.values()] for s, recs in base.sets.items()}
    for recs in sets.values():
        for r in recs:
            if only is None or r["id"] == only:
                _shift(r, delta)
    meta = copy.deepcopy(base.meta)
    if hardware is not None:
        meta["hardware"] = hardware
    return load_recording(write_recording(tmp_path / name, meta, sets))


def test_committed_vs_exact_copy_is_identical(tmp_path):
    d = diff_recordings(load_recording(COMMITTED), _copy(tmp_path, "same"))
    assert {p.status for p in d.prompts} == {"identical"} and d.ok and d.within_tolerance


def test_drift_within_tolerance_on_another_machine_passes(tmp_path):
    delta = DEFAULT_TOLERANCE / 2
    other = _copy(tmp_path, "other", delta=delta, hardware=HOST_B)
    d = diff_recordings(load_recording(COMMITTED), other)
    answered = [p for p in d.prompts if not other.sets[p.set][p.id].get("error")]
    assert answered and {p.status for p in answered} == {"equivalent"}
    assert all(p.max_logprob_drift == pytest.approx(delta) for p in answered)
    assert d.ok and d.within_tolerance
    assert d.hardware["status"] == "different" and "cpu.model" in d.hardware["line"], d.hardware["line"]


def test_drift_beyond_tolerance_fails_on_any_machine(tmp_path):
    committed = load_recording(COMMITTED)
    victim = sorted(committed.sets["chat"])[0]
    worse = _copy(tmp_path, "worse", delta=DEFAULT_TOLERANCE / 2, hardware=HOST_B)
    beyond = _copy(tmp_path, "beyond", delta=DEFAULT_TOLERANCE * 2.5, only=victim, hardware=HOST_B)
    assert diff_recordings(committed, worse).within_tolerance
    d = diff_recordings(committed, beyond)
    st = {p.id: p.status for p in d.prompts}
    assert st[victim] == "regression" and not d.ok and not d.within_tolerance
    assert sum(s != "identical" for s in st.values()) == 1


def test_a_token_change_is_never_within_tolerance(tmp_path):
    committed = load_recording(COMMITTED)
    sets = {s: [copy.deepcopy(r) for r in recs.values()] for s, recs in committed.sets.items()}
    rec = next(r for r in sets["chat"] if not r.get("error") and r["request"]["n"] == 1)
    rec["choices"][0]["token_ids"][-1] ^= 1  # the last token differs: the tokens, not the floats
    d = diff_recordings(committed, load_recording(write_recording(tmp_path / "tok", committed.meta, sets)))
    assert not d.within_tolerance


def test_diff_says_hardware_differs_and_what_it_means(tmp_path, capsys):
    a = _copy(tmp_path, "a", hardware=HOST_A)
    b = _copy(tmp_path, "b", delta=1e-5, hardware=HOST_B)
    d = diff_recordings(a, b)
    assert d.hardware["status"] == "different" and d.hardware["differs"] == ["cpu.model", "cpu.isa"]
    text = render_text(d)
    line = next(ln for ln in text.splitlines() if ln.startswith("hardware:"))
    assert "cpu.model 'AMD EPYC' vs 'Intel(R) Xeon(R) Platinum 8480+'" in line and "+amx_tile" in line
    assert "float drift" in line and "token changes are still judged as always" in line
    assert main(["golden", "diff", str(a.path), str(b.path), "--json", str(tmp_path / "d.json")]) == 0
    assert "different hardware" in capsys.readouterr().out
    j = json.loads((tmp_path / "d.json").read_text())
    assert j["hardware"]["status"] == "different" and j["within_tolerance"]
    same = diff_recordings(a, _copy(tmp_path, "a2", hardware=HOST_A))
    assert same.hardware["status"] == "same" and "same hardware" in render_text(same)


def test_old_recording_without_hardware_says_unknown(tmp_path):
    meta_less = _copy(tmp_path, "old", hardware=HOST_A)
    m = json.loads((meta_less.path / "meta.json").read_text())
    del m["hardware"]
    (meta_less.path / "meta.json").write_text(json.dumps(m))
    d = diff_recordings(load_recording(meta_less.path), _copy(tmp_path, "new", hardware=HOST_A))
    assert d.hardware["status"] == "unknown" and "hardware unknown (A: no hardware block)" in d.hardware["line"]


def _strings(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)
    elif isinstance(obj, str):
        yield obj


def test_committed_recordings_hold_no_absolute_path_and_say_their_hardware():
    metas = sorted((REPO_ROOT / "golden").glob("*/*/meta.json"))
    assert metas
    for p in metas:
        meta = json.loads(p.read_text())
        paths = [s for s in _strings(meta) if s.startswith(("/", "~")) or re.match(r"^[A-Za-z]:\\", s)]
        assert not paths, (p, paths)
        rel = meta["manifest"].get("path")
        assert rel is None or (REPO_ROOT / rel).is_file(), (p, rel)
        assert "hardware" in meta, p
        load_recording(p.parent)  # set sha256s still valid
    committed = json.loads((COMMITTED / "meta.json").read_text())
    hw = committed["hardware"]  # the committed baseline says what made it
    assert hw["cpu"]["model"] and hw["cpu"]["isa"] and hw["torch"]["version"] and hw["torch"]["cpu_capability"], hw
    assert committed["manifest"]["path"] == "manifests/vllm-0.11.0-cpu.yaml"


def test_a_recording_without_provenance_is_named_unknown(tmp_path):
    old = _copy(tmp_path, "old", hardware=UNKNOWN_BEFORE_PROVENANCE)
    d = diff_recordings(old, load_recording(COMMITTED))
    assert d.hardware["status"] == "unknown" and "recorded before provenance" in d.hardware["line"]
    assert {p.status for p in d.prompts} == {"identical"}  # unknown hardware changes no verdict
