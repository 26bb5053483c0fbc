"""matrix.json, matrix.md and an offline matrix.html from the cells in DIR/cells/. Columns are the releases that have
a cell (in spec order); rows are conformance cases, metric families, wire keys and flags, each with the first release
where it changed; per release what changed there; the performance figures across releases. The pages are rendered
from the document alone (harness.matrix.page draws matrix.html), so they re-render from a saved matrix.json."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from harness.matrix.cell import load_cell
from harness.matrix.observe import rows
from harness.matrix.page import GROUP_ORDER, KIND_TITLES, lock_said, render_html
from harness.matrix.spec import MatrixSpec, base_version
from harness.outputs import atomic_write_text
from harness.shown import md_code, md_text

__all__ = [
    "MATRIX_FORMAT",
    "matrix_document",
    "changes_by_release",
    "performance",
    "render_markdown",
    "render_html",
    "write_pages",
    "load_cells",
]

MATRIX_FORMAT = "harness-matrix/1"


def load_cells(spec: MatrixSpec, out: Path) -> dict[str, dict[str, Any]]:
    """Every cell in DIR of the spec's releases and its drift cells (columns are the releases only)."""
    cells = {}
    for v in [*spec.versions, *spec.drift_ids]:
        c = load_cell(out, v)
        if c is not None:
            cells[v] = c
    return cells


def _column(cell: dict[str, Any]) -> dict[str, Any]:
    t = cell.get("timings") or {}
    inst = cell.get("install") or {}
    ident = cell.get("identity") or {}
    return {
        "release": cell["release"],
        "status": cell.get("status"),
        "stage": cell.get("stage"),
        "reason": cell.get("reason"),
        "log_tail": cell.get("log_tail") or None,
        "log_errors": cell.get("log_errors") or None,
        "reported_version": ident.get("version"),
        "timings": t,
        # the whole cell, both launches (total_s); a cell made before it was recorded has the first launch's cell_s
        "cell_seconds": t.get("total_s", t.get("cell_s")),
        "installer": inst.get("installer"),
        "packages": inst.get("packages"),
        "flags_captured": bool(((cell.get("observables") or {}).get("flags") or {}).get("captured")),
        "golden": {k: (cell.get("golden_diff") or {}).get(k) for k in ("baseline", "ok", "counts", "refused")},
        "golden_errors": cell.get("golden_errors") or None,
        "scripted": _scripted_column(cell.get("scripted")),
        "created_at": cell.get("created_at"),
    }


def _scripted_column(stage: Any) -> dict[str, Any] | None:
    """What a release column says of its scripted stage: the parsers it ran with, what it could not do, and its
    golden diff's counts against the baseline's scripted recording."""
    if not isinstance(stage, dict):
        return None
    chosen: dict[str, Any] = stage["chosen"] if isinstance(stage.get("chosen"), dict) else {}
    problems = [str(stage["error"])] if stage.get("error") else []
    problems += [str(n) for n in stage.get("notes") or []]
    diff: dict[str, Any] = stage["golden_diff"] if isinstance(stage.get("golden_diff"), dict) else {}
    return {
        "parsers": [str(v) for v in chosen.values() if isinstance(v, str)],
        "problems": problems or None,
        "golden": diff.get("refused") or ", ".join(f"{k} {n}" for k, n in sorted((diff.get("counts") or {}).items())),
    }


