"""`harness matrix SPEC --out DIR --rejudge OLD.yaml`: the cells of DIR judged again, with no engine started, after
the spec's expectation file changed (a quirk declared, a reason reworded); OLD.yaml is the file as it was when the
cells were made (e.g. `git show REV:manifests/expectations/vllm-0.11.yaml`).

A cell keeps each case's verdict and behaviour tags, and a verdict is a pure function of the check's outcome, its
tags and the case's expectation entry (harness.conformance.expectations.resolve). A cell is re-judged only when its
key proves what judged it: the key computed with OLD.yaml in place of the spec's file equals the cell's key (the same
lock, model, harness version, template, settings, cases and prompts, and OLD.yaml's bytes). Then the cases whose
entry differs between the two files are resolved again from their tags, the counts follow, the cell says so
(`rejudged`) and takes the current key. A case whose outcome its verdict does not tell (it was skipped by OLD.yaml:
it never ran) leaves its cell as it was, and says why. The pages are written again, as after a run.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.conformance.expectations import Expectations, load_expectations, resolve
from harness.conformance.model import Check, Verdict
from harness.errors import RefusedError
from harness.matrix.cell import load_cell, reuse_decision, write_cell
from harness.matrix.run import cell_key, lock_for, stale_lock
from harness.matrix.spec import MatrixSpec

__all__ = ["rejudge", "rejudge_cases", "changed_entries"]

# the check's outcome, told by the verdict it was given (a quirk is a failed check; quirk-absent a passed one)
OUTCOME = {"pass": Verdict.PASS, "quirk-absent": Verdict.PASS, "fail": Verdict.FAIL, "quirk": Verdict.FAIL}


def changed_entries(old: Expectations, new: Expectations) -> list[str]:
    """The case ids whose expectation entry differs between the two files."""
    return sorted(c for c in {*old.cases, *new.cases} if old.cases.get(c) != new.cases.get(c))


def rejudge_cases(
    cases: dict[str, dict[str, Any]], ids: list[str], old: Expectations, new: Expectations
) -> tuple[dict[str, dict[str, Any]], list[str]] | str:
    """The cases with `ids` resolved again under `new`, and the ids whose verdict changed; or why it cannot be done.
    Pure."""
    from harness.conformance.suite import all_cases

    heads = {c.id: c for c in all_cases()}
    out = dict(cases)
    changed: list[str] = []
    for cid in ids:
        c = cases.get(cid)
        if c is None:
            continue
        verdict = str(c.get("verdict"))
        if new.skip_reason(cid) is not None:
            again = "skip"
        elif old.skip_reason(cid) is not None and verdict == "skip":
            return f"{cid} was skipped by the old file: it never ran, so no verdict under the new one can be told"
        elif verdict in OUTCOME and cid in heads:
            tags = tuple(c.get("behaviours") or ())
            again = resolve(heads[cid], Check(OUTCOME[verdict], behaviours=tags), new).verdict
        else:
            again = verdict  # skip, absent, error, info, inconclusive: not a checked outcome, no entry turns it
        if again != verdict:
            out[cid] = {**c, "verdict": again}
            changed.append(cid)
    return out, changed


def _counts(cases: dict[str, dict[str, Any]], ids: list[str] | None, keys: Any) -> dict[str, int]:
    seen = Counter(str(c.get("verdict")) for cid, c in cases.items() if ids is None or cid in ids)
    return {k: seen.get(k, 0) for k in [*keys, *sorted(set(seen) - set(keys))]}  # in the cell's order


def _rejudged(cell: dict[str, Any], ids: list[str], old: Expectations, new: Expectations) -> dict[str, Any] | str:
    from harness.matrix.scripted import scripted_case_ids

    cell = dict(cell)
    conf = ((cell.get("observables") or {}).get("conformance")) or {}
    changed: list[str] = []
    if conf.get("cases"):
        got = rejudge_cases(conf["cases"], ids, old, new)
        if isinstance(got, str):
            return got
        cases, changed = got
        conf = {**conf, "cases": cases}
        if isinstance(conf.get("counts"), dict):
            conf["counts"] = _counts(cases, None, conf["counts"])
        cell["observables"] = {**cell["observables"], "conformance": conf}
        stage = cell.get("scripted")
        if isinstance(stage, dict) and isinstance(stage.get("counts"), dict):
            cell["scripted"] = {**stage, "counts": _counts(cases, scripted_case_ids(), stage["counts"])}
    cell["rejudged"] = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "judged_under_sha256": _sha256(old),
        "entries": ids,
        "changed": changed,
    }
    return cell


def _sha256(exp: Expectations) -> str:
    import hashlib

    return hashlib.sha256(Path(exp.path).read_bytes()).hexdigest() if exp.path else ""


def rejudge(
    spec: MatrixSpec,
    out: Path,
    old_file: Path,
    *,
    prompt_sets: list[str] | None = None,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Re-judge the cells of `out` judged under `old_file` and write the pages; the pages' document, with
    doc["rejudge"] = {release: what was done}."""
    from harness.matrix.render import write_pages

    out, old_file = Path(out), Path(old_file)
    if not old_file.is_file():
        raise RefusedError(f"--rejudge: {old_file} is not a file (the expectation file the cells were judged under)")
    old, new = load_expectations(old_file), load_expectations(spec.expectations)
    ids = changed_entries(old, new)
    done: dict[str, str] = {}
    for release in [*spec.versions, *spec.drift_ids]:  # a drift cell was judged under the same file
        cell = load_cell(out, release)
        if cell is None:
            continue
        lock = lock_for(spec, release, out)
        stale = bool(stale_lock(spec, release, lock))
        now = cell_key(spec, release, lock, prompt_sets, stale=stale)
        if reuse_decision(cell, now)[0]:
            done[release] = "current"
            continue
        then = cell_key(spec, release, lock, prompt_sets, stale=stale, expectations=old_file)
        if cell.get("key") != then:
            why = reuse_decision(cell, then)[1]
            done[release] = f"not re-judged: not a cell of this spec judged under {old_file.name} ({why})"
        else:
            new_cell = _rejudged(cell, ids, old, new)
            if isinstance(new_cell, str):
                done[release] = f"not re-judged: {new_cell}"
            else:
                new_cell["key"] = now
                write_cell(out, new_cell)
                moved = new_cell["rejudged"]["changed"]
                done[release] = f"re-judged: {len(moved)} verdict(s) changed" + (
                    f" ({', '.join(moved)})" if moved else ""
                )
        say(f"[{release}] {done[release]}")
    doc = write_pages(spec, out)
    doc["rejudge"] = done
    return doc
