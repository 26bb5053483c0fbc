"""The upgrade verdict: one small rule per area turns the comparison into reasons, the worst level wins.

    blocking  an old manifest's flag the new release's own parser rejects (removed, renamed; found before any launch)
              or the new manifest's (then no engine is launched),
              golden regression / missing / incomparable prompts (a constrained prompt whose constraint held on one
              side only, or whose tool calls changed, gets its own line), a recording refused (different models), the
              new engine failed to start or to answer, or a MUST conformance case that passed (or was a declared quirk) on the old
              engine fails or errors on the new one (except EXPECTED_BEHAVIOURS such as version-mismatch: review)
    review    near-ties, resampled seeded prompts, metrics removed / hidden / renamed / retyped / relabelled (between two
              engine kinds: one engine-change line mapping the series the harness reads), changed
              response keys (e.g. system_fingerprint appears), conformance verdict changes that are not failures,
              changed engine defaults (`*_info` label values), conformance not run, a manifest flag the new release
              deprecates, an error case's error object with another status, shape, type, code or param,
              a conformance change where either side's case is intermittent (more than one outcome over its
              samples, or an outcome declared known intermittent), with both sides' rates: only a difference
              stable on both sides blocks
    info      the new release's added, gone (unused) flags and changed defaults, an argument surface not read here,
              conformance cases run on one side only (`missing` on the other: another case set, never `absent`),
              an error message's changed wording,
              locked package changes, metrics added, golden prompts all identical or equivalent, other hardware,
              declared quirks of the old engine that no longer happen on the new one (quirk -> quirk-absent: the
              engine fixed it; the new engine's expectation file drops them)
    safe      none of the blocking or review reasons

Each rule takes (old side, new side, comparison) and returns its reasons in the order the report lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.engines import PROFILES, profile_for
from harness.upgrade.model import MISSING, Comparison, Reason, Row, Side, changed, intermittent, outcomes, rates

__all__ = ["judge", "RULES", "EXPECTED_BEHAVIOURS"]

# Conformance deviations that an upgrade makes by definition (the old expectations name the old version).
EXPECTED_BEHAVIOURS = {"version-mismatch"}
INCONCLUSIVE = "inconclusive"  # harness.conformance.model.Verdict.INCONCLUSIVE: the case was not judged on that side


def _reason(level: str, text: str) -> Reason:
    return {"level": level, "text": text}


def engines(old: Side, new: Side, cmp: Comparison) -> list[Reason]:
    if old.get("launched") is False and new.get("launched") is False:  # refused before launch: arguments says why
        return [_reason("blocking", "neither engine was launched (the argument check refused the new manifest)")]
    return [
        _reason("blocking", f"the {label} engine ({side['name']}) failed: {side.get('error', 'unknown error')}")
        for side, label in ((old, "old"), (new, "new"))
        if not side.get("ok")
    ]


def _prompt_ids(g: dict[str, Any], status: str) -> str:
    return ", ".join([f"{p['set']}/{p['id']}" for p in g["prompts"] if p["status"] == status][:8])


def _migration_notes(old: Side, new: Side, topic: str) -> list[Reason]:
    """In an engine migration, what either engine's profile says about `topic` (how to read its side)."""
    from harness.engines import PROFILES

    kinds = [str((s.get("engine") or {}).get("kind")) for s in (old, new)]
    if kinds[0] == kinds[1]:
        return []
    profiles = [PROFILES[k] for k in kinds if k in PROFILES]
    return [_reason("info", f"{topic} ({p.title}): {p.notes[topic]}") for p in profiles if topic in p.notes]


def _client_changes(g: dict[str, Any]) -> list[Reason]:
    """Constrained golden prompts whose constraint held on one side only, or whose tool calls changed, by prompt."""
    from harness.golden.constraints import show_calls

    said = {True: "held", False: "did not hold", None: "refused"}
    out = []
    for p in g["prompts"]:
        c, t = p.get("constraint") or {}, p.get("tool_calls") or {}
        where = f"golden {p['set']}/{p['id']}"
        if c.get("changed"):
            detail = c.get("b_detail") if c.get("a") else c.get("a_detail")
            text = f"{where}: constraint {c['kind']} {said[c['a']]} on old, {said[c['b']]} on new ({detail})"
            out.append(_reason("blocking", text))
        elif t.get("changed"):
            calls = [" / ".join(show_calls(x) for x in t[side]) or "none" for side in ("a", "b")]
            out.append(_reason("blocking", f"{where}: tool calls changed: old {calls[0]}; new {calls[1]}"))
    return out


