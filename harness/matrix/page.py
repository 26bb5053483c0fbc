"""matrix.html from a matrix document (harness.matrix.render.matrix_document): a page read at a glance.

One grid: a row per observable, a column per release, a glyph and a colour per cell (the value on hover, the row's
story on click), the header row and the id column sticky; the rows that change first, a CSS-only switch for all;
per release what changed there; failed cells one line each, their logs folded away; one chart per performance
figure with its noise band. No script, no external resource; every text from a cell is escaped (html.escape after
shown_lines/strip_ansi), so a log or a server's reason is text, never markup.
"""

from __future__ import annotations

import html
from typing import Any

from harness.shown import shown, shown_lines, strip_ansi

__all__ = ["render_html", "glyph", "KIND_TITLES", "GROUP_ORDER"]

KIND_TITLES = {
    "case": "Conformance cases",
    "metric": "Metric families",
    "flag": "Flags",
    "wire-key": "Wire keys",
    "perf": "Performance",
}
GROUP_ORDER = ("case", "metric", "flag", "wire-key", "perf")

# verdict -> (class, glyph, legend). A value of another kind is "present" or "none" (absent from that release).
_VERDICTS = {
    "pass": ("pass", "\u2713", "pass"),
    "quirk": ("quirk", "~", "quirk (a known difference, as expected)"),
    "quirk-absent": ("qabs", "\u25cb", "quirk expected but not seen"),
    "expected-intermittent": ("interm", "\u2248", "a known intermittent outcome (a race, with its measured rate)"),
    "fail": ("fail", "\u2717", "fail"),
    "error": ("fail", "!", "error"),
    "absent": ("absent", "\u2205", "absent: the release does not serve that endpoint"),
    "skip": ("skip", "s", "skip"),
    "inconclusive": ("inconc", "\u2026", "inconclusive: the model did not do what the case needs (not judged)"),
    "info": ("info", "i", "info"),
}
_PRESENT = ("present", "\u2022", "present")
_NONE = ("none", "\u2013", "not in this release")
_UNKNOWN = ("unk", "?", "unknown: the cell failed or did not capture it")


def glyph(kind: str, value: str | None) -> tuple[str, str]:
    """(css class, glyph) of a displayed value (harness.matrix.observe.display)."""
    if value is None:
        return _UNKNOWN[:2]
    if value == "-":
        return _NONE[:2]
    if kind == "case":
        verdict = value.split(" [", 1)[0]
        return _VERDICTS.get(verdict, ("other", "\u2022", ""))[:2]
    return _PRESENT[:2]


