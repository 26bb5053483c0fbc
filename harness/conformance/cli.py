"""Subcommands: `harness conform` (live suite) and `harness check-stream` (recorded streams)."""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

from harness.conformance.expectations import FAULT_KEYS
from harness.errors import OutputError, UsageError
from harness.settings import DEFAULT_API_KEY_ENV, api_key_from_env
from harness.shown import shown, shown_json

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
        "--scripted",
        action="store_true",
        help="with --url: the server serves the embedded scripted model (harness model build --model scripted-tiny),"
        " so the tools.*, reasoning.* and structured.client.* cases hold it to its scripts (otherwise they judge the"
        " contract any model keeps; with a manifest, its model.source says so)",
    )
    p.add_argument(
        "--engine-url",
        metavar="URL",
        help="with --url GATEWAY: the loopback URL of the engine behind the gateway; the wire is judged at the"
        " gateway, the engine's own state (its /metrics for the metrics and cancellation cases) is read here",
    )
    p.add_argument(
        "--engine-api-key-env",
        default=None,
        metavar="NAME",
        help="with --engine-url: the environment variable holding the engine's own API key (default: no key)",
    )
    p.add_argument(
        "--compare-direct",
        action="store_true",
        help="with --url GATEWAY --engine-url ENGINE --out DIR: run the suite at the engine directly (DIR/direct/)"
        " and through the gateway (DIR/gateway/), and write what the gateway changes for clients, case by case"
        " (DIR/comparison.json, comparison.xml, comparison.html); exit 1 when a MUST case gets worse",
    )
    p.add_argument(
        "--direct-expect",
        metavar="NAME",
        help="with --compare-direct: the expectation file the direct run is judged by (default: --expect's)",
    )
    p.add_argument(
        "--out",
        help="directory for conformance.json, junit.xml, conformance.html and evidence/ (every case's wire trace)",
    )
    p.add_argument(
        "--rejudge",
        metavar="RUN_DIR",
        help="judge a saved run (RUN_DIR/evidence, written by --out) again, with no engine: each case's own code on"
        " the saved exchanges; needs --expect (-k selects saved cases; the saved run's bounds and model are used)",
    )
    p.add_argument(
        "--render",
        metavar="RUN_DIR",
        help="write RUN_DIR/conformance.html again from RUN_DIR/conformance.json and RUN_DIR/evidence (no engine;"
        " takes no other option)",
    )
    p.add_argument("--force", action="store_true",
                   help="replace conformance.json, junit.xml, conformance.html and evidence/ already in --out (an"
                   " evidence/ that is a symbolic link is never written through)")  # fmt: skip
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
    p.add_argument("--repeat", type=int, default=None, metavar="N",
                   help="judge every case N times (N passes of the suite, fresh requests each; at most 100): each case"
                   " is reported with its outcomes and their counts, stable or intermittent k/N (default 1)")  # fmt: skip
    p.add_argument("--restart", action="store_true",
                   help="with MANIFEST --repeat N: launch the engine afresh for every pass (a launch-level race)")  # fmt: skip
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


# The options each mode of `conform` takes (argparse dest names). Any other option given is refused: a mode never
# quietly ignores one (`--render DIR --out X` rewrote DIR/conformance.html).
MODE_OPTIONS: dict[str, frozenset[str]] = {
    "--list": frozenset({"list"}),
    "--render": frozenset({"render"}),
    "--rejudge": frozenset({"rejudge", "expect", "out", "force", "max_seconds", "cases", "fault"}),
    "--url": frozenset(
        {
            "url",
            "expect",
            "api_key_env",
            "model",
            "out",
            "force",
            "max_seconds",
            "stream_seconds",
            "cases",
            "fault",
            "scripted",
        }
    )
    | {"engine_url", "engine_api_key_env", "compare_direct", "direct_expect"}  # a gateway and the engine behind it
    | {"repeat"},
    "MANIFEST": frozenset(
        {"manifest", "expect", "out", "force", "max_seconds", "stream_seconds", "cases", "fault", "extra_arg"}
    )
    | {"repeat", "restart"},
}
FLAGS = {"manifest": "MANIFEST", "url": "--url", "expect": "--expect", "api_key_env": "--api-key-env",
         "model": "--model", "out": "--out", "rejudge": "--rejudge", "render": "--render", "force": "--force",
         "max_seconds": "--max-seconds", "stream_seconds": "--stream-seconds", "cases": "-k", "fault": "--fault",
         "list": "--list", "extra_arg": "--extra-arg", "engine_url": "--engine-url",
         "engine_api_key_env": "--engine-api-key-env", "compare_direct": "--compare-direct",
         "direct_expect": "--direct-expect", "scripted": "--scripted", "repeat": "--repeat",
         "restart": "--restart"}  # fmt: skip
