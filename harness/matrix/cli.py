"""CLI: `harness lock`, `harness envs list|gc`, `harness matrix`, `harness bisect`.

Exit codes: matrix 0 when every selected cell ran (1 when one failed; `--cell-index`: its cell), `--collect` and
`--emit` 0, `--rejudge` 0 (1 when a cell could not be re-judged); bisect 0 change found, 1 none in the range,
2 bad input; lock and envs 0 / 2."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.shown import shown

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser("lock", help="write a hashed lock for one release (uv pip compile --generate-hashes)")
    p.add_argument("requirement", help="NAME==VERSION")
    p.add_argument("--out", help="lock file (default manifests/locks/<name>-<version>.txt)")
    p.add_argument("--override", action="append", default=[], help="NAME==VERSION override (repeatable)")
    p.add_argument("--no-emit", action="append", default=[], help="package left out of the lock (repeatable)")
    p.add_argument("--find-links", action="append", default=None, help="default: pip's configured find-links")
    p.add_argument("--no-auto-overrides", action="store_true", help="do not override the wheel's local-version pins")
    p.add_argument("--python-version", default="3.11")
    p.add_argument("--as-of", help="'release' (its wheel's upload time on pip's index, which uv resolves against) or "
                   "YYYY-MM-DD (1970-01-01 to 9998-12-31): resolve as the index stood then (uv --exclude-newer); the "
                   "pins themselves are exempt")  # fmt: skip
    p.add_argument("--dated-by", metavar="PROJECT", help="--as-of release: date it by PROJECT==VERSION's upload "
                   "(the upstream project of a repackaged wheel)")  # fmt: skip
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=cmd_lock)

    p = sub.add_parser("envs", help="engine environments under $HARNESS_HOME/envs")
    esub = p.add_subparsers(dest="envs_command", metavar="ACTION", required=True)
    e = esub.add_parser("list", help="every environment: size, installer, last use, in use")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=cmd_envs_list)
    g = esub.add_parser("gc", help="delete all but the N most recently used environments (never one in use)")
    g.add_argument("--keep", type=int, required=True)
    g.add_argument("--dry-run", action="store_true")
    g.set_defaults(func=cmd_envs_gc)

    p = sub.add_parser("matrix", help="the compatibility matrix over a spec's releases (one cell per release)")
    p.add_argument("spec")
    p.add_argument("--out", help="matrix directory (cells/, golden/, locks/, matrix.*); required but with --emit")
    p.add_argument("--releases", help="A..B (inclusive) or A,B,C; default every release of the spec")
    p.add_argument("--retry-failed", action="store_true", help="run again the cells that failed")
    p.add_argument("--keep-envs", type=int, default=None, help="after each cell, `envs gc --keep N`")
    p.add_argument("--prompts", action="append", default=None, help="golden prompt set (default: all)")
    p.add_argument("--plan", action="store_true",
                   help="say per release whether its cell would be reused or run, and why; lock, install and launch"
                   " nothing, write nothing")  # fmt: skip
    p.add_argument("--executor", choices=["local", "ray"], default="local", help="where cells run (default local)")
    p.add_argument("--ray-address", help="HOST:PORT of a Ray cluster on loopback, [::1]:PORT for IPv6 (default: a "
                   "new Ray of this run alone; RAY_ADDRESS is never joined)")  # fmt: skip
    p.add_argument("--ray-retries", type=int, default=1, help="times Ray runs a cell again when its node dies")
    p.add_argument("--cell-index", type=int, help="run only the N-th selected release's cell (no pages); 0-based")
    p.add_argument("--collect", nargs="+", metavar="DIR", help="merge the cells of these matrix directories into --out")
    p.add_argument("--force", action="store_true", help="--collect: take the first of conflicting cells")
    p.add_argument("--rejudge", metavar="OLD.yaml", help="judge DIR's cells again under the spec's expectation file "
                   "as it is now, no engine started; OLD.yaml: the file as it was when they were made")  # fmt: skip
    p.add_argument("--emit", choices=["k8s-job"], help="print a Kubernetes Indexed Job for the cells; run nothing")
    p.add_argument("--image", help="--emit: the container image, NAME[:TAG]@sha256:<64 hex> (harness and the spec "
                   "inside; default harness:VER)")  # fmt: skip
    p.add_argument("--spec-path", help="--emit: the spec's path inside the image (default: as given)")
    p.add_argument("--job-name", help="--emit: the Job's name (default harness-matrix-<spec name>)")
    p.add_argument("--parallelism", type=int, help="--emit: pods at once (default: every cell)")
    p.add_argument("--results-claim", default="harness-matrix-results", help="--emit: PVC for /results")
    p.add_argument("--home-claim", help="--emit: PVC for HARNESS_HOME (default an emptyDir)")
    p.set_defaults(func=cmd_matrix)

    p = sub.add_parser("bisect", help="first release whose observable differs from --from's")
    p.add_argument("spec")
    obs = p.add_mutually_exclusive_group(required=True)
    obs.add_argument("--case", help="conformance case id: its verdict and behaviours")
    obs.add_argument("--metric", help="metric family: presence, type, labels, buckets")
    obs.add_argument("--wire-key", help="response key path (ENDPOINT:PATH for one endpoint)")
    obs.add_argument("--flag", help="flag of the release's parser: --flag=--max-model-len or --flag max-model-len")
    obs.add_argument("--perf", help="perf figure (ready_s, output_tokens_per_s, ttft_p50_ms, ...): answered from the "
                     "cells alone, a change only outside both noise bands")  # fmt: skip
    p.add_argument("--threshold", type=float, default=None, metavar="PCT",
                   help="--perf: the medians must also be more than PCT%% apart (default 10)")  # fmt: skip
    p.add_argument("--from", dest="from_", help="default: the spec's first release")
    p.add_argument("--to", help="default: the spec's last release")
    p.add_argument("--dir", help="matrix directory holding the cells (default: the spec's results/ beside it)")
    p.add_argument("--json", dest="json_out", help="write the answer as JSON")
    p.add_argument("--force", action="store_true", help="replace an existing --json file")
    p.add_argument("--no-run", action="store_true", help="answer from existing cells only; never launch")
    p.set_defaults(func=cmd_bisect)


def cmd_lock(args: argparse.Namespace) -> int:
    from harness.matrix.lock import lock_release, parse_requirement
    from harness.settings import REPO_ROOT

    name, version = parse_requirement(args.requirement)
    if args.dated_by is not None and args.as_of != "release":
        raise UsageError("--dated-by goes with --as-of release")
    out = Path(args.out) if args.out else REPO_ROOT / "manifests" / "locks" / f"{name}-{version}.txt"
    r = lock_release(
        args.requirement,
        out,
        overrides=args.override,
        no_emit=args.no_emit,
        find_links=args.find_links,
        python_version=args.python_version,
        auto_overrides=not args.no_auto_overrides,
        force=args.force,
        as_of=args.as_of,
        dated_by=args.dated_by,
    )
    over = ", ".join(r.overrides) or "none"
    dated = f"; as of {r.as_of}: {r.cutoff}" if r.as_of else ""
    print(f"lock: {r.lock}: {r.packages} packages in {r.seconds} s (overrides: {over}{dated})")
    return 0


def _gb(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e9:.1f} GB"


def cmd_envs_list(args: argparse.Namespace) -> int:
    from harness.envs import list_envs
    from harness.shown import shown

    envs = list_envs()
    if args.json:
        print(json.dumps(envs, indent=2))
        return 0
    ours = [e for e in envs if e["harness"]]
    for e in envs:  # names and marker fields come from the disk, so a hostile one is shown escaped
        if not e["harness"]:
            print(f"{shown(e['name']):<40} {'-':>8}  {shown(e['note'])}")
            continue
        state = "in use" if e["in_use"] else ("complete" if e["complete"] else "INCOMPLETE")
        fields = f"{shown(e['installer'] or '-'):<12} {shown(e['installed_at'] or '-')}"
        if e["marker_problem"]:
            state, fields = "UNREADABLE", shown(e["note"])
        print(f"{shown(e['name']):<40} {_gb(e['bytes']):>8}  {state:<10} {fields}")
    print(f"{len(ours)} environment(s), {_gb(sum(e['bytes'] or 0 for e in ours))} (hardlinked files counted per env)")
    return 0


def cmd_envs_gc(args: argparse.Namespace) -> int:
    from harness.envs import gc_envs
    from harness.shown import shown

    if args.keep < 0:
        raise UsageError(f"--keep must be 0 or more, got {args.keep}")
    deleted, kept = gc_envs(args.keep, dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    kept_verb = "would keep" if args.dry_run else "kept"
    for e in deleted:
        print(f"{verb} {shown(e['name'])} ({_gb(e['bytes'])})")
    for e in kept:
        why = "in use" if e["in_use"] else (e.get("note") or "among the --keep most recently used")
        print(f"{kept_verb} {shown(e['name'])} ({shown(why)})")
    return 0


_MODE_OPTIONS = {
    "emit": ("image", "spec_path", "job_name", "parallelism", "home_claim"),
    "ray": ("ray_address",),
}


def _check_modes(args: argparse.Namespace) -> None:
    """One mode at a time (--emit, --cell-index, --collect, a run), and no option a mode does not use."""
    modes = [m for m, on in (("--emit", args.emit), ("--cell-index", args.cell_index is not None),
                             ("--collect", args.collect), ("--rejudge", args.rejudge)) if on]  # fmt: skip
    if len(modes) > 1:
        raise UsageError(f"{modes[0]} and {modes[1]} do not go together")
    if args.out is None and not args.emit:
        raise UsageError("--out DIR is required (but with --emit)")
    if not args.emit:
        used = [o for o in _MODE_OPTIONS["emit"] if getattr(args, o) is not None]
        if used:
            raise UsageError(f"--{used[0].replace('_', '-')} is an option of --emit")
    else:  # --emit runs nothing: its pods write their own /results, with every prompt set, each cell once
        unused = [o for o, on in (("--out", args.out is not None), ("--prompts", args.prompts is not None),
                                  ("--retry-failed", args.retry_failed), ("--keep-envs", args.keep_envs is not None),
                                  ("--plan", args.plan)) if on]  # fmt: skip
        if unused:
            raise UsageError(f"--emit k8s-job does not use {', '.join(unused)}")
    if args.executor != "ray" and args.ray_address is not None:
        raise UsageError("--ray-address is an option of --executor ray")
    if args.executor == "ray" and (args.emit or args.cell_index is not None or args.collect or args.rejudge):
        raise UsageError(f"--executor ray runs a whole matrix; not with {modes[0]}")
    if args.ray_retries < 0:
        raise UsageError(f"--ray-retries must be 0 or more, got {args.ray_retries}")
    if args.force and not args.collect:
        raise UsageError("--force is an option of --collect")
    if args.collect and args.releases is not None:
        raise UsageError("--collect merges every release of the spec it finds; --releases is not used")
    if args.executor == "ray" and args.keep_envs is not None:
        raise UsageError("--keep-envs is an option of the local executor (a Ray node keeps its own environments)")


def _emit(args: argparse.Namespace, spec: Any, releases: list[str]) -> int:
    from harness import __version__
    from harness.matrix.k8s import check_image, check_with_k8s_models, job_document, job_yaml

    doc = job_document(
        spec,
        releases,
        args.spec_path or args.spec,
        # a given image is pinned by digest; the default names this harness's own build, as loaded by tag
        image=check_image(args.image) if args.image is not None else f"harness:{__version__}",
        name=args.job_name,
        parallelism=args.parallelism,
        results_claim=args.results_claim,
        home_claim=args.home_claim,
        release_arg=args.releases,
    )
    check_with_k8s_models(doc)
    sys.stdout.write(job_yaml(doc))
    return 0


def _cell_index(args: argparse.Namespace, spec: Any, releases: list[str], say: Any) -> int:
    from harness.matrix.run import ensure_cell

    n = args.cell_index
    if not 0 <= n < len(releases):
        raise UsageError(f"--cell-index {n}: the selection has {len(releases)} cell(s) (0 to {len(releases) - 1})")
    release = releases[n]
    (Path(args.out) / "cells").mkdir(parents=True, exist_ok=True)
    cell, action = ensure_cell(spec, release, Path(args.out), retry_failed=args.retry_failed,
                               prompt_sets=args.prompts, say=say)  # fmt: skip
    # a cell's reason quotes an engine, or the cell came from another machine: shown escaped, as --plan does
    failed = f"failed at {shown(cell.get('stage'))}: {shown(cell.get('reason'))}"
    state = "ran" if cell.get("status") == "ran" else failed
    print(f"matrix: cell {n} ({release}): {action}; {state}; {args.out}/cells/{release}.json")
    return 0 if cell.get("status") == "ran" else 1


def _collect(args: argparse.Namespace, spec: Any, say: Any) -> int:
    from harness.matrix.collect import collect

    doc = collect(spec, [Path(d) for d in args.collect], Path(args.out), force=args.force,
                  prompt_sets=args.prompts, say=say)  # fmt: skip
    taken = doc["collect"]
    print(
        f"matrix: collected {sum(v != 'kept' for v in taken.values())} cell(s) from {len(args.collect)} "
        f"director{'y' if len(args.collect) == 1 else 'ies'} ({len(taken)} in {args.out}); "
        f"{doc['changed_rows']} of {len(doc['rows'])} rows change; {args.out}/matrix.html"
    )
    return 0


def _rejudge(args: argparse.Namespace, spec: Any, say: Any) -> int:
    from harness.matrix.rejudge import rejudge

    if args.releases is not None:
        raise UsageError("--rejudge judges every cell of DIR the old file judged; --releases is not used")
    doc = rejudge(spec, Path(args.out), Path(args.rejudge), prompt_sets=args.prompts, say=say)
    done = doc["rejudge"]
    n = sum(v.startswith("re-judged") for v in done.values())
    print(
        f"matrix: re-judged {n} of {len(done)} cell(s) under {spec.expectations} "
        f"({sum(v == 'current' for v in done.values())} current, {sum(v.startswith('not') for v in done.values())} "
        f"not re-judged); {doc['changed_rows']} of {len(doc['rows'])} rows change; {args.out}/matrix.html"
    )
    return 1 if any(v.startswith("not") for v in done.values()) else 0


def cmd_matrix(args: argparse.Namespace) -> int:
    from harness.matrix.render import load_cells
    from harness.matrix.run import run_matrix
    from harness.matrix.spec import load_spec, select_releases

    _check_modes(args)
    if args.releases is not None and not args.releases.replace(",", "").strip():
        # an empty CI variable or a stray comma: never "every release", never "none" (which rewrote the pages)
        raise UsageError(f"--releases: {args.releases!r} names no release; give A..B or A,B,C, or leave it out for all")
    spec = load_spec(args.spec, out=args.out)  # a lock may also lie in the matrix directory (DIR/locks)
    releases = select_releases(spec, args.releases)
    if not releases:
        raise UsageError(f"--releases: {args.releases!r} selects no release of {args.spec}")
    if args.emit:
        return _emit(args, spec, releases)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if args.cell_index is not None:
        return _cell_index(args, spec, releases, say)
    # every cell in DIR is rendered into the pages: a malformed one is a DataError (exit 2) before any cell runs
    load_cells(spec, Path(args.out))
    if args.plan:
        return _print_plan(spec, Path(args.out), releases, args)
    if args.collect:
        return _collect(args, spec, say)
    if args.rejudge:
        return _rejudge(args, spec, say)
    kw: dict[str, Any] = {}
    if args.executor == "ray":
        from harness.matrix.executors import RayExecutor

        kw["executor"] = RayExecutor(args.ray_address, max_retries=args.ray_retries)
    if args.keep_envs is not None:
        if args.keep_envs < 0:
            raise UsageError(f"--keep-envs must be 0 or more, got {args.keep_envs}")
        from harness.envs import gc_envs
        from harness.matrix.cell import run_cell

        def runner(*a: Any, **kw: Any) -> dict[str, Any]:
            cell = run_cell(*a, **kw)
            gc_envs(args.keep_envs)
            return cell

        kw["runner"] = runner
    doc = run_matrix(
        spec, Path(args.out), releases, retry_failed=args.retry_failed, prompt_sets=args.prompts, say=say, **kw
    )
    actions = doc["run"]["actions"]
    failed = [c["release"] for c in doc["releases"] if c["release"] in releases and c["status"] != "ran"]
    print(
        f"matrix: {len(actions)} cell(s): {sum(a == 'ran' for a in actions.values())} ran, "
        f"{sum(a == 'reused' for a in actions.values())} reused; {doc['changed_rows']} of {len(doc['rows'])} rows "
        f"change; {args.out}/matrix.html"
    )
    for v in failed:
        c = next(c for c in doc["releases"] if c["release"] == v)
        print(f"  {v}: failed at {shown(c['stage'])}: {shown(c['reason'])}")
    # a drift cell is no column, so it is not in doc["releases"]; its failure counts all the same
    drift_failed = [
        d["drift_cell"] for d in doc.get("drift") or [] if d["release"] in releases and d["status"] != "ran"
    ]
    for d in drift_failed:
        print(f"  {d}: failed (see {args.out}/cells/{d}.json)")
    return 1 if failed or drift_failed else 0


def _print_plan(spec: Any, out: Path, releases: list[str], args: argparse.Namespace) -> int:
    from harness.matrix.run import preview_cell
    from harness.matrix.spec import base_version
    from harness.shown import shown

    reuse = 0
    cells = [
        *releases,
        *(d for d in spec.drift_ids if base_version(d) in releases),
    ]  # a drift cell runs with its release
    for v in cells:
        reused, why = preview_cell(spec, v, out, retry_failed=args.retry_failed, prompt_sets=args.prompts)
        reuse += reused
        print(f"  {v}: {'reuse' if reused else 'run'} ({shown(why)})")
    print(f"plan: {len(cells)} cell(s): {len(cells) - reuse} would run, {reuse} would be reused; nothing done")
    return 0


def _observable(args: argparse.Namespace) -> tuple[str, str]:
    named = (("case", args.case), ("metric", args.metric), ("wire-key", args.wire_key), ("flag", args.flag),
             ("perf", args.perf))  # fmt: skip
    for kind, value in named:
        if value is not None:
            if not value.strip() or len(value) > 300 or any(ord(c) < 32 for c in value):
                raise UsageError(f"--{kind}: not a usable name: {value[:60]!r}")
            if kind == "flag" and not value.startswith("-"):
                value = "--" + value
            return kind, value
    raise UsageError("one of --case, --metric, --wire-key, --flag, --perf is required")


def _bisect_inputs(spec: Any, out: Path) -> list[Path]:
    """What bisect reads, or writes as it runs a cell: the spec, the template, every release's cell and lock (with
    the lock's inputs), never a place for --json."""
    from harness.matrix.cell import cell_path
    from harness.matrix.run import lock_for

    paths = [Path(spec.path), spec.resolve(spec.template)]
    for v in spec.versions:
        lock = lock_for(spec, v, out)
        stem = lock.name.removesuffix(".txt")
        paths += [cell_path(out, v), lock, lock.with_name(f"{stem}.in"), lock.with_name(f"{stem}.overrides")]
    return paths