_CSS = """
:root{--id:36ch}
*{box-sizing:border-box}
body{font-family:system-ui,sans-serif;margin:0 1em 2em;color:#1f2328;font-size:14px}
h1{font-size:1.5em;margin:.6em 0 .2em}
h2{font-size:1.15em;margin:1.2em 0 .4em}
p{margin:.3em 0}
code,.id,pre{font-family:ui-monospace,monospace}
.legend span{display:inline-block;margin:0 .8em .2em 0;white-space:nowrap}
.legend b,.grid td{display:inline-block;text-align:center}
.grid{max-height:calc(100vh - 3em);overflow:auto;border:1px solid #d0d7de;margin:.4em 0}
.grid table{border-collapse:separate;border-spacing:0;table-layout:fixed;width:100%}
.grid th,.grid td{padding:1px 2px;font-size:12px;border-bottom:1px solid #eaeef2;height:20px;overflow:hidden}
.grid thead th{position:sticky;top:0;z-index:2;background:#f6f8fa;border-bottom:1px solid #d0d7de;font-weight:600;
  font-size:10.5px;line-height:1.15;white-space:nowrap;vertical-align:bottom}
.grid th.id{position:sticky;left:0;z-index:1;background:#fff;width:var(--id);text-align:left;font-weight:normal;
  border-right:1px solid #d0d7de;overflow-wrap:anywhere;vertical-align:top}
.grid thead th.id{z-index:3;background:#f6f8fa}
.grid thead th.fail{color:#cf222e;background:#ffebe9}
.grid thead .n{font-weight:normal;color:#57606a}.grid thead a.n{color:#0969da;font-weight:600}
.grid tr.group th{background:#f6f8fa;font-family:system-ui,sans-serif;font-weight:600;font-size:12.5px;
  text-align:left;position:sticky;left:0}
.grid td{display:table-cell;cursor:default;border-left:1px solid #f3f4f6}
.grid details summary{cursor:pointer;list-style:none;white-space:normal}
.grid details summary::-webkit-details-marker{display:none}
.grid details summary:hover{text-decoration:underline dotted}
.grid details[open]{white-space:normal}
.grid details div{font-family:system-ui,sans-serif;color:#57606a;padding:2px 0 4px}
.pass{color:#1a7f37}.fail{color:#cf222e;background:#ffebe9}.quirk{color:#9a6700;background:#fff8c5}
.qabs,.interm{color:#9a6700}.absent{color:#8250df;background:#fbefff}.skip,.none,.inconc{color:#8c959f}.info{color:#0969da}
.unk{color:#c4c9cf}.present{color:#57606a}.other{color:#57606a}
td.chg,b.chg{box-shadow:inset 0 0 0 2px #0969da;font-weight:700}
#show-all{margin-left:0}
#show-all:not(:checked)~.grid tr.same{display:none}
#show-all:checked~.grid tr.group .hidden-note{display:none}
.hidden-note{color:#57606a;font-weight:normal}
ul.changes{margin:.2em 0 .6em;padding-left:1.2em}
ul.changes li{margin:.1em 0;overflow-wrap:anywhere}
details.release>summary{cursor:pointer;margin:.15em 0}
.failed-line{overflow-wrap:anywhere}
pre{background:#f6f8fa;padding:6px;max-height:20em;overflow:auto;font-size:12px;white-space:pre-wrap;
  overflow-wrap:anywhere;margin:.3em 0}
table.releases{border-collapse:collapse;width:100%;table-layout:fixed}
table.releases th,table.releases td{border-bottom:1px solid #eaeef2;padding:2px 6px;font-size:12.5px;text-align:left;
  overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
table.releases th{background:#f6f8fa}
.charts{display:flex;flex-wrap:wrap;gap:12px}
.chart{border:1px solid #d0d7de;padding:4px 6px}
.chart h3{font-size:13px;margin:0 0 2px}
.chart svg{display:block}
.band{fill:#0969da;fill-opacity:.15}
.median{fill:none;stroke:#0969da;stroke-width:1.5}
.point{fill:#0969da}
.axis{stroke:#d0d7de}
svg text{font-size:10px;fill:#57606a;font-family:system-ui,sans-serif}
"""


def _e(text: object) -> str:
    """A cell's text for an attribute or element: ANSI stripped, controls escaped, HTML escaped."""
    return html.escape(shown(strip_ansi(text)))


def _legend() -> str:
    items = [*_VERDICTS.values(), _PRESENT, _NONE, _UNKNOWN]
    seen: set[str] = set()
    spans = []
    for cls, g, label in items:
        if label in seen:
            continue
        seen.add(label)
        spans.append(f'<span><b class="{cls}">{html.escape(g)}</b> {html.escape(label)}</span>')
    spans.append('<span><b class="chg">&nbsp;\u2713&nbsp;</b> outlined: the value changed in that release</span>')
    return '<p class="legend">' + "".join(spans) + "</p>"


def _runs(cols: list[str], values: dict[str, Any]) -> list[str]:
    """['pass: 0.11.0-0.20.0', 'fail [x]: 0.21.0-0.32.0']: which value each stretch of releases had."""
    out: list[list[Any]] = []
    for v in cols:
        val = values.get(v)
        if val is None:
            continue
        if out and out[-1][0] == val:
            out[-1][2] = v
        else:
            out.append([val, v, v])
    return [f"{val}: {a}" + (f"\u2013{b}" if b != a else "") for val, a, b in out]


def _group_rows(doc: dict[str, Any], cols: list[str]) -> list[tuple[str, list[dict[str, Any]]]]:
    order = {v: i for i, v in enumerate(cols)}
    kinds = [k for k in GROUP_ORDER if any(r["kind"] == k for r in doc["rows"])]
    kinds += sorted({r["kind"] for r in doc["rows"]} - set(kinds))
    groups = []
    for kind in kinds:
        krows = [r for r in doc["rows"] if r["kind"] == kind]
        # the rows that change first, earliest change first; then the rest by id
        krows.sort(key=lambda r: (r["first_changed"] is None, order.get(r["first_changed"] or "", 0), r["id"]))
        groups.append((kind, krows))
    return groups


