"""matrix.json, matrix.md and an offline matrix.html from the cells in DIR/cells/. Columns are the releases that have
a cell (in spec order); rows are conformance cases, metric families, wire keys and flags, each with the first release
where it changed. The HTML page has no script and no external resource; every text in it is escaped."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from harness.matrix.cell import load_cell
from harness.matrix.observe import KINDS, rows
from harness.matrix.spec import MatrixSpec, base_version
from harness.outputs import atomic_write_text
from harness.shown import md_code, md_text

__all__ = ["MATRIX_FORMAT", "matrix_document", "render_markdown", "render_html", "write_pages", "load_cells"]

MATRIX_FORMAT = "harness-matrix/1"
KIND_TITLES = {"case": "Conformance cases", "metric": "Metric families", "wire-key": "Wire keys", "flag": "Flags",
               "perf": "Performance"}  # fmt: skip


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
        "installer": inst.get("installer"),
        "packages": inst.get("packages"),
        "flags_captured": bool(((cell.get("observables") or {}).get("flags") or {}).get("captured")),
        "golden": {k: (cell.get("golden_diff") or {}).get(k) for k in ("baseline", "ok", "counts", "refused")},
        "golden_errors": cell.get("golden_errors") or None,
        "created_at": cell.get("created_at"),
    }


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
        "drift": _drift(spec, cells),
        # the newest cell's time, not the clock: re-rendering the same cells gives the same pages
        "rendered_at": max((str(cells[v].get("created_at") or "") for v in versions), default=""),
    }


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
    """Every text from a cell (a server's reason, a log line, a version, an id) goes through md_text, or md_code in a
    code span: one line, Markdown inert, so a reason cannot become a remote image or a link where the page is shown."""
    cols = [c["release"] for c in doc["releases"]]
    out = [f"# Compatibility matrix: {md_text(doc['spec'])}", ""]
    out.append(
        f"Baseline {md_text(doc['baseline'])}; conformance under `{md_code(doc['expectations'])}`; "
        f"{len(cols)} release(s) with a cell, {doc['changed_rows']} of {len(doc['rows'])} rows change."
    )
    if doc["not_run"]:
        out.append(f"Not run: {', '.join(md_text(v) for v in doc['not_run'])}.")
    out += ["", "## Releases", "", "| release | status | reported | ready s | cell s | install | golden vs baseline |"]
    out.append("|---|---|---|---|---|---|---|")
    for c in doc["releases"]:
        t = c["timings"] or {}
        status = c["status"] if c["status"] == "ran" else f"failed at {c['stage']}: {c['reason']}"
        if c.get("log_errors"):
            status += " (log: " + " / ".join(c["log_errors"][:3]) + ")"
        g = c["golden"] or {}
        gold = g.get("refused") or ", ".join(f"{k} {n}" for k, n in sorted((g.get("counts") or {}).items()))
        if c.get("golden_errors"):
            gold += "; sets not recorded: " + "; ".join(f"{k}: {v}" for k, v in c["golden_errors"].items())
        inst = f"{c.get('installer') or '?'} {t.get('install_s', '?')} s"
        out.append(
            f"| {md_text(c['release'])} | {md_text(status)} | {md_text(c.get('reported_version') or '-')} | "
            f"{md_text(t.get('ready_s', '-'))} | {md_text(t.get('cell_s', '-'))} | {md_text(inst)} | "
            f"{md_text(gold or '-')} |"
        )
    if doc.get("flags"):
        out += ["", f"Flags: {md_text(doc['flags'])}."]
    for kind in KINDS:
        krows = [r for r in doc["rows"] if r["kind"] == kind]
        if not krows:
            continue
        changed = sum(1 for r in krows if r["first_changed"])
        out += ["", f"## {KIND_TITLES[kind]} ({len(krows)}, {changed} changed)", ""]
        out.append("| " + " | ".join(["id", "first changed", "as now since", *map(md_text, cols)]) + " |")
        out.append("|" + "---|" * (len(cols) + 3))
        for r in sorted(krows, key=lambda r: (r["first_changed"] is None, r["id"])):
            vals = [md_text(r["values"].get(v) if r["values"].get(v) is not None else "?") for v in cols]
            out.append(
                f"| `{md_code(r['id'])}` | {md_text(r['first_changed'] or '-')} | {md_text(r.get('since') or '-')} | "
                + " | ".join(vals)
                + " |"
            )
    return "\n".join(out) + "\n"


_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:2px 6px;font-size:13px;vertical-align:top}
th{background:#f2f2f2;position:sticky;top:0}
td.id{font-family:monospace;max-width:38em;word-break:break-all}
td.changed{background:#fde8c8}
td.unknown{color:#999}
tr.changed td.first{font-weight:bold;color:#a33}
.failed{color:#a33}
pre{background:#f7f7f7;padding:4px;max-height:12em;overflow:auto;font-size:12px}
"""


def render_html(doc: dict[str, Any]) -> str:
    e = html.escape
    cols = [c["release"] for c in doc["releases"]]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Compatibility matrix: {e(str(doc['spec']))}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Compatibility matrix: {e(str(doc['spec']))}</h1>",
        f"<p>Baseline {e(str(doc['baseline']))}; conformance under <code>{e(str(doc['expectations']))}</code>; "
        f"{len(cols)} release(s) with a cell; {doc['changed_rows']} of {len(doc['rows'])} rows change.</p>",
    ]
    if doc["not_run"]:
        parts.append(f"<p>Not run: {e(', '.join(doc['not_run']))}.</p>")
    parts.append('<table id="releases"><tr><th>release</th><th>status</th><th>reported</th><th>ready s</th>'
                 "<th>cell s</th><th>install</th><th>golden vs baseline</th></tr>")  # fmt: skip
    for c in doc["releases"]:
        t = c["timings"] or {}
        g = c["golden"] or {}
        gold = g.get("refused") or ", ".join(f"{k} {n}" for k, n in sorted((g.get("counts") or {}).items()))
        if c.get("golden_errors"):
            gold += "; sets not recorded: " + "; ".join(f"{k}: {v}" for k, v in c["golden_errors"].items())
        if c["status"] == "ran":
            status = "ran"
        else:
            status = f'<span class="failed">failed at {e(str(c["stage"]))}: {e(str(c["reason"]))}</span>'
            if c.get("log_errors"):
                status += "<pre>" + e("\n".join(str(x) for x in c["log_errors"])) + "</pre>"
            if c.get("log_tail"):
                status += f"<pre>{e(str(c['log_tail'])[-1500:])}</pre>"
        parts.append(
            f"<tr><td>{e(c['release'])}</td><td>{status}</td><td>{e(str(c.get('reported_version') or '-'))}</td>"
            f"<td>{e(str(t.get('ready_s', '-')))}</td><td>{e(str(t.get('cell_s', '-')))}</td>"
            f"<td>{e(str(c.get('installer') or '?'))} {e(str(t.get('install_s', '?')))} s</td>"
            f"<td>{e(str(gold or '-'))}</td></tr>"
        )
    parts.append("</table>")
    if doc.get("flags"):
        parts.append(f"<p>Flags: {e(str(doc['flags']))}.</p>")
    for kind in KINDS:
        krows = [r for r in doc["rows"] if r["kind"] == kind]
        if not krows:
            continue
        changed = sum(1 for r in krows if r["first_changed"])
        parts.append(f'<h2 id="{e(kind)}">{e(KIND_TITLES[kind])} ({len(krows)}, {changed} changed)</h2>')
        head = "".join(f"<th>{e(v)}</th>" for v in cols)
        parts.append(
            f'<table class="rows" data-kind="{e(kind)}"><tr><th>id</th><th>first changed</th>'
            f"<th>as now since</th>{head}</tr>"
        )
        for r in sorted(krows, key=lambda r: (r["first_changed"] is None, r["id"])):
            cls = ' class="changed"' if r["first_changed"] else ""
            tds = []
            for v in cols:
                val = r["values"].get(v)
                if val is None:
                    tds.append('<td class="unknown">?</td>')
                    continue
                mark = ' class="changed"' if r["changes"] and v in r["changes"] else ""
                tds.append(f"<td{mark}>{e(str(val))}</td>")
            parts.append(
                f'<tr{cls}><td class="id">{e(r["id"])}</td><td class="first">{e(r["first_changed"] or "-")}</td>'
                f'<td class="since">{e(str(r.get("since") or "-"))}</td>' + "".join(tds) + "</tr>"
            )
        parts.append("</table>")
    parts.append(f"<p><small>Rendered {e(str(doc['rendered_at']))} by harness matrix.</small></p></body></html>")
    return "\n".join(parts) + "\n"


def write_pages(spec: MatrixSpec, out: Path) -> dict[str, Any]:
    doc = matrix_document(spec, load_cells(spec, out))
    atomic_write_text(Path(out) / "matrix.json", json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(Path(out) / "matrix.md", render_markdown(doc))
    atomic_write_text(Path(out) / "matrix.html", render_html(doc))
    return doc