GATEWAY_OPTIONS = ("engine_url", "engine_api_key_env", "compare_direct", "direct_expect")
WHY_NOT = {("MANIFEST", "api_key_env"): "a launched engine takes its key from the manifest (server.api_key_env)",
           ("MANIFEST", "model"): "a launched engine serves the manifest's model",
           ("MANIFEST", "scripted"): "a launched engine's model.source says whether it is the scripted model",
           ("--rejudge", "stream_seconds"): "the saved run's bound is judged again (evidence/index.json)",
           ("--rejudge", "model"): "the saved run's model is judged again",
           **{(m, d): "a gateway is checked by attaching to it: --url GATEWAY --engine-url ENGINE"
              for m in ("MANIFEST", "--rejudge", "--render", "--list") for d in GATEWAY_OPTIONS}}  # fmt: skip


def _given(value: object) -> bool:
    """An option the user gave (argparse leaves None, False or an empty list for one not given)."""
    return not (value is None or value is False or (isinstance(value, list) and not value))


def conform_mode(args: argparse.Namespace) -> str:
    """Which mode `conform` runs in (a key of MODE_OPTIONS); every option given that it does not take is a UsageError."""
    order = (("--list", "list"), ("--render", "render"), ("--rejudge", "rejudge"), ("--url", "url"),
             ("MANIFEST", "manifest"))  # fmt: skip
    mode = next((m for m, dest in order if _given(getattr(args, dest, None))), None)
    if mode is None and any(_given(getattr(args, d, None)) for d in GATEWAY_OPTIONS):
        raise UsageError("--engine-url (and the other gateway options) need --url GATEWAY: the gateway is what is"
                         " checked, the engine behind it is where its state is read")  # fmt: skip
    if mode is None:
        raise UsageError(
            "give either a MANIFEST to launch or --url to attach (or --rejudge / --render RUN_DIR, --list)"
        )
    extra = [d for d in FLAGS if d not in MODE_OPTIONS[mode] and _given(getattr(args, d, None))]
    if extra:
        takes = ", ".join(FLAGS[d] for d in FLAGS if d in MODE_OPTIONS[mode] and FLAGS[d] != mode) or "nothing else"
        why = "; ".join(WHY_NOT[(mode, d)] for d in extra if (mode, d) in WHY_NOT)
        raise UsageError(f"conform {mode} does not take {', '.join(FLAGS[d] for d in extra)}"
                         f"{f' ({why})' if why else ''}; it takes {takes}")  # fmt: skip
    return mode


def with_faults(patterns: list[str] | None, faults: list[str]) -> list[str] | None:
    """-k patterns plus `--fault NAME`: the default suite (or the -k selection), then the fault case."""
    if not faults:
        return patterns
    return [*(patterns or ["*"]), *(f"fault.{f}" for f in faults)]


def _seconds(value: float | None, flag: str, most: float = math.inf) -> float | None:
    if value is not None and not (math.isfinite(value) and 0 < value <= most):
        over = f" and at most {most:g}" if math.isfinite(most) else ""
        raise UsageError(f"{flag}: need a number of seconds over 0{over}, got {value!r}")
    return value


