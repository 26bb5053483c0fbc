"""Content hashes and atomic writes.

Model content hash recipe (documented in the README):
    for every regular file under DIR (recursively), take its POSIX path relative to DIR and the sha256 hex of its
    bytes; sort by path (byte order of the UTF-8 path); hash the UTF-8 text made of one line
    "<sha256-hex>  <relative/path>\\n" per file (the `sha256sum` line format) with sha256. The hex digest is the hash.
So the README's shell recipe (NUL-separated names, so spaces, quotes and backslashes pass through, and `sha256sum -z`,
which does not escape a name holding a backslash) gives the same value.

Anything the recipe cannot cover is refused, naming the path, rather than skipped: a symlink (file or directory: the
hash would not cover what it points to), an entry that is not a regular file or directory (a FIFO or device would block
or never end), an unreadable directory or file, and a name that is not UTF-8 or holds a control character (C0, DEL,
C1, line separators, bidi overrides: what harness.shown escapes; the recipe's lines are UTF-8 text, one per file: a
newline in a name could forge another file's line).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from harness.errors import DataError
from harness.shown import shown

__all__ = ["file_sha256", "tree_hash", "tree_listing"]


def file_sha256(path: str | Path) -> str:
    """sha256 hex of a regular file's bytes. Never blocks on a FIFO or device; DataError (naming the path) if not a
    regular file or unreadable."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        raise DataError(f"{_where(p)}: cannot read: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DataError(f"{_where(p)}: not a regular file (a FIFO, device or socket); refusing to hash it")
        h = hashlib.sha256()
        with os.fdopen(fd, "rb", closefd=False) as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    except OSError as exc:
        raise DataError(f"{_where(p)}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)


def _plain(text: str) -> bool:
    return text.isprintable() and not any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def _where(path: Path) -> str:
    """A path for a one-line message: as is, or repr() when it holds a control character or undecodable bytes."""
    return str(path) if _plain(str(path)) else repr(str(path))


def _relative_name(root: Path, path: Path) -> str:
    rel = path.relative_to(root).as_posix()
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:  # os.walk gives undecodable bytes as surrogates
        raise DataError(f"{_where(path)}: name is not UTF-8; the model hash recipe covers UTF-8 names only") from None
    if shown(rel) != rel:  # shown() escapes exactly the controls: C0, DEL, C1, line separators, bidi overrides
        raise DataError(f"{_where(path)}: name holds a control character; refusing to hash it")
    return rel


def tree_listing(root: str | Path) -> list[tuple[str, str]]:
    """Sorted (relative posix path, sha256) for every regular file under root; DataError for anything else."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{_where(root)}: {'not a directory' if root.exists() else 'no such directory'}")

    def unreadable(exc: OSError) -> None:
        where = _where(Path(exc.filename))
        raise DataError(f"{where}: cannot read directory: {exc.strerror}; refusing to hash a partial tree")

    rows = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable):
        here = Path(dirpath)
        for name in dirnames:
            d = here / name
            _relative_name(root, d)
            if d.is_symlink():  # os.walk does not descend into it: its files would silently be left out
                raise DataError(f"{_where(d)}: symlinked directories are not allowed in a hashed model directory")
        for name in filenames:
            p = here / name
            rel = _relative_name(root, p)
            try:
                mode = os.lstat(p).st_mode
            except OSError as exc:
                raise DataError(f"{_where(p)}: cannot read: {exc.strerror}") from None
            if stat.S_ISLNK(mode):
                raise DataError(f"{_where(p)}: symlinks are not allowed in a hashed model directory")
            if not stat.S_ISREG(mode):
                raise DataError(f"{_where(p)}: not a regular file (a FIFO, device or socket); refusing to hash it")
            rows.append((rel, file_sha256(p)))
    rows.sort(key=lambda r: r[0].encode())
    return rows


def tree_hash(root: str | Path) -> str:
    text = "".join(f"{digest}  {rel}\n" for rel, digest in tree_listing(root))
    return hashlib.sha256(text.encode()).hexdigest()
