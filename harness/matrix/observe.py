"""Observables of matrix cells, and the matrix rows built from them. Pure functions over cell documents.

An observable is (kind, id): kind "case" (a conformance case: verdict and behaviours), "metric" (a metric family:
type, labels, histogram buckets; "absent" when the scrape lacks it), "wire-key" (a dotted key path of the
non-streaming responses: the endpoints it appears in; `ENDPOINT:PATH` asks about one endpoint), "flag" (a flag of the
release's parser: present with its default, or "absent"), "perf" (a figure of the cell's perf stage: its median and
noise band, harness.matrix.perf). `observe(cell, kind, id)` -> (known, value): known is False when the cell
is missing, failed, or did not capture that surface (the release is then skipped, never taken as a change).
Values are compared by equality, except perf figures: two differ only outside both noise bands (perf.differs).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from harness.matrix.perf import DEFAULT_THRESHOLD_PCT, differs

__all__ = ["KINDS", "ABSENT", "observe", "display", "rows", "first_change", "row_ids", "same_for", "drift_rows"]

KINDS = ("case", "metric", "wire-key", "flag", "perf")
ABSENT = "absent"


def _obs(cell: dict[str, Any] | None) -> dict[str, Any] | None:
    if not isinstance(cell, dict) or cell.get("status") != "ran":
        return None
    o = cell.get("observables")
    return o if isinstance(o, dict) else None


def _key_paths(keys: Any) -> set[str]:
    return {k for k in keys if isinstance(k, str)} if isinstance(keys, list) else set()


def observe(cell: dict[str, Any] | None, kind: str, ident: str) -> tuple[bool, Any]:
    o = _obs(cell)
    if o is None:
        return False, None
    if kind == "case":
        conf = o.get("conformance") or {}
        if not conf.get("available"):
            return False, None
        c = (conf.get("cases") or {}).get(ident)
        return True, ({"verdict": c.get("verdict"), "behaviours": c.get("behaviours") or []} if c else ABSENT)
    if kind == "metric":
        metrics = o.get("metrics") or {}
        if not metrics:
            return False, None
        return True, metrics.get(ident, ABSENT)
    if kind == "wire-key":
        wire = o.get("wire_keys") or {}
        if not wire:
            return False, None
        if (cell or {}).get("golden_errors"):
            return False, None  # a golden set failed: the key may be in its responses (unknown, never "absent")
        # exact membership of a list of key paths: a string of keys (a tampered cell) would match any substring
        lists = {e: _key_paths(keys) for e, keys in wire.items() if isinstance(keys, list)}
        ep, sep, path = ident.partition(":")
        if sep:
            return (True, path in lists[ep]) if ep in lists else (False, None)
        return True, sorted(e for e, keys in lists.items() if ident in keys) or ABSENT
    if kind == "flag":
        flags = o.get("flags") or {}
        if not flags.get("captured"):
            return False, None
        entry = (flags.get("flags") or {}).get(ident)
        return True, ({"default": entry.get("default")} if isinstance(entry, dict) else ABSENT)
    if kind == "perf":
        figures = _perf_figures(cell)
        name = ident.removeprefix("perf.")
        return (True, figures[name]) if name in figures else (False, None)
    raise ValueError(f"unknown observable kind {kind!r}")


def _perf_figures(cell: dict[str, Any] | None) -> dict[str, Any]:
    """The perf figures of a ran cell ({} for an older cell without the stage); a figure that is not a band is left
    out (it is not an observation)."""
    perf = (cell or {}).get("perf") if _obs(cell) is not None else None
    figures = perf.get("figures") if isinstance(perf, dict) else None
    if not isinstance(figures, dict):
        return {}
    return {
        n: f
        for n, f in figures.items()
        if isinstance(f, dict) and all(isinstance(f.get(k), (int, float)) for k in ("median", "low", "high"))
    }


Same = Callable[[Any, Any], bool]


def _equal(a: Any, b: Any) -> bool:
    return bool(a == b)


def same_for(kind: str, threshold_pct: float = DEFAULT_THRESHOLD_PCT) -> Same:
    """How two known values of `kind` are compared: perf figures by their noise bands, the others by equality."""
    if kind == "perf":
        return lambda a, b: not differs(a, b, threshold_pct)
    return _equal


def display(kind: str, value: Any) -> str:
    """A short cell text for the rendered matrix."""
    if value is None:
        return "?"
    if value == ABSENT or value is False:
        return "-"
    if value is True:
        return "yes"
    if kind == "case":
        beh = value.get("behaviours") or []
        return str(value.get("verdict")) + (f" [{', '.join(beh)}]" if beh and value.get("verdict") != "pass" else "")
    if kind == "metric":
        text = str(value.get("type"))
        if value.get("labels"):
            text += "{" + ",".join(value["labels"]) + "}"
        if value.get("buckets"):
            text += f" {len(value['buckets'])} buckets"
        return text
    if kind == "wire-key":
        return ",".join(value) if isinstance(value, list) else str(value)
    if kind == "perf" and isinstance(value, dict):
        return f"{_num(value.get('median'))} [{_num(value.get('low'))}-{_num(value.get('high'))}]"
    if kind == "flag" and isinstance(value, dict):
        return "default=" + json.dumps(value.get("default"), sort_keys=True, default=str)[:50]
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)[:60] if value else "yes"
    return str(value)[:60]


def _num(x: Any) -> str:
    return f"{x:.3g}" if isinstance(x, (int, float)) else "?"


def first_change(
    versions: list[str], values: dict[str, tuple[bool, Any]], same: Same = _equal
) -> tuple[str | None, list[str]]:
    """(first release whose value differs from the first known release's, every release where the value differs
    from the previous known one). Unknown releases are skipped."""
    ref: Any = None
    prev: Any = None
    seen = False
    first: str | None = None
    changes: list[str] = []
    for v in versions:
        known, val = values.get(v, (False, None))
        if not known:
            continue
        if not seen:
            ref, prev, seen = val, val, True
            continue
        if not same(prev, val):
            changes.append(v)
        if first is None and not same(ref, val):
            first = v
        prev = val
    return first, changes


def row_ids(cells: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Every id of every kind seen in any cell, sorted."""
    ids: dict[str, set[str]] = {k: set() for k in KINDS}
    for cell in cells.values():
        o = _obs(cell)
        if o is None:
            continue
        ids["case"].update(((o.get("conformance") or {}).get("cases") or {}).keys())
        ids["metric"].update((o.get("metrics") or {}).keys())
        for ep, keys in (o.get("wire_keys") or {}).items():
            ids["wire-key"].update(f"{ep}:{k}" for k in _key_paths(keys))
        flags = o.get("flags") or {}
        if flags.get("captured"):
            ids["flag"].update((flags.get("flags") or {}).keys())
        ids["perf"].update(_perf_figures(cell))
    return {k: sorted(v) for k, v in ids.items()}