def cmd_conform(args: argparse.Namespace) -> int:
    from harness.conformance.case import provided_by
    from harness.conformance.evidence import MAX_STREAM_S_SAVED
    from harness.conformance.expectations import default_expectation, load_expectations, required_expectation
    from harness.conformance.report import print_table
    from harness.conformance.runner import new_ctx
    from harness.net import loopback_url, redact_url

    mode = conform_mode(args)  # before anything else: an option the mode would ignore is refused
    if mode == "--list":
        return cmd_list()
    args.cases = with_faults(args.cases, args.fault)
    if mode == "--render":
        from harness.conformance.html import write_html
        from harness.conformance.report import read_report

        doc = read_report(Path(args.render) / "conformance.json").to_dict()
        print(f"wrote {shown(write_html(args.render, doc))}")
        return 0
    if mode == "--rejudge":
        return cmd_rejudge(args)
    bounds = {}  # only what was given: the defaults live with the runner and the context
    # at most what a saved run's evidence index may hold, so every run written can be judged again
    if _seconds(args.stream_seconds, "--stream-seconds", MAX_STREAM_S_SAVED) is not None:
        bounds["max_stream_s"] = args.stream_seconds
    suite = {"max_wall_s": args.max_seconds} if _seconds(args.max_seconds, "--max-seconds") is not None else {}
    if mode == "--url":
        url = loopback_url(args.url)  # the one loopback rule: parsed address, before any socket
        gw = _gateway_args(args)
        exp = load_expectations(required_expectation(args.expect))
        key = api_key_from_env(args.api_key_env)
        if args.compare_direct:
            if _repeat_args(args)[0] > 1:
                raise UsageError("--compare-direct judges each side once: it does not take --repeat")
            return _compare_direct(args, url, exp, key, gw, bounds, suite)
        if args.out:  # checked before any request: a refused --out costs nothing
            _check_out(args, files=_files_read(exp))
        secrets = (key, gw.key)  # every key given to the run: its recorder and its scrub know them all
        recorder = _recorder(args, secrets)
        log = _repeat_log(args, recorder)
        t_ready = time.monotonic()
        info = {"url": redact_url(url), **({"engine_url": redact_url(gw.url)} if gw.url else {})}
        for _ in range(log.n if log else 1):  # each pass a fresh context: fresh clients, fresh requests
            ctx = new_ctx(url, exp, api_key=key, model=args.model or "", evidence=recorder, engine_url=gw.url,
                          engine_api_key=gw.key, scripted_model=args.scripted, **bounds)  # fmt: skip
            report = _run(ctx, secrets, patterns=args.cases, engine_info=info, **suite, **_on_result(log))
            if _pass_done(log, report):
                break
        report = _merged(log, report)
        return _finish(report, args, t_ready, print_table, _writer(ctx, report))

    from harness.launch.session import launch
    from harness.manifest import load_manifest

    m = load_manifest(args.manifest)
    exp = load_expectations(args.expect or default_expectation(m.engine.kind, m.engine.version))
    run_dir = _check_out(args, files=_files_read(exp, m.path)) if args.out else None
    log = _repeat_log(args, None)
    launches = log.n if log and log.restart else 1
    recorder = None
    for launched in range(1, launches + 1):
        # a fresh launch for every pass (--restart): each its own engine.log, beside the first's
        where = run_dir / f"restart-{launched}" if run_dir is not None and launched > 1 else run_dir
        with launch(m, extra_args=tuple(args.extra_arg), run_dir=where) as eng:
            t_ready = time.monotonic()
            if recorder is None:  # one recorder for every pass: the evidence of each distinct outcome
                recorder = _recorder(args, (eng.api_key,))
                if log is not None:
                    log.recorder = recorder
            info = {
                "name": m.name,
                "kind": m.engine.kind,
                "version": m.engine.version,
                "url": eng.base_url,
                "identity": getattr(eng, "identity", {}),
            }
            for _ in range(1 if launches > 1 or log is None else log.n):
                ctx = new_ctx(eng.base_url, exp, api_key=eng.api_key, model=eng.served_name, engine=eng,
                              evidence=recorder, provides=provided_by(m), **bounds)  # fmt: skip
                report = _run(ctx, (eng.api_key,), patterns=args.cases, engine_info=info, **suite, **_on_result(log))
                if _pass_done(log, report, relaunch=launched < launches):
                    break
            if launched < launches and not (log and log.stopped):
                continue
            report = _merged(log, report)
            if args.out:  # written while the engine is still up: "ready -> report" excludes the engine stop
                doc = report.to_dict()
                doc["ready_to_report_s"] = round(time.monotonic() - t_ready, 3)
                _writer(ctx, report)(doc, args.out)
                t_ready = None
            break
    return _finish(report, args, t_ready, print_table, _writer(ctx, report))


