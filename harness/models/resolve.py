"""The model a manifest pins: build an embedded model (harness.models.catalog) or use a local directory, and verify its content hash
*before* anything starts. A mismatch refuses to launch and shows both hashes."""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.errors import PinMismatch
from harness.hashing import tree_hash
from harness.manifest import Manifest
from harness.models.catalog import build_embedded
from harness.settings import harness_home

__all__ = ["resolve_model"]


def resolve_model(manifest: Manifest) -> Path:
    pinned = manifest.model.sha256
    if manifest.model_is_embedded:
        name, model_format = manifest.model.source, manifest.profile.model_format
        fmt = "" if model_format == "safetensors" else f"-{model_format}"
        target = harness_home() / "models" / f"{name}{fmt}-{pinned[:12]}"
        if not target.is_dir():
            tmp = target.with_name(target.name + ".building")
            shutil.rmtree(tmp, ignore_errors=True)
            built = build_embedded(name, model_format, tmp)  # in the engine's model format
            if built != pinned:
                shutil.rmtree(tmp, ignore_errors=True)
                raise PinMismatch("model hash", pinned, built, f"the {name} model this harness builds")
            tmp.rename(target)
        directory = target
    else:
        directory = manifest.resolve(manifest.model.source)
    actual = tree_hash(directory)
    if actual != pinned:
        raise PinMismatch("model hash", pinned, actual, str(directory))
    return directory
