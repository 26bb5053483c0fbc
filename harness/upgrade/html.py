"""upgrade.html: the upgrade report for a person, offline (no script, no font, nothing fetched), rendered from
upgrade.json alone (as upgrade.md is: harness.upgrade.render), so a saved report renders again (`write_html(DIR)`).

Every string may come from an engine (versions, error messages, metric names, log tails): each goes through
`html.escape`. Sections this renderer does not know (a comparison area added later) are shown as escaped JSON, never
dropped.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from harness.errors import DataError
from harness.outputs import atomic_write_text
from harness.readers import read_json
from harness.upgrade.model import changed, verdict_text

__all__ = ["render_html", "write_html", "HTML_NAME"]

HTML_NAME = "upgrade.html"
MAX_REPORT_BYTES = 64 << 20
_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
KNOWN = ("golden", "wire", "system_fingerprint", "metrics", "conformance", "manifest", "models")

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:4px 0}th,td{border:1px solid #ccc;padding:3px 6px;vertical-align:top;text-align:left}
th{background:#f2f2f2}pre{white-space:pre-wrap;word-break:break-all;background:#f7f7f7;padding:4px;font-size:12px;
max-height:30em;overflow:auto}.verdict{font-size:1.4em;font-weight:bold}.safe{color:#17702a}.review{color:#9a6a00}
.blocking{color:#b00020}.info{color:#0b6aa2}
"""


def esc(x: Any) -> str:
    s = x if isinstance(x, str) else ("" if x is None else json.dumps(x, default=str, ensure_ascii=False))
    return html.escape(_BAD.sub("\ufffd", s))


def _cls(x: Any) -> str:
    return re.sub(r"[^a-z-]", "", str(x).lower())


