"""The reference tiny model as GGUF: byte-identical builds, a pinned hash, and what GGUFReader reads back."""

from __future__ import annotations

from pathlib import Path

import gguf  # a declared dependency: an import error fails, never skips
import numpy as np
import pytest

from harness.errors import RefusedError
from harness.models.gguf import GGUF_FILENAME, GGUF_MODEL_NAME, MERGES, _permute, build_reference_gguf, gguf_tensors
from harness.models.reference import (
    CHAT_TEMPLATE,
    REFERENCE_MODEL_SPEC,
    SPECIAL_TOKENS,
    bytes_to_unicode,
    reference_weights,
)

# tree_hash of the directory holding model.gguf (pin this in the llama.cpp manifest)
PINNED_GGUF_HASH = "f62248ee96981e55da1ea242c8506f8f9e235b263f64aa964f552283e102ae25"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str]:
    d = tmp_path_factory.mktemp("gguf") / "model"
    return d, build_reference_gguf(d)


def _field(reader, key):
    return reader.fields[key].contents()


def test_two_builds_are_byte_identical(tmp_path, built):
    d, digest = built
    other = build_reference_gguf(tmp_path / "again")
    assert other == digest
    assert (tmp_path / "again" / GGUF_FILENAME).read_bytes() == (d / GGUF_FILENAME).read_bytes()


def test_hash_is_the_pinned_value(built):
    assert built[1] == PINNED_GGUF_HASH


def test_single_file_and_no_leftovers(tmp_path):
    build_reference_gguf(tmp_path / "m")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [GGUF_FILENAME]


def test_refuses_non_empty_dir_even_forced(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "other").write_text("x")
    for force in (False, True):  # --force replaces an embedded GGUF model only, never other files (issue 31 #5)
        with pytest.raises(RefusedError):
            build_reference_gguf(d, force=force)
    assert (d / "other").read_text() == "x"


def test_rebuilds_a_gguf_model_only_when_forced(tmp_path):
    d = tmp_path / "m"
    build_reference_gguf(d)
    with pytest.raises(RefusedError):
        build_reference_gguf(d)
    assert build_reference_gguf(d, force=True) == PINNED_GGUF_HASH


def test_refuses_a_file_in_the_way(tmp_path):
    f = tmp_path / "m"
    f.write_text("x")
    with pytest.raises(RefusedError):
        build_reference_gguf(f)
    assert f.read_text() == "x"


def test_metadata(built):
    r = gguf.GGUFReader(built[0] / GGUF_FILENAME)
    s = REFERENCE_MODEL_SPEC
    assert _field(r, "GGUF.version") == 3
    assert _field(r, "general.architecture") == "llama"
    assert _field(r, "general.name") == GGUF_MODEL_NAME
    assert _field(r, "general.file_type") == 0
    expect = {
        "llama.vocab_size": s["vocab_size"],
        "llama.context_length": s["max_position_embeddings"],
        "llama.embedding_length": s["hidden_size"],
        "llama.block_count": s["num_hidden_layers"],
        "llama.feed_forward_length": s["intermediate_size"],
        "llama.attention.head_count": s["num_attention_heads"],
        "llama.attention.head_count_kv": s["num_key_value_heads"],
        "llama.attention.key_length": s["head_dim"],
        "llama.attention.value_length": s["head_dim"],
        "llama.rope.dimension_count": s["head_dim"],
        "tokenizer.ggml.bos_token_id": SPECIAL_TOKENS["<s>"],
        "tokenizer.ggml.eos_token_id": SPECIAL_TOKENS["</s>"],
        "tokenizer.ggml.padding_token_id": SPECIAL_TOKENS["<pad>"],
        "tokenizer.ggml.unknown_token_id": SPECIAL_TOKENS["<unk>"],
    }
    for key, value in expect.items():
        assert _field(r, key) == value, key
    assert _field(r, "llama.rope.freq_base") == pytest.approx(s["rope_theta"])
    assert _field(r, "llama.attention.layer_norm_rms_epsilon") == pytest.approx(s["rms_norm_eps"], rel=1e-6)
    assert _field(r, "tokenizer.ggml.model") == "gpt2"
    assert _field(r, "tokenizer.ggml.pre") == "default"
    assert _field(r, "tokenizer.ggml.add_bos_token") is True
    assert _field(r, "tokenizer.ggml.add_eos_token") is False
    assert _field(r, "tokenizer.chat_template") == CHAT_TEMPLATE
    assert _field(r, "tokenizer.ggml.merges") == MERGES
    tokens = _field(r, "tokenizer.ggml.tokens")
    b2u = bytes_to_unicode()
    assert len(tokens) == s["vocab_size"] == 260
    assert tokens[:256] == [b2u[b] for b in range(256)]
    assert {t: tokens.index(t) for t in SPECIAL_TOKENS} == SPECIAL_TOKENS
    types = _field(r, "tokenizer.ggml.token_type")
    assert types == [int(gguf.TokenType.NORMAL)] * 256 + [int(gguf.TokenType.CONTROL)] * 4
    # the single merge can never apply: both sides are multi-character special tokens
    first, second = MERGES[0].split(" ")
    assert first in SPECIAL_TOKENS and second in SPECIAL_TOKENS


