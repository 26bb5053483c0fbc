"""Content hashes and atomic writes.

Model content hash recipe (documented in the README):
    for every regular file under DIR (recursively, symlinks refused), take its POSIX path relative to DIR and the
    sha256 hex of its bytes; sort by path (byte order of the UTF-8 path); hash the UTF-8 text made of one line
    "<sha256-hex>  <relative/path>\\n" per file (the `sha256sum` line format) with sha256. The hex digest is the hash.
So `cd DIR && find . -type f | sed 's|^\\./||' | LC_ALL=C sort | xargs sha256sum | sha256sum` gives the same value.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from harness.errors import DataError
from harness.outputs import atomic_write_bytes, atomic_write_text  # noqa: F401 - re-exported for old callers

__all__ = ["file_sha256", "tree_hash", "tree_listing", "atomic_write_bytes", "atomic_write_text"]


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree_listing(root: str | Path) -> list[tuple[str, str]]:
    """Sorted (relative posix path, sha256) for every regular file under root."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: not a directory")
    rows = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                raise DataError(f"{p}: symlinks are not allowed in a hashed model directory")
            rows.append((p.relative_to(root).as_posix(), file_sha256(p)))
    rows.sort(key=lambda r: r[0].encode())
    return rows


def tree_hash(root: str | Path) -> str:
    text = "".join(f"{digest}  {rel}\n" for rel, digest in tree_listing(root))
    return hashlib.sha256(text.encode()).hexdigest()
