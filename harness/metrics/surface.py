"""Metric surface of an engine (names, types, label sets) and the diff between two surfaces.

`surface_from_text(prometheus_text)` -> {family: {"type", "labels": [names], "values": {label: [values]}}}.
Family names are the names a client registers (prometheus_client strips the `_total` of counters and the
`_bucket/_sum/_count/_created` of histograms). Label values are kept only for low-cardinality "enum" labels
(finished_reason, source, reason, ...); `*_info` gauges keep every label's value (their labels *are* the data).

`diff_surfaces(old, new, new_source_names=None)` -> added / removed / hidden / renamed / type_changed / label changes.
A name that disappears but still occurs in the new engine's source (`new_source_names`) is classed `hidden`
(shown only with a flag such as --show-hidden-metrics-for-version, or conditional on a config) rather than `removed`.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from harness.metrics.model import Exposition, parse_exposition

__all__ = ["IGNORED_VALUE_LABELS", "Surface", "diff_surfaces", "names_in_source", "surface_from_text", "surface_of"]

Surface = dict[str, dict[str, Any]]  # family name -> {"type", "labels", "values"}

IGNORED_VALUE_LABELS = {
    "model_name",
    "engine",
    "le",
    "quantile",
    "handler",
    "method",
    "status",
    "version",
    "implementation",
    "major",
    "minor",
    "patchlevel",
    "gen",
}


def surface_from_text(text: str) -> Surface:
    """The surface of a /metrics text; DataError when it is not Prometheus text exposition."""
    return surface_of(parse_exposition(text, where="/metrics"))


def surface_of(expo: Exposition) -> Surface:
    out: Surface = {}
    for fam in expo.families.values():
        labels = fam.label_names()
        values: dict[str, set[str]] = {}
        info = fam.name.endswith("_info")
        for s in fam.samples:
            for k, v in s.labels.items():
                if k in labels and (info or k not in IGNORED_VALUE_LABELS):
                    values.setdefault(k, set()).add(v)
        out[fam.name] = {
            "type": fam.type,
            "labels": sorted(labels),
            "values": {k: sorted(v) for k, v in sorted(values.items())},
        }
    # The text format exposes a counter's/histogram's `_created` timestamps as a separate gauge family: not a metric.
    for name in [n for n in out if n.endswith("_created") and n[: -len("_created")] in out]:
        del out[name]
    return out


def names_in_source(package_dir: Path, names: list[str]) -> set[str]:
    """Which of `names` occur literally in the .py files under package_dir (the new engine's package directory: its
    profile's `source_package_dirs`)."""
    found: set[str] = set()
    if not names or not package_dir.is_dir():
        return found
    pats = {n: re.compile(rb"(?<![\w:])" + re.escape(n).encode() + rb"(?![\w])") for n in names}
    for f in package_dir.rglob("*.py"):
        try:
            data = f.read_bytes()
        except OSError:
            continue
        for n, p in pats.items():
            if n not in found and p.search(data):
                found.add(n)
        if len(found) == len(names):
            break
    return found


def _rename_candidates(removed: list[str], added: list[str], old: Surface, new: Surface) -> list[dict[str, Any]]:
    pairs = []
    used: set[str] = set()
    for r in removed:
        best, score = None, 0.0
        for a in added:
            if a in used or old[r]["type"] != new[a]["type"]:
                continue
            sc = difflib.SequenceMatcher(None, r, a).ratio()
            if sc > score:
                best, score = a, sc
        if best is not None and score >= 0.85:
            used.add(best)
            pairs.append(
                {
                    "old": r,
                    "new": best,
                    "similarity": round(score, 2),
                    "note": "possibly renamed (same type, similar name)",
                }
            )
    return pairs


def diff_surfaces(old: Surface, new: Surface, new_source_names: set[str] | None = None) -> dict[str, Any]:
    gone = sorted(set(old) - set(new))
    added = sorted(set(new) - set(old))
    renamed = _rename_candidates(gone, added, old, new)
    ren_old = {p["old"] for p in renamed}
    ren_new = {p["new"] for p in renamed}
    src = new_source_names or set()
    hidden = [n for n in gone if n in src and n not in ren_old]
    removed = [n for n in gone if n not in src and n not in ren_old]
    type_changed, label_changes, value_changes = [], [], []
    for n in sorted(set(old) & set(new)):
        o, w = old[n], new[n]
        if o["type"] != w["type"]:
            type_changed.append({"name": n, "old": o["type"], "new": w["type"]})
        la, lb = set(o["labels"]), set(w["labels"])
        if la != lb:
            label_changes.append({"name": n, "added": sorted(lb - la), "removed": sorted(la - lb)})
        for lab in sorted(set(o["values"]) & set(w["values"])):
            va, vb = o["values"][lab], w["values"][lab]
            if va != vb:
                value_changes.append(
                    {
                        "name": n,
                        "label": lab,
                        "old": va if len(va) > 1 else (va[0] if va else None),
                        "new": vb if len(vb) > 1 else (vb[0] if vb else None),
                    }
                )
    return {
        "added": [{"name": n, "type": new[n]["type"], "labels": new[n]["labels"]} for n in added if n not in ren_new],
        "removed": [{"name": n, "type": old[n]["type"], "labels": old[n]["labels"]} for n in removed],
        "hidden": [
            {
                "name": n,
                "type": old[n]["type"],
                "note": "absent from /metrics but still in the new engine's source "
                "(hidden behind a flag, or conditional)",
            }
            for n in hidden
        ],
        "renamed": renamed,
        "type_changed": type_changed,
        "label_changes": label_changes,
        "label_value_changes": value_changes,
        "counts": {"old": len(old), "new": len(new)},
    }
