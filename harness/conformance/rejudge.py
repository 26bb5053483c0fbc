"""`harness conform --rejudge`: a saved run's cases judged again by their own code on the saved exchanges, no engine.

Kept apart from harness.conformance.evidence (which the context and the runner import to record) because it drives the
runner itself."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any

from harness.conformance.evidence import (
    INDEX,
    REPLAY_KEY,
    REPLAY_URL,
    EvidenceRecorder,
    EvidenceStore,
    ReplayTransport,
    index_number,
    load_store,
)
from harness.errors import DataError, UsageError

__all__ = ["rejudge", "REPORT_NAME"]

REPORT_NAME = "conformance.json"  # the saved run's report: the cases its evidence must hold


def saved_cases(run_dir: str | Path, store: EvidenceStore) -> list[str]:
    """The saved run's case ids: the index's, which must be exactly those of RUN_DIR/conformance.json (a case cut out
    of the index would be a case that is quietly not judged again), and at least one (nothing judged is no pass)."""
    from harness.conformance.report import read_report

    where = f"{store.directory / INDEX}"
    ids = store.case_ids
    if not ids:
        raise DataError(f"{where}: cases: no case saved; nothing to judge again")
    report = Path(run_dir) / REPORT_NAME
    if not report.is_file():
        raise DataError(f"{run_dir}: no {REPORT_NAME} beside the evidence (the run's list of cases)")
    listed = [c.id for c in read_report(report).cases]
    missing = [i for i in listed if i not in set(ids)]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise DataError(f"{where}: cases: {missing[0]}{more}, a case of {report}, is not in the index")
    extra = [i for i in ids if i not in set(listed)]
    if extra:
        raise DataError(f"{where}: cases: {extra[0]} is not a case of {report}")
    return ids


def _saved_provides(engine: dict) -> frozenset[str]:
    """What the saved run's server provided (its report's engine.provides); anything but a list of names: nothing."""
    v = engine.get("provides")
    return frozenset(x for x in v if isinstance(x, str)) if isinstance(v, list) else frozenset()


def _saved_family(engine: dict) -> str | None:
    """The saved run's scripted parser family (its report's engine.scripted_family); anything but a family's name:
    none (the default scripted model's)."""
    from harness.models.families import FAMILIES

    v = engine.get("scripted_family")
    return v if isinstance(v, str) and v in FAMILIES else None


def chosen(ids: list[str], patterns: list[str] | None) -> list[str]:
    """The ids `-k` selects, by the registry's rule (a glob, or a prefix of whole dotted parts)."""
    if not patterns:
        return list(ids)
    return [i for i in ids if any(fnmatch.fnmatchcase(i, p) or i.startswith(p + ".") for p in patterns)]


async def rejudge(run_dir: str | Path, exp: Any, *, on_result: Any = None, out: str | Path | None = None,
                  max_wall_s: float | None = None, patterns: list[str] | None = None) -> Any:  # fmt: skip
    """The saved run's cases judged again by their own code on the saved exchanges (no engine). Each result carries
    `extra["rejudge"]` (the saved verdict, whether it is the same, whether the evidence sufficed); the report's engine
    block `rejudge` sums it up. With `out`, what was replayed is saved as OUT/evidence (so it can be judged again).
    `patterns` (-k) judges only the saved cases they select."""
    from harness.conformance.context import MAX_STREAM_BYTES, MAX_STREAM_S
    from harness.conformance.runner import MAX_SUITE_S, new_ctx, run_suite

    store = load_store(run_dir)
    idx = store.index
    where = str(store.directory / INDEX)
    ids = chosen(saved_cases(run_dir, store), patterns)
    if not ids:
        raise UsageError(f"-k {' '.join(patterns or [])}: selects none of the {len(store.case_ids)} saved cases")
    stream_s = index_number(idx, "max_stream_s", MAX_STREAM_S, where)
    replay = ReplayTransport(store)
    recorder = EvidenceRecorder() if out is not None else None
    model = idx.get("model") if isinstance(idx.get("model"), str) else ""
    saved_engine = idx.get("engine")
    saved_engine = saved_engine if isinstance(saved_engine, dict) else {}
    # a gateway run is judged again as one: its engine-side reads go to the replay as they went to the engine
    engine_url = REPLAY_URL if saved_engine.get("engine_url") else ""
    ctx = new_ctx(REPLAY_URL, exp, model=model, api_key=REPLAY_KEY if idx.get("api_key") is True else None,
                  transport=replay, evidence=recorder, max_stream_s=stream_s, engine_url=engine_url,
                  scripted_model=saved_engine.get("scripted_model") is True, provides=_saved_provides(saved_engine),
                  scripted_family=_saved_family(saved_engine),
                  max_stream_bytes=int(index_number(idx, "max_stream_bytes", MAX_STREAM_BYTES, where)))  # fmt: skip
    saved = store.verdicts()
    engine = dict(idx.get("engine") or {}) if isinstance(idx.get("engine"), dict) else {}
    engine.update(url=f"rejudged from {run_dir}", model=model)
    reader: dict[str, list[str]] = {}  # case -> probes it read in the live run (from the index)
    for c in idx["cases"]:
        reader[c["id"]] = list(c.get("probes") or [])

    def annotate(res: Any) -> None:
        missed, repeated, cut, short = replay.log.for_case(res.id, reader.get(res.id, []))
        ok = not missed and not cut and not short
        if not ok:
            what = []
            if missed:
                what.append(f"{len(missed)} request(s) had no saved answer ({', '.join(sorted(set(missed))[:3])})")
            if cut:
                what.append(f"{len(cut)} saved answer(s) were cut by the evidence cap")
            if short:
                what.append(f"{len(short)} saved answer(s) were read past where the live run stopped reading")
            res.note = f"{res.note}; " if res.note else ""
            res.note += "not re-judged from the evidence: " + "; ".join(what)
        res.extra["rejudge"] = {"saved_verdict": saved.get(res.id), "same": saved.get(res.id) == res.verdict,
                                "rejudged": ok, "repeated_polls": repeated}  # fmt: skip
        if on_result is not None:
            on_result(res)

    report = await run_suite(ctx, engine_info=engine, on_result=annotate, ids=ids, patterns=patterns,
                             max_wall_s=max_wall_s or MAX_SUITE_S)  # fmt: skip
    if not report.results:  # nothing judged is no pass
        raise DataError(f"{where}: cases: none of the {len(ids)} selected saved cases is a case of this harness")
    ran = {r.id for r in report.results}
    report.engine["rejudge"] = {
        "from": str(run_dir),
        "cases": len(report.results),
        "same": sum(1 for r in report.results if r.extra["rejudge"]["same"]),
        "different": [r.id for r in report.results if not r.extra["rejudge"]["same"]],
        "not_rejudged": [r.id for r in report.results if not r.extra["rejudge"]["rejudged"]],
        "not_in_suite": [i for i in ids if i not in ran],  # selected saved cases this harness no longer has
    }
    if recorder is not None and out is not None:
        keep = ("expectations", "model", "api_key", "max_stream_s", "max_stream_bytes", "engine")
        recorder.write(out, report.results, {k: idx[k] for k in keep if k in idx})
    return report
