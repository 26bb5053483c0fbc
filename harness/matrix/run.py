"""`harness matrix SPEC --out DIR`: one cell per selected release (lock, install, launch, collect; or reuse), then
the golden diffs against the baseline and the rendered pages. Engines are stopped between cells (each cell's launch
is a context that stops its engine); after the run the registry is checked for anything this process left running."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from harness.errors import DataError, HarnessError, RefusedError
from harness.matrix.cell import (
    CellKey,
    attach_golden_diff,
    failed_cell,
    load_cell,
    make_key,
    reuse_decision,
    run_cell,
    write_cell,
)
from harness.matrix.spec import MatrixSpec, base_version, is_drift, render_manifest
from harness.progress import progress
from harness.shown import shown

__all__ = [
    "preview_cell",
    "ensure_cell",
    "plan_cell",
    "run_job_here",
    "cell_key",
    "CellJob",
    "Executor",
    "run_matrix",
    "lock_for",
    "config_sha256",
    "suite_sha256",
    "stale_lock",
    "refuse_linked_lock_files",
    "CellRunner",
]

CellRunner = Callable[..., dict[str, Any]]


class Executor(Protocol):
    """Runs planned cells (somewhere) and writes each one's cell and golden recording into DIR from this process."""

    def run(
        self,
        spec: MatrixSpec,
        jobs: list[CellJob],
        out: Path,
        *,
        prompt_sets: list[str] | None,
        say: Callable[[str], None],
    ) -> None: ...


def lock_for(spec: MatrixSpec, release: str, out: Path) -> Path:
    """The lock a release runs from: the spec's committed lock, else DIR/locks/<stem>.txt (made once, then reused)."""
    committed = spec.committed_lock(release)
    return committed if committed is not None else Path(out) / "locks" / f"{spec.manifest_stem(release)}.txt"


def _template_field(spec: MatrixSpec, section: str, name: str) -> str:
    """One field of the manifest template (`model.sha256`, `engine.kind`), "" when it has none."""
    from harness.readers import read_yaml

    raw = read_yaml(spec.resolve(spec.template), "manifest template")
    part = raw.get(section) if isinstance(raw, dict) else None
    return str(part.get(name)) if isinstance(part, dict) else ""


def _engine_kind(spec: MatrixSpec) -> str:
    return _template_field(spec, "engine", "kind")


def _model_sha256(spec: MatrixSpec) -> str:
    return _template_field(spec, "model", "sha256")


