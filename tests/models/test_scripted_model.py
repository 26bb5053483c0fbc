"""The scripted model: byte-identical builds pinned by hash, and weights whose greedy decoding is each script, token
for token (a NumPy forward pass with HF Llama's semantics, on prompts the chat template renders as the engines do)."""

from __future__ import annotations

import json

import jinja2
import jinja2.ext
import pytest
import yaml
from jinja2.sandbox import ImmutableSandboxedEnvironment

from harness.errors import HarnessError, PinMismatch
from harness.hashing import tree_hash
from harness.manifest import load_manifest
from harness.models import resolve_model, scripted
from harness.models.catalog import build_embedded
from harness.settings import REPO_ROOT

SCRIPTED_HASH = "2b7c329d85d6ffaae908c8abc9adfd782ad3f9761a0a13e973746591fc1bd70b"
SCRIPTED_GGUF_HASH = "b011c62018ffe80c73a06bf31ee1a4764d8268c5263f53c8f8b4d4991771f1cd"
MANIFESTS = REPO_ROOT / "manifests"

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
# script -> what a request renders (as vLLM passes it to the template: tools, messages, chat_template_kwargs)
REQUESTS = {
    "call": {"messages": USER, "tools": [WEATHER]},
    "parallel": {"messages": USER, "tools": [WEATHER, TIME]},
    "call_direct": {"messages": USER, "tools": [WEATHER], "enable_thinking": False},
    "parallel_direct": {"messages": USER, "tools": [WEATHER, TIME], "enable_thinking": False},
    "think": {"messages": [{"role": "user", "content": "Hi"}]},
    "plain": {"messages": [{"role": "user", "content": "Hi"}], "enable_thinking": False},
    "after_tool": {"messages": [*USER, {"role": "assistant", "content": None, "tool_calls": [CALL]},
                                {"role": "tool", "tool_call_id": "c1", "content": "18"}], "tools": [WEATHER]},
}  # fmt: skip


def render(**kw) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    return env.from_string(scripted.CHAT_TEMPLATE).render(add_generation_prompt=True, **kw)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("scripted")
    return d, build_embedded("scripted-tiny", "safetensors", d / "a")


def test_two_builds_are_byte_identical_and_pinned(built, tmp_path):
    d, digest = built
    assert digest == SCRIPTED_HASH == build_embedded("scripted-tiny", "safetensors", tmp_path / "b")
    for name in scripted.SCRIPTED_FILE_NAMES:
        assert (d / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_the_gguf_build_is_pinned(tmp_path):
    assert build_embedded("scripted-tiny", "gguf", tmp_path / "g") == SCRIPTED_GGUF_HASH


def test_the_manifests_pin_the_model_this_harness_builds():
    for name, want in (("vllm-0.11.0-cpu-scripted", SCRIPTED_HASH), ("vllm-0.32.0-cpu-scripted", SCRIPTED_HASH),
                       ("llamacpp-0c1e570-cpu-scripted", SCRIPTED_GGUF_HASH)):  # fmt: skip
        doc = yaml.safe_load((MANIFESTS / f"{name}.yaml").read_text())
        assert doc["model"] == {"source": "scripted-tiny", "sha256": want, "served_name": "tiny-scripted"}, name


@pytest.mark.parametrize("name", list(REQUESTS))
def test_greedy_decoding_is_the_script_token_for_token(name):
    prompt = render(**REQUESTS[name])
    assert f"<|script:{name}|>" in prompt
    assert scripted.greedy(scripted.render_ids(prompt), max_tokens=40) == scripted.encode_script(name)


def test_text_outside_the_scripts_is_printable_and_never_ends_by_itself():
    out = scripted.greedy(scripted.render_ids("Once upon a time"), max_tokens=12)
    assert len(out) == 12 and all(32 <= t < 127 for t in out)


def test_the_markers_are_single_vocabulary_entries():
    strings = scripted.vocab_strings()
    for marker in scripted.MARKERS:
        assert strings.count(marker) == 1, marker
    assert scripted.token_kinds()[strings.index("<tool_call>")] == "user_defined"


def test_a_script_set_that_needs_two_next_tokens_in_one_context_is_refused(monkeypatch):
    # "parallel_direct" with "\n" as the separator: the second <tool_call> follows the same token as the first
    broken = dict(scripted.SCRIPTS)
    pieces = list(broken["parallel_direct"])
    pieces[pieces.index("\n\n")] = "\n"
    broken["parallel_direct"] = pieces
    monkeypatch.setattr(scripted, "SCRIPTS", broken)
    with pytest.raises(ValueError, match="parallel_direct"):
        scripted.check_rules()


def test_a_scripted_model_directory_changed_by_one_byte_is_refused_by_its_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    m = load_manifest(MANIFESTS / "vllm-0.11.0-cpu-scripted.yaml")
    directory = resolve_model(m)  # built, verified
    assert tree_hash(directory) == SCRIPTED_HASH
    config = directory / "config.json"
    raw = bytearray(config.read_bytes())
    raw[-2] ^= 1
    config.write_bytes(bytes(raw))
    with pytest.raises(PinMismatch) as err:
        resolve_model(m)
    assert isinstance(err.value, HarnessError) and SCRIPTED_HASH[:12] in str(err.value)
