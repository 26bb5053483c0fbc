"""What the embedded models share: GPT-2's byte alphabet, the exact JSON and safetensors writers, and the build of a
model directory beside its destination then renamed into place (never over what is not a model of the same kind)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from harness.errors import HarnessError, OutputError, RefusedError
from harness.hashing import tree_hash
from harness.readers import read_json

__all__ = [
    "bytes_to_unicode",
    "dumps",
    "safetensors_bytes",
    "safetensors_header",
    "tokenizer_json",
    "build_into",
    "build_model_dir",
    "holds_only",
]


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's ByteLevel map byte -> printable character (the one `tokenizers` ByteLevel uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def dumps(obj) -> bytes:
    """JSON with sorted keys, fixed separators and ASCII escapes: the same bytes everywhere."""
    return (json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=True, separators=(",", ": ")) + "\n").encode("ascii")


def safetensors_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    """safetensors: u64 LE header length, JSON header (sorted names, no spaces, space-padded to 8), raw data."""
    return safetensors_header(tensors) + b"".join(tensors[n].tobytes() for n in sorted(tensors))


def safetensors_header(tensors: dict[str, np.ndarray]) -> bytes:
    """The bytes of a safetensors file before its data (then each tensor's bytes in sorted name order): a large
    checkpoint is written tensor by tensor rather than joined in memory."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    names = sorted(tensors)
    for name in names:
        arr = tensors[name]
        assert arr.dtype == np.dtype("<f4") and arr.flags.c_contiguous
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    hjson = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    hjson += b" " * (-len(hjson) % 8)
    return struct.pack("<Q", len(hjson)) + hjson


def tokenizer_json(vocab: dict[str, int], added: list[dict], post_processor: dict | None) -> dict:
    """HF `tokenizers` JSON: BPE over the ByteLevel alphabet with no merges (every vocabulary entry beyond the
    bytes is an added token or a piece only the weights emit), and the model's own post-processor."""
    level = {"add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", **level},
        "post_processor": post_processor,
        "decoder": {"type": "ByteLevel", **level},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [],
        },  # fmt: skip
    }


def holds_only(directory: Path, names: Iterable[str]) -> bool:
    """True when `directory` holds something and only regular files named in `names` (no link, no subdirectory)."""
    allowed = set(names)
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return False
    return bool(entries) and all(e.name in allowed and e.is_file(follow_symlinks=False) for e in entries)


def _holds_model(directory: Path, names: Iterable[str], shape: dict) -> bool:
    """True when `directory` holds only files of such a model and its config.json has that model's shape: the one
    kind of non-empty directory `model build --force` may replace (a real model has the same file names)."""
    if not holds_only(directory, names):
        return False
    try:
        config = read_json(directory / "config.json", "model config", max_bytes=1 << 20)
    except HarnessError:
        return False
    keys = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "architectures")
    return isinstance(config, dict) and all(config.get(k) == shape.get(k) for k in keys)


def _check_destination(dest: Path, force: bool, holds_such: Callable[[Path], bool], what: str) -> None:
    """Never delete or overwrite what is not such a model: refuse the current directory (or one holding it), a
    symlink, a file, and a non-empty directory that is not such a model even with force; an existing one only with
    force."""
    cwd = Path(os.path.abspath(os.getcwd()))
    if dest == cwd or dest in cwd.parents:
        raise RefusedError(f"{dest}: is the current directory or holds it; give a new or empty directory for the model")
    if dest.is_symlink():
        raise RefusedError(f"{dest}: is a symlink; refusing to replace it (give a new or empty directory)")
    if dest.exists() and not dest.is_dir():
        raise RefusedError(f"{dest}: exists and is not a directory; refusing to overwrite it (even with --force)")
    if dest.is_dir() and any(dest.iterdir()):
        if not holds_such(dest):
            raise RefusedError(
                f"{dest}: directory is not empty and does not hold a {what}; refusing to overwrite it "
                f"(even with --force): give a new or empty directory"
            )
        if not force:
            raise RefusedError(f"{dest}: already holds a {what}; refusing to overwrite it (use --force)")


def build_into(dest: Path, write: Callable[[Path], None], holds_such: Callable[[Path], bool], *, force: bool,
               what: str) -> str:  # fmt: skip
    """Run `write(tmp)` on a temporary directory beside `dest`, rename it into place and return its content hash
    (harness.hashing.tree_hash). The one destination check of every format: `dest` must be new, an empty directory,
    or (with force) a directory that `holds_such` a model of the same kind; anything else is refused.
    """
    dest = Path(os.path.abspath(dest))  # "." and "x/.." get a real name and parent
    _check_destination(dest, force, holds_such, what)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    except OSError as exc:
        raise OutputError(f"{dest}: cannot create the model directory: {exc.strerror}") from None
    try:
        os.chmod(tmp, 0o755)
        write(tmp)
        old = None
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".old", dir=dest.parent))
            os.rmdir(old)
            os.replace(dest, old)
        os.replace(tmp, dest)
        if old is not None:
            shutil.rmtree(old)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputError(f"{dest}: cannot write the model: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tree_hash(dest)


def build_model_dir(dest: Path, files: Callable[[], dict[str, bytes]], names: Iterable[str], shape: dict, *,
                    force: bool = False, what: str = "model") -> str:  # fmt: skip
    """Write `files()` into `dest` and return its content hash (see build_into); with force, only a model of the
    same kind (`shape`: its config.json) built before is replaced."""

    def write(tmp: Path) -> None:
        for name, data in files().items():
            with open(tmp / name, "wb") as f:
                f.write(data)
                os.fsync(f.fileno())

    return build_into(dest, write, lambda d: _holds_model(d, names, shape), force=force, what=what)
