"""Repeated judgement (`harness conform --repeat N`): every case judged N times, and reported as the rate of each
outcome, never as one sample of a race.

The suite runs N passes (fresh requests each; with `--restart` a fresh engine launch each). After every case of every
pass the `RepeatLog` files the sample. An outcome is the verdict plus the sorted tags the check saw; the evidence of
the first sample of each distinct outcome is kept (the case's own evidence file holds the first sample, a later new
outcome gets `<case-id>#<sample>`), the exchanges of a sample whose outcome was already seen are dropped: N repeats
cost one evidence trace per outcome, not N.

Per case the merged result carries `repeat`: {n, class, k, typical, outcomes: [{verdict, behaviours, count, sample,
note, expected, actual, chunk, evidence}]}; `class` is `stable` (one outcome in N) or `intermittent k/N` (k samples
differ from the typical, most frequent, outcome). The case's verdict is its most severe sample's (an unexpected outcome
in any repeat makes the suite not ok, so a known-intermittent outcome must be declared, never retried away), and that
sample gives the result's detail fields.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from harness.conformance.evidence import OUTCOME_MARK
from harness.conformance.model import CaseResult, Verdict

__all__ = ["RepeatLog", "outcome_of", "merge_case", "class_text", "outcomes_text", "MAX_REPEAT", "SEVERITY",
           "UNEXPECTED"]  # fmt: skip

MAX_REPEAT = 100  # a bound on the passes one command makes (each is a whole suite)
# the most severe sample of a case gives its verdict: what would make a single run not ok comes first, then what asks
# for a review of the expectation file, then what is expected
SEVERITY = (Verdict.ERROR, Verdict.FAIL, Verdict.QUIRK_ABSENT, Verdict.INCONCLUSIVE, Verdict.EXPECTED_INTERMITTENT,
            Verdict.QUIRK, Verdict.INFO, Verdict.PASS, Verdict.ABSENT, Verdict.SKIP)  # fmt: skip
_RANK = {v.value: i for i, v in enumerate(SEVERITY)}
UNEXPECTED = frozenset({Verdict.FAIL.value, Verdict.ERROR.value, Verdict.QUIRK_ABSENT.value})  # not what was declared

Outcome = tuple[str, tuple[str, ...]]


def outcome_of(r: CaseResult) -> Outcome:
    """A sample's outcome: its verdict and the sorted tags its check saw."""
    return r.verdict, tuple(sorted(t for t in r.behaviours if t))


class RepeatLog:
    """The samples of every case over the passes of one repeated run, and the evidence of each distinct outcome.

    `add` is the runner's `on_result`: it is called after each case, with the case's exchanges (the liveness check
    after it included) in `recorder` under the case id; they are taken out and parked under the outcome's key, or
    dropped when the outcome was seen before. `finish` puts the parked exchanges back for the recorder to write."""

    def __init__(self, n: int, recorder: Any = None, *, restart: bool = False) -> None:
        self.n, self.recorder, self.restart = n, recorder, restart
        self.samples: dict[str, list[CaseResult]] = {}
        self.evidence: dict[tuple[str, Outcome], str] = {}  # (case, outcome) -> the evidence key of its first sample
        self._parked: dict[str, list[Any]] = {}
        self._new_in_pass: list[tuple[str, Outcome]] = []
        self.probes: dict[tuple[str, Outcome], list[str]] = {}  # (case, outcome) -> the shared probes of its sample
        self.passes: list[Any] = []  # the SuiteReport of each pass
        self.stopped = ""  # why fewer than n passes ran (a pass cut short, with no fresh launch after it)

    def add(self, res: CaseResult) -> None:
        samples = self.samples.setdefault(res.id, [])
        samples.append(res)
        key = res.id if len(samples) == 1 else f"{res.id}{OUTCOME_MARK}{len(samples)}"
        outcome = outcome_of(res)
        new = (res.id, outcome) not in self.evidence
        if new:
            self.evidence[(res.id, outcome)] = key
            self._new_in_pass.append((res.id, outcome))
        if self.recorder is None:
            return
        exchanges = self.recorder.exchanges.pop(res.id, [])
        self.recorder.stored.pop(res.id, None)  # the next sample starts the case's evidence cap afresh
        if new and exchanges:
            self._parked[key] = exchanges

    def end_pass(self) -> None:
        """After each pass: the shared probes it made (a probe serves many cases) are kept when a case that read them
        had an outcome not seen before (the first pass's as `probe:<name>`, a later one's as `probe:<name>#<pass>`),
        else dropped."""
        p = len(self.passes)
        new, self._new_in_pass = self._new_in_pass, []
        if self.recorder is None:
            return
        read = self.recorder.probes_read
        for key in [k for k in self.recorder.exchanges if k.startswith("probe:")]:
            exchanges = self.recorder.exchanges.pop(key)
            self.recorder.stored.pop(key, None)
            name = key[len("probe:") :]
            readers = [(cid, o) for cid, o in new if name in read.get(cid, [])]
            if not readers or not exchanges:
                continue
            kept = name if p <= 1 else f"{name}{OUTCOME_MARK}{p}"
            self._parked[f"probe:{kept}"] = exchanges
            for r in readers:
                self.probes.setdefault(r, []).append(kept)

    def finish(self) -> None:
        """The parked exchanges back in the recorder, each under its outcome's key (written as its own file)."""
        if self.recorder is None:
            return
        for key, exchanges in self._parked.items():
            for ex in exchanges:
                ex.key = key
            self.recorder.exchanges[key] = exchanges
            self.recorder.stored[key] = sum(len(ex.body) + len(ex.request_body) for ex in exchanges)
        self._parked = {}

    def merged(self) -> Any:
        """One SuiteReport for all the passes: per case the merged result, in the suite's order."""
        first = self.passes[0]  # a SuiteReport (harness.conformance.runner): the merged one is a copy of it
        out = dataclasses.replace(first, engine=dict(first.engine), results=[],
                                  duration_s=sum(p.duration_s for p in self.passes),
                                  aborted=next((p.aborted for p in self.passes if p.aborted), None))  # fmt: skip
        keys = {cid: {o: k for (c, o), k in self.evidence.items() if c == cid} for cid in self.samples}
        files = set(self._written_keys())
        out.results = [merge_case(s, self.n, {o: k for o, k in keys[cid].items() if k in files},
                                  {o: ps for (c, o), ps in self.probes.items() if c == cid})
                       for cid, s in self.samples.items()]  # fmt: skip
        classes = Counter("stable" if r.repeat and r.repeat["class"] == "stable" else "intermittent"
                          for r in out.results)  # fmt: skip
        out.repeat = {"n": self.n, "passes": len(self.passes), "restart": self.restart,
                      "stable": classes["stable"], "intermittent": classes["intermittent"],
                      "unexpected_samples": sum(1 for s in self.samples.values() for r in s
                                                if r.verdict in UNEXPECTED)}  # fmt: skip
        if self.stopped:
            out.repeat["stopped"] = self.stopped
        return out

    def _written_keys(self) -> list[str]:
        if self.recorder is None:
            return []
        return [k for k, exs in {**self.recorder.exchanges, **self._parked}.items() if exs]


