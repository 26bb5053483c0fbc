"""`harness upgrade OLD NEW --out DIR` (the command only: the work is harness.upgrade.run)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["register", "cmd_upgrade"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from harness.golden.diff import DEFAULT_MARGIN, DEFAULT_TOLERANCE

    u = sub.add_parser(
        "upgrade",
        help="run OLD and NEW engines in turn and write one upgrade report (golden, metrics, "
        "conformance, arguments) with a verdict safe/review/blocking",
    )
    u.add_argument("old_manifest")
    u.add_argument("new_manifest")
    u.add_argument("--out", type=Path, required=True, help="report directory (upgrade.json, upgrade.md, recordings)")
    u.add_argument(
        "--prompts",
        action="append",
        metavar="SET",
        help="prompt sets (default: the sets written for OLD's model, else every set that names no model)",
    )
    u.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE)
    u.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    u.add_argument("--no-conformance", action="store_true", help="skip the conformance suite (golden + metrics only)")
    u.add_argument("--force", action="store_true", help="replace an existing report in --out")
    u.add_argument(
        "--expect",
        help="expectation name or file both sides are judged by (default: the old engine's, exact version then "
        "series; `openai` = the plain reference)",
    )
    u.set_defaults(func=cmd_upgrade)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cmd_upgrade(args: argparse.Namespace) -> int:
    from harness.golden.diff import check_thresholds
    from harness.upgrade.run import run_upgrade

    check_thresholds(args.tolerance, args.margin)
    report = run_upgrade(
        args.old_manifest,
        args.new_manifest,
        args.out,
        prompts=args.prompts,
        tolerance=args.tolerance,
        margin=args.margin,
        conformance=not args.no_conformance,
        force=args.force,
        expect=args.expect,
        say=_say,
    )
    print(f"verdict: {report['verdict']['verdict']}")
    for r in report["verdict"]["reasons"]:
        print(f"  - [{r['level']}] {r['text']}")
    print(f"report: {args.out / 'upgrade.md'}  ({report['wall_seconds']:.0f} s)")
    return {"safe": 0, "review": 0, "blocking": 1}[report["verdict"]["verdict"]]
