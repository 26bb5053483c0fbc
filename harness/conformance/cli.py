"""Subcommands: `harness conform` (live suite) and `harness check-stream` (recorded streams)."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from harness.conformance.expectations import FAULT_KEYS
from harness.errors import UsageError
from harness.settings import DEFAULT_API_KEY_ENV, api_key_from_env

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser(
        "conform", help="run the conformance suite against an engine (launch a manifest or attach to --url)"
    )
    p.add_argument("manifest", nargs="?", help="engine manifest to launch (omit with --url)")
    p.add_argument("--url", help="attach to a running engine at this loopback URL instead of launching")
    p.add_argument(
        "--expect",
        help="expectation name (a file in manifests/expectations/, `openai` for the plain reference) or YAML path; default: the manifest engine's file (exact version, then series)",
    )
    p.add_argument(
        "--api-key-env",
        default=None,
        metavar="NAME",
        help=f"name of the environment variable holding the API key when attaching (default {DEFAULT_API_KEY_ENV},"
        " used when set); a key is never taken on the command line, and a NAME that is not set is refused",
    )
    p.add_argument("--model", default=None, help="served model name (default: first of /v1/models)")
    p.add_argument(
        "--out",
        help="directory for conformance.json, junit.xml, conformance.html and evidence/ (every case's wire trace)",
    )
    p.add_argument(
        "--rejudge",
        metavar="RUN_DIR",
        help="judge a saved run (RUN_DIR/evidence, written by --out) again, with no engine: each case's own code on"
        " the saved exchanges; needs --expect",
    )
    p.add_argument(
        "--render",
        metavar="RUN_DIR",
        help="write RUN_DIR/conformance.html again from RUN_DIR/conformance.json and RUN_DIR/evidence (no engine)",
    )
    p.add_argument("--force", action="store_true", help="replace conformance.json / junit.xml already in --out")
    p.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        metavar="S",
        help="wall-time bound for the whole suite (default 600); cases left when it is reached are errors",
    )
    p.add_argument(
        "--stream-seconds",
        type=float,
        default=None,
        metavar="S",
        help="wall-time bound for each request and its stream (default 45)",
    )
    p.add_argument("-k", "--cases", action="append", help="case id glob or prefix (repeatable)")
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        choices=sorted(FAULT_KEYS),
        help="also run this opt-in fault case, after every other case (engine-death: SIGKILL the engine's worker"
        " while streams are in flight; the engine ends dead); `-k fault.NAME` runs it alone",
    )
    p.add_argument("--list", action="store_true", help="list case ids and requirements, run nothing")
    p.add_argument("--extra-arg", action="append", default=[], help="extra engine argument when launching (repeatable)")
    p.set_defaults(func=cmd_conform)

    c = sub.add_parser("check-stream", help="check a recorded stream (raw SSE bytes or a JSON list of chunks)")
    c.add_argument("files", nargs="+", help="recorded stream file(s)")
    c.add_argument("--expect", default=None, help="expectation name or YAML path (default: pure OpenAI reference)")
    c.add_argument("--kind", choices=["chat", "completions"], help="stream kind (default: guessed from the chunks)")
    c.add_argument("--json", action="store_true", help="print results as JSON")
    c.set_defaults(func=cmd_check_stream)

    u = sub.add_parser(
        "update-expectations", help="propose an expectation file from a conformance.json: fails become quirks to review"
    )
    u.add_argument("results", help="conformance.json written by `harness conform --out`")
    u.add_argument("--expect", required=True, help="the expectation name or YAML path the run used")
    u.add_argument(
        "--out",
        required=True,
        help="where to write the proposed YAML: never over the results; over an existing file (the expectation"
        " file included) only with --force",
    )
    u.add_argument("--force", action="store_true", help="replace an existing --out (never the results file)")
    u.set_defaults(func=cmd_update_expectations)


def cmd_list() -> int:
    from harness.conformance.suite import all_cases, fault_cases

    for c in all_cases():
        print(f"{c.id:45s} {c.level.value:6s} {c.requirement}")
    for c in fault_cases(["fault"]):
        print(f"{c.id:45s} {c.level.value:6s} {c.requirement}")
    return 0


def with_faults(patterns: list[str] | None, faults: list[str]) -> list[str] | None:
    """-k patterns plus `--fault NAME`: the default suite (or the -k selection), then the fault case."""
    if not faults:
        return patterns
    return [*(patterns or ["*"]), *(f"fault.{f}" for f in faults)]


def _seconds(value: float | None, flag: str) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise UsageError(f"{flag}: need a number of seconds over 0, got {value!r}")
    return value


def cmd_conform(args: argparse.Namespace) -> int:
    from harness.conformance.expectations import default_expectation, load_expectations
    from harness.conformance.report import OUTPUT_NAMES, print_table
    from harness.conformance.runner import new_ctx, run_suite_sync
    from harness.net import loopback_url, redact_url
    from harness.outputs import output_dir

    if args.list:
        return cmd_list()
    args.cases = with_faults(args.cases, args.fault)
    if args.render:
        if args.url or args.manifest or args.rejudge:
            raise UsageError("--render takes only a RUN_DIR (no MANIFEST, --url or --rejudge)")
        from harness.conformance.html import write_html
        from harness.conformance.report import read_report

        doc = read_report(Path(args.render) / "conformance.json").to_dict()
        print(f"wrote {write_html(args.render, doc)}")
        return 0
    if args.rejudge:
        return cmd_rejudge(args)
    if bool(args.url) == bool(args.manifest):
        raise UsageError("give either a MANIFEST to launch or --url to attach (not both)")
    bounds = {}  # only what was given: the defaults live with the runner and the context
    if _seconds(args.stream_seconds, "--stream-seconds") is not None:
        bounds["max_stream_s"] = args.stream_seconds
    suite = {"max_wall_s": args.max_seconds} if _seconds(args.max_seconds, "--max-seconds") is not None else {}
    if args.url:
        url = loopback_url(args.url)  # the one loopback rule: parsed address, before any socket
        if not args.expect:
            raise UsageError("--expect NAME is required with --url")
        exp = load_expectations(args.expect)
        key = api_key_from_env(args.api_key_env)
        if args.out:  # checked before any request: a refused --out costs nothing
            output_dir(args.out, OUTPUT_NAMES, force=args.force)
        ctx = new_ctx(url, exp, api_key=key, model=args.model or "", evidence=_recorder(args, key), **bounds)
        t_ready = time.monotonic()
        report = run_suite_sync(ctx, patterns=args.cases, engine_info={"url": redact_url(url)}, **suite)
        return _finish(report, args, t_ready, print_table, _writer(ctx, report))

    from harness.launch.session import launch
    from harness.manifest import load_manifest

    if args.api_key_env is not None:
        raise UsageError(
            "--api-key-env is for --url; a launched engine takes its key from the manifest (server.api_key_env)"
        )
    m = load_manifest(args.manifest)
    exp = load_expectations(args.expect or default_expectation(m.engine.kind, m.engine.version))
    run_dir = output_dir(args.out, OUTPUT_NAMES, force=args.force) if args.out else None
    with launch(m, extra_args=tuple(args.extra_arg), run_dir=run_dir) as eng:
        t_ready = time.monotonic()
        ctx = new_ctx(eng.base_url, exp, api_key=eng.api_key, model=eng.served_name, engine=eng,
                      evidence=_recorder(args, eng.api_key), **bounds)  # fmt: skip
        info = {
            "name": m.name,
            "kind": m.engine.kind,
            "version": m.engine.version,
            "url": eng.base_url,
            "identity": getattr(eng, "identity", {}),
        }
        report = run_suite_sync(ctx, patterns=args.cases, engine_info=info, **suite)
        if args.out:  # written while the engine is still up: "ready -> report" excludes the engine stop
            doc = report.to_dict()
            doc["ready_to_report_s"] = round(time.monotonic() - t_ready, 3)
            _writer(ctx, report)(doc, args.out)
            t_ready = None
    return _finish(report, args, t_ready, print_table, _writer(ctx, report))


def _recorder(args: argparse.Namespace, key: str | None):
    """The evidence recorder of a run that writes --out (none without it: nothing would be saved)."""
    from harness.conformance.evidence import EvidenceRecorder

    return EvidenceRecorder(api_key=key) if args.out else None


def _writer(ctx, report):
    """write_outputs, after the evidence (DIR/evidence/) that conformance.html shows."""
    from harness.conformance.evidence import run_settings
    from harness.conformance.report import write_outputs

    def write(doc, out) -> None:
        if ctx.evidence is not None:
            ctx.evidence.write(out, report.results, run_settings(ctx, report.engine))
        write_outputs(doc, out)

    return write


def cmd_rejudge(args: argparse.Namespace) -> int:
    import asyncio

    from harness.conformance.expectations import load_expectations
    from harness.conformance.rejudge import rejudge
    from harness.conformance.report import OUTPUT_NAMES, print_table, write_outputs
    from harness.outputs import output_dir

    if args.url or args.manifest:
        raise UsageError("--rejudge RUN_DIR judges saved evidence: give no MANIFEST or --url")
    if not args.expect:
        raise UsageError("--expect NAME is required with --rejudge")
    exp = load_expectations(args.expect)
    src = Path(args.rejudge)
    if not src.is_dir():
        raise UsageError(f"--rejudge {src}: not a directory")
    if args.out:
        if Path(args.out).resolve() == src.resolve():
            raise UsageError("--out must differ from the --rejudge RUN_DIR (its evidence is what is judged)")
        output_dir(args.out, OUTPUT_NAMES, force=args.force, inputs=[src / "conformance.json"])
    report = asyncio.run(rejudge(src, exp, out=args.out, max_wall_s=args.max_seconds))
    doc = report.to_dict()
    if args.out:
        write_outputs(doc, args.out)
    print_table(doc)
    rj = report.engine["rejudge"]
    print(
        f"rejudged {rj['cases']} cases from {src}/evidence: {rj['same']} with the saved verdict, "
        f"{len(rj['different'])} different{(' (' + ', '.join(rj['different'][:8]) + ')') if rj['different'] else ''}, "
        f"{len(rj['not_rejudged'])} not re-judgeable from the evidence"
        + (f"; {len(rj['not_in_suite'])} saved cases not in this suite" if rj["not_in_suite"] else "")
    )
    if args.out:
        print(f"wrote {Path(args.out) / 'conformance.json'}, junit.xml and conformance.html")
    return 0 if report.ok else 1


def _finish(report, args, t_ready, print_table, write_outputs) -> int:
    doc = report.to_dict()
    if t_ready is not None:
        doc["ready_to_report_s"] = round(time.monotonic() - t_ready, 3)
        if args.out:
            write_outputs(doc, args.out)
    print_table(doc)
    if args.out:
        print(f"wrote {Path(args.out) / 'conformance.json'}, junit.xml, conformance.html and evidence/")
    return 0 if report.ok else 1


def cmd_check_stream(args: argparse.Namespace) -> int:
    from harness.conformance.checkstream import check_file
    from harness.conformance.expectations import load_expectations
    from harness.conformance.model import FAILING

    exp = load_expectations(args.expect)
    bad = 0
    all_out = {}
    for f in args.files:
        results, note = check_file(f, exp, args.kind)  # an unreadable or non-stream file is one DataError
        all_out[f] = {"note": note, "cases": [r.to_dict() for r in results]}
        fails = [r for r in results if r.verdict in FAILING]  # quirk-absent is shown, never a failure
        bad += len(fails)
        if not args.json:
            counts: dict[str, int] = {}
            for r in results:
                counts[r.verdict] = counts.get(r.verdict, 0) + 1
            status = "FAIL" if fails else "ok"
            print(f"{status:4s} {f}: {note}; " + " ".join(f"{k}={v}" for k, v in sorted(counts.items())))
            for r in results:
                if r.verdict in ("fail", "error", "quirk", "quirk-absent"):
                    tags = "+".join(r.behaviours) or r.behaviour
                    where = f" @chunk {r.chunk}" if r.chunk is not None else ""
                    print(f"     {r.verdict:6s} {r.id}: {tags}{where} {('— ' + r.note) if r.note else ''}".rstrip())
    if args.json:
        json.dump(all_out, sys.stdout, indent=2, default=str, ensure_ascii=False)
        print()
    return 1 if bad else 0


def cmd_update_expectations(args: argparse.Namespace) -> int:
    from harness.conformance.expectations import load_expectations
    from harness.conformance.update import update_expectations

    src = load_expectations(args.expect).path  # validates, and resolves a name to its file
    if not src:
        raise UsageError("--expect must name an expectation file (not the pure reference)")
    for line in update_expectations(args.results, src, args.out, force=args.force) or ["(no changes)"]:
        print(line)
    print(f"wrote {args.out}")
    return 0