def changes_by_release(versions: list[str], all_rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """{release: [{kind, id, before, after}]}: every row whose value differs from the previous known release's."""
    out: dict[str, list[dict[str, Any]]] = {v: [] for v in versions}
    for r in all_rows:
        prev = None
        for v in versions:
            val = r["values"].get(v)
            if val is None:
                continue
            if v in (r.get("changes") or []):
                out[v].append({"kind": r["kind"], "id": r["id"], "before": prev, "after": val})
            prev = val
    return {v: items for v, items in out.items() if items}


def _figure(value: Any) -> dict[str, float] | None:
    if not isinstance(value, dict):
        return None
    try:
        fig = {k: float(value[k]) for k in ("median", "low", "high")}
    except (KeyError, TypeError, ValueError):
        return None
    return fig if all(math.isfinite(x) for x in fig.values()) else None


def performance(versions: list[str], cells: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """{"figures": {name: {release: {median, low, high}}}, "ready_s": {release: s}} from the cells' perf stage
    (cell["perf"]["figures"]; a cell without one has no point) and their time to ready."""
    figures: dict[str, dict[str, dict[str, float]]] = {}
    ready: dict[str, float] = {}
    for v in versions:
        cell = cells[v]
        raw = cell.get("perf")
        perf: dict[str, Any] = raw if isinstance(raw, dict) else {}
        for name, value in sorted((perf.get("figures") or {}).items() if isinstance(perf.get("figures"), dict) else []):
            fig = _figure(value)
            if fig is not None:
                figures.setdefault(str(name), {})[v] = fig
        t = perf.get("ready_s")
        if not isinstance(t, (int, float)) or isinstance(t, bool):
            t = (cell.get("timings") or {}).get("ready_s")
        if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and cell.get("status") == "ran":
            ready[v] = float(t)
    return {"figures": figures, "ready_s": ready}


def matrix_document(spec: MatrixSpec, cells: dict[str, dict[str, Any]]) -> dict[str, Any]:
    versions = [v for v in spec.versions if v in cells]
    all_rows = rows(versions, {v: cells[v] for v in versions})  # a drift cell is no column
    flags_note = None
    if versions and not any(_column(cells[v])["flags_captured"] for v in versions):
        reasons = {((cells[v].get("observables") or {}).get("flags") or {}).get("reason") for v in versions}
        flags_note = "not captured: " + "; ".join(sorted(str(r) for r in reasons if r))
    return {
        "format": MATRIX_FORMAT,
        "spec": spec.name,
        "baseline": spec.baseline,
        "expectations": spec.expectations,
        "releases": [_column(cells[v]) for v in versions],
        "not_run": [v for v in spec.versions if v not in cells],
        "flags": flags_note,
        "rows": all_rows,
        "changed_rows": sum(1 for r in all_rows if r["first_changed"]),
        "changes_by_release": changes_by_release(versions, all_rows),
        "performance": performance(versions, cells),
        "drift": _drift(spec, cells),
        # the newest cell's time, not the clock: re-rendering the same cells gives the same pages
        "rendered_at": max((str(cells[v].get("created_at") or "") for v in versions), default=""),
    }


def _changed_at(v: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list((doc.get("changes_by_release") or {}).get(v) or [])


def _or_dash(value: Any) -> Any:
    return "-" if value is None else value


def _one_line(text: object, limit: int = 200) -> str:
    t = " ".join(str(text).split())
    return t if len(t) <= limit else t[: limit - 1] + "\u2026"


def _drift(spec: MatrixSpec, cells: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per drift cell (a release locked as of today, outside the release sequence): what differs from its release's
    cell (dependency drift), with the lock differences it recorded."""
    from harness.matrix.observe import drift_rows

    out = []
    for d in spec.drift_ids:
        cell, base = cells.get(d), cells.get(base_version(d))
        if cell is None or base is None:
            continue
        lock_of = lambda c: {k: (c.get("lock") or {}).get(k) for k in ("committed", "as_of", "cutoff")}  # noqa: E731
        out.append(
            {
                "release": base["release"],
                "drift_cell": d,
                "status": cell.get("status"),
                "locks": {"as_released": lock_of(base), "today": lock_of(cell)},
                "packages": (cell.get("drift") or {}).get("packages"),
                "rows": drift_rows(base, cell) if cell.get("status") == "ran" else [],
            }
        )
    return out


def render_markdown(doc: dict[str, Any]) -> str:
    """A compact summary: the releases (a failed cell on one line), per release what changed, the performance
    figures, and the rows that change (the full grid is matrix.html's). Every text from a cell (a server's reason,
    a log line, a version, an id) goes through md_text, or md_code in a code span: one line, Markdown inert, so a
    reason cannot become a remote image or a link where the page is shown."""
    cols = [c["release"] for c in doc["releases"]]
    out = [f"# Compatibility matrix: {md_text(doc['spec'])}", ""]
    out.append(
        f"Baseline {md_text(doc['baseline'])}; conformance under `{md_code(doc['expectations'])}`; "
        f"{len(cols)} release(s) with a cell, {doc['changed_rows']} of {len(doc['rows'])} rows change. "
        "The full grid (every row, every release) is matrix.html."
    )
    if doc["not_run"]:
        out.append(f"Not run: {', '.join(md_text(v) for v in doc['not_run'])}.")
    out += [
        "",
        "## Releases",
        "",
        "| release | status | reported | ready s | cell s | golden vs baseline | changed here |",
    ]
    out.append("|---|---|---|---|---|---|---|")
    for c in doc["releases"]:
        t = c["timings"] or {}
        status = c["status"] if c["status"] == "ran" else _one_line(f"failed at {c['stage']}: {c['reason']}")
        g = c["golden"] or {}
        gold = g.get("refused") or ", ".join(f"{k} {n}" for k, n in sorted((g.get("counts") or {}).items()))
        if c.get("golden_errors"):
            gold += f"; {len(c['golden_errors'])} set(s) not recorded"
        if c.get("scripted"):
            gold += f"; scripted: {c['scripted']['golden'] or '-'}"
            status += "".join(f"; scripted stage: {_one_line(p, 120)}" for p in c["scripted"]["problems"] or [])
        out.append(
            f"| {md_text(c['release'])} | {md_text(status)} | {md_text(c.get('reported_version') or '-')} | "
            f"{md_text(_or_dash(t.get('ready_s')))} | {md_text(_or_dash(c.get('cell_seconds')))} | {md_text(_one_line(gold or '-'))} | "
            f"{len(_changed_at(c['release'], doc))} |"
        )
    if doc.get("flags"):
        out += ["", f"Flags: {md_text(doc['flags'])}."]
    out += ["", "## What changed in each release", ""]
    ran = [c["release"] for c in doc["releases"] if c["status"] == "ran"]
    for v in cols:
        items = _changed_at(v, doc)
        if not items:
            continue
        by_kind: dict[str, list[str]] = {}
        for it in items:
            by_kind.setdefault(it["kind"], []).append(f"`{md_code(it['id'])}`")
        shown_kinds = []
        for kind, ids in by_kind.items():
            more = f", and {len(ids) - 6} more" if len(ids) > 6 else ""
            shown_kinds.append(
                f"{md_text(KIND_TITLES.get(kind, kind).lower())} ({len(ids)}): {', '.join(ids[:6])}{more}"
            )
        before = ran[ran.index(v) - 1] if v in ran and ran.index(v) > 0 else None
        versus = (
            f" (vs {md_text(before)}, the last release that ran)"
            if before and before != cols[cols.index(v) - 1]
            else ""
        )
        out.append(f"- **{md_text(v)}**{versus}: " + "; ".join(shown_kinds))
    if not any(_changed_at(v, doc) for v in cols):
        out.append("No row changes across these releases.")
    perf = doc.get("performance") or {}
    figures = perf.get("figures") or {}
    if figures or perf.get("ready_s"):
        names = list(figures)
        out += ["", "## Performance", "", "median (low to high over the rounds)", ""]
        out.append("| release | ready s | " + " | ".join(md_text(n) for n in names) + " |")
        out.append("|---|---|" + "---|" * len(names))
        for v in cols:
            cells = [
                f"{figures[n][v]['median']:.4g} ({figures[n][v]['low']:.4g} to {figures[n][v]['high']:.4g})"
                if v in figures[n]
                else "-"
                for n in names
            ]
            ready = (perf.get("ready_s") or {}).get(v, "-")
            out.append(f"| {md_text(v)} | {md_text(ready)} | " + " | ".join(cells) + " |")
    out += _drift_markdown(doc)
    for kind in [k for k in GROUP_ORDER if k in {r["kind"] for r in doc["rows"]}] + sorted(
        {r["kind"] for r in doc["rows"]} - set(GROUP_ORDER)
    ):
        krows = [r for r in doc["rows"] if r["kind"] == kind]
        changed = [r for r in krows if r["first_changed"]]
        out += ["", f"## {md_text(KIND_TITLES.get(kind, kind))} ({len(krows)}, {len(changed)} changed)", ""]
        if not changed:
            out.append("None changes.")
            continue
        out.append("| id | first changed | as now since | changed at |")
        out.append("|---|---|---|---|")
        for r in sorted(
            changed, key=lambda r: (cols.index(r["first_changed"]) if r["first_changed"] in cols else 0, r["id"])
        ):
            out.append(
                f"| `{md_code(r['id'])}` | {md_text(r['first_changed'] or '-')} | {md_text(r.get('since') or '-')} | "
                f"{md_text(', '.join(r.get('changes') or []) or '-')} |"
            )
    return "\n".join(out) + "\n"


def _drift_markdown(doc: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for d in doc.get("drift") or []:
        if not out:
            out += ["", "## Dependency drift", ""]
        locks, pkgs, rows_ = d.get("locks") or {}, d.get("packages") or {}, d.get("rows") or []
        as_released, today = (lock_said(locks.get(k)) for k in ("as_released", "today"))
        out.append(
            f"{md_text(d['release'])} (lock {md_text(as_released)}) against {md_text(d['drift_cell'])} "
            f"(the same release, lock {md_text(today)}): {len(rows_)} row(s) differ, {len(pkgs)} package "
            "pin(s) differ. Not an engine change."
        )
        if d.get("status") != "ran":
            out.append(f"The drift cell did not run ({md_text(d.get('status'))}).")
        if rows_:
            out += ["", "| kind | id | as released | today |", "|---|---|---|---|"]
            out += [
                f"| {md_text(r['kind'])} | `{md_code(r['id'])}` | {md_text(r['as_released'])} | {md_text(r['today'])} |"
                for r in rows_
            ]
        if pkgs:
            pins = ", ".join(
                f"{md_text(n)} {md_text(a or '-')} \u2192 {md_text(b or '-')}" for n, (a, b) in sorted(pkgs.items())
            )
            out += ["", f"Package pins: {pins}."]
    return out


def write_pages(spec: MatrixSpec, out: Path) -> dict[str, Any]:
    doc = matrix_document(spec, load_cells(spec, out))
    atomic_write_text(Path(out) / "matrix.json", json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(Path(out) / "matrix.md", render_markdown(doc))
    atomic_write_text(Path(out) / "matrix.html", render_html(doc))
    return doc