def _repeat_args(args: argparse.Namespace) -> tuple[int, bool]:
    """(passes, a fresh launch for each), checked before any work."""
    from harness.conformance.repeat import MAX_REPEAT

    n = 1 if args.repeat is None else args.repeat
    if not 1 <= n <= MAX_REPEAT:
        raise UsageError(f"--repeat: need a whole number of passes from 1 to {MAX_REPEAT}, got {n}")
    if args.restart and n < 2:
        raise UsageError("--restart needs --repeat N with N of 2 or more (it launches the engine afresh for each pass)")
    return n, bool(args.restart)


def _repeat_log(args: argparse.Namespace, recorder):
    """The RepeatLog of a repeated run (None for one pass: the run is exactly what it always was)."""
    from harness.conformance.repeat import RepeatLog

    n, restart = _repeat_args(args)
    return RepeatLog(n, recorder, restart=restart) if n > 1 else None


def _on_result(log) -> dict:
    return {"on_result": log.add} if log is not None else {}


def _pass_done(log, report, relaunch: bool = False) -> bool:
    """File a pass; True when no more passes run on this engine: all done, or the pass was cut short (an engine that
    died or stopped answering, a wall-time bound: its later passes would judge nothing) unless a fresh launch follows."""
    if log is None:
        return True
    log.passes.append(report)
    log.end_pass()
    c = report.counts()
    print(shown(f"pass {len(log.passes)}/{log.n}: {len(report.results)} cases in {report.duration_s:.1f}s, "
                f"{c.get('fail', 0)} fail, {c.get('error', 0)} error"
                + (f"; aborted: {report.aborted}" if report.aborted else "")))  # fmt: skip
    if report.aborted and not relaunch:
        log.stopped = f"stopped after pass {len(log.passes)} of {log.n}: {report.aborted}"
        return True
    return len(log.passes) >= log.n


def _merged(log, report):
    """The repeated run as one report (every case with its outcomes), or the one pass's report as it is."""
    if log is None:
        return report
    log.finish()
    return log.merged()


@dataclass(frozen=True)
class GatewayArgs:
    url: str = ""  # the engine behind the gateway ("" when --url is the engine itself)
    key: str | None = None  # the engine's own key
    direct_expect: str = ""  # the expectation file of the direct run (--compare-direct)


def _gateway_args(args: argparse.Namespace) -> GatewayArgs:
    """--engine-url and its companions, checked before any socket: the engine URL by the one loopback rule."""
    from harness.net import loopback_url, same_loopback_server

    if args.engine_url is None:
        given = [FLAGS[d] for d in GATEWAY_OPTIONS[1:] if _given(getattr(args, d, None))]
        if given:
            raise UsageError(f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} --engine-url ENGINE (the"
                             " engine behind the gateway at --url)")  # fmt: skip
        return GatewayArgs()
    url = loopback_url(args.engine_url, what="--engine-url")
    if same_loopback_server(url, loopback_url(args.url)):  # by any spelling: localhost, [::1], :80, a trailing /
        raise UsageError("--engine-url is the --url itself: give the gateway as --url and the engine behind it as"
                         " --engine-url")  # fmt: skip
    if args.direct_expect and not args.compare_direct:
        raise UsageError("--direct-expect needs --compare-direct (it names the direct run's expectation file)")
    if args.compare_direct and not args.out:
        raise UsageError("--compare-direct needs --out DIR (the two runs and the comparison are written there)")
    key = None
    if args.engine_api_key_env is not None:
        try:
            key = api_key_from_env(args.engine_api_key_env)
        except UsageError as exc:
            raise UsageError(str(exc).replace("--api-key-env", "--engine-api-key-env", 1)) from None
    return GatewayArgs(url=url, key=key, direct_expect=args.direct_expect or args.expect or "")


