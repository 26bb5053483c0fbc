"""KV-cache capacity as vLLM 0.11.0 computes it (``v1/kv_cache_interface.py``, ``v1/core/kv_cache_utils.py``).

page_size_bytes (per layer) = 2 * block_size * num_kv_heads * head_size * dtype_size
num_blocks                  = kv_bytes // page_size_bytes // num_layers      (uniform full attention)

``num_blocks`` includes the null block 0 (what ``vllm:cache_config_info{num_gpu_blocks}`` shows);
``usable_blocks`` = num_blocks - 1. Pure functions; :func:`read_model_config` is the only I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal
from pathlib import Path

from harness.blocks import limits
from harness.errors import DataError, UsageError
from harness.readers import MAX_INPUT_BYTES, read_json

__all__ = [
    "DTYPE_BYTES",
    "ModelShape",
    "Capacity",
    "model_shape",
    "resolve_model_dtype",
    "kv_dtype_bytes",
    "plan",
    "parse_bytes",
    "read_model_config",
    "load_shape",
    "max_concurrency",
]

DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
}
GiB = 1 << 30


@dataclass(frozen=True)
class ModelShape:
    num_layers: int
    num_kv_heads: int
    head_size: int
    checkpoint_dtype: str


def _shape_int(cfg: Mapping, key: str, hi: int, source: object) -> int:
    v = cfg[key]
    if type(v) is not int or not 1 <= v <= hi:
        raise DataError(f"{source}: {key}: must be an integer between 1 and {hi}, got {_shown(v)}")
    return v


def _shown(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:40] + "..."


def model_shape(config: Mapping, source: object = "config.json") -> ModelShape:
    """Layers, KV heads and head size from a HF ``config.json`` (text config of multimodal models too).
    Every figure must be a positive integer in range: a negative or zero one would print negative capacities."""
    if not isinstance(config, Mapping):
        raise DataError(f"{source}: (top level): a model config is a JSON object")
    cfg = config.get("text_config") or config
    if not isinstance(cfg, Mapping):
        raise DataError(f"{source}: text_config: must be a JSON object")
    try:
        layers = _shape_int(cfg, "num_hidden_layers", limits.MAX_LAYERS, source)
        heads = _shape_int(cfg, "num_attention_heads", limits.MAX_HEADS, source)
        kv_heads = (
            _shape_int(cfg, "num_key_value_heads", limits.MAX_HEADS, source)
            if cfg.get("num_key_value_heads") is not None
            else heads
        )
        if cfg.get("head_dim") is not None:
            head = _shape_int(cfg, "head_dim", limits.MAX_HEAD_SIZE, source)
        else:
            hidden = _shape_int(cfg, "hidden_size", limits.MAX_HEADS * limits.MAX_HEAD_SIZE, source)
            head = hidden // heads
            if not 1 <= head <= limits.MAX_HEAD_SIZE:
                raise DataError(
                    f"{source}: hidden_size: {hidden} / {heads} heads gives head size {head}, "
                    f"outside 1..{limits.MAX_HEAD_SIZE}"
                )
    except KeyError as exc:
        raise DataError(f"{source}: {exc.args[0]}: missing; config.json lacks a usable attention shape") from None
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or config.get("torch_dtype") or "float32"
    if not isinstance(dtype, str) or len(dtype) > 64:
        raise DataError(f"{source}: torch_dtype: must be a dtype name, got {_shown(dtype)}")
    return ModelShape(layers, kv_heads, head, dtype.replace("torch.", ""))


def resolve_model_dtype(requested: str, checkpoint_dtype: str, platform: str = "cpu") -> str:
    """vLLM's ``--dtype``: "auto" takes the checkpoint dtype, except that float32 checkpoints are
    downcast to the platform's preferred half type (bfloat16 on the CPU)."""
    req = requested.lower()
    if req == "auto":
        ck = checkpoint_dtype.lower()
        if ck in ("float32", "float"):
            return "bfloat16" if platform == "cpu" else "float16"
        return ck
    if req in ("float", "float32"):
        return "float32"
    if req in ("half", "float16"):
        return "float16"
    if req == "bfloat16":
        return req
    raise UsageError(f"unknown --dtype {_shown(requested)} (auto, float32, bfloat16, float16)")


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str) -> int:
    kv = kv_cache_dtype.lower()
    name = model_dtype if kv == "auto" else kv
    try:
        return DTYPE_BYTES[name]
    except KeyError:
        if kv == "auto":
            raise UsageError(
                f"model dtype {_shown(name)} (from --dtype or config.json torch_dtype) has no known size; "
                "pass --dtype or --kv-cache-dtype"
            ) from None
        raise UsageError(
            f"unknown --kv-cache-dtype {_shown(kv_cache_dtype)} (auto or one of {', '.join(DTYPE_BYTES)})"
        ) from None


