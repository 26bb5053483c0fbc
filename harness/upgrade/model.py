"""The shapes the upgrade passes along (plain JSON-ready dicts, written as upgrade.json as they are):

Side        one engine's findings (collect.py): name, ok, engine, identity, golden_dir, metrics, models,
            conformance, timings; error and log_tail when it failed
Comparison  area by area (compare.py): manifest, golden, wire, system_fingerprint, metrics, conformance, models
Row         one conformance case on both sides (compare.conformance_changes): id, level, old, new (the verdicts, or
            MISSING), old_behaviour, new_behaviour, new_note; old_repeat / new_repeat where that side judged the case
            more than once (`conform --repeat N`): {n, class, k, outcomes: [{verdict, behaviours, count}]}
Reason      one finding of the verdict (judge.py): {"level": blocking|review|info, "text": ...}
Report      upgrade.json: format, old, new, comparison, verdict, settings, created_at, wall_seconds

A row is read through the functions below (the judge and both renderers): a side judged once is one sample (stable
1/1); a side is intermittent when its samples had more than one outcome, or one an expectation lists as known
intermittent (the verdict expected-intermittent).
"""

from __future__ import annotations

from typing import Any

__all__ = ["Side", "Comparison", "Row", "Reason", "Report", "MISSING", "EXPECTED_INTERMITTENT", "outcomes",
           "intermittent", "changed", "rates", "verdict_text"]  # fmt: skip

Side = dict[str, Any]
Comparison = dict[str, Any]
Row = dict[str, Any]
Reason = dict[str, str]
Report = dict[str, Any]

# A conformance row's value for a case that did not run on that side (another case set: another model or manifest),
# kept apart from the verdict `absent` (the endpoint is not served), which the judge reads as an endpoint the new
# engine dropped.
MISSING = "missing"
EXPECTED_INTERMITTENT = "expected-intermittent"  # harness.conformance.model.Verdict.EXPECTED_INTERMITTENT


def outcomes(row: Row, side: str) -> list[dict[str, Any]]:
    """The outcomes one side (`old` or `new`) saw for the case, each with its count: the repeated run's, else the one
    sample (its verdict and primary tag). Read from saved JSON as it is: an entry that is not an object is left out."""
    rep = row.get(f"{side}_repeat")
    seen = rep.get("outcomes") if isinstance(rep, dict) else None
    if isinstance(seen, list) and any(isinstance(o, dict) for o in seen):
        return [o for o in seen if isinstance(o, dict)]
    tag = row.get(f"{side}_behaviour") or ""
    return [{"verdict": row.get(side), "behaviours": [tag] if tag else [], "count": 1}]


def intermittent(row: Row, side: str) -> bool:
    """More than one outcome seen on that side, or an outcome declared known intermittent."""
    seen = outcomes(row, side)
    return len(seen) > 1 or any(o.get("verdict") == EXPECTED_INTERMITTENT for o in seen)


def changed(row: Row) -> bool:
    """The verdicts differ, or the verdicts seen over the samples do (pass 7/10, fail 3/10 against fail 10/10: the same
    most severe verdict, another behaviour)."""
    if row.get("old") != row.get("new"):
        return True
    return {str(o.get("verdict")) for o in outcomes(row, "old")} != {
        str(o.get("verdict")) for o in outcomes(row, "new")
    }


def rates(row: Row, side: str) -> str:
    """Every outcome of that side with its count: `pass 7/10, fail role-repeated 3/10` (one sample: `fail 1/1`)."""
    seen = outcomes(row, side)
    n = sum(o["count"] for o in seen if type(o.get("count")) is int)
    parts = []
    for o in seen:
        tags = o.get("behaviours")
        tags = "+".join(map(str, tags)) if isinstance(tags, list) else ""
        parts.append(f"{o.get('verdict')}{' ' + tags if tags else ''} {o.get('count')}/{n}")
    return ", ".join(parts)


def verdict_text(row: Row, side: str) -> str:
    """A side's verdict as the comparison tables show it: with every outcome's count where the side judged the case
    more than once or it is intermittent (`fail (pass 7/10, fail 3/10)`), else the verdict alone."""
    if row.get(f"{side}_repeat") or intermittent(row, side):
        return f"{row.get(side)} ({rates(row, side)})"
    return str(row.get(side))