def golden(old: Side, new: Side, cmp: Comparison) -> list[Reason]:
    g = cmp.get("golden")
    if g is None:
        return []
    if "refused" in g:
        return [_reason("blocking", f"golden diff refused: {g['refused']}")]
    out = _migration_notes(old, new, "logprobs")
    c = g["counts"]
    for st in ("regression", "missing", "incomparable"):
        if c.get(st):
            out.append(_reason("blocking", f"golden: {c[st]} prompt(s) {st}: {_prompt_ids(g, st)}"))
    out += _client_changes(g)
    if c.get("near-tie"):
        out.append(
            _reason(
                "review",
                f"golden: {c['near-tie']} near-tie divergence(s) (fair greedy choices): {_prompt_ids(g, 'near-tie')}",
            )
        )
    if c.get("resampled"):
        out.append(
            _reason(
                "review",
                f"golden: {c['resampled']} seeded-sampling prompt(s) draw different tokens from "
                f"the same distribution (a fixed seed no longer reproduces old outputs): "
                f"{_prompt_ids(g, 'resampled')}",
            )
        )
    if not any(c.get(s) for s in ("regression", "missing", "incomparable", "near-tie", "resampled")):
        out.append(_reason("info", f"golden: all {sum(c.values())} prompts identical or equivalent ({c})"))
    hw = g.get("hardware") or {}
    if hw.get("status") in ("different", "unknown"):
        out.append(_reason("info", f"golden: {hw['line']}"))
    return out


def metrics(old: Side, new: Side, cmp: Comparison) -> list[Reason]:
    m = cmp.get("metrics")
    if not m:
        both_ran = old.get("ok") and new.get("ok")
        return [_reason("review", "metrics surface not compared (a /metrics scrape failed)")] if both_ran else []
    if m.get("engine_change"):  # an engine migration: every family differs by construction; one reason, not blocking
        return [_reason("review", f"{m['engine_change']['line']} (dashboards/alerts need the new names)")]
    out = []
    for key, what in (
        ("removed", "removed"),
        ("hidden", "hidden"),
        ("renamed", "possibly renamed"),
        ("type_changed", "changed type"),
        ("label_changes", "changed label names"),
    ):
        if m.get(key):
            names = [x.get("name") or f"{x['old']}->{x['new']}" for x in m[key]]
            out.append(_reason("review", f"metrics {what} (dashboards/alerts may break): {', '.join(names)}"))
    if m.get("added"):
        out.append(_reason("info", f"metrics added: {len(m['added'])}"))
    return out


def _listed(items: list[str], n: int = 8) -> str:
    return ", ".join(items[:n]) + (f" ... ({len(items)} in all)" if len(items) > n else "")


def _surface_reasons(surface: dict[str, Any]) -> list[Reason]:
    """The pre-launch check of the flags against the new release's own argument surface (harness.upgrade.arguments):
    an old flag the new release does not accept (removed, renamed, ambiguous, a value outside its choices) and the new
    manifest's own rejected flags are blocking; a flag deprecated in the new release is review; the release's added
    flags, changed defaults and a surface that could not be read are info."""
    from harness.upgrade.arguments import BLOCKING_PROBLEMS

    new_rel = (surface.get("new_surface") or {}).get("release", "the new release")
    out = []
    for p in surface.get("old_args") or []:
        if p["problem"] in BLOCKING_PROBLEMS:
            what = {"removed": "removed", "renamed": f"renamed to {p.get('to')} ({p.get('rule')})"}.get(
                p["problem"], p["problem"]
            )
            out.append(
                _reason(
                    "blocking",
                    f"arguments: the old manifest's {p['flag']} is not accepted by {new_rel}: {what} "
                    f"(found before launching it: {p['line']})",
                )
            )
    if surface.get("launch_refused"):
        out.append(_reason("blocking", f"arguments: {surface['launch_refused']} (no engine launched)"))
    elif surface.get("new_args"):
        out.append(
            _reason(
                "blocking",
                "arguments: the new manifest's own server.args: " + "; ".join(p["line"] for p in surface["new_args"]),
            )
        )
    dep = [p["flag"] for p in surface.get("old_args") or [] if p["problem"] == "deprecated"]
    if dep:
        out.append(_reason("review", f"arguments: the old manifest's flags deprecated in {new_rel}: {_listed(dep)}"))
    moved = [p for p in surface.get("old_args") or [] if p["problem"] == "default-changed"]
    if moved:
        out.append(
            _reason(
                "info",
                "arguments: flags the manifest sets whose default moved (the manifest's value still applies): "
                + _listed([f"{p['flag']} {p['old']!r}->{p['new']!r}" for p in moved]),
            )
        )
    rel = surface.get("release")
    if rel:
        gone = [x["flag"] for x in rel.get("removed") or []] + [
            f"{x['flag']}->{x['to']}" for x in rel.get("renamed") or []
        ]
        if gone:
            out.append(
                _reason(
                    "info",
                    f"arguments: {rel['removed_count'] + rel['renamed_count']} flags of {rel['old']} are gone from "
                    f"{rel['new']} (none of them in the old manifest unless listed above): {_listed(gone)}",
                )
            )
        if rel.get("added_count"):
            out.append(_reason("info", f"arguments: {rel['added_count']} flags added: {_listed(rel['added'])}"))
        if rel.get("defaults_changed_count"):
            out.append(
                _reason(
                    "info",
                    f"arguments: {rel['defaults_changed_count']} defaults changed: "
                    + _listed([f"{d['flag']} {d['old']!r}->{d['new']!r}" for d in rel["defaults_changed"]]),
                )
            )
    for side in ("old_surface", "new_surface"):
        why = (surface.get(side) or {}).get("unavailable")
        if why and not (side == "old_surface" and surface.get("migration")):
            out.append(_reason("info", f"arguments: {why}"))
    return out