def test_tensors_shapes_and_values(built):
    r = gguf.GGUFReader(built[0] / GGUF_FILENAME)
    s = REFERENCE_MODEL_SPEC
    h, hd, inter, vocab = s["hidden_size"], s["head_dim"], s["intermediate_size"], s["vocab_size"]
    by_name = {t.name: t for t in r.tensors}
    expected = {"token_embd.weight": (vocab, h), "output_norm.weight": (h,), "output.weight": (vocab, h)}
    for i in range(s["num_hidden_layers"]):
        expected.update({
            f"blk.{i}.attn_norm.weight": (h,),
            f"blk.{i}.attn_q.weight": (s["num_attention_heads"] * hd, h),
            f"blk.{i}.attn_k.weight": (s["num_key_value_heads"] * hd, h),
            f"blk.{i}.attn_v.weight": (s["num_key_value_heads"] * hd, h),
            f"blk.{i}.attn_output.weight": (h, s["num_attention_heads"] * hd),
            f"blk.{i}.ffn_norm.weight": (h,),
            f"blk.{i}.ffn_gate.weight": (inter, h),
            f"blk.{i}.ffn_up.weight": (inter, h),
            f"blk.{i}.ffn_down.weight": (h, inter),
        })  # fmt: skip
    assert set(by_name) == set(expected)
    assert [t.name for t in r.tensors] == [n for n, _ in gguf_tensors()]
    for name, shape in expected.items():
        t = by_name[name]
        assert t.tensor_type == gguf.GGMLQuantizationType.F32, name
        assert tuple(t.data.shape) == shape, name
        assert [int(x) for x in t.shape] == list(reversed(shape)), name  # GGUF stores ne[] innermost first
    w = reference_weights()
    np.testing.assert_array_equal(by_name["token_embd.weight"].data, w["model.embed_tokens.weight"])
    np.testing.assert_array_equal(by_name["output.weight"].data, w["lm_head.weight"])
    np.testing.assert_array_equal(by_name["blk.1.ffn_down.weight"].data, w["model.layers.1.mlp.down_proj.weight"])
    q = w["model.layers.0.self_attn.q_proj.weight"]
    np.testing.assert_array_equal(by_name["blk.0.attn_q.weight"].data, _permute(q, s["num_attention_heads"]))
    assert not np.array_equal(by_name["blk.0.attn_q.weight"].data, q)


def test_permute_maps_rotate_half_to_interleaved():
    """Row r = (head, half, i) in HF order goes to (head, 2*i + half): pairs (i, i+d/2) become (2i, 2i+1)."""
    n_head, d, cols = 2, 8, 3
    w = np.arange(n_head * d * cols, dtype="<f4").reshape(n_head * d, cols)
    p = _permute(w, n_head)
    for head in range(n_head):
        for i in range(d // 2):
            np.testing.assert_array_equal(p[head * d + 2 * i], w[head * d + i])
            np.testing.assert_array_equal(p[head * d + 2 * i + 1], w[head * d + d // 2 + i])
