"""The `engine:` of an expectation file (issue 22, item 2): a server the harness has no engine profile for is named
`{kind: none, name: ..., version: ...}`, and is judged without a profile; a kind that no profile has is refused, so a
typo never silently drops the profile's knowledge (liveness, identity endpoint) from a run."""

from __future__ import annotations

import pytest

from harness.conformance.expectations import available, load_expectations
from harness.conformance.runner import new_ctx
from harness.errors import ManifestError


def write(tmp_path, engine: str):
    p = tmp_path / "exp.yaml"
    p.write_text(f"name: exp\nengine: {engine}\ncases: {{}}\n")
    return p


def test_a_server_with_no_profile_is_named_kind_none(tmp_path):
    exp = load_expectations(write(tmp_path, '{kind: none, name: llama-cpp-python, version: "0.3.36"}'))
    assert exp.engine == {"kind": "none", "name": "llama-cpp-python", "version": "0.3.36"}
    ctx = new_ctx("http://127.0.0.1:9", exp)
    assert ctx.profile is None
    assert ctx.liveness()[1] == "GET /v1/models == 200 with a JSON list (no engine profile)"


def test_a_profile_kind_keeps_its_profile(tmp_path):
    ctx = new_ctx("http://127.0.0.1:9", load_expectations(write(tmp_path, '{kind: tgi, version: "3.3.5"}')))
    assert ctx.profile is not None and ctx.profile.kind == "tgi"


@pytest.mark.parametrize(
    ("engine", "field"),
    [
        ("{kind: vlm, version: '0.11.0'}", "engine.kind"),  # a typo: would silently judge without the vLLM profile
        ("{kind: None}", "engine.kind"),
        ("{kind: [vllm]}", "engine.kind"),
        ("{kind: none, version: 0.30}", "engine.version"),  # a YAML float: 0.3 is not the version "0.30"
        ("{kind: none, name: ''}", "engine.name"),
        ('{kind: none, name: "a\\nb"}', "engine.name"),
    ],
)
def test_a_bad_engine_is_one_error_naming_the_field(tmp_path, engine, field):
    p = write(tmp_path, engine)
    with pytest.raises(ManifestError) as exc:
        load_expectations(p)
    assert exc.value.field == field and exc.value.path == str(p)


def test_every_committed_expectation_file_is_still_valid():
    names = available()
    assert "llama-cpp-python-0.3.36" in names
    for name in names:
        assert load_expectations(name).engine.get("kind") in ("vllm", "tgi", "llamacpp", "none")
