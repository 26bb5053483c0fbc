"""The conformance vocabulary: levels, verdicts, what a check returns and what a case result records.

A check returns a `Check` (never raises): status pass / fail / skip / info / error, plus `behaviours`, every short
stable tag naming *what* deviated (e.g. "role-on-every-chunk"), in the order seen; `behaviour` is the first of them
(the primary). A check that scans many chunks collects its tags with `Deviations`. A tag names one exact shape
("role-on-every-chunk" is every later delta, "role-repeated" some of them), so a partial deviation never carries the
tag of the whole one. Expectation files declare quirks by these tags; the resolver (`expectations.resolve`) turns
(Check, expectation) into the final verdict, with B the tags a failing check saw and Q the declared quirk list:

    check pass  + no quirk declared                 -> pass
    check pass  + quirk declared                    -> quirk-absent (unexpected_pass=True): the engine did what the
                                                       reference asks, not what the expectation file says
    check fail  + B == set(Q)                       -> quirk
    an outcome the entry lists as known intermittent -> expected-intermittent (pass, or a fail with exactly the
                                                       listed tags: WPT's `expected: [FAIL, PASS]`; counted apart,
                                                       never a pass, never a failure)
    check fail  + a tag of B not in Q               -> fail, the first tag not covered as `behaviour`
    check fail  + B a strict subset of Q            -> fail: the declared shape did not happen in full
    check fail  + no quirk declared                 -> fail   (differs from both the reference and the expectation)
    skip / info / error / absent / inconclusive     -> unchanged (an expectation may force skip with a reason)

`absent`: the endpoint a case asks for is not served (HTTP 404 or 405 on its path, `absent_problem`). It is neither a
pass nor a fail: the matrix shows since when an endpoint exists, and `harness bisect --case` finds the release where
a case turned from absent into anything else. It never makes a suite not ok.

`inconclusive`: the server kept the contract as far as it was exercised, but the model did not do what the case
needs to judge the rest (it answered in text where a tool call was wanted; no reasoning came back). A case that
judges any model (the tools.auto.*, reasoning.* and structured.client.* cases off the scripted model) says so with
what the model did as evidence (`behaviour` names it, `actual` holds it). Never a pass, never a fail: like skip, it
never makes a suite not ok, and an upgrade that meets it on one side asks for a review, not a regression.

Exit codes: only fail and error make a suite not ok (`conform`, `check-stream`, `run` exit 1; a pytest item fails).
quirk-absent does not: the engine behaves like the reference, which no client is hurt by. It is counted
(`counts["quirk-absent"]`, `unexpected_passes`) and shown in every summary so the expectation file gets updated
(`harness update-expectations` drops it), and an upgrade that turns a quirk into quirk-absent is reported as "the engine
fixed it" (information, not blocking).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from enum import Enum
from typing import Any, Protocol

from harness.errors import DataError

__all__ = [
    "Level",
    "Verdict",
    "Check",
    "Evidence",
    "Deviations",
    "status_problem",
    "absent_problem",
    "ABSENT_STATUSES",
    "CaseHead",
    "CaseResult",
    "SuiteDocument",
    "REPORT_FORMAT",
    "REPEAT_FORMAT",
    "FAILING",
    "passed",
    "failed",
    "skipped",
    "info",
    "errored",
    "inconclusive",
    "finish_reason_tag",
    "KNOWN_FINISH_REASONS",
]

REPORT_FORMAT = 1  # conformance.json's shape; a file without `format` was written before the field existed (1 too)
REPEAT_FORMAT = 2  # a repeated run's (`conform --repeat N`, N > 1): format 1 plus `repeat`, at the top and per case


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
    QUIRK_ABSENT = "quirk-absent"  # a declared quirk did not happen (nor a known intermittent outcome): check passed
    ABSENT = "absent"  # the server does not serve the endpoint the case asks (404/405): data, not a failure
    INCONCLUSIVE = "inconclusive"  # the model did not do what the case needs (no call, no reasoning): what it did
    EXPECTED_INTERMITTENT = "expected-intermittent"  # an outcome the expectation lists as known intermittent


# verdicts that make a suite not ok (exit code 1); quirk-absent is counted and shown, never a failure
FAILING = frozenset({Verdict.FAIL.value, Verdict.ERROR.value})


@dataclass
class Evidence:
    """What one behaviour looked like where it was first seen, and how often it was seen."""

    expected: Any = None
    actual: Any = None
    chunk: int | None = None
    count: int = 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Check:
    status: Verdict
    behaviour: str = ""  # the primary tag: the first deviation (fail) or the observation (info)
    expected: Any = None
    actual: Any = None
    chunk: int | None = None  # index of the offending data chunk, if any
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    behaviours: tuple[str, ...] = ()  # every tag seen, in the order seen; behaviour is the first
    evidence: dict[str, Evidence] = field(default_factory=dict)  # per tag, when a check collected several

    def __post_init__(self) -> None:
        tags = tuple(dict.fromkeys(t for t in self.behaviours if t))
        if self.behaviour and self.behaviour not in tags:
            tags = (self.behaviour, *tags)
        self.behaviours = tags
        self.behaviour = self.behaviour or (tags[0] if tags else "")


class Deviations:
    """The collector for a check that scans many chunks or choices: `add` every deviation as it is seen, then
    `check()` is one fail carrying every tag (the first seen is primary, with its evidence), or `passed` when none."""

    def __init__(self) -> None:
        self._seen: dict[str, Evidence] = {}
        self._notes: list[str] = []

    def add(self, behaviour: str, expected: Any, actual: Any, chunk: int | None = None, note: str = "") -> None:
        if behaviour in self._seen:
            self._seen[behaviour].count += 1
            return
        self._seen[behaviour] = Evidence(expected, actual, chunk)
        if note:
            self._notes.append(note)

    def merge(self, check: Check) -> None:
        """Every tag of another check's fail (with its evidence), as if seen here."""
        if check.status is not Verdict.FAIL:
            return
        for tag in check.behaviours:
            ev = check.evidence.get(tag) or Evidence(check.expected, check.actual, check.chunk)
            if tag in self._seen:
                self._seen[tag].count += ev.count
            else:
                self._seen[tag] = Evidence(ev.expected, ev.actual, ev.chunk, ev.count)

    def __bool__(self) -> bool:
        return bool(self._seen)

    @property
    def behaviours(self) -> tuple[str, ...]:
        return tuple(self._seen)

    def check(self, otherwise: Check | None = None, note: str = "") -> Check:
        """The fail for what was seen; `otherwise` (default: a plain pass) when nothing was."""
        if not self._seen:
            return otherwise if otherwise is not None else passed(note)
        tags = self.behaviours
        first = self._seen[tags[0]]
        counts = [f"{t} x{e.count}" for t, e in self._seen.items() if e.count > 1]
        notes = [*self._notes, *([note] if note else []), *(["seen " + ", ".join(counts)] if counts else [])]
        return Check(Verdict.FAIL, tags[0], first.expected, first.actual, first.chunk, "; ".join(notes),
                     behaviours=tags, evidence=dict(self._seen))  # fmt: skip


