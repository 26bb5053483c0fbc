"""Issue 32: the parser families of the scripted models as data: which family a manifest's model is, what the
expectation file says per family, and the judges that read a family (reasoning only where the family reasons)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.conformance.case import SCRIPTED_MODEL, provided_by
from harness.conformance.cases.callparts import has_markup
from harness.conformance.expectations import Expectations, load_expectations
from harness.conformance.rejudge import _saved_family
from harness.conformance.runner import new_ctx
from harness.errors import ManifestError
from harness.models.catalog import EMBEDDED_MODELS
from harness.models.families import CALL_MARKUP, FAMILIES, HERMES, family_of_source


def _launched(source: str) -> SimpleNamespace:
    """What Ctx reads of a launched engine: its spec's manifest's model.source."""
    return SimpleNamespace(spec=SimpleNamespace(manifest=SimpleNamespace(model=SimpleNamespace(source=source))))


def test_every_family_is_an_embedded_model_and_names_its_own_source():
    for fam in FAMILIES.values():
        assert fam.source in EMBEDDED_MODELS
        assert family_of_source(fam.source) is fam
    assert HERMES.source == "scripted-tiny"
    assert family_of_source("reference-tiny") is None and family_of_source(None) is None


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_family_manifest_provides_the_scripted_model_and_says_whether_it_reasons(family):
    fam = FAMILIES[family]
    manifest = SimpleNamespace(model=SimpleNamespace(source=fam.source))
    assert SCRIPTED_MODEL in provided_by(manifest)
    ctx = new_ctx("http://127.0.0.1:9", Expectations(name="e"), engine=_launched(fam.source))
    assert ctx.scripted and ctx.family is fam
    assert ctx.scripted_reasoning is fam.reasoning


def test_the_family_comes_from_a_saved_run_or_defaults_to_hermes_when_only_told_scripted():
    told = new_ctx("http://127.0.0.1:9", Expectations(name="e"), scripted_model=True)
    assert told.family is HERMES and told.scripted_reasoning
    saved = new_ctx("http://127.0.0.1:9", Expectations(name="e"), scripted_model=True, scripted_family="pythonic")
    assert saved.family is FAMILIES["pythonic"] and not saved.scripted_reasoning
    plain = new_ctx("http://127.0.0.1:9", Expectations(name="e"), engine=_launched("reference-tiny"))
    assert plain.family is None and not plain.scripted_reasoning
    assert _saved_family({"scripted_family": "qwen3_coder"}) == "qwen3_coder"
    assert _saved_family({"scripted_family": "no-such"}) is None and _saved_family({"scripted_family": 3}) is None


def test_markup_of_every_family_counts_as_leaked_call_markup():
    assert "<function=" in CALL_MARKUP and "<|python_tag|>" in CALL_MARKUP and "<tool_call>" in CALL_MARKUP
    assert has_markup("<tool_call>\n<function=get_weather>") and has_markup("<|python_tag|>{}")
    assert not has_markup("The weather in Paris is 18 degrees Celsius.")


def test_family_entries_replace_the_case_entries_on_that_family_only(tmp_path):
    f = tmp_path / "e.yaml"
    f.write_text(
        "cases:\n"
        "  tools.auto.stream: {quirk: fragments-not-json, reason: hermes}\n"
        "  tools.auto.required: {quirk: required-not-enforced, reason: hermes}\n"
        "plain_model:\n  tools.auto.stream: {quirk: status-400, reason: no parser}\n"
        "families:\n"
        "  qwen3_coder:\n"
        "    tools.auto.stream: {quirk: missing-brace, reason: coder}\n"
        "    tools.auto.required: {reference: the coder parser enforces it}\n"
    )
    exp = load_expectations(str(f))
    coder = exp.for_model(True, "qwen3_coder")
    assert coder.quirks("tools.auto.stream") == ["missing-brace"]
    assert "tools.auto.required" not in coder.cases  # judged as the reference
    hermes = exp.for_model(True, "hermes")
    assert hermes.quirks("tools.auto.stream") == ["fragments-not-json"]
    assert hermes.quirks("tools.auto.required") == ["required-not-enforced"]
    assert exp.for_model(False, None).quirks("tools.auto.stream") == ["status-400"]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("families:\n  no_such:\n    tools.auto.stream: {quirk: x, reason: y}\n", r"families\.no_such"),
        ("families:\n  pythonic:\n    tools.auto.stream: {reason: y}\n", r"families\.pythonic\.tools\.auto\.stream"),
        ("families:\n  pythonic:\n    tools.auto.stream: {reference: ''}\n", r"tools\.auto\.stream\.reference"),
        ("families:\n  pythonic:\n    tools.auto.stream: {reference: why, quirk: x}\n", r"stream\.reference"),
        (
            "cases:\n  tools.auto.stream: {quirk: x, reason: y, reference: why}\n",
            r"cases\.tools\.auto\.stream\.reference",
        ),
    ],
)
def test_a_bad_families_entry_is_refused_naming_its_field(tmp_path, text, where):
    f = tmp_path / "e.yaml"
    f.write_text(text)
    with pytest.raises(ManifestError, match=where):
        load_expectations(str(f))


def test_update_expectations_writes_a_family_run_into_its_own_section():
    from harness.conformance.update import propose

    raw = {
        "name": "e",
        "cases": {
            "tools.auto.stream": {"quirk": "fragments-not-json", "reason": "hermes doubles a brace"},
            "tools.auto.required": {"quirk": "required-not-enforced", "reason": "hermes"},
            "tools.auto.named": {"quirk": "arguments-not-object", "reason": "every family"},
        },
        "families": {"pythonic": {"tools.auto.message": {"reference": "kept"}}},
    }
    results = {
        "engine": {"provides": [SCRIPTED_MODEL], "scripted_family": "qwen3_coder"},
        "cases": [
            {"id": "tools.auto.stream", "verdict": "fail", "behaviour": "missing-brace", "level": "MUST"},
            {"id": "tools.auto.required", "verdict": "quirk-absent", "level": "MUST"},
            {"id": "tools.auto.named", "verdict": "quirk", "level": "MUST"},
        ],
    }
    out, changes = propose(results, raw, note="2026-12-06")
    assert out["cases"] == raw["cases"]  # hermes's entries untouched
    coder = out["families"]["qwen3_coder"]
    assert coder["tools.auto.stream"]["quirk"] == "missing-brace"
    assert "does not happen on this family" in coder["tools.auto.required"]["reference"]
    assert "tools.auto.named" not in coder  # the same as `cases`: nothing of its own
    assert out["families"]["pythonic"] == raw["families"]["pythonic"]
    assert any("tools.auto.stream" in c for c in changes) and any("tools.auto.required" in c for c in changes)
    hermes_run = {**results, "engine": {"provides": [SCRIPTED_MODEL], "scripted_family": "hermes"}}
    out, _ = propose(hermes_run, raw, note="2026-12-06")
    assert out["cases"]["tools.auto.stream"]["quirk"] == "missing-brace" and "qwen3_coder" not in out["families"]


def test_an_upgrade_between_one_familys_manifests_names_the_family_in_each_change():
    from harness.upgrade.compare import conformance_changes
    from harness.upgrade.judge import conformance

    def side(verdict: str, family: str | None) -> dict:
        cases = {"tools.auto.stream": {"verdict": verdict, "level": "MUST", "behaviour": "", "note": ""}}
        conf = {"available": True, "expectations": "e", "cases": cases}
        return {"conformance": {**conf, "family": family} if family else conf}

    old, new = side("pass", "qwen3_coder"), side("fail", "qwen3_coder")
    cmp = {"conformance": conformance_changes(old["conformance"], new["conformance"])}
    reasons = conformance(old, new, cmp)
    assert reasons and all(r["text"].startswith("conformance (qwen3_coder family)") for r in reasons), reasons
    assert "tools.auto.stream" in reasons[0]["text"] and reasons[0]["level"] == "blocking"
    mixed = conformance(side("pass", "qwen3_coder"), side("fail", "pythonic"), cmp)  # two families: no one name
    assert mixed and not any("family" in r["text"] for r in mixed), mixed