def _compare_direct(args: argparse.Namespace, url: str, exp, key: str | None, gw: GatewayArgs, bounds: dict,
                    suite: dict) -> int:  # fmt: skip
    """The suite at the engine directly (DIR/direct/), then through the gateway (DIR/gateway/), and the comparison
    (DIR/comparison.*). Every output place is checked before the first request."""
    from harness.conformance.compare import COMPARISON_NAMES, compare, summary_lines, write_comparison
    from harness.conformance.expectations import load_expectations
    from harness.conformance.report import COUNTED
    from harness.conformance.runner import new_ctx
    from harness.net import redact_url
    from harness.outputs import output_dir

    direct_exp = load_expectations(gw.direct_expect)
    read = _files_read(exp, direct_exp)  # the expectation files are inputs: never written over, --force or not
    out = output_dir(args.out, COMPARISON_NAMES, force=args.force, inputs=read)
    sides = {name: argparse.Namespace(**{**vars(args), "out": str(out / name)}) for name in ("direct", "gateway")}
    for name, side in sides.items():
        if (out / name).is_symlink():  # it would write wherever it points: another run
            raise OutputError(f"--out {out}: {name} is a symbolic link; refusing to write through it")
        _check_out(side, files=read)
    docs = {}
    for name, target, side_exp, side_key, engine_url, model in (
        ("direct", gw.url, direct_exp, gw.key, "", ""),
        ("gateway", url, exp, key, gw.url, args.model or ""),
    ):
        side = sides[name]
        secrets = (side_key, key, gw.key)  # the side's own key first; both keys of the command known to both sides
        ctx = new_ctx(target, side_exp, api_key=side_key, model=model, evidence=_recorder(side, secrets),
                      engine_url=engine_url, engine_api_key=gw.key if engine_url else None, **bounds)  # fmt: skip
        info = {"url": redact_url(target), **({"engine_url": redact_url(engine_url)} if engine_url else {})}
        report = _run(ctx, secrets, patterns=args.cases, engine_info=info, **suite)
        doc = report.to_dict()
        _writer(ctx, report)(doc, side.out)
        c = doc["counts"]
        print(shown(f"{name}: {len(doc['cases'])} cases in {doc['duration_s']:.1f}s: "
                    + "  ".join(f"{k}={c.get(k, 0)}" for k in COUNTED)
                    + (f"; aborted: {doc['aborted']}" if doc.get("aborted") else "")))  # fmt: skip
        docs[name] = doc
    # made from the two reports, each already scrubbed of both keys with the harness's own words kept: scrubbing the
    # comparison again would cut a key's first six characters out of those words (`engine_url`, case ids)
    cmp = compare(docs["direct"], docs["gateway"])
    write_comparison(cmp, out)
    for line in summary_lines(cmp):
        print(shown(line))
    print(f"wrote {shown(out / 'comparison.json')}, comparison.xml, comparison.html, direct/ and gateway/")
    return 0 if cmp["ok"] else 1


def _check_out(args: argparse.Namespace, run_dirs: tuple[Path, ...] = (), files: tuple[Path, ...] = ()) -> Path:
    """--out may be written (its files, and its evidence/ directory), before any work. Neither a run directory this
    command judges (`run_dirs`: its conformance.json and evidence/) nor a file it reads (`files`: an expectation file,
    the manifest) is written over or replaced, --force or not."""
    from harness.conformance.evidence import check_evidence_out
    from harness.conformance.report import OUTPUT_NAMES
    from harness.outputs import output_dir

    out = output_dir(args.out, OUTPUT_NAMES, force=args.force,
                     inputs=[*(p / "conformance.json" for p in run_dirs), *files])  # fmt: skip
    check_evidence_out(out, force=args.force, inputs=(*(p / "evidence" for p in run_dirs), *files))
    return out


def _files_read(*sources: object) -> tuple[Path, ...]:
    """The files a run reads: the expectation files' paths (the plain `openai` reference has none) and paths given."""
    paths = (getattr(s, "path", s) for s in sources)
    return tuple(Path(str(p)) for p in paths if p)


def _run(ctx, secrets: tuple[str | None, ...], **kw):
    """run_suite_sync, then every key given to the run (and any 6+ character prefix or suffix of one) scrubbed out
    of the report: the table, conformance.json, junit.xml and conformance.html are all made from it, so none can show
    a key a server echoed back (the evidence scrubs them as it records)."""
    from harness.conformance.report import scrub_report
    from harness.conformance.runner import run_suite_sync

    report = run_suite_sync(ctx, **kw)
    scrub_report(report, list(secrets))
    return report


