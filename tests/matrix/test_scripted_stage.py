"""The scripted stage of a matrix cell, without an engine: which parser flags a release gets from its own argument
surface, which cases the stage judges, how its verdicts replace the first launch's skips, and the spec block."""

from __future__ import annotations

import pytest

from harness.cli import main
from harness.matrix.scripted import merge_cases, scripted_args, scripted_case_ids
from tests.matrix.helpers import REPO

WANTED = {
    "--enable-auto-tool-choice": [],
    "--tool-call-parser": ["hermes"],
    "--reasoning-parser": ["qwen3", "deepseek_r1"],
}


def _surface(**flags):
    return {"captured": True, "flags": flags}


def test_a_release_gets_the_first_parser_its_surface_offers():
    surface = _surface(
        **{
            "--enable-auto-tool-choice": {"choices": None, "takes_value": False},
            "--tool-call-parser": {"choices": ["hermes", "mistral"], "takes_value": True},
            "--reasoning-parser": {"choices": ["deepseek_r1", "glm45"], "takes_value": True},  # no qwen3 yet
        }
    )
    args, chosen, notes = scripted_args(WANTED, surface)
    assert args == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "deepseek_r1"]
    assert chosen == {"--enable-auto-tool-choice": True, "--tool-call-parser": "hermes",
                      "--reasoning-parser": "deepseek_r1"}  # fmt: skip
    assert notes == []


def test_a_flag_the_release_lacks_or_whose_choices_hold_none_wanted_is_left_out_and_said():
    surface = _surface(**{"--tool-call-parser": {"choices": ["mistral"], "takes_value": True}})
    args, chosen, notes = scripted_args(WANTED, surface)
    assert args == []
    assert chosen == {"--enable-auto-tool-choice": None, "--tool-call-parser": None, "--reasoning-parser": None}
    assert "--tool-call-parser: none of hermes among the release's choices" in notes
    assert "--reasoning-parser: not a flag of this release" in notes


def test_choices_the_surface_does_not_list_take_the_first_value_and_an_uncaptured_surface_is_said():
    surface = _surface(**{"--tool-call-parser": {"choices": None, "takes_value": True}})
    assert scripted_args({"--tool-call-parser": ["hermes"]}, surface)[0] == ["--tool-call-parser", "hermes"]
    args, _chosen, notes = scripted_args(WANTED, {"captured": False, "reason": "no env"})
    assert args == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"]
    assert notes and "not captured" in notes[0]


def test_the_stage_judges_the_cases_only_the_scripted_model_answers():
    ids = scripted_case_ids()
    assert "tools.auto.message" in ids and "reasoning.field" in ids and "structured.client.sdk-parse" in ids
    assert "responses.tools.function-call" in ids and "messages.tools.tool-use" in ids  # Case.needs
    assert "chat.basic" not in ids and not any(i.startswith(("auth.", "metrics.")) for i in ids)


def test_the_stages_verdicts_replace_the_first_launchs_skips_and_the_counts_follow():
    first = {
        "available": True,
        "counts": {"pass": 2, "skip": 1, "quirk": 0},
        "cases": {"chat.basic": {"verdict": "pass", "behaviours": []}, "tools.auto.message": {"verdict": "skip"},
                  "auth.bearer": {"verdict": "pass", "behaviours": []}},
    }  # fmt: skip
    merged = merge_cases(first, {"tools.auto.message": {"verdict": "quirk", "behaviours": ["b", "a"]},
                                 "responses.tools.function-call": {"verdict": "pass"}})  # fmt: skip
    assert merged["cases"]["tools.auto.message"] == {"verdict": "quirk", "behaviours": ["a", "b"]}
    assert merged["cases"]["responses.tools.function-call"]["verdict"] == "pass"
    assert merged["counts"] == {"pass": 3, "quirk": 1, "skip": 0}
    assert first["cases"]["tools.auto.message"] == {"verdict": "skip"}  # the input is not changed


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ("  model_sha256: 2b7c\n", "scripted.model_sha256"),
        ("  model_sha256: " + "a" * 64 + "\n  flags: {'--tool-call-parser; rm': [hermes]}\n", "scripted.flags"),
        ("  model_sha256: " + "a" * 64 + "\n  flags: {--tool-call-parser: ['hermes x']}\n", "scripted.flags"),
    ],
)
def test_a_bad_scripted_block_is_one_line_naming_the_field(tmp_path, capsys, block, field):
    spec = (REPO / "matrix" / "vllm-cpu-ci.yaml").read_text()
    head, _sep, rest = spec.partition("scripted:\n")
    rest = rest[rest.index("defaults:") :]
    bad = tmp_path / "spec.yaml"
    bad.write_text(head.replace("template: vllm-cpu.template.yaml", f"template: {REPO}/matrix/vllm-cpu.template.yaml")
                   .replace("../manifests", f"{REPO}/manifests") + "scripted:\n" + block + rest)  # fmt: skip
    assert main(["matrix", str(bad), "--out", str(tmp_path / "o"), "--plan"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0] and "Traceback" not in err[0], err


def test_the_scripted_manifest_is_the_cells_own_with_the_scripted_model_and_the_parser_flags(tmp_path):
    from harness.envs import lock_sha256
    from harness.matrix.run import lock_for
    from harness.matrix.scripted import scripted_manifest
    from harness.matrix.spec import load_spec, render_manifest

    spec = load_spec(REPO / "matrix" / "vllm-cpu-ci.yaml")
    lock = lock_for(spec, "0.11.0", tmp_path)
    first = render_manifest(spec, "0.11.0", lock, lock_sha256(lock), tmp_path / "manifests")
    args = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    m = scripted_manifest(first, spec.scripted.model_sha256, spec.scripted.served_name, args)
    assert m.path.name == "vllm-0.11.0-cpu-scripted.yaml" and m.path.parent == first.path.parent
    assert (m.model.source, m.model.sha256, m.model.served_name) == ("scripted-tiny", spec.scripted.model_sha256,
                                                                      "tiny-scripted")  # fmt: skip
    assert m.server.args == [*first.server.args, *args]
    assert m.server.api_key_env == first.server.api_key_env and m.runtime == first.runtime


def test_a_release_column_says_its_scripted_stages_parsers_problems_and_golden_diff():
    from harness.matrix.render import _scripted_column

    stage = {
        "chosen": {"--enable-auto-tool-choice": True, "--tool-call-parser": "hermes", "--reasoning-parser": None},
        "notes": ["--reasoning-parser: not a flag of this release"],
        "error": "EngineExited: engine exited with status 1 before it was ready",
        "golden_diff": {"baseline": "0.11.0", "counts": {"identical": 3, "regression": 1}},
    }
    col = _scripted_column(stage)
    assert col == {
        "parsers": ["hermes"],
        "problems": ["EngineExited: engine exited with status 1 before it was ready",
                     "--reasoning-parser: not a flag of this release"],
        "golden": "identical 3, regression 1",
    }  # fmt: skip
    assert _scripted_column(None) is None and _scripted_column({"chosen": "x"})["parsers"] == []
