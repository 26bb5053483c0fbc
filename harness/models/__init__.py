"""The embedded models, byte-identical on every machine: the weights, tokenizers, chat templates and the GGUF writer.

    reference   the tiny random-weight Llama every golden recording is made with (`model.source: reference-tiny`)
    scripted    a tiny Llama whose weights follow fixed scripts: tool calls and reasoning (`scripted-tiny`)
    bytelevel   what both share: GPT-2's byte alphabet, the safetensors and JSON writers, the atomic directory build
    gguf        either model as one GGUF file for llama.cpp
    resolve     the model a manifest pins, built or found, and its content hash verified before anything starts

Nothing here knows an engine's launcher: an engine profile names the format it reads (`model_format`), and
`resolve` builds that format.
"""

from harness.models.resolve import resolve_model

__all__ = ["resolve_model"]
