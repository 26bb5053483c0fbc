"""`harness matrix SPEC --collect DIR... --out OUT`: merge cells made on many machines (Kubernetes pods, Ray-less
hosts, `--cell-index` runs) into one matrix, by the reuse rules of a local run.

For each release of the spec, every DIR (and OUT itself, first) may hold a cell. A cell is taken only when a local
run would reuse it: its key (lock hash, model hash, config hash, harness version) equals the key computed now from
the spec, with the lock from the spec (a committed lock) or from the DIR that made it (DIR/locks/). A stale cell is
left out and named. The rule for several cells of one release:
  - cells with the same key: the first one in the order OUT, then the DIRs as given, that ran wins (a cell that ran
    beats one that failed with the same key); the others are the same inputs and are not written;
  - cells whose keys differ although each fits its own lock (two machines locked the release at different times):
    refused, naming both directories, unless `--force`, when the first one wins (and says so).
What is taken is copied into OUT (cell, golden recording, a lock made in DIR with its inputs), then the golden diffs
against the baseline are refilled and the pages written, as after a run. Everything is checked before anything is
written: no symlink where OUT is written, a recording of regular files and directories only, within the bound a Ray
node's recording has (GOLDEN_MAX_BYTES); a refusal leaves OUT as it was.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import DataError, OutputError, RefusedError
from harness.manifest import LOCK_MAX_BYTES
from harness.matrix.cell import cell_path, load_cell, reuse_decision, write_cell
from harness.matrix.executors import GOLDEN_MAX_BYTES
from harness.matrix.run import cell_key, lock_for, refuse_linked_lock_files, stale_lock
from harness.matrix.spec import MatrixSpec
from harness.outputs import atomic_write_bytes
from harness.readers import read_bytes
from harness.shown import shown

__all__ = ["collect", "Candidate", "MAX_RECORDING_ENTRIES"]

MAX_RECORDING_ENTRIES = 10_000  # files and directories in one recording (a recording holds a few dozen)


class Candidate:
    """One release's cell as found in one directory, with the lock it must fit."""

    def __init__(self, source: Path, cell: dict[str, Any], lock: Path, key: dict[str, Any]) -> None:
        self.source, self.cell, self.lock, self.key = source, cell, lock, key


def _candidate(spec: MatrixSpec, release: str, source: Path, prompt_sets: list[str] | None) -> Candidate | str | None:
    cell = load_cell(source, release)
    if cell is None:
        return None
    lock = lock_for(spec, release, source)
    if spec.committed_lock(release) is None:
        refuse_linked_lock_files(lock)
    stale = stale_lock(spec, release, lock)
    key = cell_key(spec, release, lock, prompt_sets, stale=bool(stale))
    reuse, why = reuse_decision(cell, key)
    if not reuse:  # `why` quotes the cell's key values: text from another machine, shown escaped
        return f"{source}: cell {release} not taken: {shown(why)}"
    return Candidate(source, cell, lock, key)


def _pick(release: str, found: list[Candidate], force: bool, say: Callable[[str], None]) -> Candidate:
    first = found[0]
    for other in found[1:]:
        if other.cell.get("key") != first.cell.get("key"):
            fields = [k for k in ("lock_sha256", "model_sha256", "config_sha256", "harness_version")
                      if (other.cell.get("key") or {}).get(k) != (first.cell.get("key") or {}).get(k)]  # fmt: skip
            msg = (f"release {release}: {first.source} and {other.source} hold cells of different keys "
                   f"({', '.join(fields) or 'key'} differ)")  # fmt: skip
            if not force:
                raise RefusedError(f"{msg}; collect one of them, or --force to take the first ({first.source})")
            say(f"[{release}] {msg}; --force: taking {first.source}")
            return first
    ran = [c for c in found if c.cell.get("status") == "ran"]
    return ran[0] if ran else first


def _with_inputs(lock: Path) -> list[Path]:
    """A lock made in a matrix directory and its `.in`/`.overrides` (harness.matrix.run's layout)."""
    stem = lock.name.removesuffix(".txt")
    return [lock, lock.with_name(f"{stem}.in"), lock.with_name(f"{stem}.overrides")]


def _refuse_linked_destination(spec: MatrixSpec, out: Path) -> None:
    """Each place under OUT that --collect writes or replaces is refused when it is a symlink (a write or an rmtree
    through it lands in another directory: another matrix's recording) or of another type than it should be. OUT
    itself is the user's own choice of place."""
    places = [(out / "cells", True), (out / "golden", True)]
    for release in spec.versions:
        places += [(cell_path(out, release), False), (out / "golden" / release, True)]
    for path, is_dir in places:
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise OutputError(f"--out {path}: cannot check it: {exc.strerror}") from None
        if stat.S_ISLNK(mode):
            raise OutputError(f"--out {path}: a symlink in the matrix directory; refusing to write through it")
        if not (stat.S_ISDIR(mode) if is_dir else stat.S_ISREG(mode)):
            kind = "directory" if is_dir else "regular file"
            raise OutputError(f"--out {path}: not a {kind}; refusing to replace it")
    for release in spec.versions:
        if spec.committed_lock(release) is None:
            refuse_linked_lock_files(lock_for(spec, release, out))


