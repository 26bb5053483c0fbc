"""The embedded tiny reference model: a byte-level Llama checkpoint written byte-identically on every machine.

`harness model build DIR` calls `build_reference_model(DIR)`; `harness model hash DIR` is `harness.hashing.tree_hash`.

What is written (no torch needed, only NumPy):

    config.json              LlamaForCausalLM, shape in REFERENCE_MODEL_SPEC, torch_dtype float32
    generation_config.json   bos/eos/pad ids only (no sampling defaults, so vLLM does not start sampling by default)
    model.safetensors        float32 little-endian weights, written by hand (see _safetensors_bytes)
    special_tokens_map.json
    tokenizer.json           HF `tokenizers` format: BPE over the 256 ByteLevel characters, no merges
    tokenizer_config.json    PreTrainedTokenizerFast, specials, model_max_length, chat template

Token ids (documented contract, golden files depend on it):
    0..255   the byte with that value (in the GPT-2 ByteLevel alphabet, so the vocab strings are printable)
    256      <pad>
    257      <s>      (BOS; prepended by the tokenizer's post-processor and by the chat template)
    258      </s>     (EOS)
    259      <unk>    (never produced: every byte has a token)

Weights come from NumPy's legacy `RandomState(REFERENCE_SEED)`, whose stream NumPy guarantees stable across
versions and platforms: `random_sample()` uniforms, 12 per weight summed in a fixed order minus 6 (an
Irwin-Hall approximate standard normal, no libm calls), drawn in the fixed order of `_tensor_plan()`, scaled,
then cast to float32 little-endian.
The lm_head rows of <pad>, <s> and <unk> are zero (never the greedy choice); the rows of EOS and of the bytes
that are not printable ASCII or newline are damped by 0.8, so EOS has no advantage and is rare (about 1 prompt
in 30 ends within 30 greedy tokens), and greedy output is about two thirds printable ASCII with some high
bytes (so incomplete UTF-8 still occurs). The init scales (REFERENCE_MODEL_SPEC["init_scales"]) are larger than
a trained model's initialiser so that attention actually mixes the context and greedy decoding gives varied bytes.

Every JSON file is written with sorted keys, fixed separators and ASCII escapes, so the tree hash is stable.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.models.bytelevel import build_model_dir, bytes_to_unicode, dumps, safetensors_bytes, tokenizer_json

__all__ = [
    "REFERENCE_SEED",
    "REFERENCE_MODEL_SPEC",
    "REFERENCE_FILE_NAMES",
    "SPECIAL_TOKENS",
    "CHAT_TEMPLATE",
    "build_reference_model",
    "write_reference_model",
    "reference_files",
    "reference_weights",
    "bytes_to_unicode",
]

REFERENCE_SEED = 6  # picked from seeds 1..12 for the most varied greedy output (fewest repeats)

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 256, 257, 258, 259
SPECIAL_TOKENS = {"<pad>": PAD_ID, "<s>": BOS_ID, "</s>": EOS_ID, "<unk>": UNK_ID}

REFERENCE_MODEL_SPEC: dict = {
    "architecture": "LlamaForCausalLM",
    "num_hidden_layers": 2,
    "hidden_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "intermediate_size": 256,
    "vocab_size": 260,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "dtype": "float32",
    "bos_token_id": BOS_ID,
    "eos_token_id": EOS_ID,
    "pad_token_id": PAD_ID,
    "unk_token_id": UNK_ID,
    "seed": REFERENCE_SEED,
    # standard deviation of the normal draw for each kind of matrix (norm weights are ones)
    "init_scales": {
        "embed": 1.0,
        "q": 0.15,
        "k": 0.15,
        "v": 0.15,
        "o": 0.15,
        "gate": 0.1,
        "up": 0.1,
        "down": 0.1,
        "lm_head": 0.2,
    },
    # lm_head rows of EOS and of bytes other than printable ASCII and "\n" are multiplied by this
    "lm_head_damping": 0.8,
}

# The files reference_files() returns (without computing the weights).
REFERENCE_FILE_NAMES = ("config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json",
                        "tokenizer.json", "tokenizer_config.json")  # fmt: skip

# lm_head rows multiplied by lm_head_damping: EOS and every byte that is not printable ASCII or "\n".
_DAMPED_ROWS = [b for b in range(256) if not (32 <= b < 127 or b == 10)] + [EOS_ID]

# <s> then, per message, "<|role|>\n" + content + "\n"; the generation prompt is "<|assistant|>\n".
# Content may be a string, None (assistant tool-call turns) or a list of OpenAI parts (only "text" parts are
# rendered). `tools`, `documents` and any other extra variable are accepted and ignored.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% elif message['content'] is iterable %}"
    "{% for part in message['content'] %}"
    "{% if part is mapping and part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}"
    "{% endif %}"
    "{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def _tensor_plan() -> list[tuple[str, tuple[int, ...], str]]:
    """(name, HF shape [out, in], init kind) in the fixed order the random stream is consumed."""
    s = REFERENCE_MODEL_SPEC
    h, hd, inter, vocab = s["hidden_size"], s["head_dim"], s["intermediate_size"], s["vocab_size"]
    q_out, kv_out = s["num_attention_heads"] * hd, s["num_key_value_heads"] * hd
    plan = [("model.embed_tokens.weight", (vocab, h), "embed")]
    for i in range(s["num_hidden_layers"]):
        p = f"model.layers.{i}."
        plan += [
            (p + "input_layernorm.weight", (h,), "norm"),
            (p + "self_attn.q_proj.weight", (q_out, h), "q"),
            (p + "self_attn.k_proj.weight", (kv_out, h), "k"),
            (p + "self_attn.v_proj.weight", (kv_out, h), "v"),
            (p + "self_attn.o_proj.weight", (h, q_out), "o"),
            (p + "post_attention_layernorm.weight", (h,), "norm"),
            (p + "mlp.gate_proj.weight", (inter, h), "gate"),
            (p + "mlp.up_proj.weight", (inter, h), "up"),
            (p + "mlp.down_proj.weight", (h, inter), "down"),
        ]
    plan += [("model.norm.weight", (h,), "norm"), ("lm_head.weight", (vocab, h), "lm_head")]
    return plan


def _approx_normal(rng: np.random.RandomState, shape: tuple[int, ...]) -> np.ndarray:
    """Irwin-Hall: sum of 12 uniforms minus 6 (mean 0, variance 1), as float64.

    Chosen over rng.standard_normal() because that goes through the C library's log() and sqrt(), which may
    differ in the last bit between platforms; random_sample() is exact integer arithmetic on the Mersenne
    Twister stream, and the 11 element-wise float64 additions (in a fixed order, no pairwise/SIMD reduction)
    and the scaling are exactly rounded IEEE operations, so the result is the same bits everywhere.
    """
    n = int(np.prod(shape))
    u = rng.random_sample(size=(12, n))
    acc = u[0].copy()
    for j in range(1, 12):
        acc = acc + u[j]
    return (acc - 6.0).reshape(shape)


def reference_weights() -> dict[str, np.ndarray]:
    """The weights as little-endian float32 arrays (deterministic: legacy RandomState stream, float64 -> float32)."""
    rng = np.random.RandomState(REFERENCE_SEED)
    scales = REFERENCE_MODEL_SPEC["init_scales"]
    out: dict[str, np.ndarray] = {}
    for name, shape, kind in _tensor_plan():
        if kind == "norm":
            w = np.ones(shape, dtype=np.float64)
        else:
            w = _approx_normal(rng, shape) * scales[kind]
        if kind == "lm_head":
            w[[PAD_ID, BOS_ID, UNK_ID], :] = 0.0
            w[_DAMPED_ROWS, :] *= REFERENCE_MODEL_SPEC["lm_head_damping"]
        out[name] = np.ascontiguousarray(w.astype("<f4"))
    return out


def _tokenizer_json() -> dict:
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    vocab.update(SPECIAL_TOKENS)
    added = [
        {
            "id": i,
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for t, i in sorted(SPECIAL_TOKENS.items(), key=lambda kv: kv[1])
    ]
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    post = {
        "type": "TemplateProcessing",
        "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [BOS_ID], "tokens": ["<s>"]}},
    }
    return tokenizer_json(vocab, added, post)


def reference_files() -> dict[str, bytes]:
    """Relative file name -> exact bytes of every file of the reference model."""
    s = REFERENCE_MODEL_SPEC
    config = {
        "architectures": [s["architecture"]],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "head_dim": s["head_dim"],
        "hidden_act": "silu",
        "hidden_size": s["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": s["intermediate_size"],
        "max_position_embeddings": s["max_position_embeddings"],
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": s["num_attention_heads"],
        "num_hidden_layers": s["num_hidden_layers"],
        "num_key_value_heads": s["num_key_value_heads"],
        "pretraining_tp": 1,
        "rms_norm_eps": s["rms_norm_eps"],
        "rope_scaling": None,
        "rope_theta": s["rope_theta"],
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": s["vocab_size"],
    }
    generation_config = {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}
    specials = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
    tokenizer_config = {
        **specials,
        "added_tokens_decoder": {
            str(i): {
                "content": t,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for t, i in SPECIAL_TOKENS.items()
        },
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": s["max_position_embeddings"],
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    return {
        "config.json": dumps(config),
        "generation_config.json": dumps(generation_config),
        "model.safetensors": safetensors_bytes(reference_weights()),
        "special_tokens_map.json": dumps(specials),
        "tokenizer.json": dumps(_tokenizer_json()),
        "tokenizer_config.json": dumps(tokenizer_config),
    }


def write_reference_model(directory: Path) -> None:
    """Write the files into an existing (empty) directory, no atomicity."""
    for name, data in reference_files().items():
        with open(Path(directory) / name, "wb") as f:
            f.write(data)


def _config_shape() -> dict:
    s = REFERENCE_MODEL_SPEC
    return {"model_type": "llama", "vocab_size": s["vocab_size"], "hidden_size": s["hidden_size"],
            "num_hidden_layers": s["num_hidden_layers"], "architectures": [s["architecture"]]}  # fmt: skip


def build_reference_model(dest: Path, force: bool = False) -> str:
    """Write the reference model into `dest` and return its content hash (harness.hashing.tree_hash).

    Built in a temporary directory beside `dest`, then renamed into place. `dest` must be new, an empty directory,
    or (with force) a reference model built before; anything else is refused (harness.models.bytelevel).
    """
    return build_model_dir(dest, reference_files, REFERENCE_FILE_NAMES, _config_shape(), force=force,
                           what="reference model")  # fmt: skip
