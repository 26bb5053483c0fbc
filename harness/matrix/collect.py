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
against the baseline are refilled and the pages written, as after a run.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import DataError, RefusedError
from harness.matrix.cell import load_cell, reuse_decision, write_cell
from harness.matrix.run import cell_key, lock_for, refuse_linked_lock_files, stale_lock
from harness.matrix.spec import MatrixSpec

__all__ = ["collect", "Candidate"]


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
    if not reuse:
        return f"{source}: cell {release} not taken: {why}"
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


def _copy_tree(src: Path, dst: Path) -> None:
    """A golden recording copied into OUT; a symlink anywhere in it is refused (it could point at any file)."""
    for p in [src, *src.rglob("*")]:
        if p.is_symlink():
            raise DataError(f"{p}: a symlink in a golden recording; refusing to follow it")
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)


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
    (out / "cells").mkdir(parents=True, exist_ok=True)
    taken: dict[str, str] = {}
    for release in spec.versions:
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
        if spec.committed_lock(release) is None:  # the lock the cell was made from comes along
            target = lock_for(spec, release, out)
            target.parent.mkdir(parents=True, exist_ok=True)
            refuse_linked_lock_files(target)
            for src, dst in zip(_with_inputs(pick.lock), _with_inputs(target)):
                if src.is_file():
                    shutil.copyfile(src, dst)
        golden = pick.source / "golden" / release
        if golden.is_dir():
            _copy_tree(golden, out / "golden" / release)
        write_cell(out, pick.cell)
        taken[release] = str(pick.source)
        say(f"[{release}] taken from {pick.source}")
    for release in spec.versions:  # the baseline's recording may have come from another directory
        cell = load_cell(out, release)
        if cell is not None and attach_golden_diff(cell, out, spec.baseline):
            write_cell(out, cell)
    doc = write_pages(spec, out)
    doc["collect"] = taken
    return doc
