"""Foundation subcommands: validate, install, model, up, ps, down, pin, run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.errors import UsageError
from harness.manifest import DEFAULT_MANIFEST, load_manifest
from harness.models.catalog import EMBEDDED_MODELS, FORMATS


def register(sub) -> None:
    p = sub.add_parser("validate", help="validate a manifest (schema, lock, pins; server.args against its release)")
    p.add_argument("manifest")
    p.add_argument(
        "--surface",
        action="store_true",
        help="check server.args against the flags of the release the manifest pins, read from its installed "
        "environment or build (no engine starts; without it they are checked only when that surface was read before)",
    )
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("install", help="build or verify the pinned engine environment")
    p.add_argument("manifest")
    p.set_defaults(func=cmd_install)

    models = "reference-tiny, scripted-tiny and a scripted model per parser family, smollm2-135m"
    p = sub.add_parser("model", help=f"the models the harness builds ({models})")
    msub = p.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    b = msub.add_parser("build", help="write an embedded tiny model (byte-identical everywhere)")
    b.add_argument("dir")
    b.add_argument("--model", choices=EMBEDDED_MODELS, default="reference-tiny", help="default: reference-tiny")
    b.add_argument("--format", choices=FORMATS, default="safetensors",
                   help="the format an engine profile reads (its model_format); default safetensors")  # fmt: skip
    b.add_argument("--force", action="store_true")
    b.set_defaults(func=cmd_model_build)
    h = msub.add_parser("hash", help="print a model directory's content hash")
    h.add_argument("dir")
    h.set_defaults(func=cmd_model_hash)

    p = sub.add_parser("up", help="run the engine in the foreground until Ctrl-C / SIGTERM")
    p.add_argument("manifest", nargs="?", default=str(DEFAULT_MANIFEST))
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("ps", help="list engines started by harness on this machine")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_ps)

    p = sub.add_parser("down", help="stop engines started by harness (by run id, or --all)")
    p.add_argument("run_id", nargs="*")
    p.add_argument("--all", action="store_true")
    p.set_defaults(func=cmd_down)

    p = sub.add_parser("pin", help="write the digest of the locally present image into a docker manifest")
    p.add_argument("manifest")
    p.set_defaults(func=cmd_pin)

    p = sub.add_parser("run", help="the main job: install, verify, launch, check, report, stop")
    p.add_argument("manifest", nargs="?", default=str(DEFAULT_MANIFEST))
    p.add_argument("--out", help="report directory (default reports/<run-id>); one holding an earlier run is refused"
                   " before the install and launch, unless --force")  # fmt: skip
    p.add_argument("--force", action="store_true", help="replace the earlier run in --out (run.json and each"
                   " stage's directory; one that is a symbolic link is never written through)")  # fmt: skip
    p.add_argument("--skip", action="append", default=[], help="skip a stage (conformance, golden, load)")
    p.set_defaults(func=cmd_run)


def cmd_validate(args) -> int:
    m = load_manifest(args.manifest)
    py, dk, src = m.runtime.python, m.runtime.docker, m.runtime.source
    if py is not None:
        rt = f"python {py.version}, lock {py.lock}"
    elif src is not None:
        rt = f"source {src.filename} sha256 {src.sha256[:12]}"
    else:
        rt = f"docker {dk.image}@{dk.digest}"
    surface_line = _validate_surface(m, capture=getattr(args, "surface", False))
    print(
        f"ok: {args.manifest}: {m.engine.kind} {m.engine.version}; {rt}; model {m.model.source} {m.model.sha256[:12]}"
    )
    if surface_line:
        print(surface_line)
    return 0


def _validate_surface(m, *, capture: bool) -> str:
    """server.args against the pinned release's own flags: a ManifestError naming the first flag it would not accept
    (exit 2, one line); '' when not checked (no surface read before, and no --surface)."""
    from harness.errors import ManifestError
    from harness.launch.argsurface import flag_tokens
    from harness.launch.surfaces import (
        SurfaceUnavailable,
        cached_release_surface,
        manifest_arg_problems,
        release_surface,
    )

    surface = cached_release_surface(m)
    if surface is None and capture:
        try:
            surface = release_surface(m, install=False)
        except SurfaceUnavailable as exc:
            raise UsageError(f"{m.path}: --surface: {exc}") from None
    if surface is None:
        return ""
    problems = manifest_arg_problems(m, surface)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ManifestError(m.path, "server.args", problems[0]["line"] + more)
    n = len(flag_tokens(surface, list(m.server.args)))
    return f"args: the {n} flags of server.args are accepted by {m.engine.kind} {m.engine.version}'s own parser"


def cmd_install(args) -> int:
    from harness.envs import ensure_env

    m = load_manifest(args.manifest)
    if m.runtime.source is not None:
        binary = m.profile.build_from_source(m.runtime.source, m.engine.version, build_lock=m.source_build_lock)
        print(f"ready: {binary} (source sha256 {m.runtime.source.sha256})")
        return 0
    if m.runtime.python is None:
        print(f"{args.manifest}: docker runtime; nothing to install (the image must be present locally)")
        return 0
    env = ensure_env(m)
    print(f"ready: {env.path} (lock sha256 {env.lock_hash})")
    return 0


def cmd_model_build(args) -> int:
    from harness.models.catalog import build_embedded

    print(build_embedded(args.model, args.format, Path(args.dir), force=args.force))
    return 0


def cmd_model_hash(args) -> int:
    from harness.hashing import tree_hash

    print(tree_hash(args.dir))
    return 0


def _identity_line(identity: dict) -> str:
    from harness.launch.session import runtime_pin

    pin = runtime_pin(identity, short=True)
    return (
        f"verified: {identity['engine']} {identity['version']}, model {identity['model_hash'][:12]}, {pin}, "
        f"served as {identity['served_name']} (ready in {identity['ready_seconds']} s)"
    )


def cmd_up(args) -> int:
    import signal
    import time

    from harness.launch.session import launch

    # Ctrl-C and SIGTERM both unwind through launch()'s cleanup, which stops the engine. SIGINT is set explicitly
    # because a harness started in the background begins with SIGINT ignored. Installed before anything starts, so a
    # signal arriving right after `ready:` is printed is still a clean stop.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    ready = False
    try:
        with launch(args.manifest) as engine:
            print(_identity_line(engine.identity), file=sys.stderr)
            # ready before the line goes out: a reader may send SIGTERM as soon as it sees it, while print returns
            ready = True
            print(f"ready: {engine.base_url}", flush=True)
            while engine.exit_status() is None:
                time.sleep(0.5)
            print(f"harness: error: engine exited with status {engine.exit_status()}", file=sys.stderr)
            print(engine.log_tail(), file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        print("engine stopped" if ready else "interrupted before the engine was ready; stopped it", file=sys.stderr)
        return 0 if ready else 130


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _all_running() -> list[dict]:
    from harness.launch import registry

    rows = [dict(e, alive=registry.alive(e)) for e in registry.entries() if e.get("kind") == "subprocess"]
    try:
        from harness.launch.containers import list_managed_containers

        rows += list_managed_containers()
    except ImportError:
        pass
    except Exception as exc:  # no daemon: subprocess engines are still listed
        if type(exc).__name__ != "DockerUnavailable":
            raise
    return rows


def cmd_ps(args) -> int:
    rows = _all_running()
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if not rows:
        print("no engines")
    for r in rows:
        where = r.get("base_url") or r.get("ports") or ""
        ident = f"pid {r['pid']}" if r.get("kind") == "subprocess" else f"container {str(r.get('id', ''))[:12]}"
        state = "running" if r.get("alive", True) else "stale"
        print(f"{r.get('run_id', '?')}  {r.get('kind')}  {ident}  {where}  {state}")
    return 0


def cmd_down(args) -> int:
    from harness.launch import registry
    from harness.procs import terminate_group

    if not args.all and not args.run_id:
        raise UsageError("say which run ids to stop, or --all")
    wanted = set(args.run_id)
    stopped = 0
    for e in registry.entries():
        if e.get("kind") != "subprocess" or not (args.all or e["run_id"] in wanted):
            continue
        if registry.alive(e):
            terminate_group(e["pid"], 20.0)
            stopped += 1
            print(f"stopped {e['run_id']} (pid {e['pid']})")
        registry.unregister(e["run_id"])
    try:
        from harness.launch.containers import remove_managed_containers

        if args.all:
            removed = remove_managed_containers()
        else:
            removed = sum((remove_managed_containers(run_id=r) for r in wanted), [])
        for c in removed:
            print(f"removed container {c}")
            stopped += 1
    except ImportError:
        pass
    except Exception as exc:
        if type(exc).__name__ != "DockerUnavailable":
            raise
        if args.all:
            print(f"note: {exc}", file=sys.stderr)
    if not stopped:
        print("nothing to stop")
    return 0


def cmd_pin(args) -> int:
    from harness.pin import pin_manifest

    digest = pin_manifest(args.manifest)
    print(f"pinned: {args.manifest}: digest {digest}")
    return 0


def cmd_run(args) -> int:
    from harness.run import run_main

    return run_main(args.manifest, out=args.out, skip=set(args.skip), force=args.force)
