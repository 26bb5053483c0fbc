"""`harness run` stage: the conformance suite against the engine the run launched. Writes
run_dir/conformance/{conformance.json,junit.xml}; engine misbehaviour is a failed result, never an exception."""

from __future__ import annotations

from harness.stages import StageContext, StageResult

__all__ = ["run_stage"]


def run_stage(ctx: StageContext) -> StageResult:
    from harness.conformance.expectations import default_expectation, load_expectations
    from harness.conformance.report import write_outputs
    from harness.conformance.runner import new_ctx, run_suite_sync

    m = ctx.manifest
    exp = load_expectations(default_expectation(m.engine.kind, m.engine.version))
    eng = ctx.engine
    c = new_ctx(
        eng.base_url, exp, api_key=getattr(eng, "api_key", None), model=getattr(eng, "served_name", ""), engine=eng
    )
    report = run_suite_sync(
        c, engine_info={"name": m.name, "kind": m.engine.kind, "version": m.engine.version, "identity": ctx.identity}
    )
    doc = report.to_dict()
    out = ctx.run_dir / "conformance"
    write_outputs(doc, out)
    n = doc["counts"]
    summary = (
        f"{len(doc['cases'])} cases: {n['pass']} pass, {n['fail']} fail, {n['quirk']} quirk, "
        f"{n['quirk-absent']} quirk-absent, {n['skip']} skip, {n['error']} error"
        + (f"; {report.aborted}" if report.aborted else "")
    )
    return StageResult(
        name="conformance",
        ok=report.ok,
        summary=summary,
        data={
            "counts": n,
            "report": str(out / "conformance.json"),
            "expectations": exp.name,
            "failed": [r.id for r in report.results if r.verdict in ("fail", "error")],
            "quirks": [r.id for r in report.results if r.verdict == "quirk"],
            "unexpected_passes": doc["unexpected_passes"],  # the quirk-absent cases (not failures)
        },
    )
