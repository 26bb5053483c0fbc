"""KV-cache capacity as vLLM 0.11.0 computes it (``v1/kv_cache_interface.py``, ``v1/core/kv_cache_utils.py``).

page_size_bytes (per layer) = 2 * block_size * num_kv_heads * head_size * dtype_size
num_blocks                  = kv_bytes // page_size_bytes // num_layers      (uniform full attention)

``num_blocks`` includes the null block 0 (what ``vllm:cache_config_info{num_gpu_blocks}`` shows); 
``usable_blocks`` = num_blocks - 1. Pure functions; :func:`read_model_config` is the only I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.errors import DataError, UsageError

__all__ = [
    "DTYPE_BYTES", "ModelShape", "Capacity", "model_shape", "resolve_model_dtype", "kv_dtype_bytes",
    "plan", "parse_bytes", "read_model_config", "max_concurrency",
]

DTYPE_BYTES = {
    "float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1,
}
GiB = 1 << 30


@dataclass(frozen=True)
class ModelShape:
    num_layers: int
    num_kv_heads: int
    head_size: int
    checkpoint_dtype: str


def model_shape(config: Mapping) -> ModelShape:
    """Layers, KV heads and head size from a HF ``config.json`` (text config of multimodal models too)."""
    cfg = config.get("text_config") or config
    try:
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head = cfg.get("head_dim") or int(cfg["hidden_size"]) // heads
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise DataError(f"config.json lacks a usable attention shape: {exc!r}") from None
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or config.get("torch_dtype") or "float32")
    return ModelShape(layers, kv_heads, int(head), dtype.replace("torch.", ""))


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
    raise UsageError(f"unknown --dtype {requested!r} (auto, float32, bfloat16, float16)")


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str) -> int:
    kv = kv_cache_dtype.lower()
    name = model_dtype if kv == "auto" else kv
    try:
        return DTYPE_BYTES[name]
    except KeyError:
        raise UsageError(f"unknown KV cache dtype {kv_cache_dtype!r}") from None


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
    model_dtype = resolve_model_dtype(dtype, shape.checkpoint_dtype, platform)
    size = kv_dtype_bytes(kv_cache_dtype, model_dtype)
    kv_heads = max(1, shape.num_kv_heads // tensor_parallel_size)
    page = 2 * block_size * kv_heads * shape.head_size * size
    blocks = kv_bytes // page // shape.num_layers
    if num_gpu_blocks_override is not None:
        blocks = num_gpu_blocks_override
    return Capacity(
        num_layers=shape.num_layers, num_kv_heads=kv_heads, head_size=shape.head_size,
        model_dtype=model_dtype, kv_dtype_bytes=size, block_size=block_size, kv_bytes=kv_bytes,
        page_size_bytes=page, block_bytes=page * shape.num_layers,
        bytes_per_token=page * shape.num_layers // block_size,
        num_blocks=blocks, usable_blocks=max(0, blocks - 1), num_tokens=blocks * block_size,
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


_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_bytes(text: str) -> int:
    """'1073741824', '1GiB', '4 GiB', '512MiB'."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"not a byte size: {text!r} (e.g. 1073741824, 1GiB, 512MiB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def read_model_config(model_dir: str | Path) -> dict:
    path = Path(model_dir)
    if path.is_dir():
        path = path / "config.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"no config.json at {path}") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: unreadable config.json: {exc}") from None