def _recording(src: Path) -> tuple[list[Path], list[tuple[Path, int]]]:
    """(directories, [(file, size)]) of the golden recording `src`, relative to it, by lstat alone: nothing is opened
    here (a FIFO would block, a device never end). DataError for a symlink (it could point at any file), anything but
    regular files and directories, more than GOLDEN_MAX_BYTES in all (a Ray node's bound) or MAX_RECORDING_ENTRIES."""
    dirs: list[Path] = []
    files: list[tuple[Path, int]] = []
    total = 0
    try:
        mode = src.lstat().st_mode
        if stat.S_ISLNK(mode):
            raise DataError(f"{src}: a symlink in a golden recording; refusing to follow it")
        if not stat.S_ISDIR(mode):
            raise DataError(f"{src}: not a directory; a golden recording is one")
        pending = [Path()]
        while pending:
            rel = pending.pop()
            with os.scandir(src / rel) as entries:
                for entry in entries:
                    p, st = rel / entry.name, entry.stat(follow_symlinks=False)
                    if len(dirs) + len(files) >= MAX_RECORDING_ENTRIES:
                        raise DataError(f"{src}: the golden recording holds more than {MAX_RECORDING_ENTRIES} entries")
                    if stat.S_ISLNK(st.st_mode):
                        raise DataError(f"{shown(src / p)}: a symlink in a golden recording; refusing to follow it")
                    if stat.S_ISDIR(st.st_mode):
                        dirs.append(p)
                        pending.append(p)
                    elif stat.S_ISREG(st.st_mode):
                        total += st.st_size
                        if total > GOLDEN_MAX_BYTES:
                            raise DataError(f"{src}: the golden recording exceeds {GOLDEN_MAX_BYTES >> 20} MiB")
                        files.append((p, st.st_size))
                    else:
                        raise DataError(f"{shown(src / p)}: not a regular file (a FIFO, device or socket) in a golden "
                                        "recording; refusing it")  # fmt: skip
    except OSError as exc:
        raise DataError(f"{src}: cannot read the golden recording: {exc.strerror}") from None
    return dirs, files


def _copy_recording(src: Path, dst: Path, dirs: list[Path], files: list[tuple[Path, int]]) -> None:
    """A checked recording copied into a directory beside `dst`, then put in its place: a failure leaves the old
    recording (or none), never half of the new one."""
    work = dst.with_name(f".{dst.name}.collecting")
    try:
        if work.is_symlink() or work.is_file():  # left by an interrupted collect
            work.unlink()
        elif work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        for rel in sorted(dirs):
            (work / rel).mkdir(parents=True, exist_ok=True)
        for rel, size in files:  # opened without blocking, read up to its checked size: a swapped file is refused
            (work / rel).write_bytes(read_bytes(src / rel, "golden recording", max_bytes=size, error=DataError))
        if dst.exists():
            shutil.rmtree(dst)
        work.rename(dst)
    except OSError as exc:
        shutil.rmtree(work, ignore_errors=True)
        raise OutputError(f"{dst}: cannot write the golden recording: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


class _Take:
    """A picked cell with all it brings, read and checked before OUT is written."""

    def __init__(self, release: str, pick: Candidate, locks: list[tuple[Path, bytes]],
                 recording: tuple[list[Path], list[tuple[Path, int]]] | None) -> None:  # fmt: skip
        self.release, self.pick, self.locks, self.recording = release, pick, locks, recording


def _prepare(spec: MatrixSpec, release: str, pick: Candidate, out: Path) -> _Take:
    locks: list[tuple[Path, bytes]] = []
    if spec.committed_lock(release) is None:  # the lock the cell was made from comes along
        for src, dst in zip(_with_inputs(pick.lock), _with_inputs(lock_for(spec, release, out))):
            if src.is_file():  # a regular file (refuse_linked_lock_files), bounded as every lock read
                locks.append((dst, read_bytes(src, "lock", max_bytes=LOCK_MAX_BYTES, error=DataError)))
    golden = pick.source / "golden" / release
    recording = _recording(golden) if golden.exists() or golden.is_symlink() else None
    return _Take(release, pick, locks, recording)


def collect(
    spec: MatrixSpec,
    sources: list[Path],
    out: Path,
    *,
    force: bool = False,
    prompt_sets: list[str] | None = None,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Merge the cells of `sources` into `out` and write the pages; the pages' document, with
    doc["collect"] = {release: source or "kept"}."""
    from harness.matrix.cell import attach_golden_diff
    from harness.matrix.render import write_pages

    out = Path(out)
    resolved_out = out.resolve()
    for s in sources:
        if not Path(s).is_dir():
            raise RefusedError(f"--collect: {s} is not a directory")
        if Path(s).resolve() == resolved_out:
            raise RefusedError(f"--collect: {s} is --out itself")
    _refuse_linked_destination(spec, out)
    taken: dict[str, str] = {}
    takes: list[_Take] = []
    for release in spec.versions:  # every cell picked and all it brings checked: a refusal leaves OUT as it was
        found: list[Candidate] = []
        for source in [out, *map(Path, sources)]:
            c = _candidate(spec, release, source, prompt_sets)
            if isinstance(c, str):
                say(c)
            elif c is not None:
                found.append(c)
        if not found:
            continue
        pick = _pick(release, found, force, say)
        if pick.source == out:
            taken[release] = "kept"
            continue
        takes.append(_prepare(spec, release, pick, out))
    (out / "cells").mkdir(parents=True, exist_ok=True)
    for t in takes:
        for dst, data in t.locks:
            atomic_write_bytes(dst, data)
        if t.recording is not None:
            _copy_recording(t.pick.source / "golden" / t.release, out / "golden" / t.release, *t.recording)
        write_cell(out, t.pick.cell)
        taken[t.release] = str(t.pick.source)
        say(f"[{t.release}] taken from {t.pick.source}")
    for release in spec.versions:  # the baseline's recording may have come from another directory
        cell = load_cell(out, release)
        if cell is not None and attach_golden_diff(cell, out, spec.baseline):
            write_cell(out, cell)
    doc = write_pages(spec, out)
    doc["collect"] = {v: taken[v] for v in spec.versions if v in taken}
    return doc
