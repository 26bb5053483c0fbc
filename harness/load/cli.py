"""`harness load (MANIFEST | --url URL) SCENARIO --out DIR` and `harness report DIR`.

Exit codes: 0 every SLO met, no abort, at least one ok request and no failed request beyond what the scenario
tolerates; 1 otherwise; 2 bad input / refused (checked before anything is sent or written).

The server cross-check reads the series of the engine's profile (harness/engines/): a launched manifest's engine kind,
or `--engine KIND` with `--url` (default: the default profile, and the report says so).
"""

from __future__ import annotations

from pathlib import Path

from harness.engines import DEFAULT_KIND, kinds, profile_for
from harness.errors import DataError, UsageError
from harness.settings import api_key_from_env

__all__ = ["register", "cmd_load", "cmd_report"]


def register(sub) -> None:
    p = sub.add_parser(
        "load",
        help="run a bounded load scenario against a local engine (or a launched manifest)",
        description=__doc__.splitlines()[0],
    )
    p.add_argument(
        "args",
        nargs="+",
        metavar="[MANIFEST] SCENARIO",
        help="a manifest to launch (omit with --url) and a scenario YAML",
    )
    p.add_argument("--url", help="base URL of a running server, e.g. http://127.0.0.1:8000")
    p.add_argument("--out", required=True, help="output directory (events.jsonl, summary.json/md, report.html)")
    p.add_argument("--force", action="store_true", help="replace the results of an earlier run in --out")
    p.add_argument(
        "--allow-remote", action="store_true", help="allow a non-loopback --url (never needed for local engines)"
    )
    p.add_argument("--model", help="model name to request (default: scenario, launched engine, or /v1/models)")
    p.add_argument("--api-key-env", help="environment variable holding the API key for --url")
    p.add_argument(
        "--engine",
        choices=kinds(),
        help=f"the engine kind behind --url: whose /metrics series are kept and cross-checked (default: "
        f"{DEFAULT_KIND}'s profile, said so in the report; with a MANIFEST its engine kind is used)",
    )
    p.add_argument("--no-progress", action="store_true", help="no live progress display")
    p.set_defaults(func=cmd_load)
    r = sub.add_parser(
        "report", help="re-render summary.json, summary.md and report.html from a load run's events.jsonl"
    )
    r.add_argument("dir", help="a load output directory")
    r.add_argument(
        "--engine",
        choices=kinds(),
        help="cross-check the scrapes with this engine kind's profile (default: the kind the run recorded)",
    )
    r.set_defaults(func=cmd_report)


def _print_verdict(s: dict, out: Path) -> int:
    from harness.load.report import stopped_by

    m = s["metrics"]
    line = (
        f"{s['scenario']}: {'PASS' if s['ok'] else 'FAIL'} · stopped by {stopped_by(s)} · "
        f"{m['requests']['ok']}/{m['requests']['total']} ok · TTFT p50 {(m['ttft_ms']['p50'] or 0):.1f} ms · "
        f"ITL p50 {(m['itl_ms']['p50'] or 0):.2f} ms · {(m['throughput']['output_tokens_per_s'] or 0):.0f} out tok/s"
    )
    print(line)
    if s.get("abort"):
        print(f"aborted: {s['abort']['detail']}")
    for c in s["slo_checks"]:
        if not c["ok"]:
            what = "failed" if c.get("kind") == "run" else "SLO failed"
            print(f"{what}: {c['name']} = {c['value']} (limit {c.get('direction', '<=')} {c['limit']})")
    missing = s["server"].get("not_available") or {}
    if missing:
        from harness.load.crosscheck import CHECKS

        eng = s["server"].get("engine") or {}
        print(
            f"server cross-check ({eng.get('title', '?')} profile): not available: "
            f"{', '.join(CHECKS[k][0] if k in CHECKS else k for k in missing)} (see summary.md)"
        )
    for f in s["server"].get("flags", []):
        print(f"server cross-check: {f}")
    for w in s["client"]["warnings"]:
        print(f"client: {w}")
    print(f"report: {out / 'report.html'}")
    return 0 if s["ok"] else 1


def _api_key(name: str | None) -> str | None:
    """The key from the variable NAME (settings' one rule: a non-name, unset or empty variable is an error). Without
    --api-key-env a load test sends no key (it does not pick up HARNESS_API_KEY)."""
    return api_key_from_env(name) if name else None


def cmd_load(args) -> int:
    from harness.load.report import write_reports
    from harness.load.runner import OUTPUT_NAMES, Target, check_target, run_scenario
    from harness.load.scenario import load_scenario
    from harness.outputs import output_dir

    engine = getattr(args, "engine", None)
    if args.url:
        if len(args.args) != 1:
            raise UsageError("with --url give only SCENARIO (no MANIFEST)")
        scenario_path, manifest_path = args.args[0], None
        url = check_target(args.url, args.allow_remote)  # refuse before anything else happens
    else:
        if len(args.args) != 2:
            raise UsageError("give MANIFEST SCENARIO, or --url URL SCENARIO")
        manifest_path, scenario_path = args.args
    sc = load_scenario(scenario_path)
    key = _api_key(args.api_key_env)
    manifest = None
    if manifest_path is not None:
        from harness.manifest import load_manifest

        manifest = load_manifest(manifest_path)
        if engine and engine != manifest.engine.kind:
            raise UsageError(
                f"--engine {engine}: the manifest runs {profile_for(manifest.engine.kind).title} "
                f"({manifest.engine.kind}); --engine names the engine behind --url"
            )
    # Before any work (a launch, a request): never over an input, never over an earlier result without --force.
    out = output_dir(args.out, OUTPUT_NAMES, force=args.force, inputs=[scenario_path, manifest_path])
    progress = False if args.no_progress else None
    if manifest is None:
        target = Target(
            url,
            model=args.model,
            api_key=key,
            allow_remote=args.allow_remote,
            engine=engine,
            engine_source="--engine" if engine else None,
        )
        run_scenario(sc, target, out, progress=progress, force=args.force)
    else:
        from harness.launch.session import launch

        with launch(manifest, run_dir=out) as running:
            target = Target(
                running.base_url,
                model=args.model or getattr(running, "served_name", None),
                api_key=getattr(running, "api_key", None),
                engine=manifest.engine.kind,
                engine_source="manifest",
            )
            run_scenario(sc, target, out, progress=progress, force=args.force)
    s = write_reports(out)
    return _print_verdict(s, out)


def cmd_report(args) -> int:
    from harness.load.report import write_reports

    out = Path(args.dir)
    if not out.is_dir():
        raise DataError(
            f"{out}: {'not a directory' if out.exists() else 'no such directory'}; give a load output directory"
        )
    s = write_reports(out, getattr(args, "engine", None))
    return _print_verdict(s, out)