def arguments(old: Side, new: Side, cmp: Comparison) -> list[Reason]:
    """What the engine runs with: the manifests' flags against the new release's own argument surface (checked before
    any launch, see _surface_reasons), and defaults the engine changed on its own as the labels of its `*_info` gauges
    show them (e.g. cache_config_info)."""
    out = _surface_reasons((cmp.get("manifest") or {}).get("surface") or {})
    info_vals = [v for v in (cmp.get("metrics") or {}).get("label_value_changes", []) if v["name"].endswith("_info")]
    if not info_vals:
        return out
    return out + [
        _reason(
            "review",
            "engine defaults changed (visible in *_info labels): "
            + ", ".join(f"{v['label']} {v['old']}->{v['new']}" for v in info_vals[:8])
            + (" ..." if len(info_vals) > 8 else ""),
        )
    ]


def wire(old: Side, new: Side, cmp: Comparison) -> list[Reason]:
    out = [
        _reason("review", f"{ep} response keys changed: +{w['added']} -{w['removed']}")
        for ep, w in (cmp.get("wire") or {}).items()
        if w["added"] or w["removed"]
    ]
    fp = cmp.get("system_fingerprint") or {}
    if fp.get("new") and not fp.get("old"):
        out.append(_reason("review", f"system_fingerprint appears: {', '.join(fp['new'])}"))
    return out


def conformance(old: Side, new: Side, cmp: Comparison) -> list[Reason]:
    """Verdict changes case by case, then the error cases' error objects field by field (_error_bodies). A case that
    changed and is intermittent on either side is said by _intermittent alone (review, never blocking); the other
    rules judge the cases stable on both sides."""
    conf = cmp.get("conformance", {})
    if "cases" not in conf:
        return [_reason("review", f"conformance not compared: {conf.get('not_run')}")]
    flaky = [r for r in conf["cases"] if _intermittent_change(r)]
    ids = {r["id"] for r in flaky}
    stable = {**conf, "cases": [r for r in conf["cases"] if r["id"] not in ids]}
    out = (
        _fail_open(stable)
        + _served(stable)
        + _one_side(stable)
        + _verdict_changes(stable)
        + _intermittent(flaky)
        + _error_bodies(cmp)
    )
    return _by_family(out, old, new)


def _by_family(reasons: list[Reason], old: Side, new: Side) -> list[Reason]:
    """Both sides served one parser family's scripted model: each conformance change names the family (a tool or
    reasoning change is that family's parser's)."""
    families = {(side.get("conformance") or {}).get("family") for side in (old, new)}
    if len(families) != 1 or not isinstance(family := families.pop(), str):
        return reasons
    label = f"conformance ({family} family)"
    return [{**r, "text": label + r["text"][len("conformance") :]} if r["text"].startswith("conformance") else r
            for r in reasons]  # fmt: skip


def _intermittent_change(r: Row) -> bool:
    """Run on both sides, changed (the verdict, or the verdicts seen over the samples), and intermittent on either;
    except an endpoint served in every sample of one side and absent in every sample of the other: a stable change of
    what is served, whatever the served side's outcomes (_served says it)."""
    if MISSING in (r["old"], r["new"]) or not changed(r):
        return False
    old_absent, new_absent = ({o.get("verdict") == "absent" for o in outcomes(r, side)} for side in ("old", "new"))
    if {True} in (old_absent, new_absent) and {False} in (old_absent, new_absent):
        return False
    return intermittent(r, "old") or intermittent(r, "new")


