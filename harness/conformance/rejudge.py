"""`harness conform --rejudge`: a saved run's cases judged again by their own code on the saved exchanges, no engine.

Kept apart from harness.conformance.evidence (which the context and the runner import to record) because it drives the
runner itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.conformance.evidence import (
    REPLAY_KEY,
    REPLAY_URL,
    EvidenceRecorder,
    ReplayTransport,
    index_number,
    load_store,
)

__all__ = ["rejudge"]


async def rejudge(run_dir: str | Path, exp: Any, *, on_result: Any = None, out: str | Path | None = None,
                  max_wall_s: float | None = None) -> Any:  # fmt: skip
    """The saved run's cases judged again by their own code on the saved exchanges (no engine). Each result carries
    `extra["rejudge"]` (the saved verdict, whether it is the same, whether the evidence sufficed); the report's engine
    block `rejudge` sums it up. With `out`, what was replayed is saved as OUT/evidence (so it can be judged again)."""
    from harness.conformance.context import MAX_STREAM_BYTES, MAX_STREAM_S
    from harness.conformance.runner import MAX_SUITE_S, new_ctx, run_suite

    store = load_store(run_dir)
    idx = store.index
    stream_s = index_number(idx, "max_stream_s", MAX_STREAM_S)
    replay = ReplayTransport(store, hang_s=stream_s + 5.0)
    recorder = EvidenceRecorder() if out is not None else None
    model = idx.get("model") if isinstance(idx.get("model"), str) else ""
    ctx = new_ctx(REPLAY_URL, exp, model=model, api_key=REPLAY_KEY if idx.get("api_key") is True else None,
                  transport=replay, evidence=recorder, max_stream_s=stream_s,
                  max_stream_bytes=int(index_number(idx, "max_stream_bytes", MAX_STREAM_BYTES)))  # fmt: skip
    saved = store.verdicts()
    engine = dict(idx.get("engine") or {}) if isinstance(idx.get("engine"), dict) else {}
    engine.update(url=f"rejudged from {run_dir}", model=model)
    reader: dict[str, list[str]] = {}  # case -> probes it read in the live run (from the index)
    for c in idx["cases"]:
        reader[c["id"]] = list(c.get("probes") or [])

    def annotate(res: Any) -> None:
        missed, repeated, cut = replay.log.for_case(res.id, reader.get(res.id, []))
        ok = not missed and not cut
        if not ok:
            what = []
            if missed:
                what.append(f"{len(missed)} request(s) had no saved answer ({', '.join(sorted(set(missed))[:3])})")
            if cut:
                what.append(f"{len(cut)} saved answer(s) were cut by the evidence cap")
            res.note = f"{res.note}; " if res.note else ""
            res.note += "not re-judged from the evidence: " + "; ".join(what)
        res.extra["rejudge"] = {"saved_verdict": saved.get(res.id), "same": saved.get(res.id) == res.verdict,
                                "rejudged": ok, "repeated_polls": repeated}  # fmt: skip
        if on_result is not None:
            on_result(res)

    report = await run_suite(ctx, engine_info=engine, on_result=annotate, ids=store.case_ids,
                             max_wall_s=max_wall_s or MAX_SUITE_S)  # fmt: skip
    ran = {r.id for r in report.results}
    report.engine["rejudge"] = {
        "from": str(run_dir),
        "cases": len(report.results),
        "same": sum(1 for r in report.results if r.extra["rejudge"]["same"]),
        "different": [r.id for r in report.results if not r.extra["rejudge"]["same"]],
        "not_rejudged": [r.id for r in report.results if not r.extra["rejudge"]["rejudged"]],
        "not_in_suite": [i for i in store.case_ids if i not in ran],  # saved cases this harness no longer has
    }
    if recorder is not None and out is not None:
        keep = ("expectations", "model", "api_key", "max_stream_s", "max_stream_bytes", "engine")
        recorder.write(out, report.results, {k: idx[k] for k in keep if k in idx})
    return report