def passed(note: str = "", **extra: Any) -> Check:
    return Check(Verdict.PASS, note=note, extra=extra)


def failed(
    behaviour: str | Sequence[str], expected: Any, actual: Any, chunk: int | None = None, note: str = "", **extra: Any
) -> Check:
    """A fail; `behaviour` is one tag or every tag seen (the first is primary)."""
    tags = (behaviour,) if isinstance(behaviour, str) else tuple(behaviour)
    return Check(Verdict.FAIL, tags[0] if tags else "", expected, actual, chunk, note, extra, behaviours=tags)


def skipped(reason: str) -> Check:
    return Check(Verdict.SKIP, note=reason)


def info(behaviour: str, actual: Any, note: str = "", **extra: Any) -> Check:
    return Check(Verdict.INFO, behaviour, actual=actual, note=note, extra=extra)


def errored(note: str) -> Check:
    return Check(Verdict.ERROR, note=note)


def inconclusive(behaviour: str, actual: Any, note: str = "", **extra: Any) -> Check:
    """The model did not do what the case needs (`behaviour` names what it did, `actual` shows it): no verdict."""
    return Check(Verdict.INCONCLUSIVE, behaviour, actual=actual, note=note, extra=extra)


# finish_reason values some engine is known to send, each a tag of its own (`finish-reason-eos_token` is a quirk an
# expectation file names): OpenAI's, TGI's, Anthropic's stop reasons, vLLM's and SGLang's abort/error.
KNOWN_FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call", "eos_token",
                                  "stop_sequence", "end_turn", "max_tokens", "tool_use", "pause_turn", "refusal",
                                  "abort", "error"})  # fmt: skip


