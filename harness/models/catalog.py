"""The models the harness builds, by the name a manifest gives as `model.source`, and the formats each is written in:
the embedded tiny models (written from code) and the trained SmolLM2-135M-Instruct (fetched by hash: models.smollm2)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from harness.models.families import FAMILIES

__all__ = ["EMBEDDED_MODELS", "SCRIPTED_MODELS", "FORMATS", "TRAINED_MODELS", "build_embedded"]

# one scripted model per parser family (harness.models.families): scripted-tiny is the hermes family's
SCRIPTED_MODELS = tuple(f.source for f in FAMILIES.values())
EMBEDDED_MODELS = ("reference-tiny", *SCRIPTED_MODELS, "smollm2-135m")
# the trained ones: their greedy answers end on their own (the end token), where the tiny models' random or scripted
# weights run every answer to max_tokens
TRAINED_MODELS = ("smollm2-135m",)
FORMATS = ("safetensors", "gguf")


def build_embedded(name: str, fmt: str, dest: Path, force: bool = False) -> str:
    """Write embedded model `name` in format `fmt` (an engine profile's model_format) into `dest`; its content hash."""
    from harness.models.gguf import build_reference_gguf, build_scripted_gguf
    from harness.models.reference import build_reference_model
    from harness.models.scripted import build_scripted_model
    from harness.models.smollm2 import build_smollm2_gguf, build_smollm2_model

    builders: dict[tuple[str, str], Callable[..., str]] = {
        ("reference-tiny", "safetensors"): build_reference_model,
        ("reference-tiny", "gguf"): build_reference_gguf,
        **{(f.source, "safetensors"): partial(build_scripted_model, fam=f) for f in FAMILIES.values()},
        **{(f.source, "gguf"): partial(build_scripted_gguf, fam=f) for f in FAMILIES.values()},
        ("smollm2-135m", "safetensors"): build_smollm2_model,
        ("smollm2-135m", "gguf"): build_smollm2_gguf,
    }
    if (name, fmt) not in builders:
        raise ValueError(f"no embedded model {name!r} in format {fmt!r}")
    return builders[(name, fmt)](dest, force=force)
