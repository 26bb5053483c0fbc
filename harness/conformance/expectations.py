"""Per engine-version expectations: data, not code (`manifests/expectations/<name>.yaml`).

    name: vllm-0.11
    engine: {kind: vllm, version: "0.11"}      # informational; matched by name, never branched on in code
    cases:                                      # a missing entry means: the OpenAI reference behaviour is expected
      chat.stream.role-once:
        quirk: role-on-every-chunk               # one tag or a list of tags (the Check.behaviour values)
        reason: "TGI repeats role on every delta"
        conditional: true                        # optional: the quirk shows only for some requests, so its
                                                 # absence is not reported as an unexpected pass
      auth.health-unguarded:
        skip: "..."                              # force a skip, with the reason
    metrics: {...}                              # the metrics contract (names/types/labels), read by metrics cases
    cancellation: {...}                         # which series prove that work stopped
    probes: {...}                               # engine-specific request extras the suite may send (data only)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.conformance.model import Case, CaseResult, Check, Verdict
from harness.errors import UsageError

__all__ = ["Expectations", "load_expectations", "resolve", "EXPECTATIONS_DIR", "available"]

EXPECTATIONS_DIR = Path(__file__).resolve().parents[2] / "manifests" / "expectations"


@dataclass
class Expectations:
    name: str
    cases: dict[str, dict[str, Any]] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    cancellation: dict[str, Any] = field(default_factory=dict)
    probes: dict[str, Any] = field(default_factory=dict)
    engine: dict[str, Any] = field(default_factory=dict)
    path: str = ""

    def quirks(self, case_id: str) -> list[str]:
        q = self.cases.get(case_id, {}).get("quirk")
        if q is None:
            return []
        return [str(x) for x in (q if isinstance(q, list) else [q])]

    def skip_reason(self, case_id: str) -> str | None:
        s = self.cases.get(case_id, {}).get("skip")
        return str(s) if s else None


def available() -> list[str]:
    return sorted(p.stem for p in EXPECTATIONS_DIR.glob("*.yaml"))


def load_expectations(name_or_path: str | Path | None) -> Expectations:
    """By name (`vllm-0.11`) from manifests/expectations/, or a path to a YAML file. None = pure reference."""
    if name_or_path is None or name_or_path == "openai":
        return Expectations(name="openai")
    p = Path(name_or_path)
    if not p.is_file() and (EXPECTATIONS_DIR / f"{name_or_path}.yaml").is_file():
        p = EXPECTATIONS_DIR / f"{name_or_path}.yaml"
    if not p.is_file():
        raise UsageError(f"no expectation file {name_or_path!r}; available: {', '.join(available()) or '(none)'}")
    try:
        raw = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"{p}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("cases", {}), dict):
        raise UsageError(f"{p}: must be a mapping with a 'cases' mapping")
    for cid, entry in (raw.get("cases") or {}).items():
        if not isinstance(entry, dict) or not ({"quirk", "skip"} & set(entry)):
            raise UsageError(f"{p}: cases.{cid}: needs 'quirk' (tag or list) or 'skip' (reason)")
        if "quirk" in entry and not entry.get("reason"):
            raise UsageError(f"{p}: cases.{cid}: a quirk needs a 'reason'")
    return Expectations(
        name=str(raw.get("name") or p.stem),
        cases=dict(raw.get("cases") or {}),
        metrics=dict(raw.get("metrics") or {}),
        cancellation=dict(raw.get("cancellation") or {}),
        probes=dict(raw.get("probes") or {}),
        engine=dict(raw.get("engine") or {}),
        path=str(p),
    )


def resolve(case: Case, check: Check, exp: Expectations, duration_s: float = 0.0) -> CaseResult:
    """Turn a raw check into the reported verdict, applying the declared expectation."""
    r = CaseResult(
        id=case.id,
        level=case.level.value,
        requirement=case.requirement,
        verdict=check.status.value,
        behaviour=check.behaviour,
        expected=check.expected,
        actual=check.actual,
        chunk=check.chunk,
        note=check.note,
        duration_s=round(duration_s, 4),
        extra=check.extra,
    )
    quirks = exp.quirks(case.id)
    entry = exp.cases.get(case.id, {})
    if check.status is Verdict.FAIL:
        if check.behaviour in quirks:
            r.verdict = Verdict.QUIRK.value
            r.quirk_reason = str(entry.get("reason", ""))
        elif case.level.value == "INFO":
            r.verdict = Verdict.INFO.value
    elif check.status is Verdict.PASS and quirks and not entry.get("conditional"):
        r.unexpected_pass = True
        r.quirk_reason = str(entry.get("reason", ""))
        r.note = (r.note + "; " if r.note else "") + f"expected quirk {'/'.join(quirks)} did not happen"
    return r