def _grid(doc: dict[str, Any], cols: list[str]) -> list[str]:
    e = html.escape
    n_rows, n_changed = len(doc["rows"]), doc["changed_rows"]
    per_release = {v: len((doc.get("changes_by_release") or {}).get(v) or []) for v in cols}
    failed = {c["release"]: f"failed at {c.get('stage')}" for c in doc["releases"] if c["status"] != "ran"}
    parts = [
        '<input type="checkbox" id="show-all">',
        f'<label for="show-all">show the {n_rows - n_changed} unchanged rows too ({n_rows} in all)</label>',
        # below about 3em a release column no longer shows its name: the grid scrolls sideways in its box then
        f'<div class="grid"><table id="grid" style="min-width:calc(var(--id) + {len(cols)} * 3em)">',
        '<colgroup><col class="id-col" style="width:var(--id)">' + "<col>" * len(cols) + "</colgroup>",
        '<thead><tr><th class="id">observable<br><span class="n">rows changed in the release \u2192</span></th>'
        + "".join(
            f'<th class="fail" title="{e(v)}: {_e(failed[v])}">{e(v)}<br><span class="n">failed</span></th>'
            if v in failed
            # under each release, how many rows changed there: a link to its list
            else f'<th title="{e(v)}: {per_release[v]} row(s) changed here">{e(v)}<br>'
            + (
                f'<a class="n" href="#rel-{e(v)}">{per_release[v]}</a>'
                if per_release[v]
                else '<span class="n">0</span>'
            )
            + "</th>"
            for v in cols
        )
        + "</tr></thead>",
    ]
    for kind, krows in _group_rows(doc, cols):
        changed = sum(1 for r in krows if r["first_changed"])
        title = KIND_TITLES.get(kind, kind)
        hidden = len(krows) - changed
        note = f' <span class="hidden-note">({hidden} unchanged hidden)</span>' if hidden else ""
        parts.append(f'<tbody data-kind="{e(kind)}">')
        parts.append(
            f'<tr class="group"><th class="id" colspan="{len(cols) + 1}">{e(title)}: {len(krows)} rows, '
            f"{changed} changed{note}</th></tr>"
        )
        for r in krows:
            cls = "chgrow" if r["first_changed"] else "same"
            story = "<br>".join(
                _e(line)
                for line in [
                    f"first changed: {r['first_changed'] or 'never'}; as now since: {r.get('since') or '-'}",
                    *_runs(cols, r["values"]),
                ]
            )
            tds = []
            for v in cols:
                val = r["values"].get(v)
                gcls, g = glyph(kind, val)
                here = v in (r.get("changes") or [])
                # the release is the sticky column header's; the tip holds the value alone (the page stays small)
                tip = ("unknown" if val is None else str(val)) + (" (changed here)" if here else "")
                tds.append(f'<td class="{gcls}{" chg" if here else ""}" title="{_e(tip)}">{e(g)}</td>')
            parts.append(
                f'<tr class="{cls}"><th class="id" scope="row"><details><summary title="{_e(r["id"])}">'
                f"{_e(r['id'])}</summary><div>{story}</div></details></th>" + "".join(tds) + "</tr>"
            )
        parts.append("</tbody>")
    parts.append("</table></div>")
    return parts


_NOUNS = {
    "case": ("case", "cases"),
    "metric": ("metric family", "metric families"),
    "flag": ("flag", "flags"),
    "wire-key": ("wire key", "wire keys"),
    "perf": ("figure", "figures"),
}


def _count(kind: str, n: int) -> str:
    one, many = _NOUNS.get(kind, (kind, kind))
    return f"{n} {one if n == 1 else many}"


def _transition(item: dict[str, Any]) -> str:
    """'pass -> fail [x]', 'added: counter{...}', 'removed (was ...)': "-" is the row's value where it is absent."""
    before, after = item.get("before"), item.get("after")
    if before == "-":
        return f"added: {after}"
    if after == "-":
        return f"removed (was {before})"
    return f"{before} \u2192 {after}"