def finish_reason_tag(value: Any) -> str:
    """The tag for a finish_reason that is not the one asked for. A tag is the harness's word, never the server's
    text (a newline or a megabyte in it would be a tag): any value not known is `finish-reason-other`, and the value
    itself goes into the check's `actual`."""
    if value is None or value == "":
        return "no-finish-reason"
    if not isinstance(value, str):
        return "finish-reason-not-a-string"
    return f"finish-reason-{value}" if value in KNOWN_FINISH_REASONS else "finish-reason-other"


def status_problem(trace: Any) -> Check | None:
    """A fail for any answer that is not HTTP 200, with the transport error or the start of the body as its note."""
    if trace.status != 200:
        body = trace.error or trace.body[:200].decode("utf-8", "replace")
        return failed(f"status-{trace.status}", 200, trace.status, note=body)
    return None


ABSENT_STATUSES = frozenset({404, 405})  # "no such route" / "not this method here": the release does not serve it


def absent_problem(trace: Any, what: str = "") -> Check | None:
    """`absent` when the server answered 404/405 at the route itself (not at a model it does not know: that 404 carries
    an error naming the model, which an absent route's default body does not), else None."""
    if trace.status not in ABSENT_STATUSES:
        return None
    body = trace.body[:400].decode("utf-8", "replace")
    if trace.status == 404 and "model" in body.lower():
        return None  # the route exists and refused the request's model: judged by the case, not absent
    where = what or str(getattr(trace, "url", "")).split("?")[0]
    return Check(Verdict.ABSENT, f"status-{trace.status}", actual=trace.status, note=f"not served: {where} -> "
                 f"HTTP {trace.status} {body[:120]}".strip())  # fmt: skip


class CaseHead(Protocol):
    """What judging a case needs to know of it (`expectations.resolve`): its id, level and requirement. The case itself
    (`harness.conformance.case.Case`, which also holds the code that runs against a server) stands above this module."""

    @property
    def id(self) -> str: ...
    @property
    def level(self) -> Level: ...
    @property
    def requirement(self) -> str: ...


@dataclass
class CaseResult:
    id: str
    level: str
    requirement: str
    verdict: str
    behaviour: str = ""  # the primary tag
    behaviours: list[str] = field(default_factory=list)  # every tag the check saw (reports before it: [behaviour])
    expected: Any = None
    actual: Any = None
    chunk: int | None = None
    note: str = ""
    quirk_reason: str = ""
    unexpected_pass: bool = False
    duration_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    # `conform --repeat N` (harness.conformance.repeat): {n, class, k, outcomes: [{verdict, behaviours, count, ...}]};
    # None (and not written) for a case judged once, so a run of one sample is the document it always was
    repeat: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.behaviour and not self.behaviours:
            self.behaviours = [self.behaviour]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.repeat is None:
            del d["repeat"]
        return d

    @classmethod
    def from_dict(cls, raw: object, where: str = "case") -> CaseResult:
        """A case result read back from JSON: every field checked, one DataError naming the field."""
        d = _object(raw, where, cls)
        verdicts = {v.value for v in Verdict}
        if d["verdict"] not in verdicts:
            raise DataError(f"{where}.verdict: must be one of {', '.join(sorted(verdicts))}, got {d['verdict']!r}")
        tags = _typed(d, "behaviours", list, where)
        if not all(isinstance(t, str) for t in tags):
            raise DataError(f"{where}: behaviours: must be a list of tags")
        return cls(
            id=_typed(d, "id", str, where), level=_typed(d, "level", str, where),
            requirement=_typed(d, "requirement", str, where), verdict=d["verdict"],
            behaviour=_typed(d, "behaviour", str, where), behaviours=tags, expected=d["expected"], actual=d["actual"],
            chunk=_typed(d, "chunk", (int, type(None)), where), note=_typed(d, "note", str, where),
            quirk_reason=_typed(d, "quirk_reason", str, where),
            unexpected_pass=_typed(d, "unexpected_pass", bool, where),
            duration_s=_seconds(d, "duration_s", where), extra=_typed(d, "extra", dict, where),
            repeat=_typed(d, "repeat", (dict, type(None)), where),
        )  # fmt: skip