def _table(head: list[str], rows: list[list[Any]]) -> str:
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _json(x: Any) -> str:
    return f"<pre>{esc(json.dumps(x, indent=1, default=str, ensure_ascii=False))}</pre>"


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _l(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def _golden(g: dict[str, Any]) -> str:
    if "refused" in g:
        return f"<p>Refused: {esc(g['refused'])}</p>"
    counts = ", ".join(f"{k} {v}" for k, v in _d(g.get("counts")).items())
    rows = [
        [f"{p.get('set')}/{p.get('id')}", p.get("status"), p.get("reason", ""),
         "" if p.get("position") is None else f"token {p.get('position')}: old {p.get('a_token')} / new {p.get('b_token')}",
         p.get("max_logprob_drift", 0)]
        for p in (_d(x) for x in _l(g.get("prompts")))
    ]  # fmt: skip
    hw = _d(g.get("hardware")).get("line")
    return (
        f"<p>tolerance {esc(g.get('tolerance'))} nats, near-tie margin {esc(g.get('margin'))} nats; {esc(counts)}</p>"
        + (f"<p>hardware: {esc(hw)}</p>" if hw else "")
        + _table(["prompt", "class", "reason", "first divergence", "max drift"], rows)
    )


def _metrics(m: dict[str, Any]) -> str:
    c = _d(m.get("counts"))
    out = [f"<p>{esc(c.get('old'))} metric families before, {esc(c.get('new'))} after.</p>"]
    if m.get("engine_change"):
        ec = _d(m["engine_change"])
        rows = [[x.get("series"), x.get("old"), x.get("new"), x.get("note")] for x in map(_d, _l(ec.get("mapped")))]
        out.append(_table(["series", "old", "new", "note"], rows))
        return "".join(out)
    for key in ("removed", "hidden", "renamed", "type_changed", "added"):
        items = _l(m.get(key))
        shown = ", ".join(
            f"{x.get('old')} → {x.get('new')}" if key == "renamed" else str(x.get("name", x)) for x in map(_d, items)
        )
        out.append(f"<div><b>{esc(key.replace('_', ' '))} ({len(items)}):</b> {esc(shown or 'none')}</div>")
    for key in ("label_changes", "label_value_changes"):
        if m.get(key):
            out.append(f"<div><b>{esc(key.replace('_', ' '))}:</b>{_json(m[key])}</div>")
    return "".join(out)


def _conformance(c: dict[str, Any]) -> str:
    if "not_run" in c:
        return f"<p>Not compared: {esc(c['not_run'])}</p>"
    cases = [_d(r) for r in _l(c.get("cases"))]
    diff = [r for r in cases if changed(r)]
    exp = c.get("expectations")
    new_exp = c.get("expectations_new") or exp
    rows = [
        [r.get("id"), r.get("level") or "", verdict_text(r, "old"), verdict_text(r, "new"),
         r.get("new_behaviour") or r.get("new_note", "")]
        for r in diff
    ]  # fmt: skip
    return f"<p>expectations: old {esc(exp)}, new {esc(new_exp)}; {len(diff)} of {len(cases)} cases change.</p>" + (
        _table(["case", "level", "old", "new", "new behaviour / note"], rows) if rows else "<p>No change.</p>"
    )


def render_html(r: dict[str, Any]) -> str:
    """The page for one upgrade.json document."""
    v = _d(r.get("verdict"))
    old, new, cmp = _d(r.get("old")), _d(r.get("new")), _d(r.get("comparison"))
    verdict = str(v.get("verdict") or "")
    parts = [
        f"<h1>Upgrade report: {esc(old.get('name'))} → {esc(new.get('name'))}</h1>",
        f'<p class="verdict {_cls(verdict)}" id="verdict">Verdict: {esc(verdict.upper())}</p>',
        "<ul>"
        + "".join(
            f'<li class="reason {_cls(x.get("level"))}"><b>{esc(x.get("level"))}</b>: {esc(x.get("text"))}</li>'
            for x in map(_d, _l(v.get("reasons")))
        )
        + "</ul>",
        "<h2>Engines</h2>",
    ]
    rows = []
    for s in (old, new):
        ident = _d(s.get("identity"))
        ran = "yes" if s.get("ok") else f"NO: {s.get('error')}"
        rows.append([s.get("name"), ident.get("version") or _d(s.get("engine")).get("version"), ran,
                     s.get("ready_seconds"), s.get("conformance_seconds"), s.get("wall_seconds")])  # fmt: skip
    parts.append(_table(["manifest", "engine version", "ran", "ready s", "conformance s", "total s"], rows))
    for s in (old, new):
        if not s.get("ok") and s.get("log_tail"):
            parts.append(f"<p>engine log tail ({esc(s.get('name'))}):</p><pre>{esc(str(s['log_tail'])[-3000:])}</pre>")
    sections = [
        ("Golden outputs", "golden", _golden),
        ("Metric surface", "metrics", _metrics),
        ("Conformance", "conformance", _conformance),
    ]
    for title, key, fn in sections:
        parts.append(f"<h2>{esc(title)}</h2>")
        parts.append(fn(_d(cmp[key])) if isinstance(cmp.get(key), dict) else "<p>Not compared.</p>")
    wire = _d(cmp.get("wire"))
    if wire:
        parts.append("<h2>Wire shape</h2>")
        parts.append(_table(["endpoint", "keys added", "keys removed"],
                            [[ep, _l(_d(w).get("added")), _l(_d(w).get("removed"))] for ep, w in wire.items()]))  # fmt: skip
    if cmp.get("manifest") is not None:
        parts.append("<h2>Manifests, arguments and locked packages</h2>" + _json(cmp.get("manifest")))
    for key, val in cmp.items():  # areas this page has no layout for are shown, never dropped
        if key not in KNOWN:
            parts.append(f"<h2>{esc(key.replace('_', ' '))}</h2>{_json(val)}")
    s = _d(r.get("settings"))
    parts.append(
        f"<hr><p>prompt sets {esc(s.get('prompt_sets'))}; tolerance {esc(s.get('tolerance'))}; margin "
        f"{esc(s.get('margin'))}; expectations {esc(s.get('expectations'))}; created {esc(r.get('created_at'))}; "
        f"wall time {esc(r.get('wall_seconds'))} s.</p>"
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>upgrade report</title>'
        f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>\n"
    )


def write_html(out_dir: str | Path, report: dict[str, Any] | None = None) -> Path:
    """OUT/upgrade.html from `report` (default: OUT/upgrade.json read back, bounded)."""
    out = Path(out_dir)
    if report is None:
        report = read_json(out / "upgrade.json", "upgrade report", max_bytes=MAX_REPORT_BYTES, error=DataError)
        if not isinstance(report, dict):
            raise DataError(f"{out / 'upgrade.json'}: must be an object")
    target = out / HTML_NAME
    atomic_write_text(target, render_html(report))
    return target