def suite_sha256(expectations: str, prompt_sets: list[str] | None) -> str:
    """What a cell is judged by and fed: the conformance case ids (a case added or renamed makes every cell
    stale), the expectation file's bytes, and each golden prompt set's bytes. A case's code is not hashed: a
    change there is a harness version."""
    import hashlib
    import json

    from harness.conformance.expectations import load_expectations
    from harness.conformance.suite import all_cases
    from harness.golden.prompts import resolve_prompt_sets

    exp = load_expectations(expectations)
    exp_bytes = Path(exp.path).read_bytes() if exp.path else b""
    doc = {
        "cases": sorted(c.id for c in all_cases()),
        "expectations": hashlib.sha256(exp_bytes).hexdigest(),
        "prompt_sets": {
            s.name: hashlib.sha256(Path(str(s.path)).read_bytes()).hexdigest() for s in resolve_prompt_sets(prompt_sets)
        },
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def config_sha256(spec: MatrixSpec, release: str, suite: str | None = None) -> str:
    """Everything besides the lock and the model that a cell's manifest and judgement come from: the template,
    the release's settings, the perf stage's scenario, and (suite) the cases, expectations and prompts
    (suite_sha256)."""
    import hashlib
    import json

    from harness.matrix.perf import scenario_doc

    template = hashlib.sha256(spec.resolve(spec.template).read_bytes()).hexdigest()
    settings = {n: spec.setting(release, n) for n in ("platform_plugin", "startup_timeout_s", "env")}
    doc = {"template": template, **settings, "python": spec.python, "expectations": spec.expectations}
    if spec.perf:
        doc["perf"] = scenario_doc()  # another load is another measurement: a cell made under an older one is stale
    if spec.api_key:
        doc["api_key"] = True  # a cell judged without a key (auth.* skipped) is another cell
    if spec.scripted is not None:  # the scripted stage's model, parsers and prompt sets
        doc["scripted"] = spec.scripted.model_dump()
    if suite is not None:
        doc["suite"] = suite
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _lock_files(lock: Path) -> tuple[Path, Path]:
    stem = lock.name[: -len(".txt")]
    return lock.parent / f"{stem}.in", lock.parent / f"{stem}.overrides"


def refuse_linked_lock_files(lock: Path) -> None:
    """DIR/locks/ is the matrix's own: its directory, a lock and the lock's inputs are refused (DataError) when they
    are a symlink or not a regular file, so no file elsewhere is read, hashed or shown through them."""
    for path in (lock.parent, lock, *_lock_files(lock)):
        if path.is_symlink():
            raise DataError(f"{path}: a symlink in the matrix's locks; refusing to follow it (remove it to lock again)")
        regular = path.is_dir() if path == lock.parent else path.is_file()
        if path.exists() and not regular:
            raise DataError(f"{path}: not a regular {'directory' if path == lock.parent else 'file'}; refusing it")


def _input_lines(path: Path) -> list[str] | None:
    """The non-blank lines of a lock input (bounded read), or None when there is none."""
    from harness.readers import read_text

    if not path.exists():
        return None
    text = read_text(path, "lock input", max_bytes=1 << 20, error=DataError)
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


def _digest(lines: list[str]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]


def stale_lock(spec: MatrixSpec, release: str, lock: Path) -> str | None:
    """Why a lock the matrix made (DIR/locks/) no longer fits the spec, or None: its `.in` must list the requirement
    and the release's extra requirements, and its `.overrides` hold every override the spec names. A committed lock
    is the spec's own choice and never stale. The inputs are named by a short hash, never quoted: a file found there
    may hold anything."""
    if not lock.is_file() or spec.committed_lock(release) is not None:
        return None
    refuse_linked_lock_files(lock)
    inputs, overrides = _lock_files(lock)
    want = [spec.requirement_for(release), *spec.setting(release, "extra")]
    have = _input_lines(inputs)
    if have is None:
        return f"no inputs file {inputs.name}; the spec asks for {' '.join(want)}"
    if have != want:
        return f"{inputs.name} (sha256 {_digest(have)}...) differs from what the spec asks for: {' '.join(want)}"
    held = set(_input_lines(overrides) or [])
    missing = [o for o in spec.setting(release, "overrides") if o not in held]
    if missing:
        return f"override {missing[0]} not applied"
    from harness.matrix.lock import lock_cutoff

    as_of, cutoff = spec.lock_as_of_for(release), lock_cutoff(lock)
    if as_of is not None and cutoff is None:
        return f"locked as of the day it was made; the spec locks as of the {as_of}"
    if as_of is None and cutoff is not None:
        return f"locked as of {cutoff}; the spec locks as of today"
    return None


def lock_record(spec: MatrixSpec, release: str, lock: Path, locked_at: str | None = None) -> dict[str, Any]:
    """What the cell says of its lock: committed or made by the matrix, and as of when (the --exclude-newer cutoff
    in its header; None: as of the day it was made)."""
    from harness.matrix.lock import lock_cutoff

    committed = spec.committed_lock(release) is not None
    as_of = None if committed else (spec.lock_as_of_for(release) or "today")
    cutoff = lock_cutoff(lock) if lock.is_file() else None
    return {"committed": committed, "as_of": as_of, "cutoff": cutoff, "locked_at": locked_at}


def drift_record(spec: MatrixSpec, release: str, out: Path) -> dict[str, Any] | None:
    """For a drift cell: its release and the packages whose pin differs between the two locks (name: [as released,
    today]; None where one lock lacks it). None for any other cell, or when a lock is not there."""
    from harness.matrix.lock import lock_differences

    if not is_drift(release):
        return None
    base = base_version(release)
    old, new = lock_for(spec, base, out), lock_for(spec, release, out)
    if not (old.is_file() and new.is_file()):
        return {"of": base, "packages": None}
    return {"of": base, "packages": lock_differences(old, new)}


def preview_cell(spec: MatrixSpec, release: str, out: Path, *, retry_failed: bool = False,
                 prompt_sets: list[str] | None = None) -> tuple[bool, str]:  # fmt: skip
    """(reused, why) of one cell, as `ensure_cell` would decide it, with nothing locked, installed or launched:
    what a re-run would cost, and why (a stale lock, another suite or config, another harness version)."""
    from harness.envs import lock_sha256

    lock = lock_for(spec, release, Path(out))
    stale = stale_lock(spec, release, lock) if lock.is_file() else "no lock yet"
    config = config_sha256(spec, release, suite_sha256(spec.expectations, prompt_sets))
    key = make_key(lock_sha256(lock) if lock.is_file() and not stale else None, _model_sha256(spec), config)
    reuse, why = reuse_decision(load_cell(Path(out), release), key, retry_failed=retry_failed)
    return reuse, (f"lock stale ({stale}); {why}" if stale and not reuse else why)


@dataclass(frozen=True)
class CellJob:
    """A cell the driver decided to run: its lock is made and its key is final (what an executor runs)."""

    release: str
    key: CellKey
    lock: Path
    lock_seconds: float | None
    locked_at: str | None = None  # when the driver made the lock (None: it was there)


def cell_key(
    spec: MatrixSpec,
    release: str,
    lock: Path,
    prompt_sets: list[str] | None,
    *,
    stale: bool,
    expectations: str | Path | None = None,
) -> CellKey:
    """The key a cell of `release` must carry to be reused: the lock's hash (None while there is no usable lock),
    the model's, the config's and the harness version. `expectations`: another expectation file in place of the
    spec's (the key a cell judged under that file carries: harness.matrix.rejudge)."""
    from harness.envs import lock_sha256

    config = config_sha256(spec, release, suite_sha256(str(expectations or spec.expectations), prompt_sets))
    return make_key(lock_sha256(lock) if lock.is_file() and not stale else None, _model_sha256(spec), config)


def plan_cell(
    spec: MatrixSpec,
    release: str,
    out: Path,
    *,
    retry_failed: bool = False,
    prompt_sets: list[str] | None = None,
    say: Callable[[str], None] = print,
) -> tuple[dict[str, Any] | None, str, CellJob | None]:
    """The driver's half of a cell: (cell, "reused", None) when DIR's cell is reused; (cell, "ran", None) when the
    lock failed (that cell is written); else (None, "run", job) with the lock made."""
    from harness.envs import lock_sha256
    from harness.matrix.lock import check_lock_file, lock_release

    out = Path(out)
    lock = lock_for(spec, release, out)
    made_here = spec.committed_lock(release) is None
    if made_here:
        refuse_linked_lock_files(lock)
    stale = stale_lock(spec, release, lock)
    if stale:  # made for other inputs than the spec names now: made again (it stays until the new one is there)
        say(f"[{release}] lock {lock.name} is stale ({stale}); locking again")
    elif lock.is_file():  # never quoted when it holds anything else: it may be any file
        check_lock_file(lock, DataError)
    key = cell_key(spec, release, lock, prompt_sets, stale=bool(stale))
    cell = load_cell(out, release)
    reuse, why = reuse_decision(cell, key, retry_failed=retry_failed)
    why = shown(why)  # it quotes the stored cell's key and stage, which may come from another machine
    if reuse and cell is not None:
        changed = attach_golden_diff(cell, out, spec.baseline)
        changed = _fill_flags(spec, release, cell, lock, out) or changed
        changed = _fill_lock_records(spec, release, cell, lock, out) or changed
        if changed:
            write_cell(out, cell)
        say(f"[{release}] reused ({why})")
        return cell, "reused", None
    say(f"[{release}] running: {why}")
    lock_s = None
    locked_at = None
    if stale or not lock.is_file():
        t = time.perf_counter()
        try:
            lock_release(
                spec.requirement_for(release),
                lock,
                overrides=spec.setting(release, "overrides"),
                no_emit=spec.setting(release, "no_emit"),
                extra=spec.setting(release, "extra"),
                python_version=spec.python,
                python_platform=spec.python_platform,
                force=True,  # DIR/locks/ is the matrix's own; a failed lock leaves the old one there
                as_of=spec.lock_as_of_for(release),
                dated_by=spec.release_dated_by,
                say=say,
            )
        except HarnessError as exc:
            kept = f" (the stale lock {lock.name} is left as it was)" if stale else ""
            cell = failed_cell(release, key, "lock", exc.one_line() + kept, str(exc))
            write_cell(out, cell)
            return cell, "ran", None
        lock_s = round(time.perf_counter() - t, 1)
        locked_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        key = make_key(lock_sha256(lock), key["model_sha256"], key.get("config_sha256"))
    return None, "run", CellJob(release, key, lock, lock_s, locked_at)


def run_job_here(
    spec: MatrixSpec,
    job: CellJob,
    out: Path,
    *,
    prompt_sets: list[str] | None = None,
    runner: CellRunner = run_cell,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run a planned cell in this process with DIR as its working place (the local executor); returns the cell."""
    try:
        manifest = render_manifest(spec, job.release, job.lock, str(job.key["lock_sha256"]), Path(out) / "manifests")
    except HarnessError as exc:
        return failed_cell(job.release, job.key, "manifest", exc.one_line(), str(exc))
    cell = runner(
        job.release,
        manifest,
        job.key,
        out,
        expectations=spec.expectations,
        baseline=spec.baseline,
        prompt_sets=prompt_sets,
        lock_seconds=job.lock_seconds,
        perf=spec.perf,
        scripted=spec.scripted,
        say=say,
    )
    cell.setdefault("ran_on", {"executor": "local"})
    return cell


def record_lock(spec: MatrixSpec, job: CellJob, out: Path, cell: dict[str, Any]) -> dict[str, Any]:
    """What the driver adds to a cell that ran, wherever it ran: its lock's record and, a drift cell, the drift."""
    cell["lock"] = lock_record(spec, job.release, job.lock, job.locked_at)
    drift = drift_record(spec, job.release, out)
    if drift is not None:
        cell["drift"] = drift
    return cell


def ensure_cell(
    spec: MatrixSpec,
    release: str,
    out: Path,
    *,
    retry_failed: bool = False,
    prompt_sets: list[str] | None = None,
    runner: CellRunner = run_cell,
    say: Callable[[str], None] = print,
) -> tuple[dict[str, Any], str]:
    """(cell, action) where action is "reused" or "ran"; writes DIR/cells/<release>.json when it ran."""
    cell, action, job = plan_cell(spec, release, out, retry_failed=retry_failed, prompt_sets=prompt_sets, say=say)
    if job is None:
        assert cell is not None
        return cell, action
    cell = record_lock(spec, job, out, run_job_here(spec, job, out, prompt_sets=prompt_sets, runner=runner, say=say))
    write_cell(out, cell)
    return cell, "ran"


def _fill_lock_records(spec: MatrixSpec, release: str, cell: dict[str, Any], lock: Path, out: Path) -> bool:
    """A reused cell made before cells said what their lock is as of (and, a drift cell, how it differs) gets it
    now from the lock on disk (the same lock: the key holds its hash). True when the cell changed."""
    changed = False
    if "lock" not in cell and lock.is_file():
        cell["lock"] = lock_record(spec, release, lock)
        changed = True
    drift = drift_record(spec, release, out)
    if drift is not None and cell.get("drift") != drift:
        cell["drift"] = drift
        changed = True
    return changed


def _fill_flags(spec: MatrixSpec, release: str, cell: dict[str, Any], lock: Path, out: Path) -> bool:
    """A reused cell whose flags were not captured, or were captured by another capture code than this harness's
    (the revision it names is another), gets them now when the release's environment is on disk (the parser runs in
    it; nothing is installed and no engine starts). A cell that names no revision predates the record and is left:
    checking it would render its manifest into DIR on every run. True when the cell changed."""
    from harness.engines import PROFILES
    from harness.envs import env_for
    from harness.matrix.cell import capture_flags, flags_revision

    obs = cell.get("observables")
    if cell.get("status") != "ran" or not isinstance(obs, dict):
        return False
    had = obs.get("flags") or {}
    profile = PROFILES.get(_engine_kind(spec))
    if had.get("captured") and (had.get("revision") is None or (profile is not None and had["revision"] ==
                                                                 flags_revision(profile))):  # fmt: skip
        return False
    try:
        manifest = render_manifest(spec, release, lock, str(cell["key"]["lock_sha256"]), out / "manifests")
        env = env_for(manifest)
    except HarnessError:
        return False
    if not env.marker.is_file():
        return False
    flags = capture_flags(manifest, env.path)
    if not flags.get("captured") or flags == had:
        return False
    obs["flags"] = flags
    return True


def _leftovers() -> list[str]:
    from harness.launch import registry

    me = registry.current_harness()
    return [
        str(e.get("run_id"))
        for e in registry.entries()
        if e.get("harness_pid") == me["harness_pid"]
        and e.get("harness_pid_start") == me["harness_pid_start"]
        and registry.alive(e)
    ]


def run_matrix(
    spec: MatrixSpec,
    out: Path,
    releases: list[str],
    *,
    retry_failed: bool = False,
    prompt_sets: list[str] | None = None,
    runner: CellRunner = run_cell,
    executor: Executor | None = None,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every selected cell (the baseline first when selected, so the others diff against its recording), then the
    golden diffs of reused cells refreshed, then matrix.json/md/html over every cell present in DIR."""
    from harness.matrix.render import write_pages

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise RefusedError(f"{out}: --out is a file, not a directory")
    (out / "cells").mkdir(parents=True, exist_ok=True)
    # a drift cell runs after its release's cell; neither is in the other's sequence
    releases = [*releases, *(d for d in spec.drift_ids if base_version(d) in releases)]
    order = sorted(releases, key=lambda v: (v != spec.baseline, spec.versions.index(base_version(v)), is_drift(v)))
    actions: dict[str, str] = {}
    t0 = time.perf_counter()
    # engines this process had running before the matrix (a test session's, a caller's) are not the cells' leftovers
    running_before = set(_leftovers())
    if executor is not None:  # the driver plans every cell, the executor runs them elsewhere, the driver writes them
        jobs: list[CellJob] = []
        for release in order:
            _cell, action, job = plan_cell(
                spec, release, out, retry_failed=retry_failed, prompt_sets=prompt_sets, say=say
            )
            actions[release] = "ran" if job is not None else action
            jobs += [job] if job is not None else []
        if jobs:
            executor.run(spec, jobs, out, prompt_sets=prompt_sets, say=say)
    here = order if executor is None else []
    for n, release in enumerate(here, start=1):
        # a cell takes minutes (lock, install, launch, collect): its stage and elapsed time are shown meanwhile
        with progress(f"[{release}] cell {n} of {len(here)}", say=say) as stage:
            _cell, actions[release] = ensure_cell(
                spec, release, out, retry_failed=retry_failed, prompt_sets=prompt_sets, runner=runner, say=stage.say
            )
        left = [run_id for run_id in _leftovers() if run_id not in running_before]
        if left:
            raise RefusedError(f"engines still registered after the cell of {release}: {', '.join(left)}")
    for release in [*spec.versions, *spec.drift_ids]:  # a baseline recording made after a cell: its diff now
        cell = load_cell(out, release)
        if cell is not None and attach_golden_diff(cell, out, spec.baseline):
            write_cell(out, cell)
    doc = write_pages(spec, out)
    doc["run"] = {"actions": actions, "wall_seconds": round(time.perf_counter() - t0, 1)}
    return doc