@dataclass
class SuiteDocument:
    """What conformance.json holds: one suite run against one engine under one expectation file."""

    engine: dict[str, Any]  # name/kind/version/identity of a launched engine, or the (redacted) url attached to
    expectations: str
    started_at: float  # epoch seconds
    duration_s: float
    aborted: str | None  # why the rest was not run, if it was not
    counts: dict[str, int]  # verdict -> number of cases
    unexpected_passes: list[str]  # ids of declared quirks that did not happen (verdict quirk-absent)
    cases: list[CaseResult]
    ready_to_report_s: float | None = None  # `conform MANIFEST --out`: engine ready -> report written
    # the check asked after a failed case ("GET /v1/models == 200 with a JSON list (no engine profile)"); None in a
    # report written before the field existed
    liveness: str | None = None
    format: int = REPORT_FORMAT
    # `conform --repeat N`: {n, restart, stable, intermittent, unexpected} (format REPEAT_FORMAT); None: one sample
    repeat: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (key order as written since before `format`; `format` first)."""
        doc: dict[str, Any] = {"format": REPEAT_FORMAT if self.repeat is not None else self.format}
        for f in fields(self):
            optional = ("ready_to_report_s", "liveness", "repeat")
            if f.name == "format" or (f.name in optional and getattr(self, f.name) is None):
                continue
            doc[f.name] = [c.to_dict() for c in self.cases] if f.name == "cases" else getattr(self, f.name)
        return doc

    @classmethod
    def from_dict(cls, raw: object, where: str = "conformance report") -> SuiteDocument:
        """A document read back from JSON (or handed over as a dict): every field checked, one DataError naming it."""
        d = _object(raw, where, cls, optional=("format", "ready_to_report_s", "liveness", "repeat"))
        fmt = d.get("format", REPORT_FORMAT)
        repeat = _typed(d, "repeat", (dict, type(None)), where) if "repeat" in d else None
        if type(fmt) is not int or not 1 <= fmt <= REPEAT_FORMAT or (fmt == REPEAT_FORMAT) != (repeat is not None):
            raise DataError(f"{where}: format: this harness reads format {REPORT_FORMAT} (one sample per case) and "
                            f"{REPEAT_FORMAT} (a repeated run, with its `repeat`), got {fmt!r}")  # fmt: skip
        counts = _typed(d, "counts", dict, where)
        if not all(isinstance(k, str) and type(v) is int for k, v in counts.items()):
            raise DataError(f"{where}: counts: must map verdicts to whole numbers")
        passes = _typed(d, "unexpected_passes", list, where)
        if not all(isinstance(p, str) for p in passes):
            raise DataError(f"{where}: unexpected_passes: must be a list of case ids")
        cases = _typed(d, "cases", list, where)
        ready = d.get("ready_to_report_s")
        return cls(
            engine=_typed(d, "engine", dict, where), expectations=_typed(d, "expectations", str, where),
            started_at=_seconds(d, "started_at", where), duration_s=_seconds(d, "duration_s", where),
            aborted=_typed(d, "aborted", (str, type(None)), where), counts=counts, unexpected_passes=passes,
            cases=[CaseResult.from_dict(c, f"{where}: cases[{i}]") for i, c in enumerate(cases)],
            ready_to_report_s=None if ready is None else _seconds(d, "ready_to_report_s", where),
            liveness=_typed(d, "liveness", (str, type(None)), where) if "liveness" in d else None, format=fmt,
            repeat=repeat,
        )  # fmt: skip


# -- reading a document back: the shape checks ---------------------------------------------------------------------


def _object(raw: object, where: str, model: type, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """`raw` as a dict holding exactly the model's fields; one with a default (or named in `optional`) may be missing."""
    if not isinstance(raw, dict):
        raise DataError(f"{where}: must be an object, got {type(raw).__name__}")
    unknown = sorted(str(k) for k in set(raw) - {f.name for f in fields(model)})
    if unknown:
        raise DataError(f"{where}: unknown field {unknown[0]!r}")
    out = dict(raw)
    for f in fields(model):
        if f.name in out or f.name in optional:
            continue
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
        else:
            raise DataError(f"{where}: missing field {f.name!r}")
    return out


def _typed(d: dict[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = d[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):  # True is an int to isinstance
        raise DataError(f"{where}: {name}: wrong type {type(value).__name__}")
    return value


def _seconds(d: dict[str, Any], name: str, where: str) -> float:
    """A number of seconds; conformance.json stores a non-finite float as its repr ("nan", "inf"), so that too."""
    value = d[name]
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError(f"{where}: {name}: must be a number of seconds, got {type(value).__name__}")
    return float(value)
