"""The embedded tiny reference model: byte-identical builds, a valid safetensors file, a byte-level tokenizer."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from harness.errors import RefusedError
from harness.hashing import tree_hash
from harness.models.reference import (
    CHAT_TEMPLATE,
    REFERENCE_FILE_NAMES,
    REFERENCE_MODEL_SPEC,
    REFERENCE_SEED,
    SPECIAL_TOKENS,
    build_reference_model,
    bytes_to_unicode,
    reference_files,
    reference_weights,
)

EXPECTED_FILES = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
]

# The content hash of the reference model. It changes only if the recipe changes on purpose:
# then every golden file recorded against the old model is stale too.
EXPECTED_HASH = "16330773dc7fcf5a92b6d2f3b62497279ab5af3ca8be1c29440e49ef9070757d"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tiny") / "model"
    build_reference_model(d)
    return d


def _read_safetensors(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    return header, raw[8 + n :]


def test_two_builds_are_byte_identical(tmp_path, model_dir):
    h = build_reference_model(tmp_path / "again")
    assert h == tree_hash(model_dir) == tree_hash(tmp_path / "again")
    assert sorted(p.name for p in model_dir.iterdir()) == EXPECTED_FILES
    for name in EXPECTED_FILES:
        assert (model_dir / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name


def test_hash_is_the_pinned_value(model_dir):
    assert tree_hash(model_dir) == EXPECTED_HASH


def test_no_leftover_temp_dirs(tmp_path):
    build_reference_model(tmp_path / "m")
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def test_refuses_non_empty_dir_even_forced(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "precious.txt").write_text("keep me")
    for force in (False, True):  # --force replaces a reference model only, never other files
        with pytest.raises(RefusedError):
            build_reference_model(d, force=force)
        assert (d / "precious.txt").read_text() == "keep me"
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def test_rebuilds_a_reference_model_only_when_forced(tmp_path):
    d = tmp_path / "m"
    build_reference_model(d)
    (d / "model.safetensors").write_bytes(b"damaged")
    with pytest.raises(RefusedError):
        build_reference_model(d)
    assert build_reference_model(d, force=True) == EXPECTED_HASH
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def test_refuses_a_file_in_the_way(tmp_path):
    f = tmp_path / "m"
    f.write_text("x")
    for force in (False, True):
        with pytest.raises(RefusedError):
            build_reference_model(f, force=force)
    assert f.read_text() == "x"


def test_reference_file_names_constant():
    assert tuple(sorted(reference_files())) == REFERENCE_FILE_NAMES == tuple(EXPECTED_FILES)


def test_empty_existing_dir_is_fine(tmp_path):
    (tmp_path / "m").mkdir()
    assert build_reference_model(tmp_path / "m") == EXPECTED_HASH


def test_safetensors_header_and_shapes(model_dir):
    s = REFERENCE_MODEL_SPEC
    header, data = _read_safetensors(model_dir / "model.safetensors")
    raw = (model_dir / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    assert raw[8:9] == b"{"
    assert header.pop("__metadata__") == {"format": "pt"}
    h, hd, inter, vocab = s["hidden_size"], s["head_dim"], s["intermediate_size"], s["vocab_size"]
    expected = {"model.embed_tokens.weight": [vocab, h], "model.norm.weight": [h], "lm_head.weight": [vocab, h]}
    for i in range(s["num_hidden_layers"]):
        p = f"model.layers.{i}."
        expected.update(
            {
                p + "self_attn.q_proj.weight": [s["num_attention_heads"] * hd, h],
                p + "self_attn.k_proj.weight": [s["num_key_value_heads"] * hd, h],
                p + "self_attn.v_proj.weight": [s["num_key_value_heads"] * hd, h],
                p + "self_attn.o_proj.weight": [h, s["num_attention_heads"] * hd],
                p + "mlp.gate_proj.weight": [inter, h],
                p + "mlp.up_proj.weight": [inter, h],
                p + "mlp.down_proj.weight": [h, inter],
                p + "input_layernorm.weight": [h],
                p + "post_attention_layernorm.weight": [h],
            }
        )
    assert {k: v["shape"] for k, v in header.items()} == expected
    assert {v["dtype"] for v in header.values()} == {"F32"}
    # offsets: contiguous, in sorted-name order, covering the data exactly
    offset = 0
    for name in sorted(header):
        begin, end = header[name]["data_offsets"]
        assert begin == offset and end - begin == 4 * int(np.prod(header[name]["shape"]))
        offset = end
    assert offset == len(data)
    weights = reference_weights()
    for name, meta in header.items():
        begin, end = meta["data_offsets"]
        arr = np.frombuffer(data[begin:end], dtype="<f4").reshape(meta["shape"])
        assert np.array_equal(arr, weights[name]), name
        assert np.isfinite(arr).all()
        if name.endswith("norm.weight"):
            assert (arr == 1).all()


def test_weights_not_degenerate():
    w = reference_weights()
    lm = w["lm_head.weight"]
    for special in ("<pad>", "<s>", "<unk>"):
        assert not lm[SPECIAL_TOKENS[special]].any()
    # EOS gets no advantage over the byte rows
    eos_norm = np.linalg.norm(lm[SPECIAL_TOKENS["</s>"]])
    assert eos_norm <= np.median(np.linalg.norm(lm[:256], axis=1)) * 1.5
    assert w["model.embed_tokens.weight"].std() > 0.5


def test_config(model_dir):
    s = REFERENCE_MODEL_SPEC
    cfg = json.loads((model_dir / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    assert cfg["torch_dtype"] == "float32" and cfg["tie_word_embeddings"] is False
    for key in (
        "num_hidden_layers",
        "hidden_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "intermediate_size",
        "vocab_size",
        "max_position_embeddings",
        "rms_norm_eps",
        "rope_theta",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
    ):
        assert cfg[key] == s[key], key
    assert s["hidden_size"] == s["num_attention_heads"] * s["head_dim"]
    assert s["seed"] == REFERENCE_SEED
    gen = json.loads((model_dir / "generation_config.json").read_text())
    assert not {"temperature", "top_p", "top_k", "do_sample", "repetition_penalty"} & set(gen)
    assert gen["eos_token_id"] == SPECIAL_TOKENS["</s>"]


def test_json_files_are_canonical(model_dir):
    for name in EXPECTED_FILES:
        if name.endswith(".json"):
            text = (model_dir / name).read_text()
            obj = json.loads(text)
            assert text == json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=True, separators=(",", ": ")) + "\n"


# --- tokenizer ----------------------------------------------------------------------------------------------


def test_bytes_to_unicode_is_a_bijection():
    b2u = bytes_to_unicode()
    assert sorted(b2u) == list(range(256))
    assert len(set(b2u.values())) == 256
    assert b2u[ord("A")] == "A" and b2u[ord(" ")] == "\u0120" and b2u[ord("\n")] == "\u010a"


def _encode(tok: dict, text: str) -> list[int]:
    """What the tokenizer.json does (ByteLevel without regex, BPE without merges): one token per byte."""
    b2u = bytes_to_unicode()
    vocab = tok["model"]["vocab"]
    return [vocab[b2u[b]] for b in text.encode("utf-8")]


def _decode(tok: dict, ids: list[int]) -> str:
    u2b = {u: b for b, u in bytes_to_unicode().items()}
    inv = {i: t for t, i in tok["model"]["vocab"].items()}
    return bytes(u2b[inv[i]] for i in ids if i < 256).decode("utf-8")


def test_tokenizer_json(model_dir):
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    assert tok["model"]["type"] == "BPE" and tok["model"]["merges"] == []
    assert len(vocab) == 260 and sorted(vocab.values()) == list(range(260))
    assert tok["pre_tokenizer"] == {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": False,
        "use_regex": False,
    }
    assert tok["decoder"]["type"] == "ByteLevel"
    assert {t["content"]: t["id"] for t in tok["added_tokens"]} == SPECIAL_TOKENS
    assert all(t["special"] for t in tok["added_tokens"])
    for t, i in SPECIAL_TOKENS.items():
        assert vocab[t] == i


@pytest.mark.parametrize(
    "text", ["hello world", "  spaces  ", "Crème brûlée, naïve", "emoji 🎉👩‍👩‍👧", "a\nb\r\n\tc", "", "中文テキスト"]
)
def test_tokenizer_round_trip(model_dir, text):
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    ids = _encode(tok, text)
    assert ids == list(text.encode("utf-8"))
    assert _decode(tok, ids) == text


def test_tokenizer_config(model_dir):
    cfg = json.loads((model_dir / "tokenizer_config.json").read_text())
    assert cfg["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert (cfg["bos_token"], cfg["eos_token"], cfg["pad_token"], cfg["unk_token"]) == ("<s>", "</s>", "<pad>", "<unk>")
    assert cfg["clean_up_tokenization_spaces"] is False  # otherwise " ," would not round-trip
    assert cfg["chat_template"] == CHAT_TEMPLATE
    assert cfg["model_max_length"] == REFERENCE_MODEL_SPEC["max_position_embeddings"]
    smap = json.loads((model_dir / "special_tokens_map.json").read_text())
    assert smap == {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}


def test_chat_template_renders():
    import jinja2  # a test extra: this test must run, not skip
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)  # what transformers uses
    t = env.from_string(CHAT_TEMPLATE)
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Hi"}]
    assert t.render(messages=msgs, bos_token="<s>", add_generation_prompt=True) == (
        "<s><|system|>\nsys\n<|user|>\nHi\n<|assistant|>\n"
    )
    assert t.render(messages=msgs, bos_token="<s>", add_generation_prompt=False) == "<s><|system|>\nsys\n<|user|>\nHi\n"
    msgs2 = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "a "},
                {"type": "image_url", "image_url": {}},
                {"type": "text", "text": "b"},
            ],
        },
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "content": "42"},
    ]
    out = t.render(messages=msgs2, bos_token="<s>", add_generation_prompt=True, tools=[{"type": "function"}])
    assert out == "<s><|user|>\na b\n<|assistant|>\n\n<|tool|>\n42\n<|assistant|>\n"
    del jinja2
