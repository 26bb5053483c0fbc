"""`harness run` stage: the conformance suite against the engine the run launched. Writes
run_dir/conformance/{conformance.json,junit.xml,conformance.html} and evidence/ (every case's exchanges, as
`harness conform --out` keeps them), so `harness conform --rejudge run_dir/conformance` judges the run again with no
engine. Engine misbehaviour is a failed result, never an exception."""

from __future__ import annotations

from harness.stages import StageContext, StageResult

__all__ = ["run_stage"]


def run_stage(ctx: StageContext) -> StageResult:
    from harness.conformance.evidence import EvidenceRecorder, run_settings
    from harness.conformance.expectations import default_expectation, load_expectations
    from harness.conformance.report import write_outputs
    from harness.conformance.runner import new_ctx, run_suite_sync

    m = ctx.manifest
    exp = load_expectations(default_expectation(m.engine.kind, m.engine.version))
    eng = ctx.engine
    key = getattr(eng, "api_key", None)
    evidence = EvidenceRecorder(api_key=key)  # the key is cut out of every stored byte
    c = new_ctx(eng.base_url, exp, api_key=key, model=getattr(eng, "served_name", ""), engine=eng, evidence=evidence)
    report = run_suite_sync(
        c, engine_info={"name": m.name, "kind": m.engine.kind, "version": m.engine.version, "identity": ctx.identity}
    )
    doc = report.to_dict()
    out = ctx.run_dir / "conformance"
    # the evidence first: conformance.html shows it, and --rejudge judges it (as `harness conform --out` writes them)
    evidence.write(out, report.results, run_settings(c, report.engine))
    write_outputs(doc, out)
    n = doc["counts"]
    summary = (
        f"{len(doc['cases'])} cases: {n['pass']} pass, {n['fail']} fail, {n['quirk']} quirk, "
        f"{n['quirk-absent']} quirk-absent, {n['skip']} skip, {n.get('inconclusive', 0)} inconclusive, {n['error']} error"
        + (f"; {report.aborted}" if report.aborted else "")
    )
    return StageResult(
        name="conformance",
        ok=report.ok,
        summary=summary,
        data={
            "counts": n,
            "report": str(out / "conformance.json"),
            "evidence": str(out / "evidence"),
            "expectations": exp.name,
            "failed": [r.id for r in report.results if r.verdict in ("fail", "error")],
            "quirks": [r.id for r in report.results if r.verdict == "quirk"],
            "unexpected_passes": doc["unexpected_passes"],  # the quirk-absent cases (not failures)
        },
    )
