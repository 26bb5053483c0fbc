"""`harness run` stage "load": the short default scenario (loadtests/default.yaml) against the launched engine."""

from __future__ import annotations

from harness.errors import OutputError
from harness.load.report import stopped_by, write_reports
from harness.load.runner import Target, run_scenario
from harness.load.scenario import load_scenario
from harness.settings import LOADTESTS_DIR
from harness.stages import StageContext, StageResult

__all__ = ["run_stage", "DEFAULT_SCENARIO"]

DEFAULT_SCENARIO = LOADTESTS_DIR / "default.yaml"


def run_stage(ctx: StageContext) -> StageResult:
    sc = load_scenario(DEFAULT_SCENARIO)
    out = ctx.run_dir / "load"
    eng = ctx.engine
    target = Target(
        eng.base_url,
        model=getattr(eng, "served_name", None) or None,
        api_key=getattr(eng, "api_key", None),
        engine=ctx.manifest.engine.kind,
        engine_source="manifest",
    )
    try:
        run_scenario(sc, target, out, progress=False, force=ctx.force)  # `harness run` checked --out before launch
    except OutputError as exc:  # an earlier result in this run directory: a failed stage, not a lost result
        return StageResult(name="load", ok=False, summary=str(exc), data={"error": str(exc)})
    s = write_reports(out)
    m = s["metrics"]
    failed = [c["name"] for c in s["slo_checks"] if not c["ok"]]
    summary = (
        f"{m['requests']['ok']}/{m['requests']['total']} ok, stopped by {stopped_by(s)}, "
        f"TTFT p50 {(m['ttft_ms']['p50'] or 0):.0f} ms, ITL p50 {(m['itl_ms']['p50'] or 0):.1f} ms, "
        f"{(m['throughput']['output_tokens_per_s'] or 0):.0f} out tok/s"
        + (f"; SLO failed: {', '.join(failed)}" if failed else "")
        + (f"; aborted: {s['abort']['detail']}" if s.get("abort") else "")
        + (f"; {len(s['server']['flags'])} cross-check flag(s)" if s["server"].get("flags") else "")
    )
    return StageResult(
        name="load",
        ok=s["ok"],
        summary=summary,
        data={
            "report": str(out / "report.html"),
            "summary": str(out / "summary.json"),
            "stop_reason": s["stop_reason"],
            "abort": s.get("abort"),
            "slo_failed": failed,
            "cross_check_flags": s["server"].get("flags", []),
            "ttft_p50_ms": m["ttft_ms"]["p50"],
            "itl_p50_ms": m["itl_ms"]["p50"],
            "output_tokens_per_s": m["throughput"]["output_tokens_per_s"],
        },
    )