def merge_case(samples: list[CaseResult], n: int, evidence: dict[Outcome, str] | None = None,
               probes: dict[Outcome, list[str]] | None = None) -> CaseResult:  # fmt: skip
    """One case's samples as one result: the most severe sample's fields, and `repeat` with every outcome's count
    (in the order first seen), the class, and the evidence of each outcome's first sample when kept (its key, and the
    shared probes it read)."""
    evidence, probes = evidence or {}, probes or {}
    counts = Counter(outcome_of(s) for s in samples)
    order = list(dict.fromkeys(outcome_of(s) for s in samples))
    typical = max(order, key=lambda o: counts[o])  # the first seen among the most frequent
    k = len(samples) - counts[typical]
    worst = min(samples, key=lambda s: _RANK.get(s.verdict, -1))  # a verdict this module does not know: first
    outcomes = []
    for o in order:
        s = next(x for x in samples if outcome_of(x) == o)
        outcomes.append({"verdict": o[0], "behaviours": list(o[1]), "count": counts[o],
                         "sample": samples.index(s) + 1, "note": s.note, "expected": s.expected, "actual": s.actual,
                         "chunk": s.chunk, "evidence": evidence.get(o), "probes": probes.get(o, [])})  # fmt: skip
    cls = "stable" if len(order) == 1 else "intermittent"
    rep = {"n": len(samples), "asked": n, "class": cls, "k": k, "rate": f"{k}/{len(samples)}",
           "typical": {"verdict": typical[0], "behaviours": list(typical[1])}, "outcomes": outcomes}  # fmt: skip
    return dataclasses.replace(worst, duration_s=round(sum(s.duration_s for s in samples), 4), repeat=rep,
                               behaviours=list(worst.behaviours), extra=dict(worst.extra))  # fmt: skip


def class_text(repeat: dict[str, Any] | None) -> str:
    """`stable` or `intermittent k/N` (empty for a case judged once)."""
    if not isinstance(repeat, dict):
        return ""
    return "stable" if repeat.get("class") == "stable" else f"intermittent {repeat.get('k')}/{repeat.get('n')}"


def outcomes_text(repeat: dict[str, Any] | None) -> str:
    """Every outcome with its count: `quirk think-markers-in-reasoning 3/5, expected-intermittent pass 2/5`."""
    if not isinstance(repeat, dict):
        return ""
    n = repeat.get("n")
    parts = []
    for o in repeat.get("outcomes") or []:
        tags = "+".join(o.get("behaviours") or [])
        parts.append(f"{o.get('verdict')}{' ' + tags if tags else ''} {o.get('count')}/{n}")
    return ", ".join(parts)
