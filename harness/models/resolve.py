"""The model a manifest pins: build the embedded reference model or use a local directory, and verify its content hash
*before* anything starts. A mismatch refuses to launch and shows both hashes."""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.errors import PinMismatch
from harness.hashing import tree_hash
from harness.manifest import Manifest
from harness.settings import harness_home

__all__ = ["resolve_model"]


def resolve_model(manifest: Manifest) -> Path:
    pinned = manifest.model.sha256
    if manifest.model_is_reference:
        profile = manifest.profile
        fmt = "" if profile.model_format == "safetensors" else f"-{profile.model_format}"
        target = harness_home() / "models" / f"reference-tiny{fmt}-{pinned[:12]}"
        if not target.is_dir():
            tmp = target.with_name(target.name + ".building")
            shutil.rmtree(tmp, ignore_errors=True)
            built = profile.build_reference_model(tmp)  # in the engine's model format
            if built != pinned:
                shutil.rmtree(tmp, ignore_errors=True)
                raise PinMismatch("model hash", pinned, built, "the reference-tiny model this harness builds")
            tmp.rename(target)
        directory = target
    else:
        directory = manifest.resolve(manifest.model.source)
    actual = tree_hash(directory)
    if actual != pinned:
        raise PinMismatch("model hash", pinned, actual, str(directory))
    return directory