def _changes_by_release(doc: dict[str, Any], cols: list[str]) -> list[str]:
    e = html.escape
    by = doc.get("changes_by_release") or {}
    parts = ['<h2 id="changes">What changed in each release</h2>']
    if not any(by.get(v) for v in cols):
        return [*parts, "<p>No row changes across these releases.</p>"]
    ran = [c["release"] for c in doc["releases"] if c["status"] == "ran"]
    for v in cols:
        items = by.get(v) or []
        if not items:
            continue
        before = ran[ran.index(v) - 1] if v in ran and ran.index(v) > 0 else None
        adjacent = cols[cols.index(v) - 1] if cols.index(v) > 0 else None
        # a failed release in between is unknown: the change is against the last release that ran
        versus = f" vs {before}" if before and before != adjacent else ""
        counts: dict[str, int] = {}
        for it in items:
            counts[it["kind"]] = counts.get(it["kind"], 0) + 1
        summary = ", ".join(_count(k, n) for k, n in counts.items())
        lis = "".join(
            f"<li>{e(_NOUNS.get(it['kind'], (it['kind'],))[0])} <code>{_e(it['id'])}</code>: {_e(_transition(it))}</li>"
            for it in items
        )
        parts.append(
            f'<details class="release" id="rel-{e(v)}"><summary><b>{e(v)}</b>: {len(items)} changed{e(versus)} ({e(summary)})</summary>'
            f'<ul class="changes">{lis}</ul></details>'
        )
    return parts


def _failed(doc: dict[str, Any]) -> list[str]:
    failed = [c for c in doc["releases"] if c["status"] != "ran"]
    if not failed:
        return []
    parts = ['<h2 id="failed">Failed cells</h2><ul class="changes">']
    for c in failed:
        log = "\n".join(str(x) for x in (c.get("log_errors") or []))
        if c.get("log_tail"):
            log += ("\n\n" if log else "") + str(c["log_tail"])[-3000:]
        folded = (
            f"<details><summary>log</summary><pre>{html.escape(shown_lines(strip_ansi(log)))}</pre></details>"
            if log
            else ""
        )
        parts.append(
            f'<li class="failed-line"><b>{_e(c["release"])}</b> <span class="fail">failed at {_e(c.get("stage"))}'
            f"</span>: {_e(c.get('reason'))}{folded}</li>"
        )
    parts.append("</ul>")
    return parts


def lock_said(lock: dict[str, Any] | None) -> str:
    """A drift entry's lock, in words (both pages say it alike)."""
    lock = lock or {}
    return f"as of {lock['cutoff']}" if lock.get("cutoff") else "resolved later, no cutoff"


