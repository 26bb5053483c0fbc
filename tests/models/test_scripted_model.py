"""The scripted model: byte-identical builds pinned by hash, and weights whose greedy decoding is each script, token
for token (a NumPy forward pass with HF Llama's semantics, on prompts the chat template renders as the engines do)."""

from __future__ import annotations

import dataclasses
import json
import re

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
from harness.models.families import FAMILIES, HERMES, Family
from harness.settings import REPO_ROOT

SCRIPTED_HASH = "2b7c329d85d6ffaae908c8abc9adfd782ad3f9761a0a13e973746591fc1bd70b"
SCRIPTED_GGUF_HASH = "b011c62018ffe80c73a06bf31ee1a4764d8268c5263f53c8f8b4d4991771f1cd"
# family -> (safetensors, GGUF) content hashes: the same bytes on every machine
FAMILY_HASHES = {
    "hermes": (SCRIPTED_HASH, SCRIPTED_GGUF_HASH),
    "qwen3_coder": ("c7fc704ddb5bf07808e80a2e01eca115f243f942db50c030b27475e7d77e0a5c",
                    "794bf55dca587d812f5cf9e9d3ad59671bda26aab8d90400d4250fea2ce215bc"),
    "llama3_json": ("e2ffaad7252306242c12df9e608e1b8b3df7f8772e06736390d0f44a15451e6b",
                    "6a6b1024ec5c449b52f410982196be621b7daf8749bdf4348d8ca9a529c1b789"),
    "deepseek_v3": ("5e511b8b0b4233400a5762264993850e1a9824a2873c5a1aa2417b1517f86622",
                    "b760a29cd12c8e0ea515cff43139e859ea423f7d727cc7698abee4641b9953cc"),
    "kimi_k2": ("bd5eff46161bbcdeba4f13c4dc7ad78ab7c902ac58c2ca3eef526c70ca4b1629",
                "134678d1416883a8397f73c883dd9bf3fc039dd964c7cd4868be3cbe86cc39ab"),
    "pythonic": ("4810c1b31abdd6c6b16eb6cbe625ec4b308da6c7856b7d8a9e74abd4dee34d3d",
                 "a47e22b575363a12a601afcd1fb345751e5f74e9045c9cfa03dbdc9f330ca402"),
}  # fmt: skip
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


def render(fam: Family = HERMES, **kw) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    return env.from_string(fam.template).render(add_generation_prompt=True, **kw)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("scripted")
    return d, build_embedded("scripted-tiny", "safetensors", d / "a")