def _recorder(args: argparse.Namespace, secrets: tuple[str | None, ...]):
    """The evidence recorder of a run that writes --out (none without it: nothing would be saved); `secrets` are the
    run's own key, then every other key given to it (the engine's own behind a gateway)."""
    from harness.conformance.evidence import EvidenceRecorder

    return EvidenceRecorder(api_key=secrets[0], other_keys=secrets[1:]) if args.out else None


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
    from harness.conformance.report import print_table, write_outputs

    if not args.expect:
        raise UsageError("--expect NAME is required with --rejudge")
    exp = load_expectations(args.expect)
    src = Path(args.rejudge)
    if not src.is_dir():
        raise UsageError(f"--rejudge {src}: not a directory")
    _seconds(args.max_seconds, "--max-seconds")
    if args.out:
        _separate(src, Path(args.out))
        _check_out(args, run_dirs=(src,), files=_files_read(exp))
    report = asyncio.run(rejudge(src, exp, out=args.out, max_wall_s=args.max_seconds, patterns=args.cases))
    doc = report.to_dict()
    if args.out:
        write_outputs(doc, args.out)
    print_table(doc)
    rj = report.engine["rejudge"]
    different = ", ".join(rj["different"][:8])
    print(shown(
        f"rejudged {rj['cases']} cases from {src}/evidence: {rj['same']} with the saved verdict, "
        f"{len(rj['different'])} different{f' ({different})' if different else ''}, "
        f"{len(rj['not_rejudged'])} not re-judgeable from the evidence"
        + (f"; {len(rj['not_in_suite'])} saved cases not in this suite" if rj["not_in_suite"] else "")
    ))  # fmt: skip
    if args.out:
        print(f"wrote {shown(Path(args.out) / 'conformance.json')}, junit.xml, conformance.html and evidence/")
    return 0 if report.ok else 1


def _separate(src: Path, out: Path) -> None:
    """--out is neither RUN_DIR nor inside its evidence/ (what is judged), and RUN_DIR is not inside the evidence/
    that --force would replace."""
    from harness.outputs import same_file

    s, o = src.resolve(), out.resolve()
    if s == o or same_file(src, out):
        raise UsageError("--out must differ from the --rejudge RUN_DIR (its evidence is what is judged)")
    if (s / "evidence") in (o, *o.parents):
        raise UsageError(f"--out {out}: inside the --rejudge RUN_DIR's evidence/, which is what is judged")
    if (o / "evidence") in (s, *s.parents):
        raise UsageError(f"--rejudge {src}: inside --out's evidence/, which the re-judge replaces")


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
            print(shown(f"{status:4s} {f}: {note}; " + " ".join(f"{k}={v}" for k, v in sorted(counts.items()))))
            for r in results:
                if r.verdict in ("fail", "error", "quirk", "quirk-absent"):
                    tags = "+".join(r.behaviours) or r.behaviour
                    where = f" @chunk {r.chunk}" if r.chunk is not None else ""
                    # the note may quote the recorded stream: its control characters are shown, not sent
                    print(
                        shown(f"     {r.verdict:6s} {r.id}: {tags}{where} {('— ' + r.note) if r.note else ''}".rstrip())
                    )
    if args.json:  # the results quote the recorded stream: its control characters escaped, the JSON the same
        print(shown_json(json.dumps(all_out, indent=2, default=str, ensure_ascii=False)))
    return 1 if bad else 0


def cmd_update_expectations(args: argparse.Namespace) -> int:
    from harness.conformance.expectations import load_expectations
    from harness.conformance.update import update_expectations

    # validates, and resolves a name to its file; `openai` (the plain reference) starts a new file for a server that
    # has none yet (a server without an engine profile: engine.kind none)
    src = load_expectations(args.expect).path or None
    for line in update_expectations(args.results, src, args.out, force=args.force) or ["(no changes)"]:
        print(shown(line))  # case ids and notes from the results file
    print(f"wrote {shown(args.out)}")
    return 0
