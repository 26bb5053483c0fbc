"""The embedded models, byte-identical on every machine: the weights, tokenizers, chat templates and the GGUF writer.

    reference   the tiny random-weight Llama every golden recording is made with (`model.source: reference-tiny`)
    scripted    a tiny Llama whose weights follow fixed scripts: tool calls and reasoning (`scripted-tiny`)
    bytelevel   what both share: GPT-2's byte alphabet, the safetensors and JSON writers, the atomic directory build
    gguf        either model as one GGUF file for llama.cpp
    catalog     the names a manifest may give, and which builder writes which format
    resolve     the model a manifest pins, built or found, and its content hash verified before anything starts

Nothing here knows an engine's launcher: an engine profile names the format it reads (`model_format`), and
`resolve` builds that format.
"""

from typing import Any

__all__ = ["resolve_model"]


def __getattr__(name: str) -> Any:
    # late: harness.manifest reads harness.models.catalog, and resolve reads harness.manifest
    if name == "resolve_model":
        from harness.models.resolve import resolve_model

        return resolve_model
    raise AttributeError(name)
