"""The case registry: `@case(...)` registers a live case; shape checks are registered per probe. Stable order.
It knows no case family: `harness.conformance.suite` imports them all (and so fills CASES)."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import Any

from harness.conformance.case import Case
from harness.conformance.model import Check, Level

__all__ = ["CASES", "FAULTS", "case", "shape_cases", "select", "select_faults"]

CASES: list[Case] = []
FAULTS: list[Case] = []  # opt-in cases that break the engine: never in the default suite, run last (select_faults)


def case(
    id: str,
    requirement: str,
    level: Level = Level.MUST,
    timeout_s: float = 60.0,
    fault: bool = False,
    needs: tuple[str, ...] = (),
):
    """Register a live case; `needs`: what the server must provide for the case to be selected (`select`)."""

    def deco(fn: Callable[[Any], Any]):
        if any(c.id == id for c in (*CASES, *FAULTS)):
            raise ValueError(f"duplicate case id {id}")
        (FAULTS if fault else CASES).append(Case(id, requirement, level, fn, timeout_s=timeout_s,
                                                 needs=frozenset(needs)))  # fmt: skip
        return fn

    return deco


def shape_cases(prefix: str, probe_name: str, checks: dict, kind: str) -> None:
    """Register one live case per pure shape check, all judged on the trace of one probe."""
    from harness.conformance.view import from_trace

    for name, (fn, level, req, kinds) in checks.items():
        if kind not in kinds:
            continue

        def make(fn=fn):
            async def run(ctx) -> Check:
                trace = await ctx.probe(probe_name)
                chk = fn(from_trace(trace))
                if trace.ended in ("timeout", "limit"):  # say which bound cut the stream these verdicts judge
                    chk.note = f"{chk.note}; " if chk.note else ""
                    chk.note += (
                        f"judged on the part of the {probe_name} stream read before the harness's bound: {trace.error}"
                    )
                return chk

            return run

        CASES.append(Case(f"{prefix}.{name}", req, level, make(), shape=fn, kind=kind))


def select(cases: list[Case], patterns: list[str] | None, provides: frozenset[str] | None = None) -> list[Case]:
    """The cases the patterns name (all without patterns), less those that need what the server does not provide
    (`Case.needs`; `provides` None: no filter, as for listing)."""
    if provides is not None:
        cases = [c for c in cases if c.needs <= provides]
    if not patterns:
        return cases
    return [c for c in cases if any(fnmatch.fnmatchcase(c.id, p) or c.id.startswith(p + ".") for p in patterns)]


def select_faults(patterns: list[str] | None) -> list[Case]:
    """The fault cases named on purpose, by a pattern that starts with `fault` (`fault`, `fault.*`, the id): a broad
    pattern (`*`, `chat`) never selects one, since a fault case breaks the engine for every case after it."""
    named = [p for p in patterns or [] if p.startswith("fault")]
    return select(FAULTS, named) if named else []