def test_two_builds_are_byte_identical_and_pinned(built, tmp_path):
    d, digest = built
    assert digest == SCRIPTED_HASH == build_embedded("scripted-tiny", "safetensors", tmp_path / "b")
    for name in scripted.SCRIPTED_FILE_NAMES:
        assert (d / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_builds_pinned_in_both_formats(family, tmp_path):
    fam = FAMILIES[family]
    want = FAMILY_HASHES[family]
    assert (
        build_embedded(fam.source, "safetensors", tmp_path / "s"),
        build_embedded(fam.source, "gguf", tmp_path / "g"),
    ) == want


def _family_manifests() -> list[tuple[str, Family]]:
    """(manifest name, family) of every scripted manifest: scripted-tiny's and each family's on each engine."""
    out = []
    for path in sorted(MANIFESTS.glob("*-cpu-scripted*.yaml")):
        source = yaml.safe_load(path.read_text())["model"]["source"]
        out.append((path.stem, next(f for f in FAMILIES.values() if f.source == source)))
    return out


def test_the_manifests_pin_the_model_this_harness_builds():
    seen = _family_manifests()
    assert {f.name for _, f in seen} == set(FAMILIES)  # every family has its manifests
    for name, fam in seen:
        doc = yaml.safe_load((MANIFESTS / f"{name}.yaml").read_text())
        want = FAMILY_HASHES[fam.name][1 if name.startswith("llamacpp") else 0]
        served = "tiny-scripted" + ("" if fam is HERMES else "-" + fam.source.removeprefix("scripted-"))
        assert doc["model"] == {"source": fam.source, "sha256": want, "served_name": served}, name
        if not name.startswith("llamacpp"):  # vLLM runs the family's own parsers
            args = " ".join(doc["server"]["args"])
            assert " ".join(fam.parser_args[1:]) in args, name


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("name", list(REQUESTS))
def test_greedy_decoding_is_the_script_token_for_token(name, family):
    fam = FAMILIES[family]
    prompt = render(fam, **REQUESTS[name])
    # a family without reasoning has no thinking switch: its template picks the thinking script, the direct twin's
    twin = {"call_direct": "call", "parallel_direct": "parallel", "plain": "think"}
    assert f"<|script:{name if fam.reasoning else twin.get(name, name)}|>" in prompt
    out = scripted.greedy(scripted.render_ids(prompt, fam), max_tokens=40, fam=fam)
    assert out == scripted.encode_script(name, fam)
    assert scripted.decode(out, fam).endswith(fam.eos)


def test_text_outside_the_scripts_is_printable_and_never_ends_by_itself():
    out = scripted.greedy(scripted.render_ids("Once upon a time"), max_tokens=12)
    assert len(out) == 12 and all(32 <= t < 127 for t in out)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_markers_are_single_vocabulary_entries(family):
    fam = FAMILIES[family]
    strings = scripted.vocab_strings(fam)
    for marker in fam.markers:
        assert strings.count(marker) == 1, marker
        assert scripted.token_kinds(fam)[strings.index(marker)] == "user_defined"


def _with_script(fam: Family, name: str, pieces: list[str]) -> Family:
    return dataclasses.replace(fam, scripts={**fam.scripts, name: pieces})


def test_a_script_set_that_needs_two_next_tokens_in_one_context_is_refused():
    # "parallel_direct" with "\n" as the separator: the second <tool_call> follows the same token as the first
    pieces = list(HERMES.scripts["parallel_direct"])
    pieces[pieces.index("\n\n")] = "\n"
    with pytest.raises(ValueError, match=re.escape("family hermes, script parallel_direct: after '\\n' '<tool_call>'")):
        scripted.check_rules(_with_script(HERMES, "parallel_direct", pieces))
    coder = FAMILIES["qwen3_coder"]  # both calls of a parallel script ending on the same pieces
    pieces = list(coder.scripts["parallel"])
    last = len(pieces) - 1 - pieces[::-1].index("</function>")
    pieces[last : last + 2] = ["</function>\n"]
    with pytest.raises(ValueError, match="family qwen3_coder, script parallel: after"):
        scripted.check_rules(_with_script(coder, "parallel", pieces))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"markers": ("<tool_call>", "<")}, "family bad: added token '<' collides with the byte token"),
        ({"markers": ("<tool_call>", "<|im_end|>")}, "family bad: added token '<|im_end|>' is listed twice"),
        ({"eos": "<|eot_id|>"}, "family bad: the end token '<|eot_id|>' must be one of"),
        ({"prompt_endings": (("t", "\n\n"),)}, "family bad: a prompt ending is two tokens"),
    ],
)  # fmt: skip
def test_a_family_whose_tokens_collide_is_refused_when_built(change, message, tmp_path):
    fam = dataclasses.replace(HERMES, name="bad", **change)
    with pytest.raises(ValueError, match=re.escape(message)):
        scripted.build_scripted_model(tmp_path / "m", fam=fam)
    assert not (tmp_path / "m").exists()


def test_a_piece_that_holds_a_marker_or_a_missing_script_is_refused_naming_the_script():
    with pytest.raises(ValueError, match=re.escape("family hermes, script call_direct: piece '<tool_call>\\n{' holds")):
        scripted.check_rules(_with_script(HERMES, "call_direct", ["<tool_call>\n{", "}"]))
    with pytest.raises(ValueError, match="family hermes: script plain missing or empty"):
        scripted.check_rules(_with_script(HERMES, "plain", []))


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
