"""Compare the two sides of an upgrade, area by area: manifests (arguments, env, locked packages), golden outputs,
wire shape (response keys, system_fingerprint), metric surface, conformance side by side, /v1/models.
Pure over the collected sides and their recordings on disk; the verdict is `harness.upgrade.judge`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.errors import HarnessError, RefusedError
from harness.manifest import Manifest
from harness.secrets import shown_env_value
from harness.upgrade.model import Comparison, Side

__all__ = [
    "compare_sides",
    "manifest_changes",
    "golden_changes",
    "wire_changes",
    "metric_changes",
    "conformance_changes",
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


def metric_changes(old: Side, new: Side) -> dict[str, Any]:
    """The metric-surface diff; a metric gone from /metrics but still named in the new engine's source is hidden."""
    from harness.metrics.surface import diff_surfaces, names_in_source

    gone = sorted(set(old["metrics"]) - set(new["metrics"]))
    src: set[str] = set()
    if new.get("env_dir"):
        sp = list(Path(new["env_dir"]).glob("lib/python*/site-packages/vllm"))
        if sp:
            src = names_in_source(sp[0], gone)
    return diff_surfaces(old["metrics"], new["metrics"], src)


def conformance_changes(oc: dict[str, Any], nc: dict[str, Any]) -> dict[str, Any]:
    """Every case's verdict on both sides (both judged under the old engine's expectations)."""
    if not (oc.get("available") and nc.get("available")):
        return {"not_run": oc.get("reason") or nc.get("reason") or "conformance unavailable"}
    rows = []
    for cid in sorted(set(oc["cases"]) | set(nc["cases"])):
        a, b = oc["cases"].get(cid, {}), nc["cases"].get(cid, {})
        rows.append(
            {
                "id": cid,
                "level": (a or b).get("level"),
                "old": a.get("verdict", "absent"),
                "new": b.get("verdict", "absent"),
                "old_behaviour": a.get("behaviour", ""),
                "new_behaviour": b.get("behaviour", ""),
                "new_note": b.get("note", ""),
            }
        )
    return {"expectations": oc.get("expectations"), "cases": rows}


def compare_sides(
    old_m: Manifest, new_m: Manifest, old: Side, new: Side, *, tolerance: float, margin: float
) -> Comparison:
    cmp: Comparison = {"manifest": manifest_changes(old_m, new_m)}
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
