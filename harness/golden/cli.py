"""`harness golden record|diff` (the commands only: recording is golden/record.py, the diff golden/diff.py)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from harness.errors import RefusedError
from harness.outputs import atomic_write_text, output_file

__all__ = ["register", "cmd_record", "cmd_diff"]


def register(sub) -> None:
    from harness.golden.diff import DEFAULT_MARGIN, DEFAULT_TOLERANCE

    g = sub.add_parser("golden", help="record golden outputs of an engine, or diff two recordings")
    gs = g.add_subparsers(dest="golden_command", metavar="SUBCOMMAND")
    g.set_defaults(func=lambda a: (g.print_help(), 2)[1])

    r = gs.add_parser(
        "record", help="launch MANIFEST's engine and record the prompt sets (temperature 0, top-5 logprobs)"
    )
    r.add_argument("manifest")
    r.add_argument(
        "--prompts",
        action="append",
        metavar="SET",
        help="prompt set name (golden/prompts/SET.yaml) or path; repeatable; default: the sets written for the "
        "manifest's model (their `model:`), else every set that names no model",
    )
    r.add_argument("--out", type=Path, help="recording directory (default golden/<engine>-<version>/<model-hash-12>/)")
    r.add_argument("--force", action="store_true", help="replace an existing recording")
    r.add_argument("--url", help="record from an already running engine at this base URL instead of launching one")
    r.set_defaults(func=cmd_record)

    d = gs.add_parser("diff", help="classify every prompt of recording B against baseline A; exit 0 iff no regression")
    d.add_argument("a", type=Path, help="baseline recording directory")
    d.add_argument("b", type=Path, help="candidate recording directory")
    d.add_argument("--json", type=Path, metavar="OUT", help="also write the full diff as JSON")
    d.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help=f"max |logprob drift| (nats) for 'equivalent' (default {DEFAULT_TOLERANCE})",
    )
    d.add_argument(
        "--margin",
        type=float,
        default=DEFAULT_MARGIN,
        help=f"max baseline top-1/top-2 gap (nats) for 'near-tie' (default {DEFAULT_MARGIN})",
    )
    d.add_argument("--force", action="store_true", help="replace an existing --json file")
    d.add_argument("-v", "--verbose", action="store_true", help="list identical prompts too")
    d.set_defaults(func=cmd_diff)


def cmd_record(args: argparse.Namespace) -> int:
    from harness.errors import OutputError
    from harness.golden.prompts import resolve_prompt_sets
    from harness.golden.record import UrlEngine, record_with_engine
    from harness.golden.store import default_recording_dir, existing_recording
    from harness.manifest import load_manifest
    from harness.net import loopback_url

    url = loopback_url(args.url) if args.url is not None else None  # the loopback rule, before any socket
    m = load_manifest(args.manifest)
    sets = resolve_prompt_sets(args.prompts, model=m.model.source)  # default: the sets written for its model
    out = args.out or default_recording_dir(m)
    # Refuse before launching anything: an existing recording is never overwritten without --force.
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out}: exists and is not a directory")
    there = existing_recording(out, [s.name for s in sets])
    if there and not args.force:
        raise RefusedError(f"{out}: {there}; pass --force to replace it")
    t0 = time.perf_counter()
    if url:
        _, records, meta = record_with_engine(UrlEngine(url, m), m, sets, out, force=args.force)
    else:
        from harness.launch.session import launch

        with launch(m) as engine:
            _, records, meta = record_with_engine(engine, m, sets, out, force=args.force)
    from harness.hardware import summary
    from harness.shown import shown

    # the engine's version is the server's own text: shown with its controls escaped (no cursor moves, no retitling)
    for s in sets:
        n = len(records[s.name])
        t = meta["timing_s"][s.name]
        refused = sum(1 for r in records[s.name] if r.get("error"))
        note = f"; {refused} refused by the engine, recorded as outcomes" if refused else ""
        print(f"{shown(s.name)}: {n} prompts in {t:.2f} s ({t / n:.3f} s/prompt{note})")
    print(f"hardware: {shown(summary(meta.get('hardware')))}")
    print(
        f"recorded {sum(len(v) for v in records.values())} prompts to {shown(out)} "
        f"(engine {shown(meta['engine']['reported_version'])}, model {m.model.sha256[:12]}, total {time.perf_counter() - t0:.1f} s)"
    )
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from harness.golden.diff import check_thresholds, diff_recordings, render_text
    from harness.golden.store import load_recording

    check_thresholds(args.tolerance, args.margin)
    if args.json:  # never over a file of either recording, nor an existing result without --force
        inputs = [p for d in (args.a, args.b) if d.is_dir() for p in d.iterdir()] + [args.a, args.b]
        output_file(args.json, force=args.force, inputs=inputs, what="--json")
    a, b = load_recording(args.a), load_recording(args.b)
    d = diff_recordings(a, b, tolerance=args.tolerance, margin=args.margin)
    from harness.shown import shown_lines

    print(shown_lines(render_text(d, verbose=args.verbose)))  # a recording's texts are data: controls escaped
    if args.json:
        atomic_write_text(args.json, json.dumps(d.to_json(), indent=2, ensure_ascii=False) + "\n")
    return 0 if d.ok else 1
