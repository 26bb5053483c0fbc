"""Where the harness writes: never over an input, never over an existing result without --force, always atomically.

    out = output_dir(args.out, ["conformance.json", "junit.xml"], force=args.force, inputs=[args.rejudge])
    output_file(args.json, force=args.force, inputs=[a / "meta.json", b / "meta.json"])
    atomic_write_text(out / "conformance.json", text)     # temp file beside it, fsync, rename; mode from the umask

Every problem is one OutputError naming the path (exit 2), raised before any work is done where the caller checks
first, and never a traceback from the write itself.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from harness.errors import OutputError

__all__ = ["output_dir", "output_file", "atomic_write_bytes", "atomic_write_text", "same_file"]


def same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _refuse_inputs(target: Path, inputs: Iterable[object], what: str) -> None:
    for inp in inputs:
        if inp is None:
            continue
        ip = Path(str(inp))
        if same_file(target, ip) or target.resolve() == ip.resolve():
            raise OutputError(f"{what} {target}: that is an input of this command; refusing to write over it")


def output_file(path: str | Path, *, force: bool = False, inputs: Iterable[object] = (), what: str = "output") -> Path:
    """Check that `path` may be written: not a directory, not an input, not existing unless force, parent usable."""
    p = Path(path)
    _refuse_inputs(p, inputs, what)
    if p.is_dir():
        raise OutputError(f"{what} {p}: is a directory; give a file path")
    if p.exists() or p.is_symlink():
        if not force:
            raise OutputError(f"{what} {p}: already exists; pass --force to replace it")
        if not p.is_file():
            raise OutputError(f"{what} {p}: not a regular file; refusing to replace it")
    parent = p.parent
    if parent.exists() and not parent.is_dir():
        raise OutputError(f"{what} {p}: {parent} is not a directory")
    return p


def output_dir(path: str | Path, names: Iterable[str] = (), *, force: bool = False, inputs: Iterable[object] = (),
               what: str = "--out") -> Path:  # fmt: skip
    """Create (or reuse) directory `path` for the files `names`; refuse an existing one of them without force."""
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise OutputError(f"{what} {d}: exists and is not a directory")
    inputs = list(inputs)
    existing = []
    for name in names:
        target = d / name
        _refuse_inputs(target, inputs, what)
        if target.is_dir():
            raise OutputError(f"{what} {d}: {name} is a directory; refusing to replace it")
        if target.exists() or target.is_symlink():
            existing.append(name)
    if existing and not force:
        raise OutputError(
            f"{what} {d}: already holds {', '.join(existing)}; pass --force to replace, or choose another directory"
        )
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{what} {d}: cannot create the directory: {exc.strerror}") from None
    if not os.access(d, os.W_OK | os.X_OK):
        raise OutputError(f"{what} {d}: not writable")
    return d


def _umask() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write a temporary file beside the target, fsync, then rename: readers never see half a file. The mode is the
    one an ordinary write would give (0666 less the umask), not mkstemp's 0600."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise OutputError(f"{path}: is a directory; refusing to replace it")
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())
