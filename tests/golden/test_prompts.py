"""Prompt set files: the committed sets load; malformed files name the file and field."""

from __future__ import annotations

import pytest

from harness.errors import ManifestError
from harness.golden.prompts import load_prompt_set, resolve_prompt_sets


def test_committed_sets_cover_the_issue():
    sets = {s.name: s for s in resolve_prompt_sets()}
    assert set(sets) == {"chat", "completions", "structured"}
    bodies = [p.body() for s in sets.values() for p in s.prompts]
    kinds = {p.id: (p.constraint() or {}).get("kind") for p in sets["structured"].prompts}
    assert sorted(kinds.values()) == ["json_object", "json_schema", "tool_choice"], kinds
    strict = next(p for p in sets["structured"].prompts if kinds[p.id] == "json_schema").body()
    assert strict["response_format"]["json_schema"]["strict"] is True
    forced = next(p for p in sets["structured"].prompts if kinds[p.id] == "tool_choice").body()
    assert forced["tool_choice"] == {"type": "function", "function": {"name": forced["tools"][0]["function"]["name"]}}
    # unconstrained prompts send no constraint field: their request hashes (and committed records) are unchanged
    plain = [p for s in ("chat", "completions") for p in sets[s].prompts]
    assert all(
        p.constraint() is None and not set(p.body()) & {"response_format", "tools", "tool_choice"} for p in plain
    )
    assert any("stop" in b for b in bodies) and any(b["n"] == 2 for b in bodies) and any("seed" in b for b in bodies)
    assert all(b["logprobs"] in (True, 5) for b in bodies)
    assert all(b["temperature"] == 0 or "seed" in b for b in bodies)
    ids = [p.id for s in sets.values() for p in s.prompts]
    assert len(ids) == len(set(ids))
    # stable request hashes: the committed recording depends on them
    assert sets["chat"].prompts[0].request_sha256() == sets["chat"].prompts[0].request_sha256()


@pytest.mark.parametrize(
    "body, field",
    [
        ("name: x\nprompts: []\n", "prompts"),
        ("name: x\nprompts:\n  - {id: a, prompt: hi, bogus: 1}\n", "prompts[0].bogus"),
        ("name: x\nprompts:\n  - {id: a, prompt: hi}\n  - {id: a, prompt: ho}\n", "prompts[1].id"),
        ("name: x\nprompts:\n  - {id: a, prompt: hi, messages: []}\n", "prompts[0]"),
        ("name: x\nprompts:\n  - {id: a, messages: [{role: bot, content: x}]}\n", "prompts[0].messages[0]"),
        ("name: x\nprompts:\n  - {id: a, prompt: hi, temperature: 0.5}\n", "prompts[0].temperature"),
        ("name: x\nprompts:\n  - {id: a, prompt: hi, top_logprobs: 9}\n", "prompts[0].top_logprobs"),
        ("name: x\nprompts:\n  - {id: a, prompt: hi\n", "line 4"),
    ],
)
def test_malformed_sets(tmp_path, body, field):
    f = tmp_path / "s.yaml"
    f.write_text(body)
    with pytest.raises(ManifestError) as ei:
        load_prompt_set(f)
    assert str(f) in str(ei.value) and field in str(ei.value)


def test_unknown_set_name():
    with pytest.raises(ManifestError, match="no prompt set named 'nope'"):
        resolve_prompt_sets(["nope"])
