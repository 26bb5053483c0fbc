"""Per engine-version expectations: data, not code (`manifests/expectations/<name>.yaml`).

name: vllm-0.11
engine: {kind: vllm, version: "0.11"}      # informational; matched by name, never branched on in code. kind is an
                                            # engine profile's (vllm, tgi, llamacpp), whose knowledge the cases use
                                            # (identity endpoint, liveness), or `none` for a server the harness has no
                                            # profile for: {kind: none, name: llama-cpp-python, version: "0.3.36"}
cases:                                      # a missing entry means: the OpenAI reference behaviour is expected
  chat.stream.role-once:
    quirk: role-on-every-chunk               # one tag or a list of tags (Check.behaviours): the failing check
                                             # must see exactly these, all of them and nothing else
    reason: "TGI repeats role on every delta"
  reasoning.stream:
    quirk: think-markers-in-reasoning        # the typical outcome (no `quirk`: the typical outcome is a pass)
    reason: "..."
    intermittent:                            # known intermittent outcomes (WPT's `expected: [FAIL, PASS]`), each
      - outcome: pass                        # `pass`, or the exact tag(s) of a failing check
        rate: "3/5 (conform --repeat 5)"     # how often it was seen, or "rate not measured yet"
        evidence: "..."                      # what was seen, where
                                             # one of them -> expected-intermittent; any other -> unexpected
  auth.health-unguarded:
    skip: "..."                              # force a skip, with the reason
plain_model:                                # entries written as under `cases`, for a server whose model is not the
  tools.auto.message: {quirk: ..., reason: ...}  # scripted one: each replaces the `cases` entry of its id there
families:                                   # per parser family of the scripted models (harness.models.families):
  qwen3_coder:                              # entries written as under `cases`, each replacing the `cases` entry of
    tools.auto.stream: {quirk: ..., reason: ...}  # its id on that family's model; `reference: WHY` says the family
    tools.auto.required: {reference: "..."}       # behaves as the reference where `cases` declares a quirk
metrics: {...}                              # the metrics contract (names/types/labels), read by metrics cases
cancellation: {...}                         # which series prove that work stopped
probes: {...}                               # engine-specific request extras the suite may send (data only)
fault:                                      # opt-in fault cases (harness conform --fault NAME): bounds, outcomes
  engine-death: {streams_end_within_s: 30, health_down_within_s: 30, stream_ends: [error-event, closed]}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.conformance.model import CaseHead, CaseResult, Check, Verdict
from harness.errors import ManifestError, UsageError
from harness.models.families import FAMILIES
from harness.readers import read_yaml
from harness.settings import EXPECTATIONS_DIR

__all__ = [
    "Expectations",
    "load_expectations",
    "resolve",
    "EXPECTATIONS_DIR",
    "available",
    "default_expectation",
    "required_expectation",
    "series_name",
    "outcome_tags",
    "outcome_name",
    "PASS_OUTCOME",
]


@dataclass
class Expectations:
    name: str
    cases: dict[str, dict[str, Any]] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    cancellation: dict[str, Any] = field(default_factory=dict)
    probes: dict[str, Any] = field(default_factory=dict)
    engine: dict[str, Any] = field(default_factory=dict)
    fault: dict[str, Any] = field(default_factory=dict)
    path: str = ""
    plain_model: dict[str, dict[str, Any]] = field(default_factory=dict)
    families: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def for_model(self, scripted: bool, family: str | None = None) -> Expectations:
        """The entries that judge the server's model: on any model but the scripted one, each `plain_model` entry in
        place of the `cases` entry of its id (a tools.auto case refused by a server without a tool parser is not the
        scripted model's parser quirk); on a scripted model, `cases` with its family's entries in place (an entry
        `reference: WHY` drops the case's entry: that family behaves as the reference)."""
        if not scripted:
            return replace(self, cases={**self.cases, **self.plain_model}) if self.plain_model else self
        overlay = self.families.get(family or "", {})
        if not overlay:
            return self
        merged = {**self.cases, **overlay}
        return replace(self, cases={k: v for k, v in merged.items() if "reference" not in v})

    def quirks(self, case_id: str) -> list[str]:
        q = self.cases.get(case_id, {}).get("quirk")
        if q is None:
            return []
        return [str(x) for x in (q if isinstance(q, list) else [q])]

    def skip_reason(self, case_id: str) -> str | None:
        s = self.cases.get(case_id, {}).get("skip")
        return str(s) if s else None

    def intermittent(self, case_id: str) -> list[tuple[frozenset[str], dict[str, Any]]]:
        """The known intermittent outcomes of a case: (its tags, empty for `pass`; the entry with rate and evidence)."""
        return [(outcome_tags(o["outcome"]), o) for o in self.cases.get(case_id, {}).get("intermittent") or []]


PASS_OUTCOME = "pass"  # the outcome of a check that passed; any other outcome is a failing check's exact tags


def outcome_tags(outcome: str | list[str]) -> frozenset[str]:
    """An `outcome:` as written (`pass`, a tag, a list of tags) as a set of tags (empty for pass)."""
    if outcome == PASS_OUTCOME:
        return frozenset()
    return frozenset([outcome] if isinstance(outcome, str) else outcome)


def outcome_name(tags: frozenset[str] | list[str] | tuple[str, ...]) -> str:
    """One outcome said in one word: `pass`, or the sorted tags joined by `+`."""
    return "+".join(sorted(tags)) or PASS_OUTCOME


def available() -> list[str]:
    return sorted(p.stem for p in EXPECTATIONS_DIR.glob("*.yaml"))


def series_name(kind: str, version: str) -> str:
    """The most general expectation name the engine's profile would look for (its series, else the exact version)."""
    from harness.engines import profile_for

    return profile_for(kind).expectation_names(version)[-1]


def default_expectation(kind: str, version: str) -> str:
    """The expectation file for an engine version, as its profile chooses: the exact version's, then its series'.
    Never silently the plain OpenAI reference: without a file this refuses, naming what it looked for; pass
    `--expect openai` to judge against the reference on purpose."""
    from harness.engines import profile_for

    names = available()
    wanted = profile_for(kind).expectation_names(version)
    for cand in wanted:
        if cand in names:
            return cand
    looked = " or ".join(f"{EXPECTATIONS_DIR.name}/{w}.yaml" for w in wanted)
    raise UsageError(
        f"no expectation file for {kind} {version}: looked for {looked}; write one, or pass --expect openai to judge "
        f"against the plain OpenAI reference (available: {', '.join(names) or 'none'})"
    )


def required_expectation(name: str | None, *, option: str = "--expect", target: str = "--url") -> str:
    """The expectation name given for a server of unknown kind (`conform --url`, the pytest plugin's --harness-url),
    or a UsageError: such a server is never judged by the plain OpenAI reference silently, only with `openai` named.
    `option` and `target` are the caller's spellings (the flag that names the file, where the URL came from)."""
    if name:
        return name
    raise UsageError(
        f"{option} NAME is required with {target} (`{option} openai` judges by the plain OpenAI reference)"
    )


def load_expectations(name_or_path: str | Path | None) -> Expectations:
    """By name (`vllm-0.11`) from manifests/expectations/, or a path to a YAML file. None = pure reference.
    Read through the bounded YAML reader; every malformed field is one ManifestError naming the file and field."""
    if name_or_path is None or name_or_path == "openai":
        return Expectations(name="openai")
    p = Path(name_or_path)
    named = EXPECTATIONS_DIR / f"{name_or_path}.yaml"
    if not p.is_file() and named.is_file():
        p = named
    if not p.exists():
        raise UsageError(f"no expectation file {str(name_or_path)!r}; available: {', '.join(available()) or '(none)'}")
    raw = read_yaml(p, "expectation")
    raw = {} if raw is None else raw
    _validate(raw, p)
    return Expectations(
        name=str(raw.get("name") or p.stem),
        cases={k: dict(v) for k, v in (raw.get("cases") or {}).items()},
        metrics=dict(raw.get("metrics") or {}),
        cancellation=dict(raw.get("cancellation") or {}),
        probes=dict(raw.get("probes") or {}),
        engine=dict(raw.get("engine") or {}),
        fault={k: dict(v or {}) for k, v in (raw.get("fault") or {}).items()},
        path=str(p),
        plain_model={k: dict(v) for k, v in (raw.get("plain_model") or {}).items()},
        families={
            f: {k: dict(v) for k, v in (cases or {}).items()} for f, cases in (raw.get("families") or {}).items()
        },
    )


SECTIONS = ("name", "engine", "cases", "plain_model", "families", "metrics", "cancellation", "probes", "fault")
CASE_KEYS = {"quirk", "reason", "skip", "intermittent", "reference"}
OUTCOME_KEYS = ("outcome", "rate", "evidence")
CONDITIONAL_GONE = ("`conditional` is gone: write the outcomes seen, the typical one as `quirk:` (none: a pass) and "
                    "each other as `intermittent: [{outcome: pass | TAG | [TAGS], rate: 'k/N ...', evidence: '...'}]`"
                    " (README: known-intermittent outcomes)")  # fmt: skip
# fault name -> its keys (harness.conformance.cases.death reads them); a number of seconds, a count, or data
FAULT_KEYS = {
    "engine-death": ("streams_end_within_s", "health_down_within_s", "streams", "stream_ends", "request", "reason")
}
STREAM_ENDS = ("error-event", "closed")


def _validate(raw: Any, p: Path) -> None:
    """The shape every reader of an expectation file relies on; names the first field that breaks it."""

    def need(ok: bool, where: str, message: str) -> None:
        if not ok:
            raise ManifestError(p, where, message)

    def names(v: Any) -> bool:
        return isinstance(v, list) and all(isinstance(x, str) and x for x in v)

    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    def mapping(v: Any, where: str, optional: bool = True) -> dict:
        need(isinstance(v, dict) or (optional and v is None), where, f"must be a mapping, got {type(v).__name__}")
        need(all(isinstance(k, str) and k for k in (v or {})), where, "every key must be a non-empty string")
        return v or {}

    mapping(raw, "(top level)", optional=False)
    unknown = sorted(set(raw) - set(SECTIONS))
    need(not unknown, unknown[0] if unknown else "", f"unknown section (known: {', '.join(SECTIONS)})")
    need(
        raw.get("name") is None or (isinstance(raw["name"], str) and raw["name"].strip() == raw["name"] != ""),
        "name",
        "must be a non-empty single-line string",
    )
    _validate_engine(mapping(raw.get("engine"), "engine"), need)
    entries = [(f"{s}.{cid}", e) for s in ("cases", "plain_model") for cid, e in mapping(raw.get(s), s).items()]
    for fam, fam_cases in mapping(raw.get("families"), "families").items():
        need(fam in FAMILIES, f"families.{fam}", f"not a parser family (known: {', '.join(FAMILIES)})")
        entries += [(f"families.{fam}.{cid}", e) for cid, e in mapping(fam_cases, f"families.{fam}").items()]
    for where, entry in entries:  # a plain_model or families entry is written as a cases entry
        need(not (isinstance(entry, dict) and "conditional" in entry), f"{where}.conditional", CONDITIONAL_GONE)
        family_entry = where.startswith("families.")
        need(
            isinstance(entry, dict) and bool({"quirk", "skip", "intermittent"} & set(entry) or
                                             (family_entry and "reference" in entry)),
            where,
            "needs 'quirk' (tag or list), 'intermittent' (outcomes) or 'skip' (reason)"
            + (", or 'reference' (why the family behaves as the reference)" if family_entry else ""),
        )  # fmt: skip
        if "reference" in entry:
            need(family_entry, f"{where}.reference", "only a families entry says a family behaves as the reference")
            need(
                isinstance(entry["reference"], str) and entry["reference"].strip() != "" and len(entry) == 1,
                f"{where}.reference",
                "must be the reason (a non-empty string), alone in its entry",
            )
        bad = sorted(set(entry) - CASE_KEYS)
        need(not bad, f"{where}.{bad[0] if bad else ''}", f"unknown key (known: {', '.join(sorted(CASE_KEYS))})")
        if "quirk" in entry:
            q = entry["quirk"]
            need(
                (isinstance(q, str) and q != "") or (names(q) and q != []),
                f"{where}.quirk",
                "must be a behaviour tag or a non-empty list of tags",
            )
            need(
                isinstance(entry.get("reason"), str) and entry["reason"].strip() != "",
                f"{where}.reason",
                "a quirk needs a 'reason' (a non-empty string)",
            )
        if "skip" in entry:
            need(
                isinstance(entry["skip"], str) and entry["skip"].strip() != "",
                f"{where}.skip",
                "must be the reason (a non-empty string)",
            )
        if "intermittent" in entry:
            _validate_intermittent(entry, where, need, names)
    metrics = mapping(raw.get("metrics"), "metrics")
    for name, spec in mapping(metrics.get("required"), "metrics.required").items():
        spec = mapping(spec, f"metrics.required.{name}")
        need(
            spec.get("type") is None or isinstance(spec["type"], str),
            f"metrics.required.{name}.type",
            "must be a string",
        )
        need(
            spec.get("labels") is None or names(spec["labels"]),
            f"metrics.required.{name}.labels",
            "must be a list of names",
        )
    for key in ("hidden", "grow"):
        need(metrics.get(key) is None or names(metrics[key]), f"metrics.{key}", "must be a list of metric names")
    info = mapping(metrics.get("info"), "metrics.info")
    if info:
        need(isinstance(info.get("name"), str) and info["name"] != "", "metrics.info.name", "must be a metric name")
        need(info.get("labels") is None or names(info["labels"]), "metrics.info.labels", "must be a list of names")
    canc = mapping(raw.get("cancellation"), "cancellation")
    for where, idle in (("metrics.idle", metrics.get("idle")), ("cancellation.idle", canc.get("idle"))):
        for name, v in mapping(idle, where).items():
            need(number(v), f"{where}.{name}", "must be a number (the gauge's idle value)")
    for key in ("generated", "running", "kv"):
        need(
            canc.get(key) is None or (isinstance(canc[key], str) and canc[key] != ""),
            f"cancellation.{key}",
            "must be a metric name",
        )
    bt = canc.get("bound_tokens", 0)
    need(
        isinstance(bt, int) and not isinstance(bt, bool) and 0 <= bt <= 1_000_000,
        "cancellation.bound_tokens",
        "must be a whole number of tokens (0 to 1000000)",
    )
    st = canc.get("settle_s", 1)
    need(number(st) and 0 < st <= 600, "cancellation.settle_s", "must be a number of seconds (over 0, at most 600)")
    for key, v in mapping(raw.get("probes"), "probes").items():
        mapping(v, f"probes.{key}")
    for name, spec in mapping(raw.get("fault"), "fault").items():
        need(name in FAULT_KEYS, f"fault.{name}", f"unknown fault (known: {', '.join(FAULT_KEYS)})")
        spec = mapping(spec, f"fault.{name}")
        bad = sorted(set(spec) - set(FAULT_KEYS[name]))
        need(not bad, f"fault.{name}.{bad[0] if bad else ''}", f"unknown key (known: {', '.join(FAULT_KEYS[name])})")
        for key in ("streams_end_within_s", "health_down_within_s"):
            v = spec.get(key, 1)
            need(number(v) and 0 < v <= 600, f"fault.{name}.{key}", "must be a number of seconds (over 0, at most 600)")
        n = spec.get("streams", 1)
        need(type(n) is int and 1 <= n <= 16, f"fault.{name}.streams", "must be a whole number of streams (1 to 16)")
        ends = spec.get("stream_ends", list(STREAM_ENDS))
        need(
            names(ends) and ends != [] and set(ends) <= set(STREAM_ENDS),
            f"fault.{name}.stream_ends",
            f"must be a non-empty list of: {', '.join(STREAM_ENDS)}",
        )
        mapping(spec.get("request"), f"fault.{name}.request")
        need(spec.get("reason") is None or isinstance(spec["reason"], str), f"fault.{name}.reason", "must be a string")


def _validate_intermittent(entry: dict, where: str, need: Callable[[bool, str, str], None],
                           names: Callable[[Any], bool]) -> None:  # fmt: skip
    """intermittent: a non-empty list of {outcome, rate, evidence}; no outcome twice, none the typical one."""
    listed = entry["intermittent"]
    need(isinstance(listed, list) and listed != [], f"{where}.intermittent", "must be a non-empty list of outcomes")
    need(isinstance(entry.get("reason"), str) and entry["reason"].strip() != "", f"{where}.reason",
         "an entry with intermittent outcomes needs a 'reason' (a non-empty string)")  # fmt: skip
    q = entry.get("quirk")
    typical = outcome_tags(q) if isinstance(q, (str, list)) and q not in ("", []) else frozenset()
    seen = {typical}
    for i, o in enumerate(listed):
        at = f"{where}.intermittent[{i}]"
        need(isinstance(o, dict), at, "must be a mapping {outcome, rate, evidence}")
        bad = sorted(set(o) - set(OUTCOME_KEYS))
        need(not bad, f"{at}.{bad[0] if bad else ''}", f"unknown key (known: {', '.join(OUTCOME_KEYS)})")
        v = o.get("outcome")
        need((isinstance(v, str) and v.strip() == v != "") or (names(v) and v != []), f"{at}.outcome",
             "must be `pass`, a behaviour tag or a non-empty list of tags")  # fmt: skip
        need(not (isinstance(v, list) and PASS_OUTCOME in v), f"{at}.outcome", "`pass` is an outcome of its own")
        for key in ("rate", "evidence"):
            need(isinstance(o.get(key), str) and o[key].strip() != "", f"{at}.{key}",
                 "must be a non-empty string (a rate: 'k/N ...' or 'rate not measured yet')")  # fmt: skip
        tags = outcome_tags(v)
        need(tags not in seen, f"{at}.outcome", "listed twice (or the typical outcome: the entry's `quirk`)")
        seen.add(tags)


NO_PROFILE = "none"  # engine.kind of a server no engine profile describes (judged as `--expect openai` judges it)


def _validate_engine(engine: dict, need: Callable[[bool, str, str], None]) -> None:
    """engine: {kind, name, version, ...}. A kind no profile has would silently judge the server without a profile, so
    it must be a profile's kind or `none`, said on purpose; name and version are one-line strings."""
    from harness.engines import PROFILES

    kind = engine.get("kind")
    kinds = [*PROFILES, NO_PROFILE]
    need(kind is None or kind in kinds, "engine.kind", f"must be one of {', '.join(kinds)}, got {kind!r}")
    for key in ("name", "version"):
        v = engine.get(key)
        need(v is None or (isinstance(v, str) and v.strip() == v != "" and "\n" not in v), f"engine.{key}",
             "must be a non-empty single-line string (quote a version: \"0.3.36\")")  # fmt: skip


def resolve(case: CaseHead, check: Check, exp: Expectations, duration_s: float = 0.0) -> CaseResult:
    """Turn a raw check into the reported verdict, applying the declared expectation (the table in
    harness.conformance.model): a quirk covers exactly the tags it names, never a part or a neighbour of them."""
    r = CaseResult(
        id=case.id,
        level=case.level.value,
        requirement=case.requirement,
        verdict=check.status.value,
        behaviour=check.behaviour,
        behaviours=list(check.behaviours),
        expected=check.expected,
        actual=check.actual,
        chunk=check.chunk,
        note=check.note,
        duration_s=round(duration_s, 4),
        extra=dict(check.extra),
    )
    if len(check.evidence) > 1:
        r.extra["evidence"] = {tag: ev.to_dict() for tag, ev in check.evidence.items()}
    quirks = exp.quirks(case.id)
    entry = exp.cases.get(case.id, {})
    declared = "/".join(quirks)
    known = exp.intermittent(case.id)
    if check.status in (Verdict.PASS, Verdict.FAIL) and known:
        seen_tags = frozenset(check.behaviours) if check.status is Verdict.FAIL else frozenset()
        typical = frozenset(quirks)
        hit = next((o for tags, o in known if tags == seen_tags), None)
        if hit is not None and seen_tags != typical and (check.status is Verdict.PASS or seen_tags):
            r.verdict = Verdict.EXPECTED_INTERMITTENT.value
            r.quirk_reason = str(entry.get("reason", ""))
            _add_note(r, f"a known intermittent outcome ({outcome_name(seen_tags)}, rate {hit['rate']}; typical: "
                         f"{outcome_name(typical)})")  # fmt: skip
            return r
    if check.status is Verdict.FAIL:
        seen = list(check.behaviours)
        covered = set(quirks).union(*(tags for tags, _ in known))
        uncovered = [t for t in seen if t not in covered]
        if quirks and seen and set(seen) == set(quirks):
            r.verdict = Verdict.QUIRK.value
            r.quirk_reason = str(entry.get("reason", ""))
            return r
        if covered and uncovered:
            _make_primary(r, check, uncovered[0])
            r.extra["not_covered"] = uncovered
            said = f"the declared quirk {declared}" if quirks else "a declared outcome"
            _add_note(r, f"not {said}: {', '.join(uncovered)} is not part of it")
        elif quirks and seen:
            missing = [q for q in quirks if q not in seen]
            _add_note(r, f"the declared quirk {declared} happened only in part: no {', '.join(missing)}")
        elif known and seen:
            listed = ", ".join(outcome_name(tags) for tags, _ in known)
            _add_note(r, f"not a declared outcome (typical: pass; known intermittent: {listed})")
        if case.level.value == "INFO":
            r.verdict = Verdict.INFO.value
    elif check.status is Verdict.PASS and quirks:
        r.verdict = Verdict.QUIRK_ABSENT.value
        r.unexpected_pass = True
        r.quirk_reason = str(entry.get("reason", ""))
        _add_note(r, f"expected quirk {declared} did not happen")
    return r


def _make_primary(r: CaseResult, check: Check, tag: str) -> None:
    """Report `tag` (and its evidence, when the check kept it) as the result's primary behaviour."""
    r.behaviour = tag
    ev = check.evidence.get(tag)
    if ev is not None:
        r.expected, r.actual, r.chunk = ev.expected, ev.actual, ev.chunk


def _add_note(r: CaseResult, text: str) -> None:
    r.note = (r.note + "; " if r.note else "") + text
