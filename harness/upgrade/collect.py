"""One side of an upgrade: launch the engine of a loaded Manifest once and collect what the comparison needs.

Inside one launch: the golden prompt sets are recorded (DIR/<name>/golden/), /metrics is scraped after the golden
traffic (DIR/<name>/metrics.txt), /v1/models is read, and the conformance suite runs under the OLD engine's
expectations. An engine that fails to start or to answer is a finding of the report, never a crash of it.
"""

from __future__ import annotations

import shutil
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.client import make_sync_client, wire_errors
from harness.errors import HarnessError, WireError
from harness.manifest import Manifest
from harness.net import redact_url
from harness.outputs import atomic_write_text
from harness.upgrade.model import Side

if TYPE_CHECKING:
    import httpx

    from harness.conformance.model import CaseResult
    from harness.golden.prompts import PromptSet

__all__ = ["collect_side", "conformance_of"]


def conformance_of(
    results: Iterable[CaseResult],
    *,
    expectations: str,
    expectations_file: str | None = None,
    aborted: str | None = None,
) -> dict[str, Any]:
    """A side's conformance findings from its case results (a suite run's, or a saved conformance.json's `cases`):
    per case the verdict, level, tags, note and requirement, the error body an error case saw, and for a case judged
    more than once (`conform --repeat N`) its rate: `repeat` {n, class, k, outcomes: [{verdict, behaviours, count}]}."""
    from harness.conformance.model import Verdict

    cases: dict[str, Any] = {}
    counts = {v.value: 0 for v in Verdict}
    for r in results:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
        c = cases[r.id] = {"verdict": r.verdict, "level": r.level, "behaviour": r.behaviour,
                           "behaviours": list(r.behaviours), "note": r.note, "requirement": r.requirement}  # fmt: skip
        if isinstance(r.extra.get("error_body"), dict):  # the error seen, for error_body_changes
            c["error_body"] = r.extra["error_body"]
        if isinstance(r.repeat, dict):
            c["repeat"] = {k: r.repeat.get(k) for k in ("n", "class", "k")} | {
                "outcomes": [
                    {k: o.get(k) for k in ("verdict", "behaviours", "count")} for o in r.repeat.get("outcomes") or []
                ]
            }
    return {
        "available": True,
        "expectations": expectations,
        "expectations_file": expectations_file or "(the OpenAI reference)",
        "cases": cases,
        "counts": counts,
        "aborted": aborted,
    }


def _run_conformance(engine: Any, expectations: str, ids: list[str] | None = None) -> dict[str, Any]:
    """Per-case verdicts of the conformance suite (harness.conformance.runner) under `expectations` (`ids`: those
    cases only), or {"available": False, "reason"} when it cannot run. A broken suite is reported, never fatal to
    the upgrade report."""
    try:
        from harness.conformance.case import provided_by
        from harness.conformance.expectations import load_expectations
        from harness.conformance.runner import new_ctx, run_suite_sync
    except ImportError as exc:
        return {"available": False, "reason": f"conformance runner not available ({exc})"}
    try:
        exp = load_expectations(expectations)  # chosen (or refused) by run_upgrade before any launch: never a fallback
        m = engine.spec.manifest
        ctx = new_ctx(
            engine.base_url,
            exp,
            api_key=engine.spec.api_key(),
            model=m.model.served_name,
            engine=engine,
            provides=provided_by(m),
        )
        info = {"name": m.name, "kind": m.engine.kind, "version": m.engine.version}
        report = run_suite_sync(ctx, engine_info=info, ids=ids)
        found = conformance_of(
            report.results, expectations=exp.name, expectations_file=exp.path, aborted=report.aborted
        )
        family = report.engine.get("scripted_family")  # the parser family of a scripted model: its changes say so
        return {**found, "family": family} if isinstance(family, str) else found
    except Exception as exc:  # noqa: BLE001
        return {
            "available": False,
            "reason": f"conformance suite failed: {type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc()[-2000:],
        }


