"""Propose an updated expectation file from a conformance run (WPT's update-expectations, for engine quirks).

Every `fail` becomes a declared quirk with a reason that says what was observed and asks for review. A quirk covers
exactly the tags it lists, so the proposal is the tags the check saw (`behaviours`), replacing a declared list that
did not match. Every quirk-absent (a declared quirk that no longer happens) is dropped. A repeated run (`conform
--repeat N`) proposes from the rates: the most frequent outcome typical, every other one seen a known intermittent
outcome with its rate k/N, and a declared intermittent outcome not seen in the N repeats dropped. `error` verdicts
(the harness could not run the case) are listed, never written: they are not engine behaviour. The other sections of the
file (metrics, cancellation, probes, engine) are kept as they are. The result is a proposal for a person to read: it is
written to a new file, never over the input unless asked.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from harness.conformance.case import SCRIPTED_MODEL
from harness.conformance.expectations import outcome_name, outcome_tags
from harness.conformance.model import Verdict
from harness.errors import DataError
from harness.outputs import atomic_write_text, output_file
from harness.readers import MAX_INPUT_BYTES, read_json, read_yaml

__all__ = ["propose", "update_expectations", "check_results"]

MAX_RESULTS_BYTES = 64 << 20  # a conformance.json is tens of KB
VERDICTS = {v.value for v in Verdict}


def check_results(results: Any, path: object) -> dict:
    """The fields `propose` reads, checked: one DataError naming the file and the field, never a traceback."""

    def need(ok: bool, where: str, message: str) -> None:
        if not ok:
            raise DataError(f"{path}: {where}: {message}")

    need(isinstance(results, dict), "(top level)", "not a conformance.json (want an object with a 'cases' list)")
    need(isinstance(results.get("cases"), list), "cases", "no 'cases' list; is this a conformance.json?")
    for i, r in enumerate(results["cases"]):
        at = f"cases[{i}]"
        need(isinstance(r, dict), at, f"must be an object, got {type(r).__name__}")
        need(isinstance(r.get("id"), str) and r["id"].strip() == r["id"] != "", f"{at}.id", "must be a case id")
        need(r.get("verdict") in VERDICTS, f"{at}.verdict", f"must be one of {', '.join(sorted(VERDICTS))}")
        for key in ("behaviour", "level", "note"):
            need(r.get(key) is None or isinstance(r[key], str), f"{at}.{key}", "must be a string")
        tags = r.get("behaviours")
        need(
            tags is None or (isinstance(tags, list) and all(isinstance(t, str) for t in tags)),
            f"{at}.behaviours",
            "must be a list of tags",
        )
        need(isinstance(r.get("unexpected_pass", False), bool), f"{at}.unexpected_pass", "must be true or false")
        rep = r.get("repeat")
        if rep is not None:  # a repeated run: what `_propose_repeated` reads of it
            need(isinstance(rep, dict) and type(rep.get("n")) is int and rep["n"] >= 1, f"{at}.repeat.n",
                 "must be a whole number of samples")  # fmt: skip
            outs = rep.get("outcomes")
            need(isinstance(outs, list), f"{at}.repeat.outcomes", "must be a list")
            for j, o in enumerate(outs):
                ok = (isinstance(o, dict) and o.get("verdict") in VERDICTS and type(o.get("count")) is int
                      and o["count"] >= 1 and isinstance(o.get("behaviours"), list)
                      and all(isinstance(t, str) and t.strip() == t != "" and "\n" not in t for t in o["behaviours"]))  # fmt: skip
                need(ok, f"{at}.repeat.outcomes[{j}]", "must be {verdict, behaviours: [one-line tags], count}")
        if r["verdict"] == "fail":
            for tag in [r.get("behaviour"), *(tags or [])]:
                need(
                    tag is None or (tag.strip() == tag and "\n" not in tag), f"{at}.behaviour", "must be a one-line tag"
                )
    return results


def propose(results: dict, raw: dict[str, Any], *, note: str = "") -> tuple[dict[str, Any], list[str]]:
    """(new expectation mapping, one line per change). Pure.

    A run on another model than the scripted one (its report's engine.provides lacks it) writes a case into
    `plain_model` when that section holds it already, or when the file has the section and the case is one whose
    judge differs off the scripted model (tools.*, reasoning.*, structured.client.*: the scripted model's entry in
    `cases` must not be overwritten by another model's answer); every other case into `cases`. A run on the scripted
    model of another parser family than hermes (the one `cases` is written for) writes into `families.<family>`:
    every entry that differs from `cases`, and `reference: ...` where a `cases` quirk does not happen there."""
    scripted_run = SCRIPTED_MODEL in _provides(results)
    cases: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (raw.get("cases") or {}).items()}
    plain: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (raw.get("plain_model") or {}).items()}
    family = _family(results) if scripted_run else None
    base = cases
    if family is not None:  # judged on the family's view: `cases` with its entries in place, then written back apart
        own = (raw.get("families") or {}).get(family) or {}
        cases = {**{k: dict(v) for k, v in cases.items()},
                 **{k: dict(v) for k, v in own.items() if "reference" not in v}}  # fmt: skip
        for k, v in own.items():
            if "reference" in v:
                cases.pop(k, None)
    shared = cases
    changes: list[str] = []
    stamp = note or time.strftime("%Y-%m-%d")
    for r in results.get("cases", []):
        cid, verdict, tag = r.get("id"), r.get("verdict"), r.get("behaviour") or "unspecified"
        off_script = not scripted_run and (cid in plain or (bool(plain) and str(cid).startswith(MODEL_JUDGED)))
        cases = plain if off_script else shared
        rep = r.get("repeat")
        if isinstance(rep, dict) and rep.get("n", 1) > 1:
            _propose_repeated(cid, r, rep, cases, changes, stamp)
        elif verdict == "fail":
            seen = [t for t in (r.get("behaviours") or []) if t] or [tag]
            entry = cases.setdefault(cid, {})
            old = entry.get("quirk", [])
            old = [old] if isinstance(old, str) else list(old)
            entry["quirk"] = seen[0] if len(seen) == 1 else seen
            _drop_listed(entry, frozenset(seen))  # the new typical outcome is not also an intermittent one
            saw = f"expected {json.dumps(r.get('expected'), default=str)[:120]}, got {json.dumps(r.get('actual'), default=str)[:120]}"
            _review(entry, f"REVIEW: observed {stamp} ({r.get('level')}): {saw}")
            was = f" (was {'/'.join(old)})" if old and old != seen else ""
            changes.append(f"+ {cid}: quirk {'/'.join(seen)}{was} ({r.get('level')})")
        elif (verdict == "quirk-absent" or r.get("unexpected_pass")) and cid in cases:
            if cases[cid].get("intermittent"):  # the typical outcome becomes a pass; its known intermittents stay
                cases[cid].pop("quirk", None)
                changes.append(f"- {cid}: the declared quirk no longer happens (its intermittent outcomes kept)")
            else:
                del cases[cid]
                changes.append(f"- {cid}: the declared quirk no longer happens")
        elif verdict == "error":
            changes.append(f"! {cid}: error (harness could not run it), not written: {(r.get('note') or '')[:100]}")
    out = dict(raw)
    out["cases"] = dict(sorted(shared.items()))
    if family is not None:
        out["cases"] = dict(sorted(base.items()))
        families = {k: dict(v) for k, v in (raw.get("families") or {}).items()}
        families[family] = _family_entries(base, shared, (raw.get("families") or {}).get(family) or {}, stamp)
        out["families"] = {k: v for k, v in sorted(families.items()) if v}
        if not out["families"]:
            out.pop("families")
    if plain:
        out["plain_model"] = dict(sorted(plain.items()))
    else:
        out.pop("plain_model", None)
    return out, changes


MODEL_JUDGED = ("tools.", "reasoning.", "structured.client.")  # the families judged by model (issue 32 item 0)


def _family(results: dict) -> str | None:
    """The parser family of the run's scripted model when it is not hermes (whose entries are `cases` itself)."""
    from harness.models.families import FAMILIES, HERMES

    engine = results.get("engine")
    name = engine.get("scripted_family") if isinstance(engine, dict) else None
    return name if isinstance(name, str) and name in FAMILIES and name != HERMES.name else None


def _family_entries(base: dict, seen: dict, old: dict, stamp: str) -> dict[str, dict[str, Any]]:
    """A family's section: each entry of its view that differs from `cases`; `reference` where `cases` declares
    what the family does not do (kept as written when it said so already)."""
    out: dict[str, dict[str, Any]] = {}
    for cid in sorted(set(base) | set(seen)):
        if cid in seen and seen[cid] != base.get(cid):
            out[cid] = seen[cid]
        elif cid not in seen and cid in base:
            out[cid] = (
                dict(old[cid])
                if "reference" in old.get(cid, {})
                else {"reference": f"REVIEW: observed {stamp}: the declared quirk does not happen on this family"}
            )
    return out


def _provides(results: dict) -> list[Any]:
    engine = results.get("engine")
    provides = engine.get("provides") if isinstance(engine, dict) else None
    return provides if isinstance(provides, list) else []


# the verdicts whose samples say what the engine did (a pass, or a failing check's tags); error, skip, absent,
# inconclusive and info say nothing an expectation file declares
_ENGINE_OUTCOMES = frozenset({"pass", "fail", "quirk", "quirk-absent", "expected-intermittent"})


def _propose_repeated(cid: str, r: dict, rep: dict, cases: dict[str, dict[str, Any]], changes: list[str],
                      stamp: str) -> None:  # fmt: skip
    """A repeated case: its entry made the outcomes seen (the most frequent typical, the others known intermittent,
    each with its rate k/N), unless they are already exactly the declared ones. A declared intermittent outcome not
    seen in N samples is dropped: a behaviour of rate p is missed by N samples with chance (1-p)^N, so the line says N."""
    n = int(rep.get("n", 1))
    seen: dict[frozenset[str], tuple[int, dict]] = {}
    for o in rep.get("outcomes") or []:
        if o.get("verdict") == "error":
            changes.append(
                f"! {cid}: error in {o.get('count')}/{n} samples, not written: {(o.get('note') or '')[:100]}"
            )
        if o.get("verdict") not in _ENGINE_OUTCOMES:
            continue
        tags = frozenset(o.get("behaviours") or []) if o.get("verdict") != "quirk-absent" else frozenset()
        count = seen.get(tags, (0, o))[0] + int(o.get("count", 0))
        seen[tags] = (count, seen.get(tags, (0, o))[1])
    if not seen:
        return
    typical = max(seen, key=lambda t: seen[t][0])  # the first seen among the most frequent
    entry = dict(cases.get(cid, {}))
    declared = {outcome_tags(o["outcome"]): o for o in entry.get("intermittent") or []}
    q = entry.get("quirk")
    declared_typical = frozenset([q] if isinstance(q, str) else q or [])
    if set(seen) == {declared_typical, *declared} and (entry or typical == frozenset()):
        return  # exactly the declared outcomes: nothing to change (their rates are the reviewer's to restate)
    if typical:
        entry["quirk"] = sorted(typical)[0] if len(typical) == 1 else sorted(typical)
    else:
        entry.pop("quirk", None)
    listed = []
    for tags, (count, o) in seen.items():
        if tags == typical:
            continue
        rate = f"{count}/{n} (harness conform --repeat {n}, {stamp})"
        old = declared.get(tags)
        if old is not None:
            listed.append({**old, "rate": rate})
            continue
        said = o.get("note") or json.dumps(o.get("actual"), default=str)[:120]
        listed.append({"outcome": outcome_name(tags) if not tags or len(tags) > 1 else next(iter(tags)),
                       "rate": rate, "evidence": f"REVIEW: first in sample {o.get('sample')}: {said}"[:300]})  # fmt: skip
        if len(tags) > 1:
            listed[-1]["outcome"] = sorted(tags)
        changes.append(f"+ {cid}: intermittent {outcome_name(tags)} {count}/{n} (typical {outcome_name(typical)})")
    for tags in declared:
        if tags not in seen and tags != typical:
            changes.append(f"- {cid}: intermittent {outcome_name(tags)} not seen in {n} repeats")
    if declared_typical != typical:
        changes.append(f"~ {cid}: typical {outcome_name(typical)} (was {outcome_name(declared_typical)}), "
                       f"{seen[typical][0]}/{n}")  # fmt: skip
    if listed:
        entry["intermittent"] = listed
    else:
        entry.pop("intermittent", None)
    if "quirk" not in entry and "intermittent" not in entry and "skip" not in entry:
        if cid in cases:
            del cases[cid]
            changes.append(f"- {cid}: passed in all {n} repeats; entry dropped")
        return
    _review(entry, f"REVIEW: outcomes seen {stamp} in {n} repeats ({r.get('level')})")
    cases[cid] = entry


def _drop_listed(entry: dict[str, Any], tags: frozenset[str]) -> None:
    kept = [o for o in entry.get("intermittent") or [] if outcome_tags(o["outcome"]) != tags]
    if kept:
        entry["intermittent"] = kept
    else:
        entry.pop("intermittent", None)


def _review(entry: dict[str, Any], text: str) -> None:
    entry["reason"] = (entry["reason"] + " | " if entry.get("reason") else "") + text


def update_expectations(
    results_path: str | Path, expect_path: str | Path | None, out_path: str | Path, *, force: bool = False
) -> list[str]:
    """Write the proposal to `out_path`: never over the results, over the expectation file only with --force.
    `expect_path` None: the run was judged by the plain OpenAI reference, and the proposal is a new file for a server
    no engine profile describes (`engine: {kind: none}`; its name and version are the reviewer's to fill in)."""
    results_path, out_path = Path(results_path), Path(out_path)
    expect = Path(expect_path) if expect_path is not None else None
    inputs = [results_path] if force or expect is None else [results_path, expect]
    output_file(out_path, force=force, inputs=inputs, what="--out")  # before reading: a refused --out costs nothing
    results = check_results(read_json(results_path, "conformance results", max_bytes=MAX_RESULTS_BYTES,
                                      error=DataError), results_path)  # fmt: skip
    if expect is None:
        raw: dict[str, Any] = {"name": out_path.stem, "engine": {"kind": "none", "name": "REVIEW", "version": "REVIEW"},
                               "cases": {}}  # fmt: skip
        over = "the plain OpenAI reference"
    else:
        raw = read_yaml(expect, "expectation", max_bytes=MAX_INPUT_BYTES) or {}
        over = str(expect)
    new, changes = propose(results, raw, note=f"{time.strftime('%Y-%m-%d')} from {results_path}")
    header = (
        f"# Proposed by `harness update-expectations` from {results_path} over {over}.\n"
        "# Every REVIEW reason was written by the tool: read it, then say why the engine does this.\n"
    )
    atomic_write_text(out_path, header + yaml.safe_dump(new, sort_keys=False, allow_unicode=True, width=120))
    return changes
