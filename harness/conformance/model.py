"""The conformance vocabulary: levels, verdicts, what a check returns and what a case result records.

A check returns a `Check` (never raises): status pass / fail / skip / info / error, plus `behaviour`, a short stable tag
naming *what* deviated (e.g. "role-on-every-chunk"). Expectation files declare quirks by these tags; the resolver turns
(Check, expectation) into the final verdict:

    check pass  + no quirk declared       -> pass
    check pass  + quirk declared          -> pass, unexpected_pass=True (the engine fixed it)
    check fail  + behaviour declared      -> quirk
    check fail  + behaviour not declared  -> fail   (differs from both the reference and the expectation)
    skip / info / error                   -> unchanged (an expectation may force skip with a reason)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Awaitable, Callable

__all__ = ["Level", "Verdict", "Check", "Case", "CaseResult", "passed", "failed", "skipped", "info", "errored"]


class Level(str, Enum):
    MUST = "MUST"
    SHOULD = "SHOULD"
    INFO = "INFO"


class Verdict(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    QUIRK = "quirk"
    SKIP = "skip"
    INFO = "info"
    ERROR = "error"


@dataclass
class Check:
    status: Verdict
    behaviour: str = ""  # stable tag of the deviation (fail) or observation (info)
    expected: Any = None
    actual: Any = None
    chunk: int | None = None  # index of the offending data chunk, if any
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def passed(note: str = "", **extra: Any) -> Check:
    return Check(Verdict.PASS, note=note, extra=extra)


def failed(behaviour: str, expected: Any, actual: Any, chunk: int | None = None, note: str = "", **extra: Any) -> Check:
    return Check(Verdict.FAIL, behaviour, expected, actual, chunk, note, extra)


def skipped(reason: str) -> Check:
    return Check(Verdict.SKIP, note=reason)


def info(behaviour: str, actual: Any, note: str = "", **extra: Any) -> Check:
    return Check(Verdict.INFO, behaviour, actual=actual, note=note, extra=extra)


def errored(note: str) -> Check:
    return Check(Verdict.ERROR, note=note)


@dataclass(frozen=True)
class Case:
    id: str  # stable hierarchical id, e.g. chat.stream.role-first
    requirement: str  # one line: what a conformant server does
    level: Level
    run: Callable[[Any], Awaitable[Check]]  # live: run(ctx) -> Check
    shape: Callable[[Any], Check] | None = None  # pure check over a StreamView (check-stream uses it)
    kind: str = "chat"  # chat | completions | other: which recorded streams the shape check applies to
    timeout_s: float = 60.0


@dataclass
class CaseResult:
    id: str
    level: str
    requirement: str
    verdict: str
    behaviour: str = ""
    expected: Any = None
    actual: Any = None
    chunk: int | None = None
    note: str = ""
    quirk_reason: str = ""
    unexpected_pass: bool = False
    duration_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
