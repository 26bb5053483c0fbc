"""Saved conformance results for the upgrade's unit tests: a conformance.json written as `harness conform --out` writes
it (SuiteDocument, one sample per case, or `--repeat N`'s merged samples), read back as the upgrade reads a side."""

from __future__ import annotations

import json
from pathlib import Path

from harness.conformance.model import CaseResult, SuiteDocument
from harness.conformance.repeat import merge_case
from harness.conformance.report import read_report
from harness.upgrade.collect import conformance_of

EXPECT = "vllm-0.11"


def result(cid: str, verdict: str, *tags: str, level: str = "MUST") -> CaseResult:
    return CaseResult(id=cid, level=level, requirement="r", verdict=verdict, behaviour=tags[0] if tags else "",
                      behaviours=list(tags))  # fmt: skip


def repeated(cid: str, samples: list[tuple[str, ...]], level: str = "MUST") -> CaseResult:
    """A case judged len(samples) times (each sample: the verdict, then its tags), merged as `conform --repeat` does."""
    return merge_case([result(cid, v, *tags, level=level) for v, *tags in samples], len(samples))


def save(path: Path, results: list[CaseResult]) -> Path:
    """conformance.json for these results (format 2 with `repeat` when any case was judged more than once)."""
    counts: dict[str, int] = {}
    for r in results:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    n = max((r.repeat or {}).get("n", 1) for r in results)
    doc = SuiteDocument(engine={"name": path.stem}, expectations=EXPECT, started_at=0.0, duration_s=1.0,
                        aborted=None, counts=counts, unexpected_passes=[], cases=results,
                        repeat={"n": n, "passes": n} if n > 1 else None)  # fmt: skip
    path.write_text(json.dumps(doc.to_dict()))
    return path


def side(path: Path) -> dict:
    """An upgrade side read from a saved conformance.json (collect.conformance_of over its cases)."""
    doc = read_report(path)
    return {"name": path.stem, "ok": True, "engine": {"version": "v"},
            "conformance": conformance_of(doc.cases, expectations=doc.expectations)}  # fmt: skip


def report(old: dict, new: dict, cmp: dict, verdict: dict) -> dict:
    """An upgrade.json document around these (what render_markdown and render_html read)."""
    return {"old": old, "new": new, "comparison": cmp, "verdict": verdict, "created_at": "t", "wall_seconds": 0,
            "settings": {"prompt_sets": [], "tolerance": 0.02, "margin": 0.1}}  # fmt: skip
