"""Compare the two sides of an upgrade, area by area: manifests (arguments, env, locked packages), golden outputs,
wire shape (response keys, system_fingerprint), metric surface, conformance side by side, /v1/models.
Pure over the collected sides and their recordings on disk; the verdict is `harness.upgrade.judge`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.engines import PROFILES, profile_for
from harness.errors import HarnessError, RefusedError
from harness.manifest import Manifest
from harness.secrets import shown_env_value
from harness.upgrade.model import MISSING, Comparison, Row, Side

__all__ = [
    "compare_sides",
    "manifest_changes",
    "golden_changes",
    "wire_changes",
    "metric_changes",
    "engine_change",
    "hidden_metric_search",
    "conformance_changes",
    "error_body_changes",
    "ERROR_BODY_FIELDS",
]


def _lock_changes(old: Manifest, new: Manifest) -> dict[str, Any]:
    from harness.envs import parse_lock

    if not (old.lock_path and new.lock_path):
        return {}
    a, b = parse_lock(old.lock_path), parse_lock(new.lock_path)
    changed = {k: [a[k], b[k]] for k in sorted(set(a) & set(b)) if a[k] != b[k]}
    return {
        "added": {k: b[k] for k in sorted(set(b) - set(a))},
        "removed": {k: a[k] for k in sorted(set(a) - set(b))},
        "changed": changed,
    }


def manifest_changes(old: Manifest, new: Manifest) -> dict[str, Any]:
    oa, na = list(old.server.args), list(new.server.args)
    oe, ne = dict(old.server.env), dict(new.server.env)
    return {
        "engine_version": [old.engine.version, new.engine.version],
        "args_added": [x for x in na if x not in oa],
        "args_removed": [x for x in oa if x not in na],
        "args_identical": oa == na,
        # compared on the real values, shown redacted: a token in server.env never reaches the report
        "env_changed": {
            k: [shown_env_value(k, oe.get(k)), shown_env_value(k, ne.get(k))]
            for k in sorted(set(oe) | set(ne))
            if oe.get(k) != ne.get(k)
        },
        "model_same": old.model.sha256 == new.model.sha256,
        "lock": _lock_changes(old, new),
        "python_runtime": [
            old.runtime.python.model_dump() if old.runtime.python else None,
            new.runtime.python.model_dump() if new.runtime.python else None,
        ],
    }


def golden_changes(old_dir: str, new_dir: str, *, tolerance: float, margin: float) -> dict[str, Any]:
    """The golden diff of the two recordings, or {"refused": why} when they cannot be compared."""
    from harness.golden.diff import diff_recordings
    from harness.golden.store import load_recording

    try:
        return diff_recordings(
            load_recording(old_dir), load_recording(new_dir), tolerance=tolerance, margin=margin
        ).to_json()
    except (RefusedError, HarnessError) as exc:
        return {"refused": str(exc)}


def _wire(rec_dir: str) -> dict[str, Any]:
    from harness.golden.store import load_recording

    rec = load_recording(rec_dir)
    keys: dict[str, set[str]] = {}
    fps: set[str] = set()
    for (_s, _pid), r in rec.prompts().items():
        keys.setdefault(r["endpoint"], set()).update(r.get("response_keys", []))
        if r.get("system_fingerprint"):
            fps.add(r["system_fingerprint"])
    return {"keys": {k: sorted(v) for k, v in keys.items()}, "system_fingerprints": sorted(fps)}


def wire_changes(old_dir: str, new_dir: str) -> dict[str, Any]:
    """Response keys added/removed per endpoint, and the system_fingerprints each side sent."""
    wo, wn = _wire(old_dir), _wire(new_dir)
    return {
        "wire": {
            ep: {
                "added": sorted(set(wn["keys"].get(ep, [])) - set(wo["keys"].get(ep, []))),
                "removed": sorted(set(wo["keys"].get(ep, [])) - set(wn["keys"].get(ep, []))),
            }
            for ep in sorted(set(wo["keys"]) | set(wn["keys"]))
        },
        "system_fingerprint": {"old": wo["system_fingerprints"], "new": wn["system_fingerprints"]},
    }


# the series an engine migration maps from the old engine's profile to the new one's (MetricNames fields, in order)
MAPPED_SERIES = (
    "kv_usage",
    "running",
    "waiting",
    "ttft",
    "itl",
    "queue_time",
    "prompt_tokens",
    "prompt_tokens_cached",
    "generation_tokens",
    "request_success",
    "prefix_hits",
    "prefix_queries",
    "preemptions",
    "cache_config",
)


def _kind(side: Side) -> str | None:
    kind = (side.get("engine") or {}).get("kind")
    return kind if isinstance(kind, str) and kind in PROFILES else None


def hidden_metric_search(new: Side, gone: list[str]) -> tuple[set[str], str]:
    """Which of `gone` still occur in the new engine's source, and one line saying where that was looked for: the
    site-packages directories of the new side's profile (`source_package_dirs`) in its Python environment, or why
    there was nowhere to look (the profile's notes["hidden_metrics"])."""
    from harness.metrics.surface import names_in_source

    kind = _kind(new)
    if kind is None:
        return set(), "hidden metrics not searched: the new side names no known engine kind"
    profile = profile_for(kind)
    if not profile.source_package_dirs:
        why = profile.notes.get("hidden_metrics") or f"the {profile.title} profile names no source package"
        return set(), f"hidden metrics not searched: {why}"
    if not new.get("env_dir"):
        return set(), f"hidden metrics not searched: the new {profile.title} has no Python environment here"
    env = Path(new["env_dir"])
    dirs = [d for name in profile.source_package_dirs for d in sorted(env.glob(f"lib/python*/site-packages/{name}"))]
    if not dirs:
        where = ", ".join(f"site-packages/{d}" for d in profile.source_package_dirs)
        return set(), f"hidden metrics not searched: no {where} in {env}"
    found: set[str] = set()
    for d in dirs:
        found |= names_in_source(d, [n for n in gone if n not in found])
    shown = ", ".join(str(d.relative_to(env)) for d in dirs)
    return found, f"hidden metrics searched for in the new environment's {shown}"


def _seen(name: str | None, surface: dict[str, Any]) -> bool:
    """Whether the series (a sample name) is in a surface (family names: a counter's `_total` is not part of it)."""
    return name is not None and (name in surface or name.removesuffix("_total") in surface)


def engine_change(old: Side, new: Side, old_kind: str, new_kind: str) -> dict[str, Any]:
    """An engine migration's metric section: every family differs by construction, so no per-family diff: the counts,
    and the series the harness reads mapped from the old engine's name to the new one's (None: the new has none)."""
    po, pn = profile_for(old_kind), profile_for(new_kind)
    so, sn = old["metrics"], new["metrics"]
    mapped = []
    for f in MAPPED_SERIES:
        a, b = getattr(po.metrics, f), getattr(pn.metrics, f)
        if a is None and b is None:
            continue
        mapped.append(
            {
                "series": f,
                "old": a,
                "new": b,
                "old_seen": _seen(a, so),
                "new_seen": _seen(b, sn),
                "note": pn.notes.get(f, "") if b is None else "",
            }
        )
    line = (
        f"metric families: engine change {po.title} -> {pn.title}: {len(so)} families on the old side, "
        f"{len(sn)} on the new; mapped series: "
        + ", ".join(f"{m['series']} {m['old'] or 'none'} -> {m['new'] or 'none'}" for m in mapped)
    )
    return {
        "engine_change": {
            "old": {"kind": old_kind, "title": po.title},
            "new": {"kind": new_kind, "title": pn.title},
            "mapped": mapped,
            "line": line,
        },
        "counts": {"old": len(so), "new": len(sn)},
    }


def metric_changes(old: Side, new: Side) -> dict[str, Any]:
    """The metric-surface diff; a metric gone from /metrics but still named in the new engine's source is hidden.
    Between two different engine kinds it is an engine change (`engine_change`), not a list of removed families."""
    from harness.metrics.surface import diff_surfaces

    ko, kn = _kind(old), _kind(new)
    if ko and kn and ko != kn:
        return engine_change(old, new, ko, kn)
    gone = sorted(set(old["metrics"]) - set(new["metrics"]))
    src, searched = hidden_metric_search(new, gone) if gone else (set(), "")
    out = diff_surfaces(old["metrics"], new["metrics"], src)
    if searched:
        out["hidden_search"] = searched
    return out


def conformance_changes(oc: dict[str, Any], nc: dict[str, Any]) -> dict[str, Any]:
    """Every case's verdict on both sides (both judged under the old engine's expectations); a case one side did not
    run is MISSING there, and a side that judged the case more than once adds its rate (`old_repeat`, `new_repeat`)."""
    if not (oc.get("available") and nc.get("available")):
        return {"not_run": oc.get("reason") or nc.get("reason") or "conformance unavailable"}
    rows = []
    for cid in sorted(set(oc["cases"]) | set(nc["cases"])):
        a, b = oc["cases"].get(cid, {}), nc["cases"].get(cid, {})
        row: Row = {
            "id": cid,
            "level": (a or b).get("level"),
            "old": a.get("verdict", MISSING),
            "new": b.get("verdict", MISSING),
            "old_behaviour": a.get("behaviour", ""),
            "new_behaviour": b.get("behaviour", ""),
            "new_note": b.get("note", ""),
        }
        for side, c in (("old", a), ("new", b)):
            if isinstance(c.get("repeat"), dict):
                row[f"{side}_repeat"] = c["repeat"]
        rows.append(row)
    out = {"expectations": oc.get("expectations"), "expectations_new": nc.get("expectations"), "cases": rows}
    bodies = error_body_changes(oc["cases"], nc["cases"])
    if bodies:
        out["error_bodies"] = bodies
    return out


# the fields of an error object compared old -> new (harness.conformance.cases.errors.error_body), and how much a
# change matters to a client: a client that branches on the shape, type, code, param or status breaks (review); the
# message's wording is shown (info)
ERROR_BODY_FIELDS = {
    "status": "review",
    "shape": "review",
    "type": "review",
    "code": "review",
    "param": "review",
    "message": "review",
    "message_prefix": "info",
}


def error_body_changes(old_cases: dict[str, Any], new_cases: dict[str, Any]) -> list[dict[str, Any]]:
    """Per error case (errors.*, auth.*, any case whose result carries an error body on both sides), every field of
    the error object that differs between the old and the new engine, whatever the verdicts say."""
    out = []
    for cid in sorted(set(old_cases) & set(new_cases)):
        a, b = old_cases[cid].get("error_body"), new_cases[cid].get("error_body")
        if not (isinstance(a, dict) and isinstance(b, dict)):
            continue
        fields = [
            {"field": f, "old": a.get(f), "new": b.get(f), "level": level}
            for f, level in ERROR_BODY_FIELDS.items()
            if a.get(f) != b.get(f)
        ]
        if fields:
            out.append({"id": cid, "fields": fields})
    return out


def compare_sides(
    old_m: Manifest, new_m: Manifest, old: Side, new: Side, *, tolerance: float, margin: float
) -> Comparison:
    cmp: Comparison = {"manifest": manifest_changes(old_m, new_m)}
    if new.get("arguments"):  # the pre-launch check of the flags against the new release (harness.upgrade.arguments)
        cmp["manifest"]["surface"] = new["arguments"]
    if old.get("golden_dir") and new.get("golden_dir"):
        cmp["golden"] = golden_changes(old["golden_dir"], new["golden_dir"], tolerance=tolerance, margin=margin)
        cmp.update(wire_changes(old["golden_dir"], new["golden_dir"]))
    if old.get("metrics") is not None and new.get("metrics") is not None:
        cmp["metrics"] = metric_changes(old, new)
    cmp["conformance"] = conformance_changes(old.get("conformance", {}), new.get("conformance", {}))
    mo = {m.get("id"): m for m in old.get("models", [])}
    mn = {m.get("id"): m for m in new.get("models", [])}
    cmp["models"] = {"old": list(mo.values()), "new": list(mn.values())}
    return cmp
