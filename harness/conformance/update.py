"""Propose an updated expectation file from a conformance run (WPT's update-expectations, for engine quirks).

Every `fail` becomes a declared quirk (its behaviour tag) with a reason that says what was observed and asks for review;
every unexpected pass (a declared quirk that no longer happens, and is not `conditional`) is dropped. `error` verdicts
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

from harness.errors import DataError, UsageError
from harness.hashing import atomic_write_text

__all__ = ["propose", "update_expectations"]


def propose(results: dict, raw: dict[str, Any], *, note: str = "") -> tuple[dict[str, Any], list[str]]:
    """(new expectation mapping, one line per change). Pure."""
    cases: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (raw.get("cases") or {}).items()}
    changes: list[str] = []
    stamp = note or time.strftime("%Y-%m-%d")
    for r in results.get("cases", []):
        cid, verdict, tag = r.get("id"), r.get("verdict"), r.get("behaviour") or "unspecified"
        if verdict == "fail":
            entry = cases.setdefault(cid, {})
            tags = entry.get("quirk", [])
            tags = [tags] if isinstance(tags, str) else list(tags)
            if tag not in tags:
                tags.append(tag)
            entry["quirk"] = tags[0] if len(tags) == 1 else tags
            seen = f"expected {json.dumps(r.get('expected'), default=str)[:120]}, got {json.dumps(r.get('actual'), default=str)[:120]}"
            entry["reason"] = (entry.get("reason", "") + " | " if entry.get("reason") else "") + \
                f"REVIEW: observed {stamp} ({r.get('level')}): {seen}"
            changes.append(f"+ {cid}: quirk {tag} ({r.get('level')})")
        elif r.get("unexpected_pass") and cid in cases and not cases[cid].get("conditional"):
            del cases[cid]
            changes.append(f"- {cid}: the declared quirk no longer happens")
        elif verdict == "error":
            changes.append(f"! {cid}: error (harness could not run it), not written: {r.get('note', '')[:100]}")
    out = dict(raw)
    out["cases"] = dict(sorted(cases.items()))
    return out, changes


def update_expectations(results_path: str | Path, expect_path: str | Path, out_path: str | Path, *,
                        force: bool = False) -> list[str]:
    results_path, expect_path, out_path = Path(results_path), Path(expect_path), Path(out_path)
    try:
        results = json.loads(results_path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{results_path}: not a readable conformance.json ({exc})") from None
    if not isinstance(results, dict) or not isinstance(results.get("cases"), list):
        raise DataError(f"{results_path}: no 'cases' list; is this a conformance.json?")
    try:
        raw = yaml.safe_load(expect_path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise DataError(f"{expect_path}: not a readable expectation file ({exc})") from None
    if out_path.exists() and not force:
        raise UsageError(f"{out_path} exists; pass --force to overwrite it")
    new, changes = propose(results, raw, note=f"{time.strftime('%Y-%m-%d')} from {results_path}")
    header = (f"# Proposed by `harness update-expectations` from {results_path} over {expect_path}.\n"
              "# Every REVIEW reason was written by the tool: read it, then say why the engine does this.\n")
    atomic_write_text(out_path, header + yaml.safe_dump(new, sort_keys=False, allow_unicode=True, width=120))
    return changes