def _intermittent(rows: list[Row]) -> list[Reason]:
    """A change where either side's case is intermittent (more than one outcome in its samples, or an outcome the
    expectation lists as known intermittent): a difference within a race is not a stable change, so review, one line
    per case with both sides' rates (one sample is 1/1; `conform --repeat N` gives the rate of a race)."""
    return [
        _reason(
            "review",
            f"conformance: {r['id']} [{r.get('level') or '?'}] changed where it is intermittent (review, not a stable "
            f"change): {rates(r, 'old')} on old; {rates(r, 'new')} on new",
        )
        for r in rows
    ]


def _one_side(conf: dict[str, Any]) -> list[Reason]:
    """Cases run on one side only (the two sides ran other case sets, e.g. another model or manifest): nothing to
    compare, said as information, never as an endpoint removed."""
    old_only = [r["id"] for r in conf["cases"] if r["new"] == MISSING and r["old"] != MISSING]
    new_only = [r["id"] for r in conf["cases"] if r["old"] == MISSING and r["new"] != MISSING]
    out = []
    why = "(the sides ran other case sets, e.g. another model or manifest)"
    if old_only:
        out.append(_reason("info", f"conformance: not run on the new side {why}: " + ", ".join(old_only)))
    if new_only:
        out.append(_reason("info", f"conformance: not run on the old side {why}: " + ", ".join(new_only)))
    return out


def _served(conf: dict[str, Any]) -> list[Reason]:
    """Endpoints one side serves and the other does not (a case `absent` on one side only): a new endpoint is
    information, one the new engine no longer serves is blocking where a MUST case used it."""
    came = [r for r in conf["cases"] if r["old"] == "absent" and r["new"] != "absent"]
    went = [r for r in conf["cases"] if r["new"] == "absent" and r["old"] != "absent"]
    out = []
    if came:
        out.append(_reason("info", "conformance: endpoints the new engine serves (absent before): "
                           + ", ".join(f"{r['id']} ({r['new']})" for r in came)))  # fmt: skip
    if went:
        level = "blocking" if any(r.get("level") == "MUST" for r in went) else "review"
        out.append(_reason(level, "conformance: endpoints the new engine no longer serves (now absent): "
                           + ", ".join(f"{r['id']} (was {r['old']})" for r in went)))  # fmt: skip
    return out


# the behaviours of a request field or constraint that is accepted (HTTP 200) and has no effect
FAIL_OPEN = ("constraint-ignored", "ignored-field")


def _fail_open(conf: dict[str, Any]) -> list[Reason]:
    """Request fields and constraints the new engine accepts and ignores (and the old one honoured), by field name:
    the changes no client sees as an error. The cases' notes start with the field ("guided_json: HTTP 200 but ...")."""
    fields: dict[str, list[str]] = {}
    level = "review"
    for r in conf["cases"]:
        if r["new"] == "fail" and r["old"] != "fail" and r.get("new_behaviour") in FAIL_OPEN:
            field = (r.get("new_note") or "").split(":", 1)[0].strip() or r["id"]
            fields.setdefault(field, []).append(r["id"])
            level = "blocking" if r.get("level") == "MUST" else level
    if not fields:
        return []
    listed = "; ".join(f"{f} ({', '.join(ids)})" for f, ids in sorted(fields.items()))
    return [_reason(level, f"accepted and ignored by the new engine (HTTP 200, no effect): {listed}")]