def cmd_bisect(args: argparse.Namespace) -> int:
    from harness.matrix.bisect import search
    from harness.matrix.cell import load_cell
    from harness.matrix.observe import display, observe, same_for
    from harness.matrix.perf import DEFAULT_THRESHOLD_PCT, FIGURES
    from harness.matrix.run import ensure_cell
    from harness.matrix.spec import load_spec
    from harness.outputs import atomic_write_text, output_file

    spec = load_spec(args.spec)
    kind, ident = _observable(args)
    threshold = DEFAULT_THRESHOLD_PCT if args.threshold is None else args.threshold
    if args.threshold is not None and (kind != "perf" or not 0 <= threshold <= 1000):
        raise UsageError("--threshold PCT goes with --perf, a percentage from 0 to 1000")
    if kind == "perf":
        ident = ident.removeprefix("perf.")
        if ident not in FIGURES:
            raise UsageError(f"--perf: {ident[:40]!r} is not a perf figure; one of {', '.join(FIGURES)}")
    vs = spec.versions
    a = args.from_ or vs[0]
    b = args.to or vs[-1]
    for flag, v in (("--from", a), ("--to", b)):
        if v not in vs:
            raise UsageError(f"{flag}: {v[:40]!r} is not a release of {args.spec}")
    if vs.index(a) >= vs.index(b):
        raise UsageError(f"--from {a} must come before --to {b}")
    out = Path(args.dir) if args.dir else spec.resolve("results")
    json_out = (
        output_file(args.json_out, force=args.force, inputs=_bisect_inputs(spec, out), what="--json")
        if args.json_out
        else None
    )
    rng = vs[vs.index(a) : vs.index(b) + 1]
    cells: dict[str, dict[str, Any]] = {}
    known = {}
    for v in rng:
        c = load_cell(out, v)
        if c is not None:
            cells[v] = c
            known[v] = observe(c, kind, ident)
    ran: set[str] = set()
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731

    def evaluate(v: str) -> tuple[bool, Any]:
        if args.no_run or kind == "perf":  # a figure measured now beside figures measured then is no comparison
            return False, None
        cell, action = ensure_cell(spec, v, out, say=say)
        cells[v] = cell
        if action == "ran":
            ran.add(v)
        return observe(cell, kind, ident)

    res = search(rng, evaluate, known, mark_ran=lambda v: v in ran, same=same_for(kind, threshold))
    if res.error:
        raise UsageError(res.error)

    def side(v: str | None) -> dict[str, Any] | None:
        if v is None:
            return None
        c = cells.get(v) or {}
        return {"release": v, "value": res.values.get(v), "shown": display(kind, res.values.get(v)),
                "cell": f"cells/{v}.json", "created_at": c.get("created_at")}  # fmt: skip

    answer = {
        "observable": {"kind": kind, "id": ident, **({"threshold_pct": threshold} if kind == "perf" else {})},
        "first_changed": res.first_changed,
        "last_same": res.last_same,
        "from": a,
        "to": b,
        "evidence": {"last_same": side(res.last_same), "first_changed": side(res.first_changed)},
        "evaluated": {v: display(kind, val) for v, val in res.values.items()},
        "skipped": res.skipped,
        "ran": res.ran,
        "unevaluated": res.unevaluated,
        # releases between last_same and first_changed with no observation (--no-run, failed cells): the first
        # change may lie among them
        "not_observed_between": [
            v
            for v in rng[rng.index(res.last_same) + 1 : rng.index(res.first_changed)]
            if res.first_changed and res.last_same and v not in res.values
        ]
        if res.first_changed and res.last_same
        else [],
        "matrix_dir": str(out),
    }
    if json_out is not None:
        atomic_write_text(json_out, json.dumps(answer, indent=2, ensure_ascii=False, default=str) + "\n")
    ran_txt = f"; ran {', '.join(res.ran)}" if res.ran else "; no cell ran"
    if res.first_changed:
        before, after = side(res.last_same) or {}, side(res.first_changed) or {}
        print(f"{kind} {ident}: first changed in {res.first_changed} (last same: {res.last_same}){ran_txt}")
        print(f"  {res.last_same}: {before.get('shown')}")
        print(f"  {res.first_changed}: {after.get('shown')}")
        if answer["not_observed_between"]:
            print(
                f"  not observed between them: {', '.join(answer['not_observed_between'])} (the change may lie there)"
            )
        return 0
    print(f"{kind} {ident}: no change from {a} to {b} (same in {', '.join(res.values)}){ran_txt}")
    if res.unevaluated:
        print(f"  not evaluated (the binary search assumes a change persists): {', '.join(res.unevaluated)}")
    if res.skipped:
        print(f"  skipped (no observation): {', '.join(res.skipped)}")
    return 1
