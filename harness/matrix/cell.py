"""One matrix cell: one release locked (cached), installed, launched once, and its observables recorded.

A cell is DIR/cells/<release>.json. It is reused, with no install and no launch, when it was made for the same lock
hash, model hash, harness version and config (template, the release's settings, the suite: harness.matrix.run
config_sha256) (`reuse_decision`, a pure function); a release that cannot be locked, installed or started is a cell
too (status "failed", the stage, the reason, the log's tail and its error lines), never a crash of the matrix.
The observables (what the rows of the matrix are made of):
  conformance  {case id: {verdict, behaviours}} under the spec's expectation file (the baseline release's)
  metrics      {family: {type, labels, buckets}} of a /metrics scrape taken after the golden traffic
  wire_keys    {endpoint: [dotted key paths]} of the non-streaming golden responses
  flags        the release's argument surface when a capture is available, else {"captured": false, "reason"}
  golden_diff  the golden diff against the baseline release's recording (counts and per-prompt classes)
A cell is read once, by `load_cell`, and its whole shape checked there (CELL_SHAPE): what bisect and the pages then
read is of the type they expect, and a tampered cell is one DataError naming the file and the field.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import __version__
from harness.errors import DataError, HarnessError, IdentityMismatch, InstallError
from harness.outputs import atomic_write_text
from harness.readers import read_json
from harness.shown import strip_ansi

__all__ = [
    "CELL_FORMAT",
    "CellKey",
    "cell_path",
    "load_cell",
    "check_cell_shape",
    "CELL_SHAPE",
    "reuse_decision",
    "run_cell",
    "failed_cell",
    "metric_surface",
    "wire_keys_of",
    "golden_diff_summary",
    "preload_entries",
]

CELL_FORMAT = "harness-matrix-cell/1"
CellKey = dict[str, Any]  # {"lock_sha256", "model_sha256", "harness_version"}


def cell_path(out: Path, release: str) -> Path:
    return Path(out) / "cells" / f"{release}.json"


def load_cell(out: Path, release: str) -> dict[str, Any] | None:
    """The stored cell, or None when there is none; a cell file that is not a cell, or not of a cell's shape, is a
    DataError naming the file (and the field)."""
    p = cell_path(out, release)
    if not p.exists() and not p.is_symlink():
        return None
    doc = read_json(p, "matrix cell", max_bytes=32 << 20)
    if not isinstance(doc, dict) or doc.get("format") != CELL_FORMAT or doc.get("release") != release:
        raise DataError(f"{p}: not a matrix cell for release {release} (format {CELL_FORMAT})")
    check_cell_shape(doc, p)
    return doc


def _nullable(*types: str) -> dict[str, Any]:
    return {"type": [*types, "null"]}


def _map_of(value: dict[str, Any]) -> dict[str, Any]:
    return {"type": ["object", "null"], "additionalProperties": value}


def _list_of(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": ["array", "null"], "items": item}


def _object(**properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": ["object", "null"], "properties": properties}


_STR, _NUM, _INT, _BOOL = _nullable("string"), _nullable("number"), _nullable("integer"), _nullable("boolean")
# The shape of a cell as the matrix reads it (bisect, the pages, reuse). A field may be missing or null (the readers
# default it), and is of its type when present; fields not named here are kept and not read.
CELL_SHAPE: dict[str, Any] = {
    "type": "object",
    "required": ["format", "release", "status"],
    "properties": {
        "format": {"type": "string"},
        "release": {"type": "string"},
        "status": {"type": "string"},
        "key": _map_of(_STR),
        "stage": _STR,
        "reason": _STR,
        "log_tail": _STR,
        "log_errors": _list_of({"type": "string"}),
        "created_at": _STR,
        "identity": _object(version=_STR),
        "models": _list_of({}),
        "install": _object(env=_STR, fresh=_BOOL, installer=_STR, packages=_INT, install_seconds=_NUM),
        "timings": _map_of(_NUM),
        "env_preload": _list_of({"type": "string"}),
        "observables": _object(
            conformance=_object(
                available=_BOOL,
                expectations=_STR,
                reason=_STR,
                counts=_map_of(_INT),
                cases=_map_of(
                    {"type": "object", "properties": {"verdict": _STR, "behaviours": _list_of({"type": "string"})}}
                ),
            ),
            metrics=_map_of(
                {
                    "type": "object",
                    "properties": {
                        "type": _STR,
                        "labels": _list_of({"type": "string"}),
                        "buckets": _list_of({"type": "string"}),
                    },
                }
            ),
            wire_keys=_map_of({"type": "array", "items": {"type": "string"}}),
            flags=_object(captured=_BOOL, source=_STR, revision=_STR, reason=_STR, flags=_map_of({"type": "object"})),
        ),
        "perf": _object(
            scenario=_map_of({}),
            ready_s=_NUM,
            error=_STR,
            host=_map_of(_NUM),
            rounds=_list_of({"type": "object", "additionalProperties": _NUM}),
            figures=_map_of(
                {
                    "type": "object",
                    "properties": {"median": {"type": "number"}, "low": {"type": "number"}, "high": {"type": "number"}},
                }
            ),
        ),
        "lock": _object(committed=_BOOL, as_of=_STR, cutoff=_STR, locked_at=_STR),
        "drift": _object(of=_STR, packages=_map_of({"type": "array", "items": _STR})),
        "scripted": _object(
            args=_list_of({"type": "string"}),
            chosen=_map_of({"type": ["string", "boolean", "null"]}),
            notes=_list_of({"type": "string"}),
            ready_s=_NUM,
            golden_s=_NUM,
            conformance_s=_NUM,
            counts=_map_of(_INT),
            golden_dir=_STR,
            error=_STR,
            log_errors=_list_of({"type": "string"}),
            golden_errors=_map_of({"type": "string"}),
            golden_diff=_object(baseline=_STR, ok=_BOOL, refused=_STR, counts=_map_of(_INT), prompts=_map_of(_STR)),
        ),
        "golden_dir": _STR,
        "golden_diff": _object(baseline=_STR, ok=_BOOL, refused=_STR, counts=_map_of(_INT), prompts=_map_of(_STR)),
        "golden_errors": _map_of({"type": "string"}),
        "metrics_error": _STR,
        # where the cell ran: {"executor": "local"}, or a Ray node's id and address (harness.matrix.executors)
        "ran_on": _object(executor=_STR, node_id=_STR, node_ip=_STR, attempt=_INT),
        # judged again under a changed expectation file, with no engine started (harness.matrix.rejudge)
        "rejudged": _object(
            at=_STR,
            judged_under_sha256=_STR,
            entries=_list_of({"type": "string"}),
            changed=_list_of({"type": "string"}),
        ),
    },
}

_JSON_TYPES = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
               "number": "a number", "boolean": "true or false", "null": "null"}  # fmt: skip


def _json_type(value: Any) -> str:
    for name, py in (("null", type(None)), ("boolean", bool), ("integer", int), ("number", float), ("string", str),
                     ("array", list), ("object", dict)):  # fmt: skip
        if isinstance(value, py):
            return _JSON_TYPES[name]
    return type(value).__name__


def _field_path(parts: Any) -> str:
    """observables.metrics.<family>.buckets; a key from the file is shown escaped and cut short."""
    from harness.shown import shown

    return ".".join(f"[{p}]" if isinstance(p, int) else shown(p)[:80] for p in parts) or "(top level)"


@functools.cache
def _cell_validator() -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(CELL_SHAPE)


def check_cell_shape(doc: Any, path: object) -> None:
    """DataError("<file>: <field>: expected a <type>, got ...") naming one field not of CELL_SHAPE (the first by its
    path, so the same file always gives the same line)."""
    errors = sorted(_cell_validator().iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    if not errors:
        return
    e = errors[0]
    where = _field_path(e.absolute_path)
    if e.validator == "required":
        missing = next((f for f in e.validator_value if isinstance(doc, dict) and f not in doc), "?")
        raise DataError(f"{path}: {missing}: missing (a matrix cell names its format, release and status)")
    wanted = [t for t in ([e.validator_value] if isinstance(e.validator_value, str) else e.validator_value)
              if t != "null"]  # fmt: skip
    expected = " or ".join(_JSON_TYPES.get(t, t) for t in wanted)
    raise DataError(f"{path}: {where}: expected {expected}, got {_json_type(e.instance)}")


def make_key(lock_sha256: str | None, model_sha256: str, config_sha256: str | None = None) -> CellKey:
    """config_sha256: what else the rendered manifest depends on (the template's bytes, the release's settings, the
    expectation file's name), so that a changed template is never answered from an old cell."""
    key: CellKey = {"lock_sha256": lock_sha256, "model_sha256": model_sha256, "harness_version": __version__}
    if config_sha256 is not None:
        key["config_sha256"] = config_sha256
    return key


def reuse_decision(cell: dict[str, Any] | None, key: CellKey, *, retry_failed: bool = False) -> tuple[bool, str]:
    """(reuse?, why). Pure: a cell is reused when its key equals `key` (lock hash, model hash, harness version, and
    the config hash of the rendered manifest);
    a failed cell likewise unless retry_failed; a lock-stage failure (no lock hash yet) when the rest matches."""
    if cell is None:
        return False, "no cell yet"
    old = cell.get("key") or {}
    if cell.get("status") == "failed" and retry_failed:
        return False, f"failed at {cell.get('stage')} before; --retry-failed"
    if cell.get("status") == "failed" and cell.get("stage") == "lock" and key.get("lock_sha256") is None:
        same = all(old.get(k) == key.get(k) for k in ("model_sha256", "harness_version"))
        return (True, "lock failed before (same model, same harness)") if same else (False, "key changed")
    for k in ("lock_sha256", "model_sha256", "harness_version", "config_sha256"):
        if old.get(k) != key.get(k):
            return False, f"{k} changed ({str(old.get(k))[:12]} -> {str(key.get(k))[:12]})"
    if cell.get("status") not in ("ran", "failed"):
        return False, f"unknown status {cell.get('status')!r}"
    return True, "same lock, model, config and harness version"


def metric_surface(text: str) -> dict[str, dict[str, Any]]:
    """{family: {"type", "labels", "buckets"}}: the metric surface (harness.metrics.surface) plus each histogram's
    bucket bounds (the `le` values, in order, +Inf last)."""
    from harness.metrics.model import parse_exposition
    from harness.metrics.surface import surface_of

    expo = parse_exposition(text, where="/metrics")
    surface = surface_of(expo)
    out: dict[str, dict[str, Any]] = {}
    for name, entry in sorted(surface.items()):
        fam = expo.families.get(name)
        buckets: list[str] | None = None
        if fam is not None and fam.type == "histogram":
            les = {s.labels["le"] for s in fam.samples if "le" in s.labels}
            buckets = sorted(les, key=lambda x: float("inf") if x in ("+Inf", "Inf") else float(x))
        out[name] = {"type": entry["type"], "labels": entry["labels"], "buckets": buckets}
    return out


def wire_keys_of(recording_dir: Path) -> dict[str, list[str]]:
    """{endpoint: sorted key paths} over every non-streaming response of a golden recording."""
    from harness.golden.store import load_recording

    keys: dict[str, set[str]] = {}
    for _sp, rec in load_recording(recording_dir).prompts().items():
        keys.setdefault(str(rec["endpoint"]), set()).update(rec.get("response_keys", []))
    return {ep: sorted(v) for ep, v in sorted(keys.items())}


def golden_diff_summary(baseline_dir: Path, cell_dir: Path, baseline: str) -> dict[str, Any]:
    from harness.golden.diff import DEFAULT_MARGIN, DEFAULT_TOLERANCE
    from harness.upgrade.compare import golden_changes

    d = golden_changes(str(baseline_dir), str(cell_dir), tolerance=DEFAULT_TOLERANCE, margin=DEFAULT_MARGIN)
    if "refused" in d:
        return {"baseline": baseline, "refused": d["refused"]}
    return {
        "baseline": baseline,
        "ok": d.get("ok"),
        "counts": d.get("counts"),
        "prompts": {f"{p['set']}/{p['id']}": p.get("status") for p in d.get("prompts", []) if "set" in p},
    }


def _log_tail(path: Path, max_bytes: int = 3000) -> str:
    """The last bytes of an engine log (the cell keeps tails only, never whole logs)."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - max_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


_PREFIX = re.compile(r"^\s*(\(\w+ pid=\d+\)\s*)?((INFO|WARNING|ERROR|DEBUG) \d\d-\d\d [\d:]+ \[[^\]]*\]\s*)?")
_FINDING = re.compile(r"\b(\w+Error|\w+Exception)\b[:(]|\bnot found\b")


def log_findings(path: Path, limit: int = 8, max_bytes: int = 8 << 20) -> list[str]:
    """The distinct error lines of an engine log, in order (a release's root cause is often far above the tail:
    0.11.2's `vllm._C` fails to import with a libstdc++ ABI error 80 lines before the final RuntimeError)."""
    try:
        with path.open("rb") as f:
            text = f.read(max_bytes).decode("utf-8", "replace")
    except OSError:
        return []
    seen: list[str] = []
    for raw in text.splitlines():
        line = _PREFIX.sub("", strip_ansi(raw)).strip()
        if line.startswith(("File ", "raise ", "^")) or not _FINDING.search(line) or line in seen:
            continue
        seen.append(line[:400])
        if len(seen) >= limit:
            break
    return seen


def failed_cell(
    release: str, key: CellKey, stage: str, reason: str, log_tail: str = "", **extra: Any
) -> dict[str, Any]:
    return {
        "format": CELL_FORMAT,
        "release": release,
        "key": key,
        "status": "failed",
        "stage": stage,
        "reason": reason[:2000],
        "log_tail": (log_tail or "")[-3000:],
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **extra,
    }


def flags_revision(profile: Any) -> str:
    """Which capture made a cell's flags: the surface format and the engine profile's capture-code revision."""
    from harness.launch.argsurface import SURFACE_FORMAT

    rev = profile.surface_revision()
    return f"f{SURFACE_FORMAT}" + (f"-r{rev}" if rev else "")


def capture_flags(manifest: Any, env_dir: Path | None) -> dict[str, Any]:
    """The release's argument surface from its own parser, through the engine profile's `argument_surface` and the
    cache of harness/launch/argsurface.py (no engine starts); {"captured": False, "reason"} where it cannot be read."""
    try:
        from harness.launch.argsurface import SurfaceUnavailable, cached_surface
    except ImportError:
        return {
            "captured": False,
            "reason": "no argument-surface capture in this harness (harness/launch/argsurface.py)",
        }
    capture = getattr(manifest.profile, "argument_surface", None)
    if capture is None:
        return {"captured": False, "reason": f"the {manifest.engine.kind} profile has no argument_surface"}
    if env_dir is None or not Path(env_dir).is_dir():
        return {"captured": False, "reason": "no engine environment to read the parser from"}
    from harness.launch.surfaces import surface_key

    revision = flags_revision(manifest.profile)
    # the launch's own check of the manifest's flags caches the surface under this key (its environment, the capture
    # code's revision): one capture serves both, and a new capture code is a new capture, never an old one's cache
    key = surface_key(manifest) or f"{manifest.engine.kind}-{manifest.engine.version}-{revision}"
    try:
        surface = cached_surface(key, lambda: capture(Path(env_dir), manifest.engine.version))
    except SurfaceUnavailable as exc:
        return {"captured": False, "reason": exc.one_line()}
    except Exception as exc:  # noqa: BLE001 - a capture that fails is a finding of the cell
        return {"captured": False, "reason": f"capture failed: {type(exc).__name__}: {str(exc)[:300]}"}
    flags = surface.get("flags") if isinstance(surface, dict) else None
    if not isinstance(flags, dict):
        return {"captured": False, "reason": "the capture returned no flags"}
    return {
        "captured": True,
        "source": surface.get("source"),
        "revision": revision,
        "flags": {
            str(k): {
                f: v.get(f) for f in ("default", "choices", "nargs", "takes_value", "deprecated") if isinstance(v, dict)
            }
            for k, v in sorted(flags.items())
        },
    }


def preload_entries(manifest: Any, env_dir: Path) -> list[str] | None:
    """The LD_PRELOAD entries of the release's server env as the spec writes them: the environment's own path put
    back as {env_dir} (render_manifest filled it in), so no machine path enters a cell. None when nothing is
    preloaded."""
    server = getattr(manifest, "server", None)
    value = (getattr(server, "env", None) or {}).get("LD_PRELOAD")
    if not value:
        return None
    return [entry.replace(str(env_dir), "{env_dir}") for entry in re.split(r"[\s:]+", value) if entry]


def run_cell(release: str, manifest: Any, key: CellKey, out: Path, **options: Any) -> dict[str, Any]:
    """The cell of `_run_cell`, with this machine's directories put back as placeholders (harness.matrix.portable),
    so it reads the same wherever it was built."""
    from harness.matrix.portable import portable_cell

    return portable_cell(_run_cell(release, manifest, key, out, **options), out)


def _run_cell(
    release: str,
    manifest: Any,
    key: CellKey,
    out: Path,
    *,
    expectations: str,
    baseline: str,
    prompt_sets: list[str] | None = None,
    lock_seconds: float | None = None,
    perf: bool = True,
    scripted: Any = None,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Install, launch once, collect, stop; returns the cell (written by the caller). Never raises for the engine.
    `perf`: the bounded load in rounds after the other stages (the spec's `perf`). `scripted` (the spec's block):
    then a second launch with the scripted model and the release's parsers (harness.matrix.scripted)."""
    from harness.envs import ensure_env, env_for
    from harness.golden.prompts import resolve_prompt_sets
    from harness.matrix.apikey import cell_api_key
    from harness.matrix.perf import PERF_ROUNDS, run_perf
    from harness.upgrade.collect import collect_side

    t0 = time.perf_counter()
    timings: dict[str, Any] = {"lock_s": lock_seconds}
    work = Path(out) / "work" / release
    env = env_for(manifest)
    fresh = not env.marker.is_file()
    # which libraries the engine ran with (a release whose CPU worker needs tcmalloc and libiomp preloaded)
    preload = preload_entries(manifest, env.path)
    named: dict[str, Any] = {"env_preload": preload} if preload else {}
    try:
        t = time.perf_counter()
        ensure_env(manifest)
        timings["install_s"] = round(time.perf_counter() - t, 1)
    except (HarnessError, OSError) as exc:
        msg = exc.one_line() if isinstance(exc, HarnessError) else str(exc)
        return failed_cell(release, key, "install", msg, str(exc), timings=timings, **named)
    marker = json.loads(env.marker.read_text())
    install = {
        "env": env.path.name,
        "fresh": fresh,
        "installer": marker.get("installer", "pip"),
        "packages": marker.get("packages"),
        "install_seconds": marker.get("install_seconds"),
    }
    sets = resolve_prompt_sets(prompt_sets)
    say(f"[{release}] launching")

    def perf_stage(engine: Any) -> dict[str, Any]:  # last, on the live engine: a bounded load in rounds
        say(f"[{release}] perf: {PERF_ROUNDS} rounds of the fixed load")
        return run_perf(engine, work / "perf", ready_s=(getattr(engine, "identity", None) or {}).get("ready_seconds"))

    with cell_api_key(manifest):
        side = collect_side(manifest, work, sets, expectations=expectations, conformance=True, say=say,
                            keep_good_sets=True, extra=perf_stage if perf else None)  # fmt: skip
    timings["cell_s"] = round(time.perf_counter() - t0, 1)
    timings["ready_s"] = side.get("ready_seconds")
    timings["golden_s"] = side.get("golden_seconds")
    timings["conformance_s"] = side.get("conformance_seconds")
    if not side.get("ok"):
        err = str(side.get("error", "engine failed"))
        stage = "identity" if err.startswith(IdentityMismatch.__name__) else "launch"
        log = work / manifest.name / "run" / "engine.log"
        tail = str(side.get("log_tail") or "") or _log_tail(log)
        return failed_cell(
            release, key, stage, err, tail, timings=timings, install=install, log_errors=log_findings(log), **named
        )
    observables: dict[str, Any] = {}
    conf = side.get("conformance") or {}
    observables["conformance"] = {
        "available": bool(conf.get("available")),
        "expectations": conf.get("expectations", expectations),
        "reason": conf.get("reason"),
        "counts": conf.get("counts"),
        "cases": {
            cid: {"verdict": c.get("verdict"), "behaviours": sorted(c.get("behaviours") or [])}
            for cid, c in sorted((conf.get("cases") or {}).items())
        },
    }
    metrics_txt = work / manifest.name / "metrics.txt"
    observables["metrics"] = metric_surface(metrics_txt.read_text()) if metrics_txt.is_file() else {}
    # no recording (every golden set failed) means no golden_dir: Path("") would be the working directory
    rec_src = Path(side["golden_dir"]) if side.get("golden_dir") else None
    golden_dir = Path(out) / "golden" / release
    if golden_dir.exists():
        shutil.rmtree(golden_dir)  # a recording of an earlier run of this cell is not this run's
    if rec_src is not None and rec_src.is_dir():
        shutil.copytree(rec_src, golden_dir)
    try:
        observables["wire_keys"] = wire_keys_of(golden_dir) if golden_dir.is_dir() else {}
    except HarnessError as exc:  # a partial recording is a finding of the cell, not a crash of the matrix
        observables["wire_keys"] = {}
        side.setdefault("golden_errors", {})["(recording)"] = exc.one_line()
    t = time.perf_counter()
    observables["flags"] = capture_flags(manifest, env.path)
    timings["flags_s"] = round(time.perf_counter() - t, 1)
    scripted_doc: dict[str, Any] | None = None
    if scripted is not None:
        t = time.perf_counter()
        with cell_api_key(manifest):
            scripted_doc = scripted_stage(release, manifest, scripted, observables, work, golden_dir, expectations, say)
        timings["scripted_s"] = round(time.perf_counter() - t, 1)  # its launch, cases, recording and stop
    timings["total_s"] = round(time.perf_counter() - t0, 1)  # the whole cell: both launches
    identity = {k: v for k, v in (side.get("identity") or {}).items() if k not in ("base_url", "pid", "log")}
    cell = {
        "format": CELL_FORMAT,
        "release": release,
        "key": key,
        "status": "ran",
        "stage": "done",
        "reason": None,
        "identity": identity,
        "models": side.get("models"),
        "install": install,
        **named,
        "timings": timings,
        "observables": observables,
        "perf": side.get("extra"),
        **({"scripted": scripted_doc} if scripted_doc is not None else {}),
        "golden_dir": f"golden/{release}",
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    for k in ("metrics_error", "golden_errors"):
        if side.get(k):
            cell[k] = side[k]
    attach_golden_diff(cell, out, baseline)
    return cell


def scripted_stage(
    release: str,
    manifest: Any,
    scripted: Any,
    observables: dict[str, Any],
    work: Path,
    golden_dir: Path,
    expectations: str,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """The second launch (harness.matrix.scripted): its verdicts merged into observables["conformance"], its
    agentic recording's keys into observables["wire_keys"] as "scripted/<endpoint>", the recording kept as
    golden/<release>/scripted; returns what the cell says of the stage. A stage that fails is said in the cell
    ("error", with the log's error lines), never the loss of the first launch's observables."""
    from harness.golden.prompts import resolve_prompt_sets
    from harness.matrix.scripted import (
        SCRIPTED_ENDPOINT_PREFIX,
        merge_cases,
        scripted_args,
        scripted_case_ids,
        scripted_manifest,
    )
    from harness.upgrade.collect import collect_side

    args, chosen, notes = scripted_args(scripted.flags, observables.get("flags") or {})
    stage: dict[str, Any] = {"args": args, "chosen": chosen, "notes": notes}
    try:
        m = scripted_manifest(manifest, scripted.model_sha256, scripted.served_name, args)
        sets = resolve_prompt_sets(list(scripted.prompt_sets))
    except HarnessError as exc:
        stage["error"] = exc.one_line()
        return stage
    say(f"[{release}] scripted stage: launching with the scripted model {' '.join(args)}")
    side = collect_side(m, work, sets, expectations=expectations, conformance=True, say=say, keep_good_sets=True,
                        conformance_ids=scripted_case_ids())  # fmt: skip
    stage["ready_s"] = side.get("ready_seconds")
    stage["golden_s"] = side.get("golden_seconds")
    stage["conformance_s"] = side.get("conformance_seconds")
    if not side.get("ok"):
        stage["error"] = str(side.get("error", "engine failed"))
        stage["log_errors"] = log_findings(work / m.name / "run" / "engine.log")
        return stage
    conf = side.get("conformance") or {}
    if conf.get("available"):
        cases = conf.get("cases") or {}
        stage["counts"] = conf.get("counts")
        observables["conformance"] = merge_cases(observables.get("conformance") or {}, cases)
    else:
        stage["error"] = f"conformance: {conf.get('reason')}"
    if side.get("golden_errors"):
        stage["golden_errors"] = side["golden_errors"]
    rec = Path(side["golden_dir"]) if side.get("golden_dir") else None
    if rec is not None and rec.is_dir():
        shutil.copytree(rec, golden_dir / "scripted")
        stage["golden_dir"] = f"golden/{release}/scripted"
        try:
            for ep, keys in wire_keys_of(golden_dir / "scripted").items():
                observables.setdefault("wire_keys", {})[SCRIPTED_ENDPOINT_PREFIX + ep] = keys
        except HarnessError as exc:
            stage.setdefault("golden_errors", {})["(recording)"] = exc.one_line()
    return stage


def _diff_or_refusal(base: Path, own: Path, baseline: str, missing: str) -> dict[str, Any]:
    """The golden diff summary of `own` against `base`, or {"baseline", "refused"} when it cannot be made."""
    if not (base.is_dir() and own.is_dir()):
        return {"baseline": baseline, "refused": missing}
    try:
        return golden_diff_summary(base, own, baseline)
    except HarnessError as exc:
        return {"baseline": baseline, "refused": exc.one_line()}


def attach_golden_diff(cell: dict[str, Any], out: Path, baseline: str) -> bool:
    """Set cell["golden_diff"] (and the scripted stage's) against the baseline's recordings; True when it changed."""
    if cell.get("status") != "ran":
        return False
    base_dir, own = Path(out) / "golden" / baseline, Path(out) / "golden" / cell["release"]
    new = _diff_or_refusal(base_dir, own, baseline, "no recording of the baseline release in this matrix")
    changed = cell.get("golden_diff") != new
    cell["golden_diff"] = new
    stage = cell.get("scripted")
    if isinstance(stage, dict) and stage.get("golden_dir"):  # the scripted stage's recording, against the baseline's
        new_s = _diff_or_refusal(base_dir / "scripted", own / "scripted", baseline,
                                 "no scripted recording of the baseline release")  # fmt: skip
        changed = changed or stage.get("golden_diff") != new_s
        stage["golden_diff"] = new_s
    return changed


def write_cell(out: Path, cell: dict[str, Any]) -> Path:
    """DIR/cells/<release>.json; no absolute path of this machine and no terminal escape is written."""
    from harness.matrix.portable import portable_cell

    p = cell_path(out, cell["release"])
    p.parent.mkdir(parents=True, exist_ok=True)
    cell = portable_cell(cell, out)
    atomic_write_text(p, json.dumps(cell, indent=2, ensure_ascii=False, sort_keys=False, default=str) + "\n")
    return p


__all__ += ["attach_golden_diff", "write_cell", "make_key", "capture_flags", "InstallError"]