@dataclass(frozen=True)
class Capacity:
    num_layers: int
    num_kv_heads: int
    head_size: int
    model_dtype: str
    kv_dtype_bytes: int
    block_size: int
    kv_bytes: int
    page_size_bytes: int  # per layer
    block_bytes: int  # all layers
    bytes_per_token: int
    num_blocks: int  # incl. the null block, = vllm:cache_config_info num_gpu_blocks
    usable_blocks: int
    num_tokens: int  # num_blocks * block_size (vLLM's "KV cache size: N tokens")

    def to_dict(self) -> dict:
        return asdict(self)


def plan(
    shape: ModelShape,
    kv_bytes: int,
    block_size: int,
    *,
    dtype: str = "auto",
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
    num_gpu_blocks_override: int | None = None,
    platform: str = "cpu",
) -> Capacity:
    if kv_bytes < 0 or block_size < 1 or tensor_parallel_size < 1:
        raise UsageError("KV bytes must be >= 0, block size and TP size >= 1")
    if min(shape.num_layers, shape.num_kv_heads, shape.head_size) < 1:
        raise UsageError(f"layers, KV heads and head size must be >= 1, got {shape}")
    model_dtype = resolve_model_dtype(dtype, shape.checkpoint_dtype, platform)
    size = kv_dtype_bytes(kv_cache_dtype, model_dtype)
    kv_heads = max(1, shape.num_kv_heads // tensor_parallel_size)
    page = 2 * block_size * kv_heads * shape.head_size * size
    blocks = kv_bytes // page // shape.num_layers
    if num_gpu_blocks_override is not None:
        blocks = num_gpu_blocks_override
    return Capacity(
        num_layers=shape.num_layers,
        num_kv_heads=kv_heads,
        head_size=shape.head_size,
        model_dtype=model_dtype,
        kv_dtype_bytes=size,
        block_size=block_size,
        kv_bytes=kv_bytes,
        page_size_bytes=page,
        block_bytes=page * shape.num_layers,
        bytes_per_token=page * shape.num_layers // block_size,
        num_blocks=blocks,
        usable_blocks=max(0, blocks - 1),
        num_tokens=blocks * block_size,
    )


def max_concurrency(cap: Capacity, lengths: Sequence[int]) -> dict:
    """How many requests fit at once, for total lengths (prompt + output) drawn from ``lengths``.

    ``worst_case``: every request at the longest length (what vLLM logs as "Maximum concurrency",
    computed there as num_blocks / blocks(max_model_len)); ``expected``: usable blocks over mean blocks
    per request; ``all_at_once``: whether the whole given list fits simultaneously.
    """
    if not lengths:
        raise UsageError("need at least one length")
    b = cap.block_size
    per = [-(-t // b) for t in lengths]
    mean_blocks = sum(per) / len(per)
    return {
        "vllm_logged": cap.num_blocks / max(per),
        "worst_case": cap.usable_blocks // max(per),
        "expected": cap.usable_blocks / mean_blocks,
        "mean_blocks_per_request": mean_blocks,
        "all_at_once": sum(per) <= cap.usable_blocks,
    }


_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}


def parse_bytes(text: str, what: str = "--kv-bytes") -> int:
    """'1073741824', '1GiB', '4 GiB', '512MiB', '1.5GiB'; at most MAX_KV_BYTES."""
    m = re.fullmatch(r"\s*(\d{1,20}(?:\.\d{1,20})?)\s*([A-Za-z]{0,3})\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"{what}: not a byte size: {_shown(text)} (e.g. 1073741824, 1GiB, 512MiB)")
    n = int(Decimal(m.group(1)) * _UNITS[m.group(2).lower()])  # exact: no float rounding of large sizes
    if n > limits.MAX_KV_BYTES:
        raise UsageError(f"{what}: {_shown(text)} is over the limit of {limits.MAX_KV_BYTES} bytes (1 PiB)")
    return n


def _config_path(model_dir: str | Path) -> Path:
    path = Path(model_dir)
    return path / "config.json" if path.is_dir() else path


def read_model_config(model_dir: str | Path) -> dict:
    """The model's config.json (a directory or the file itself), through the bounded JSON reader.
    NaN is allowed in the file (HF writes it for some unused fields); the shape fields are checked by model_shape."""
    return read_json(
        _config_path(model_dir), "model config", max_bytes=MAX_INPUT_BYTES, allow_nan=True, error=DataError
    )


def load_shape(model_dir: str | Path) -> ModelShape:
    """read_model_config + model_shape, with errors naming the config file."""
    return model_shape(read_model_config(model_dir), _config_path(model_dir))
