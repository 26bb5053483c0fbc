import random
from pathlib import Path

import pytest

from harness.errors import ManifestError
from harness.load.scenario import Arrival, arrival_offsets, load_scenario, parse_scenario, plan

REPO = Path(__file__).resolve().parents[2]

BASE = {
    "name": "t",
    "bounds": {"max_requests": 10, "max_duration_s": 5},
    "arrival": {"kind": "poisson", "rate": 2.0},
    "prompt_tokens": {"kind": "fixed", "value": 8},
    "output_tokens": {"kind": "uniform", "min": 4, "max": 9},
}


def with_(**kw):
    d = {**BASE}
    d.update(kw)
    return d


@pytest.mark.parametrize("path", sorted((REPO / "loadtests").glob("*.yaml")))
def test_shipped_scenarios_validate(path):
    sc = load_scenario(path)
    assert sc.bounds.max_requests > 0 and sc.bounds.max_duration_s > 0


def test_default_scenario_is_short():
    sc = load_scenario(REPO / "loadtests" / "default.yaml")
    assert 8 <= sc.bounds.max_requests <= 16 and sc.bounds.max_duration_s <= 20


@pytest.mark.parametrize(
    "raw, field",
    [
        (with_(bogus=1), "bogus"),
        (with_(bounds={"max_requests": 10}), "bounds.max_duration_s"),
        (with_(bounds={"max_duration_s": 10}), "bounds.max_requests"),
        (with_(bounds={"max_requests": 0, "max_duration_s": 1}), "bounds.max_requests"),
        (with_(arrival={"kind": "gamma", "rate": 1.0}), "arrival"),
        (with_(arrival={"kind": "concurrency", "rate": 1.0, "concurrency": 2}), "arrival"),
        (with_(arrival={"kind": "warp"}), "arrival.kind"),
        (with_(prompt_tokens={"kind": "uniform", "min": 9, "max": 3}), "prompt_tokens"),
        (with_(prompt_tokens={"kind": "fixed", "value": 3, "extra": 1}), "prompt_tokens.extra"),
        (with_(endpoint="embeddings"), "endpoint"),
        (with_(slo={"ttft_ms": {"p42": 10}}), "slo.ttft_ms.p42"),
        (with_(abort={"max_error_rate": 2}), "abort.max_error_rate"),
        (with_(shared_prefix={"share": 1.5, "tokens": 4}), "shared_prefix.share"),
        (with_(source="x"), "source"),
        ([1, 2], "(top level)"),
    ],
)
def test_bad_scenarios_name_the_field(raw, field):
    with pytest.raises(ManifestError) as ei:
        parse_scenario(raw, "s.yaml")
    assert ei.value.field == field
    assert "s.yaml" in str(ei.value)


def test_lengths_from_file(tmp_path):
    (tmp_path / "lens.txt").write_text("# comment\n5\n7\n\n9\n")
    sc_path = tmp_path / "s.yaml"
    import yaml

    sc_path.write_text(yaml.safe_dump(with_(prompt_tokens={"kind": "file", "path": "lens.txt"})))
    sc = load_scenario(sc_path)
    assert [p.prompt_units for p in plan(sc, 5)] == [5, 7, 9, 5, 7]
    (tmp_path / "lens.txt").write_text("5\n-1\n")
    with pytest.raises(ManifestError, match="line 2"):
        load_scenario(sc_path)
    sc_path.write_text(yaml.safe_dump(with_(prompt_tokens={"kind": "file", "path": "missing.txt"})))
    with pytest.raises(ManifestError) as ei:
        load_scenario(sc_path)
    assert ei.value.field == "prompt_tokens.path"


def test_plan_is_deterministic_and_honours_lengths():
    sc = parse_scenario(
        with_(
            shared_prefix={"share": 0.5, "tokens": 3}, prompt_unit="char", prompt_tokens={"kind": "fixed", "value": 10}
        )
    )
    a, b = plan(sc), plan(sc)
    assert a == b
    assert all(len(p.prompt) == 10 for p in a)
    assert all(4 <= p.max_tokens <= 9 for p in a)
    pre = [p.prompt[:3] for p in a if p.prefixed]
    assert pre and len(set(pre)) == 1
    assert [p.offset_s for p in a] == sorted(p.offset_s for p in a)


def test_arrival_processes():
    rng = random.Random(1)
    n = 4000
    po = arrival_offsets(Arrival(kind="poisson", rate=10.0), n, rng)
    assert abs(po[-1] / (n - 1) - 0.1) < 0.01  # mean gap 1/rate
    co = arrival_offsets(Arrival(kind="constant", rate=4.0), 5, rng)
    assert co == [0.0, 0.25, 0.5, 0.75, 1.0]
    ga = arrival_offsets(Arrival(kind="gamma", rate=10.0, burstiness=0.25), n, rng)
    gaps = [b - a for a, b in zip(ga, ga[1:])]
    mean = sum(gaps) / len(gaps)
    var = sum((g - mean) ** 2 for g in gaps) / len(gaps)
    assert abs(mean - 0.1) < 0.015 and var / mean**2 > 2.5  # CV^2 = 1/k = 4: burstier than Poisson
    ra = arrival_offsets(Arrival(kind="ramp", start_rate=1.0, end_rate=9.0, ramp_s=2.0), 20, rng)
    assert ra[:3] == pytest.approx([0.0, 0.5, 0.78078], abs=1e-4)  # Λ(t)=t+2t² → t=(-1+sqrt(1+8i))/4
    assert ra[10] == pytest.approx(2.0, abs=1e-9)  # Λ(2)=10 requests by the end of the ramp
    assert ra[19] == pytest.approx(2.0 + 9 / 9.0)
    assert arrival_offsets(Arrival(kind="concurrency", concurrency=2), 3, rng) == [None] * 3
