"""Propose an updated expectation file from a conformance run (WPT's update-expectations, for engine quirks).

Every `fail` becomes a declared quirk with a reason that says what was observed and asks for review. A quirk covers
exactly the tags it lists, so the proposal is the tags the check saw (`behaviours`), replacing a declared list that
did not match; a `conditional` quirk (any part of its list is the quirk) gains the new tags instead. Every quirk-absent
(a declared quirk that no longer happens, and is not `conditional`) is dropped. `error` verdicts
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
        if r["verdict"] == "fail":
            for tag in [r.get("behaviour"), *(tags or [])]:
                need(
                    tag is None or (tag.strip() == tag and "\n" not in tag), f"{at}.behaviour", "must be a one-line tag"
                )
    return results


def propose(results: dict, raw: dict[str, Any], *, note: str = "") -> tuple[dict[str, Any], list[str]]:
    """(new expectation mapping, one line per change). Pure."""
    cases: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (raw.get("cases") or {}).items()}
    changes: list[str] = []
    stamp = note or time.strftime("%Y-%m-%d")
    for r in results.get("cases", []):
        cid, verdict, tag = r.get("id"), r.get("verdict"), r.get("behaviour") or "unspecified"
        if verdict == "fail":
            seen = [t for t in (r.get("behaviours") or []) if t] or [tag]
            entry = cases.setdefault(cid, {})
            old = entry.get("quirk", [])
            old = [old] if isinstance(old, str) else list(old)
            tags = old + [t for t in seen if t not in old] if entry.get("conditional") else seen
            entry["quirk"] = tags[0] if len(tags) == 1 else tags
            saw = f"expected {json.dumps(r.get('expected'), default=str)[:120]}, got {json.dumps(r.get('actual'), default=str)[:120]}"
            entry["reason"] = (
                entry.get("reason", "") + " | " if entry.get("reason") else ""
            ) + f"REVIEW: observed {stamp} ({r.get('level')}): {saw}"
            was = f" (was {'/'.join(old)})" if old and old != tags else ""
            changes.append(f"+ {cid}: quirk {'/'.join(tags)}{was} ({r.get('level')})")
        elif (
            (verdict == "quirk-absent" or r.get("unexpected_pass"))
            and cid in cases
            and not cases[cid].get("conditional")
        ):
            del cases[cid]
            changes.append(f"- {cid}: the declared quirk no longer happens")
        elif verdict == "error":
            changes.append(f"! {cid}: error (harness could not run it), not written: {(r.get('note') or '')[:100]}")
    out = dict(raw)
    out["cases"] = dict(sorted(cases.items()))
    return out, changes


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
