"""conformance.json is written from the typed model (SuiteDocument) and read back through it."""

from __future__ import annotations

import json
import math

import pytest

from harness.conformance.model import REPORT_FORMAT, CaseResult, SuiteDocument
from harness.conformance.report import read_report, to_json, write_outputs
from harness.errors import DataError

KEYS = [
    "format",
    "engine",
    "expectations",
    "started_at",
    "duration_s",
    "aborted",
    "counts",
    "unexpected_passes",
    "cases",
]


def _doc(**kw) -> SuiteDocument:
    cases = [
        CaseResult("chat.stream.role-first", "MUST", "role first", "fail", behaviour="role-missing",
                   expected=["assistant"], actual={"delta": {}}, chunk=0, note="n", duration_s=0.25),
        CaseResult("auth.missing-key", "SHOULD", "401", "quirk", behaviour="no-401", quirk_reason="r",
                   extra={"status": 200}),
        CaseResult("health.version", "INFO", "version", "pass", unexpected_pass=True),
    ]  # fmt: skip
    base = dict(engine={"name": "m", "kind": "vllm", "version": "0.11.0", "url": "http://127.0.0.1:8000"},
                expectations="vllm-0.11", started_at=1.5e9, duration_s=3.25, aborted=None,
                counts={"pass": 1, "fail": 1, "quirk": 1, "skip": 0, "info": 0, "error": 0},
                unexpected_passes=["health.version"], cases=cases)  # fmt: skip
    return SuiteDocument(**{**base, **kw})


def test_round_trip_through_the_file(tmp_path):
    doc = _doc(ready_to_report_s=0.5)
    j, x = write_outputs(doc, tmp_path)
    assert read_report(j) == doc
    raw = json.loads(j.read_text())
    assert list(raw)[: len(KEYS)] == KEYS and raw["format"] == REPORT_FORMAT and raw["ready_to_report_s"] == 0.5
    assert "<testsuite" in x.read_text()


def test_a_dict_is_checked_against_the_model_before_it_is_written(tmp_path):
    doc = _doc().to_dict()
    del doc["format"]  # the runner's dict, as written before the field existed
    write_outputs(doc, tmp_path)
    assert read_report(tmp_path / "conformance.json") == _doc()
    with pytest.raises(DataError, match="counts"):
        write_outputs({**doc, "counts": {"pass": "1"}}, tmp_path)


def test_a_nan_duration_survives_as_the_string_nan(tmp_path):
    doc = _doc(duration_s=float("nan"))
    write_outputs(doc, tmp_path)
    assert json.loads((tmp_path / "conformance.json").read_text())["duration_s"] == "nan"
    assert math.isnan(read_report(tmp_path / "conformance.json").duration_s)


def test_the_engine_url_is_stored_without_its_password(tmp_path):
    doc = _doc(engine={"url": "http://u:secret@127.0.0.1:1"})
    write_outputs(doc, tmp_path)
    assert "secret" not in (tmp_path / "conformance.json").read_text() and "secret" not in to_json(doc)


BAD = {
    "not an object": ([], "must be an object"),
    "unknown field": ({"extra_top": 1}, "unknown field 'extra_top'"),
    "future format": ({"format": REPORT_FORMAT + 1}, "format"),
    "bool format": ({"format": True}, "format"),
    "cases not a list": ({"cases": {}}, "cases"),
    "bad verdict": ({"cases": [{**_doc().cases[0].to_dict(), "verdict": "maybe"}]}, "cases[0].verdict"),
    "chunk a bool": ({"cases": [{**_doc().cases[0].to_dict(), "chunk": True}]}, "cases[0]: chunk"),
    "missing id": (
        {"cases": [{k: v for k, v in _doc().cases[0].to_dict().items() if k != "id"}]},
        "missing field 'id'",
    ),
    "duration a string": ({"duration_s": "slow"}, "duration_s"),
    "missing engine": (None, "missing field 'engine'"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_malformed_report_is_one_data_error_naming_the_field(name, tmp_path):
    change, needle = BAD[name]
    if isinstance(change, list):
        raw = change
    elif change is None:
        raw = {k: v for k, v in _doc().to_dict().items() if k != "engine"}
    else:
        raw = {**_doc().to_dict(), **change}
    path = tmp_path / "conformance.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(DataError) as ei:
        read_report(path)
    assert needle in str(ei.value) and str(path) in str(ei.value)