def rows(versions: list[str], cells: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per observable: the shown value per release, the first release where it changed, every change, and
    the release since which it has its newest value."""
    out = []
    for kind, ids in row_ids(cells).items():
        for ident in ids:
            values = {v: observe(cells.get(v), kind, ident) for v in versions}
            first, changes = first_change(versions, values, same_for(kind))
            known_versions = [v for v in versions if values[v][0]]
            out.append(
                {
                    "kind": kind,
                    "id": ident,
                    "values": {v: (display(kind, val) if known else None) for v, (known, val) in values.items()},
                    "first_changed": first,
                    "changes": changes,
                    # "since which release does it behave like this": where the newest known value began
                    "since": changes[-1] if changes else (known_versions[0] if known_versions else None),
                }
            )
    return out


def drift_rows(as_released: dict[str, Any], today: dict[str, Any]) -> list[dict[str, Any]]:
    """The observables in which a release's drift cell (locked as of today) differs from its cell as released:
    dependency drift, never an engine change (both run the same release). Only observables both cells observed."""
    pair = {"as_released": as_released, "today": today}
    out = []
    for kind, ids in row_ids(pair).items():
        same = same_for(kind)
        for ident in ids:
            (ka, va), (kb, vb) = observe(as_released, kind, ident), observe(today, kind, ident)
            if ka and kb and not same(va, vb):
                out.append({"kind": kind, "id": ident, "as_released": display(kind, va), "today": display(kind, vb)})
    return out