def _verdict_changes(conf: dict[str, Any]) -> list[Reason]:
    out = []
    good = {"pass", "quirk", "quirk-absent"}  # quirk-absent: the reference behaviour where a quirk was declared
    expected = [r for r in conf["cases"] if r["new_behaviour"] in EXPECTED_BEHAVIOURS and r["old"] != r["new"]]
    fixed = [r for r in conf["cases"] if r["old"] == "quirk" and r["new"] == "quirk-absent"]
    if fixed:
        out.append(
            _reason(
                "info",
                "conformance: declared quirks the new engine no longer shows (it behaves like the reference): "
                + ", ".join(f"{r['id']} ({r['old_behaviour']})" if r.get("old_behaviour") else r["id"] for r in fixed),
            )
        )
    if expected:
        out.append(
            _reason(
                "review",
                "conformance changes the upgrade itself makes: "
                + ", ".join(f"{r['id']} ({r['new_behaviour']})" for r in expected),
            )
        )
    broke = [
        r
        for r in conf["cases"]
        if r["old"] in good and r["new"] in ("fail", "error") and r not in expected and r.get("level") != "INFO"
    ]  # an old inconclusive is not good: the case was not judged there (said below, as review)
    weak = [r for r in broke if r.get("level") != "MUST"]
    broke = [r for r in broke if r not in weak]
    # inconclusive on one side: the model did not do what the case needs there, so nothing is compared (never a
    # regression, never a fix): a review line of its own
    unjudged = [r for r in conf["cases"] if r["old"] != r["new"] and INCONCLUSIVE in (r["old"], r["new"])]
    changed = [
        r
        for r in conf["cases"]
        if r["old"] != r["new"]
        and r not in broke
        and r not in expected
        and r not in fixed
        and r not in unjudged
        and "absent" not in (r["old"], r["new"])  # said by _served
        and MISSING not in (r["old"], r["new"])  # said by _one_side
    ]
    if unjudged:
        out.append(
            _reason(
                "review",
                "conformance: judged on one side only (inconclusive on the other: the model did not do what the case "
                "needs): " + ", ".join(f"{r['id']} {r['old']}->{r['new']}" for r in unjudged),
            )
        )
    if broke:
        out.append(
            _reason(
                "blocking",
                "conformance (old expectations): now failing: "
                + ", ".join(f"{r['id']} ({r['new_behaviour'] or r['new']})" for r in broke),
            )
        )
    if weak:
        out.append(
            _reason(
                "review",
                "conformance (old expectations): SHOULD-level cases now failing: "
                + ", ".join(f"{r['id']} ({r['new_behaviour'] or r['new']})" for r in weak),
            )
        )
    if changed:
        out.append(
            _reason(
                "review",
                "conformance verdict changes: " + ", ".join(f"{r['id']} {r['old']}->{r['new']}" for r in changed),
            )
        )
    return out


def key_packages(old: Side, new: Side) -> tuple[str, ...]:
    """The packages whose versions the summary line names: both sides' profiles' key_packages (every profile's when
    a side names no known engine kind)."""
    kinds = [k for k in ((s.get("engine") or {}).get("kind") for s in (old, new)) if k in PROFILES]
    out: list[str] = []
    for kind in kinds if len(kinds) == 2 else list(PROFILES):
        out += [p for p in profile_for(kind).key_packages if p not in out]
    return tuple(out)


def packages(old: Side, new: Side, cmp: Comparison) -> list[Reason]:
    lock = (cmp.get("manifest") or {}).get("lock") or {}
    if not (lock.get("changed") or lock.get("added") or lock.get("removed")):
        return []
    wanted = key_packages(old, new)
    key = [f"{k} {v[0]}->{v[1]}" for k, v in lock.get("changed", {}).items() if k in wanted]
    return [
        _reason(
            "info",
            f"locked packages: {len(lock.get('changed', {}))} changed, {len(lock.get('added', {}))} "
            f"added, {len(lock.get('removed', {}))} removed ({', '.join(key)})",
        )
    ]


def _error_bodies(cmp: Comparison) -> list[Reason]:
    """The error objects of the error cases, field by field (compare.error_body_changes): a changed status, shape,
    type, code, param or message type is review (a client matching on it breaks even when both verdicts pass); a
    changed message prefix only is info."""
    out = []
    for level in ("review", "info"):
        items = [
            f"{c['id']} "
            + ", ".join(f"{f['field']} {f['old']!r}->{f['new']!r}" for f in c["fields"] if f["level"] == level)
            for c in (cmp.get("conformance") or {}).get("error_bodies") or []
            if any(f["level"] == level for f in c["fields"])
        ]
        if items:
            out.append(
                _reason(level, "error bodies changed: " + "; ".join(items[:8]) + (" ..." if len(items) > 8 else ""))
            )
    return out


RULES: tuple[Callable[[Side, Side, Comparison], list[Reason]], ...] = (
    engines,
    golden,
    metrics,
    arguments,
    wire,
    conformance,
    packages,
)


def judge(old: Side, new: Side, cmp: Comparison) -> dict[str, Any]:
    reasons = [r for rule in RULES for r in rule(old, new, cmp)]
    levels = {r["level"] for r in reasons}
    verdict = "blocking" if "blocking" in levels else "review" if "review" in levels else "safe"
    return {"verdict": verdict, "reasons": reasons}
