"""The embedded models as one GGUF file each, written byte-identically on every machine (the reference model below;
the scripted model the same way, with its own vocabulary: bytes NORMAL, specials and selectors CONTROL, the parsers'
markers USER_DEFINED, script pieces NORMAL, and one merge that never applies).

    digest = build_reference_gguf(DIR)     # DIR/model.gguf; returns harness.hashing.tree_hash(DIR)

Same weights as the safetensors model (`reference.reference_weights()`), same token ids, specials and chat template, in
llama.cpp's layout (what `convert_hf_to_gguf.py` does for a LlamaForCausalLM), written with the `gguf` package:

    architecture  llama, float32 tensors (general.file_type 0 = ALL_F32), GGUF v3, default 32-byte alignment
    tensors       token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up,
                  ffn_down}, output_norm, output; Q and K rows permuted for llama.cpp's interleaved rope (`_permute`,
                  as convert_hf_to_gguf.py's LlamaModel.permute: HF's rotate-half pairs (i, i + d/2) become (2i, 2i+1))
    tokenizer     model `gpt2` (byte-level BPE) with exactly the 260 tokens of the reference model: 0..255 the GPT-2 ByteLevel
                  character of that byte (NORMAL), 256 <pad>, 257 <s>, 258 </s>, 259 <unk> (CONTROL); no added tokens
                  (more entries than the token-type array overflows it in the loader); pre-tokenizer `default`
    merges        exactly one, `<s> </s>`: the loader refuses an empty merge list, and this pair can never apply
                  (BPE starts from single characters and no other merge exists to build either side), so tokenisation
                  is one token per byte, as in the HF tokenizer
    specials      bos 257, eos 258, pad 256, unk 259; add_bos_token true (the HF post-processor prepends <s>),
                  add_eos_token false; the chat template is reference.CHAT_TEMPLATE

Determinism: every key is added in one fixed order (the writer keeps insertion order), there is no timestamp, no
path and no version string of the writer in the file, and tensors are little-endian float32 from a deterministic
source; so the file, and the directory's tree hash, are the same on every machine and with any `gguf` release that
writes GGUF v3 the same way (the unit test pins the hash).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.models.bytelevel import build_into, holds_only
from harness.models.families import HERMES, Family
from harness.models.reference import (
    CHAT_TEMPLATE,
    REFERENCE_MODEL_SPEC,
    SPECIAL_TOKENS,
    bytes_to_unicode,
    reference_weights,
)

__all__ = [
    "GGUF_FILENAME",
    "GGUF_MODEL_NAME",
    "MERGES",
    "GgufModel",
    "gguf_tensors",
    "write_gguf",
    "write_reference_gguf",
    "build_gguf",
    "build_reference_gguf",
    "build_scripted_gguf",
]

GGUF_FILENAME = "model.gguf"
GGUF_MODEL_NAME = "harness-tiny-reference"
SCRIPTED_GGUF_NAME = HERMES.gguf_name
MERGES = ["<s> </s>"]


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.permute: reorder each head's rows from rotate-half to interleaved pairs."""
    return np.ascontiguousarray(
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


def _layer_tensors(w: dict[str, np.ndarray], cfg: dict) -> list[tuple[str, np.ndarray]]:
    out = [("token_embd.weight", w["model.embed_tokens.weight"])]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [
            (f"blk.{i}.attn_norm.weight", w[p + "input_layernorm.weight"]),
            (f"blk.{i}.attn_q.weight", _permute(w[p + "self_attn.q_proj.weight"], cfg["num_attention_heads"])),
            (f"blk.{i}.attn_k.weight", _permute(w[p + "self_attn.k_proj.weight"], cfg["num_key_value_heads"])),
            (f"blk.{i}.attn_v.weight", w[p + "self_attn.v_proj.weight"]),
            (f"blk.{i}.attn_output.weight", w[p + "self_attn.o_proj.weight"]),
            (f"blk.{i}.ffn_norm.weight", w[p + "post_attention_layernorm.weight"]),
            (f"blk.{i}.ffn_gate.weight", w[p + "mlp.gate_proj.weight"]),
            (f"blk.{i}.ffn_up.weight", w[p + "mlp.up_proj.weight"]),
            (f"blk.{i}.ffn_down.weight", w[p + "mlp.down_proj.weight"]),
        ]
    out += [("output_norm.weight", w["model.norm.weight"]), ("output.weight", w["lm_head.weight"])]
    for name, arr in out:
        assert arr.dtype == np.dtype("<f4") and arr.flags.c_contiguous, name
    return out


def gguf_tensors() -> list[tuple[str, np.ndarray]]:
    """(GGUF tensor name, little-endian float32 array in HF [out, in] shape) in the order they are written."""
    s = REFERENCE_MODEL_SPEC
    cfg = {k: s[k] for k in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads")}
    return _layer_tensors(reference_weights(), cfg)


def _tokens() -> tuple[list[str], list[int]]:
    import gguf

    b2u = bytes_to_unicode()
    vocab = [b2u[b] for b in range(256)]
    types = [int(gguf.TokenType.NORMAL)] * 256
    for tok, tid in sorted(SPECIAL_TOKENS.items(), key=lambda kv: kv[1]):
        assert tid == len(vocab), (tok, tid)
        vocab.append(tok)
        types.append(int(gguf.TokenType.CONTROL))
    assert len(vocab) == REFERENCE_MODEL_SPEC["vocab_size"]
    return vocab, types


@dataclass(frozen=True)
class GgufModel:
    """What one GGUF file holds, in the writer's order: the HF config, tensors, tokenizer and template."""

    name: str
    config: dict
    tensors: list[tuple[str, np.ndarray]]
    vocab: list[str]
    types: list[int]
    merges: list[str]
    specials: dict[str, int]  # bos, eos, pad, unk (those the model has)
    add_bos: bool
    chat_template: str


def _reference_model() -> GgufModel:
    s = REFERENCE_MODEL_SPEC
    vocab, types = _tokens()
    specials = {k: s[f"{k}_token_id"] for k in ("bos", "eos", "pad", "unk")}
    return GgufModel(GGUF_MODEL_NAME, dict(s), gguf_tensors(), vocab, types, MERGES, specials, True, CHAT_TEMPLATE)


def _scripted_model(fam: Family = HERMES) -> GgufModel:
    import gguf

    import harness.models.scripted as scripted

    cfg = scripted.config(fam)
    kinds = {"normal": gguf.TokenType.NORMAL, "control": gguf.TokenType.CONTROL,
             "user_defined": gguf.TokenType.USER_DEFINED}  # fmt: skip
    types = [int(kinds[k]) for k in scripted.token_kinds(fam)]
    specials = {"bos": cfg["pad_token_id"], "eos": cfg["eos_token_id"], "pad": cfg["pad_token_id"]}
    return GgufModel(fam.gguf_name, cfg, _layer_tensors(scripted.scripted_weights(fam), cfg),
                     scripted.vocab_strings(fam), types, [fam.never_merge], specials, False,
                     fam.template)  # fmt: skip


def write_gguf(path: Path, m: GgufModel) -> None:
    """Write the GGUF file at `path` (no atomicity; see build_gguf)."""
    import gguf

    c = m.config
    wr = gguf.GGUFWriter(str(path), "llama")  # adds general.architecture first
    wr.add_name(m.name)
    wr.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    wr.add_vocab_size(c["vocab_size"])
    wr.add_context_length(c["max_position_embeddings"])
    wr.add_embedding_length(c["hidden_size"])
    wr.add_block_count(c["num_hidden_layers"])
    wr.add_feed_forward_length(c["intermediate_size"])
    wr.add_head_count(c["num_attention_heads"])
    wr.add_head_count_kv(c["num_key_value_heads"])
    wr.add_key_length(c["head_dim"])
    wr.add_value_length(c["head_dim"])
    wr.add_rope_dimension_count(c["head_dim"])
    wr.add_rope_freq_base(float(c["rope_theta"]))
    wr.add_layer_norm_rms_eps(float(c["rms_norm_eps"]))
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("default")
    wr.add_token_list(m.vocab)
    wr.add_token_types(m.types)
    wr.add_token_merges(m.merges)
    for kind in ("bos", "eos", "pad", "unk"):
        if kind in m.specials:
            getattr(wr, f"add_{kind}_token_id")(m.specials[kind])
    wr.add_add_bos_token(m.add_bos)
    wr.add_add_eos_token(False)
    wr.add_chat_template(m.chat_template)
    for name, arr in m.tensors:
        wr.add_tensor(name, arr)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def write_reference_gguf(path: Path) -> None:
    """Write the reference model's GGUF file at `path` (no atomicity; see build_reference_gguf)."""
    write_gguf(path, _reference_model())


def build_reference_gguf(dest_dir: Path, force: bool = False) -> str:
    """The reference model as DIR/model.gguf (see build_gguf)."""
    return build_gguf(dest_dir, GGUF_MODEL_NAME, _reference_model, force=force)


def build_scripted_gguf(dest_dir: Path, force: bool = False, fam: Family = HERMES) -> str:
    """A family's scripted model (harness.models.scripted) as DIR/model.gguf (see build_gguf)."""
    return build_gguf(dest_dir, fam.gguf_name, lambda: _scripted_model(fam), force=force)


def _string_kv(key: str, value: str) -> bytes:
    """One GGUF string key/value as write_gguf writes it: u64 length + key, type 8 (string), u64 length + value."""
    k, v = key.encode(), value.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<IQ", 8, len(v)) + v


def _holds_gguf(directory: Path, name: str) -> bool:
    """True when `directory` holds only model.gguf and that file is the embedded model `name` as write_gguf writes it
    (GGUF v3, general.architecture then general.name in its first bytes): the one kind of non-empty directory
    `model build --format gguf --force` may replace. Reads a bounded prefix; never parses a foreign file."""
    if not holds_only(directory, [GGUF_FILENAME]):
        return False
    head = b"GGUF" + struct.pack("<I", 3)
    ours = _string_kv("general.architecture", "llama") + _string_kv("general.name", name)
    try:
        with open(directory / GGUF_FILENAME, "rb") as f:
            prefix = f.read(24 + len(ours))  # magic, version, tensor count, key/value count, then ours
    except OSError:
        return False
    return prefix[:8] == head and prefix[24:] == ours


def build_gguf(dest_dir: Path, name: str, model: Callable[[], GgufModel], force: bool = False) -> str:
    """Write DIR/model.gguf and return tree_hash(DIR), built in a temporary directory beside DIR then renamed, with
    the same destination rules as the safetensors models (harness.models.bytelevel.build_into): with force, only a
    directory holding this embedded model's model.gguf alone is replaced."""

    def write(tmp: Path) -> None:
        write_gguf(tmp / GGUF_FILENAME, model())
        with open(tmp / GGUF_FILENAME, "rb") as f:
            os.fsync(f.fileno())

    return build_into(Path(dest_dir), write, lambda d: _holds_gguf(d, name), force=force, what=f"{name} GGUF model")