def _get(base: str, path: str, api_key: str | None) -> httpx.Response | None:
    """One GET; None when the engine does not answer (a finding the comparison reports, not an error)."""
    try:
        with make_sync_client(base, api_key=api_key, timeout=30) as http, wire_errors(base):
            return http.get(path)
    except WireError:
        return None


def collect_side(
    manifest: Manifest,
    out: Path,
    sets: list[PromptSet],
    *,
    expectations: str,
    conformance: bool,
    say: Callable[[str], None],
    keep_good_sets: bool = False,
    extra: Callable[[Any], Any] | None = None,
    conformance_ids: list[str] | None = None,
) -> Side:
    """Launch one engine and collect everything the comparison needs. Never raises for an engine failure.

    keep_good_sets (the matrix): a golden set that fails is left out of the recording and named in
    side["golden_errors"], and the other stages still run; otherwise (an upgrade) a recording is all or nothing.
    extra(engine) (the matrix's perf stage) runs last against the live engine; its result is side["extra"].
    conformance_ids: only those cases (the matrix's scripted stage)."""
    from harness.golden.record import record_with_engine
    from harness.launch.session import launch
    from harness.metrics.surface import surface_from_text

    side: Side = {
        "manifest": str(manifest.path),
        "name": manifest.name,
        "ok": False,
        "engine": {"kind": manifest.engine.kind, "version": manifest.engine.version},
    }
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
            failed: dict[str, str] | None = {} if keep_good_sets else None
            if failed is not None and rec_dir.exists():
                shutil.rmtree(rec_dir)  # an earlier run's set must not stand in for one that fails now
            record_with_engine(engine, manifest, sets, rec_dir, force=True, failed=failed)
            if failed is not None:
                side["golden_errors"] = failed
            if rec_dir.is_dir():  # none when every set failed
                side["golden_dir"] = str(rec_dir)
            side["golden_seconds"] = round(time.perf_counter() - t, 2)
            say(f"[{manifest.name}] scraping /metrics and /v1/models")  # the progress line's stage (harness.progress)
            key = engine.spec.api_key()
            r = _get(engine.base_url, "/metrics", key)
            if r is not None and r.status_code == 200:
                atomic_write_text(out / manifest.name / "metrics.txt", r.text)
                try:
                    side["metrics"] = surface_from_text(r.text)
                except HarnessError as exc:  # a scrape the parser refuses is a finding, not the loss of the side
                    side["metrics_error"] = exc.one_line()
            else:
                side["metrics_error"] = f"/metrics: {getattr(r, 'status_code', 'no answer')}"
            r = _get(engine.base_url, "/v1/models", key)
            if r is not None and r.status_code == 200:
                side["models"] = [
                    {k: m.get(k) for k in ("id", "max_model_len", "owned_by", "root")} for m in r.json().get("data", [])
                ]
            if conformance:
                say(f"[{manifest.name}] conformance suite under expectations {expectations}")
                t = time.perf_counter()
                side["conformance"] = _run_conformance(engine, expectations, conformance_ids)
                side["conformance_seconds"] = round(time.perf_counter() - t, 2)
            else:
                side["conformance"] = {"available": False, "reason": "not run (--no-conformance)"}
            if extra is not None:
                side["extra"] = extra(engine)
            if engine.spec.env_dir:
                side["env_dir"] = str(engine.spec.env_dir)
            side["ok"] = True
    except Exception as exc:  # noqa: BLE001 - an engine that fails is a finding of the report, not a crash
        msg = exc.one_line() if isinstance(exc, HarnessError) else str(exc)
        side["error"] = f"{type(exc).__name__}: {msg}"
        side["log_tail"] = (getattr(exc, "log_tail", "") or "")[-3000:]
    side["wall_seconds"] = round(time.perf_counter() - t0, 1)
    return side