def drift_section(doc: dict[str, Any]) -> list[str]:
    """Per drift cell: the same release with another lock, so what differs is the dependencies' doing. The rows that
    differ in a table; the packages whose pins differ folded away (there are often a hundred)."""
    entries = doc.get("drift") or []
    if not entries:
        return []
    e = _e
    parts = ['<h2 id="drift">Dependency drift</h2>']
    for d in entries:
        locks = d.get("locks") or {}
        pkgs = d.get("packages") or {}
        parts.append(
            f"<p><b>{e(d['release'])}</b> (lock {e(lock_said(locks.get('as_released')))}) against "
            f"<b>{e(d['drift_cell'])}</b> (the same release, lock {e(lock_said(locks.get('today')))}): "
            f"{len(d.get('rows') or [])} row(s) differ, {len(pkgs)} package pin(s) differ. Not an engine change.</p>"
        )
        if d.get("status") != "ran":
            parts.append(f'<p class="fail">the drift cell did not run ({e(d.get("status"))})</p>')
        if d.get("rows"):
            parts.append('<table class="releases"><tr><th>kind</th><th>id</th><th>as released</th><th>today</th></tr>')
            parts += [
                f'<tr><td>{e(r["kind"])}</td><td>{e(r["id"])}</td><td title="{e(r["as_released"])}">'
                f'{e(r["as_released"])}</td><td title="{e(r["today"])}">{e(r["today"])}</td></tr>'
                for r in d["rows"]
            ]
            parts.append("</table>")
        if pkgs:
            lis = "".join(f"<li>{e(n)}: {e(a or '-')} \u2192 {e(b or '-')}</li>" for n, (a, b) in sorted(pkgs.items()))
            parts.append(
                f'<details><summary>{len(pkgs)} package pin(s)</summary><ul class="changes">{lis}</ul></details>'
            )
    return parts


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def _chart(name: str, series: dict[str, dict[str, float]], cols: list[str]) -> str:
    """One figure across releases: the median as a line with points, the low..high band shaded; a release without
    the figure is a gap (the band and the line break there)."""
    w, h, left, right, top, bottom = 420, 130, 40, 8, 8, 20
    vals = [x for p in series.values() for x in (p["low"], p["high"], p["median"])]
    lo, hi = min(vals), max(vals)
    if hi == lo:
        lo, hi = lo - 1, hi + 1
    pad = (hi - lo) * 0.08
    lo, hi = max(0.0, lo - pad) if lo >= 0 else lo - pad, hi + pad
    step = (w - left - right) / max(1, len(cols) - 1)

    def x(i: int) -> float:
        return left + i * step if len(cols) > 1 else (w - left - right) / 2 + left

    def y(v: float) -> float:
        return top + (hi - v) / (hi - lo) * (h - top - bottom)

    segments: list[list[int]] = []
    for i, v in enumerate(cols):
        if v in series:
            if segments and segments[-1][-1] == i - 1:
                segments[-1].append(i)
            else:
                segments.append([i])
    svg = [f'<svg width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{html.escape(name)}">']
    svg.append(f'<line class="axis" x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}"/>')
    svg.append(f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}"/>')
    svg.append(f'<text x="{left - 4}" y="{top + 8}" text-anchor="end">{_fmt(hi)}</text>')
    svg.append(f'<text x="{left - 4}" y="{h - bottom}" text-anchor="end">{_fmt(lo)}</text>')
    for seg in segments:
        pts = [cols[i] for i in seg]
        upper = [f"{x(i):.1f},{y(series[cols[i]]['high']):.1f}" for i in seg]
        lower = [f"{x(i):.1f},{y(series[cols[i]]['low']):.1f}" for i in reversed(seg)]
        if len(seg) == 1:  # a lone release: a short bar of its band
            i = seg[0]
            svg.append(
                f'<rect class="band" x="{x(i) - 3:.1f}" y="{y(series[pts[0]]["high"]):.1f}" width="6" '
                f'height="{max(1.0, y(series[pts[0]]["low"]) - y(series[pts[0]]["high"])):.1f}"/>'
            )
        else:
            svg.append(f'<polygon class="band" points="{" ".join(upper + lower)}"/>')
            line = " ".join(f"{x(i):.1f},{y(series[cols[i]]['median']):.1f}" for i in seg)
            svg.append(f'<polyline class="median" points="{line}"/>')
        for i in seg:
            p = series[cols[i]]
            tip = f"{cols[i]}: {_fmt(p['median'])} (band {_fmt(p['low'])}\u2013{_fmt(p['high'])})"
            svg.append(
                f'<circle class="point" cx="{x(i):.1f}" cy="{y(p["median"]):.1f}" r="2.5">'
                f"<title>{html.escape(tip)}</title></circle>"
            )
    label_every = max(1, -(-len(cols) * 34 // (w - left - right)))  # about 34 px per label
    for i, v in enumerate(cols):
        if i % label_every == 0:
            svg.append(f'<text x="{x(i):.1f}" y="{h - bottom + 12}" text-anchor="middle">{html.escape(v)}</text>')
        if v not in series:  # no point: a cross on the axis says so
            svg.append(f'<text x="{x(i):.1f}" y="{h - bottom - 3}" text-anchor="middle">\u00d7</text>')
    svg.append("</svg>")
    missing = [v for v in cols if v not in series]
    note = f"<small>no figure for {html.escape(', '.join(missing))}</small>" if missing else ""
    return f'<div class="chart"><h3>{html.escape(name)}</h3>{"".join(svg)}{note}</div>'


def _performance(doc: dict[str, Any], cols: list[str]) -> list[str]:
    perf = doc.get("performance") or {}
    figures: dict[str, dict[str, dict[str, float]]] = perf.get("figures") or {}
    ready: dict[str, float] = perf.get("ready_s") or {}
    charts = [_chart(n, s, cols) for n, s in figures.items() if s]
    if ready:
        band = {v: {"median": t, "low": t, "high": t} for v, t in ready.items()}
        charts.insert(0, _chart("time to ready (s, one launch per cell: no band)", band, cols))
    if not charts:
        return []
    note = perf.get("note")
    return [
        '<h2 id="performance">Performance</h2>',
        *([f"<p>{_e(note)}</p>"] if note else []),
        '<div class="charts">',
        *charts,
        "</div>",
    ]


def _num(value: Any) -> str:
    return "-" if value is None else str(value)


def _releases_table(doc: dict[str, Any]) -> list[str]:
    e = _e
    parts = [
        '<h2 id="releases">Releases</h2><table class="releases"><colgroup><col style="width:7em"><col>'
        '<col style="width:8em"><col style="width:6em"><col style="width:6em"><col style="width:12em">'
        '<col style="width:26%"></colgroup>',
        "<tr><th>release</th><th>status</th><th>reported</th><th>ready s</th><th>cell s</th><th>install</th>"
        "<th>golden vs baseline</th></tr>",
    ]
    for c in doc["releases"]:
        t = c["timings"] or {}
        g = c["golden"] or {}
        gold = g.get("refused") or ", ".join(f"{k} {n}" for k, n in sorted((g.get("counts") or {}).items()))
        if c.get("golden_errors"):
            gold += "; sets not recorded: " + "; ".join(f"{k}: {v}" for k, v in c["golden_errors"].items())
        status = "ran" if c["status"] == "ran" else f"failed at {c['stage']}: {c['reason']}"
        stage = c.get("scripted") or {}
        if stage:  # the second launch: its golden diff, and what it could not do
            gold += f"; scripted: {stage.get('golden') or '-'}"
            status += "".join(f"; scripted stage: {p}" for p in stage.get("problems") or [])
        cls = "" if c["status"] == "ran" else ' class="fail"'
        inst = f"{c.get('installer') or '?'} {t.get('install_s', '?')} s"
        parts.append(
            f'<tr><td>{e(c["release"])}</td><td{cls} title="{e(status)}">{e(status)}</td>'
            f"<td>{e(c.get('reported_version') or '-')}</td><td>{e(_num(t.get('ready_s')))}</td>"
            f'<td>{e(_num(c.get("cell_seconds")))}</td><td title="{e(inst)}">{e(inst)}</td>'
            f'<td title="{e(gold or "-")}">{e(gold or "-")}</td></tr>'
        )
    parts.append("</table>")
    return parts


def render_html(doc: dict[str, Any]) -> str:
    e = _e
    cols = [c["release"] for c in doc["releases"]]
    perf = _performance(doc, cols)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Compatibility matrix: {e(doc['spec'])}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Compatibility matrix: {e(doc['spec'])}</h1>",
        f"<p>Baseline {e(doc['baseline'])}; conformance under <code>{e(doc['expectations'])}</code>; "
        f"{len(cols)} release(s) with a cell; {doc['changed_rows']} of {len(doc['rows'])} rows change. "
        '<a href="#changes">What changed in each release</a>'
        + (' \u00b7 <a href="#performance">performance</a>' if perf else "")
        + (' \u00b7 <a href="#drift">dependency drift</a>' if doc.get("drift") else "")
        + ' \u00b7 <a href="#releases">releases</a>.</p>',
    ]
    if doc["not_run"]:
        parts.append(f"<p>Not run: {e(', '.join(doc['not_run']))}.</p>")
    if doc.get("flags"):
        parts.append(f"<p>Flags: {e(doc['flags'])}.</p>")
    parts += _failed(doc)
    parts.append(_legend())
    parts += _grid(doc, cols)
    parts += perf
    parts += _changes_by_release(doc, cols)
    parts += drift_section(doc)
    parts += _releases_table(doc)
    parts.append(f"<p><small>Rendered {e(doc['rendered_at'])} by harness matrix.</small></p></body></html>")
    return "\n".join(parts) + "\n"
