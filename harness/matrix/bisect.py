"""`harness bisect`: the first release whose observable differs from the --from release's.

`search(versions, evaluate, known)` is the algorithm, pure over an evaluator: releases whose cell already exists are
read first (free), so with a complete matrix the answer is exact even for an observable that changes and changes
back; the releases still unknown between the last known-same and the first known-different release are then
binary-searched, each evaluation running at most one cell. A release that cannot be observed (failed cell, surface not
captured) is skipped, as `git bisect skip` does. When the --to release and every known cell equal --from, the answer
is "no change", and the releases the search did not evaluate are listed (a change that reverted between them is
invisible to a binary search). `same` says when two values are the same observation: equality, or for a perf
figure, inside the noise bands (harness.matrix.observe.same_for).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BisectResult", "search"]

Evaluate = Callable[[str], tuple[bool, Any]]


@dataclass
class BisectResult:
    first_changed: str | None
    last_same: str | None
    reference: Any
    values: dict[str, Any] = field(default_factory=dict)  # every release evaluated (known), with its value
    skipped: list[str] = field(default_factory=list)  # evaluated but not observable
    ran: list[str] = field(default_factory=list)  # releases whose cell the search had to run
    unevaluated: list[str] = field(default_factory=list)
    error: str | None = None


def _equal(a: Any, b: Any) -> bool:
    return bool(a == b)


def search(
    versions: list[str],
    evaluate: Evaluate,
    known: dict[str, tuple[bool, Any]],
    *,
    mark_ran: Callable[[str], bool],
    same: Callable[[Any, Any], bool] = _equal,
) -> BisectResult:
    """versions: the range, --from first, --to last. known: {release: (observable?, value)} for existing cells.
    evaluate(release) -> (observable?, value), running the cell when needed; mark_ran(release) says if it did."""
    res = BisectResult(None, None, None)
    if len(versions) < 2:
        res.error = "the range holds fewer than two releases"
        return res
    state: dict[str, tuple[bool, Any]] = dict(known)

    def get(v: str) -> tuple[bool, Any]:
        if v not in state:
            state[v] = evaluate(v)
            if mark_ran(v):
                res.ran.append(v)
        ok, val = state[v]
        if ok:
            res.values[v] = val
        elif v not in res.skipped:
            res.skipped.append(v)
        return ok, val

    ok, ref = get(versions[0])
    if not ok:
        res.error = f"release {versions[0]} (--from) has no observation of this observable"
        return res
    res.reference = ref
    for v in versions:
        if v in state and state[v][0]:
            res.values[v] = state[v][1]
    differing = [v for v in versions[1:] if v in state and state[v][0] and not same(ref, state[v][1])]
    hi: int | None = versions.index(differing[0]) if differing else None
    if hi is None:
        for j in range(len(versions) - 1, 0, -1):  # --to, or the closest observable release before it
            ok, val = get(versions[j])
            if ok:
                if not same(ref, val):
                    hi = j
                break
        if hi is None:
            res.last_same = max((v for v in res.values), key=versions.index)
            res.unevaluated = [v for v in versions if v not in state]
            return res
    assert hi is not None
    lo = max(i for i in range(hi) if versions[i] in state and state[versions[i]][0])
    while True:
        between = [i for i in range(lo + 1, hi) if not (versions[i] in state and not state[versions[i]][0])]
        if not between:
            break
        mid = between[len(between) // 2]
        ok, val = get(versions[mid])
        if not ok:
            continue
        if same(ref, val):
            lo = mid
        else:
            hi = mid
    res.first_changed, res.last_same = versions[hi], versions[lo]
    res.unevaluated = [v for v in versions if v not in state]
    return res
