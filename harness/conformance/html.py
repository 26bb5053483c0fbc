"""conformance.html: the conformance report for a person, offline (no script, no font, nothing fetched), rendered from
the saved JSON alone (conformance.json, then evidence/ beside it when there is one): raw -> derived -> presented, so a
saved run renders again (`harness conform --render DIR`).

Every string in it may come from the server (error messages, chunk contents, header values): each goes through
`html.escape` (and characters HTML cannot hold become U+FFFD), so a hostile server's text is shown, never run.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from harness.errors import DataError
from harness.net import redact_url
from harness.outputs import atomic_write_text

__all__ = ["render_html", "write_html", "target_line", "HTML_NAME", "REQUEST_EXCERPT", "RESPONSE_EXCERPT"]

HTML_NAME = "conformance.html"
REQUEST_EXCERPT = 4096  # characters of a request body shown
RESPONSE_EXCERPT = 8192  # characters of a response body shown
_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;width:100%}th,td{border:1px solid #ccc;padding:3px 6px;vertical-align:top;text-align:left}
th{background:#f2f2f2}pre{white-space:pre-wrap;word-break:break-all;background:#f7f7f7;padding:4px;margin:2px 0;
max-height:28em;overflow:auto;font-size:12px}.v{font-weight:bold}.v-pass{color:#17702a}.v-fail{color:#b00020}
.v-error{color:#8a1a8a}.v-quirk{color:#9a6a00}.v-quirk-absent{color:#c77700}.v-skip{color:#777}.v-info{color:#0b6aa2}.v-absent{color:#3b4fb0}.v-inconclusive{color:#4a7a8a}
.v-expected-intermittent{color:#b85c00}
details{margin:2px 0}summary{cursor:pointer}.muted{color:#666}.ex{border-left:3px solid #ddd;padding-left:6px;
margin:6px 0}.cut{color:#b00020}
"""


def esc(x: Any) -> str:
    return html.escape(_BAD.sub("\ufffd", x if isinstance(x, str) else json.dumps(x, default=str, ensure_ascii=False)))


def _short(x: Any, n: int = 300) -> str:
    s = x if isinstance(x, str) else json.dumps(x, default=str, ensure_ascii=False)
    return s if len(s) <= n else s[: n - 1] + "…"


def _body_text(d: Any) -> tuple[str, bool]:
    """(the stored body as text, whether it was binary): text as is, base64 said so."""
    if isinstance(d, dict) and isinstance(d.get("text"), str):
        return d["text"], False
    if isinstance(d, dict) and isinstance(d.get("b64"), str):
        return d["b64"], True
    return "", False


def _excerpt(d: Any, limit: int) -> str:
    text, binary = _body_text(d)
    if not text:
        return '<span class="muted">(empty)</span>'
    more = f" … ({len(text) - limit} more characters in the evidence file)" if len(text) > limit else ""
    label = '<span class="muted">base64 (not UTF-8):</span>' if binary else ""
    return f"{label}<pre>{esc(text[:limit])}{esc(more)}</pre>"


def _headers(h: Any) -> str:
    items = h.items() if isinstance(h, dict) else (h if isinstance(h, list) else [])
    rows = "".join(
        f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>"
        for pair in items
        if isinstance(pair, (list, tuple)) and len(pair) == 2
        for k, v in [pair]
    )
    return f'<details><summary>headers</summary><table class="h">{rows}</table></details>' if rows else ""


def _exchange(e: Any) -> str:
    if not isinstance(e, dict):
        return ""
    status = e.get("status")
    how = e.get("ended") or ""
    err = e.get("error") if isinstance(e.get("error"), dict) else None
    head = f"{esc(e.get('method'))} {esc(e.get('path'))} → " + (
        f"HTTP {esc(status)}" if status is not None else "no response"
    )
    facts = [f"ended {esc(how)}", f"{esc(e.get('seen_bytes', 0))} bytes"]
    if e.get("duration_ms") is not None:
        facts.append(f"{esc(e.get('duration_ms'))} ms")
    cut = (
        f'<div class="cut">truncated: {esc(e.get("stored_bytes"))} of {esc(e.get("seen_bytes"))} bytes kept '
        f"(the evidence cap)</div>"
        if e.get("truncated")
        else ""
    )
    error = f'<div class="cut">{esc(err.get("type"))}: {esc(err.get("message"))}</div>' if err else ""
    return (
        f'<div class="ex"><div><b>{head}</b> <span class="muted">({", ".join(facts)})</span></div>{error}{cut}'
        f"<div>request {_headers(e.get('request_headers'))}{_excerpt(e.get('request_body'), REQUEST_EXCERPT)}</div>"
        f"<div>response {_headers(e.get('headers'))}{_excerpt(e.get('body'), RESPONSE_EXCERPT)}</div></div>"
    )


def _anchor(name: str) -> str:
    return "probe-" + re.sub(r"[^A-Za-z0-9_-]", "_", name)


def _repeat_block(rep: dict[str, Any], first: str, files: dict[str, Any]) -> str:
    """A repeated case: its class, then every outcome with its count and the evidence of its first sample (the case's
    own evidence is the first sample's; a later distinct outcome has its own file)."""
    from harness.conformance.repeat import class_text

    items = []
    for i, o in enumerate(rep.get("outcomes") or []):
        tags = "+".join(str(t) for t in o.get("behaviours") or [])
        head = (f'<span class="v v-{esc(o.get("verdict"))}">{esc(o.get("verdict"))}</span> {esc(tags)} '
                f"<b>{esc(o.get('count'))}/{esc(rep.get('n'))}</b> (first in sample {esc(o.get('sample'))})")  # fmt: skip
        if o.get("note"):
            head += f" <span class='muted'>{esc(_short(o.get('note')))}</span>"
        exs = (files.get(o.get("evidence")) or {}).get("exchanges") or [] if i else []
        more = (f"<details><summary>evidence: {len(exs)} exchange(s)</summary>"
                f"{''.join(_exchange(e) for e in exs)}</details>") if exs else ""  # fmt: skip
        shared = [str(p) for p in o.get("probes") or [] if f"probe:{p}" in files]
        if i and shared:
            more += (
                "<div>shared probe(s):" + "".join(f' <a href="#{_anchor(p)}">{esc(p)}</a>' for p in shared) + "</div>"
            )
        items.append(f"<li>{head}{first if i == 0 else more}</li>")
    return f"<div><b>{esc(class_text(rep))}</b> over {esc(rep.get('n'))} samples:<ul>{''.join(items)}</ul></div>"


def _case_row(r: dict[str, Any], ev: dict[str, Any] | None, probes: list[str],
              outcome_files: dict[str, Any] | None = None) -> str:  # fmt: skip
    v = str(r.get("verdict", ""))
    tags = [t for t in (r.get("behaviours") or []) if isinstance(t, str)] or (
        [r["behaviour"]] if r.get("behaviour") else []
    )
    detail = []
    if v == "inconclusive":  # not judged: what the model did instead is the evidence
        detail.append(f"<div>the model did: <code>{esc(_short(r.get('actual')))}</code></div>")
    elif r.get("expected") is not None or r.get("actual") is not None:
        detail.append(f"<div>expected <code>{esc(_short(r.get('expected')))}</code>, "
                      f"got <code>{esc(_short(r.get('actual')))}</code></div>")  # fmt: skip
    if r.get("chunk") is not None:
        detail.append(f"<div>at chunk {esc(r.get('chunk'))}</div>")
    if r.get("quirk_reason"):
        detail.append(f"<div>quirk: {esc(r.get('quirk_reason'))}</div>")
    rj = (r.get("extra") or {}).get("rejudge") if isinstance(r.get("extra"), dict) else None
    if isinstance(rj, dict):
        same = "same as" if rj.get("same") else "differs from"
        detail.append(f"<div>re-judged: {same} the saved verdict {esc(rj.get('saved_verdict'))}</div>")
    exs = (ev or {}).get("exchanges") or []
    links = "".join(f' <a href="#{_anchor(p)}">{esc(p)}</a>' for p in probes)
    evidence = ""
    if exs or probes:
        body = "".join(_exchange(e) for e in exs)
        shared = f"<div>shared probe(s):{links}</div>" if probes else ""
        evidence = (f"<details><summary>evidence: {len(exs)} exchange(s)"
                    f"{', ' + str(len(probes)) + ' shared probe(s)' if probes else ''}</summary>{shared}{body}</details>")  # fmt: skip
    if isinstance(r.get("repeat"), dict):
        evidence = _repeat_block(r["repeat"], evidence, outcome_files or {})
    return (
        f'<tr class="case" id="case-{esc(r.get("id"))}"><td>{esc(r.get("id"))}</td><td>{esc(r.get("level"))}</td>'
        f'<td class="v v-{esc(v)}">{esc(v)}</td><td>{esc(r.get("requirement"))}</td>'
        f"<td>{esc(', '.join(tags))}</td><td>{esc(r.get('note'))}{''.join(detail)}{evidence}</td></tr>"
    )


def target_line(engine: dict[str, Any]) -> str:
    """What a report's header names as the server checked: the launched engine's name, the URL attached to, or a
    gateway and the engine behind it (both redacted)."""
    if engine.get("name"):
        return str(engine["name"])
    url = redact_url(engine.get("url", ""))
    if engine.get("engine_url"):
        return f"gateway {url} in front of engine {redact_url(engine['engine_url'])}"
    return url


def render_html(doc: dict[str, Any], evidence: Any = None, evidence_problem: str = "") -> str:
    """The page for a conformance document (a dict as in conformance.json) and its evidence store (or None)."""
    files = getattr(evidence, "files", {}) or {}
    index = getattr(evidence, "index", {}) or {}
    probes_of = {c.get("id"): c.get("probes") or [] for c in index.get("cases", []) if isinstance(c, dict)}
    given = doc.get("engine")
    engine: dict[str, Any] = given if isinstance(given, dict) else {}
    target = target_line(engine)
    counts = doc.get("counts") or {}
    head = [
        f"<h1>Conformance: {esc(target)}</h1>",
        f"<p>expectations <b>{esc(doc.get('expectations'))}</b>; {len(doc.get('cases') or [])} cases in "
        f"{esc(doc.get('duration_s'))} s: "
        + ", ".join(f'<span class="v v-{esc(k)}">{esc(k)} {esc(n)}</span>' for k, n in counts.items())
        + "</p>",
    ]
    if engine.get("kind") or engine.get("version"):
        head.append(
            f"<p>engine {esc(engine.get('kind'))} {esc(engine.get('version'))}, model {esc(engine.get('model'))}</p>"
        )
    if doc.get("liveness"):
        head.append(f"<p>liveness check after a failed case: {esc(doc['liveness'])}</p>")
    if doc.get("aborted"):
        head.append(f'<p class="cut">aborted: {esc(doc["aborted"])}</p>')
    rj = engine.get("rejudge")
    if isinstance(rj, dict):
        head.append(
            f"<p>re-judged from {esc(rj.get('from'))}: {esc(rj.get('same'))} of {esc(rj.get('cases'))} with the saved "
            f"verdict; different: {esc(', '.join(rj.get('different') or []) or 'none')}; not re-judgeable from the "
            f"evidence: {esc(', '.join(rj.get('not_rejudged') or []) or 'none')}</p>"
        )
    if evidence is None:
        head.append(
            f'<p class="muted">no evidence beside this report{": " + esc(evidence_problem) if evidence_problem else ""}</p>'
        )
    rows = [
        _case_row(
            r, files.get(r.get("id")), [p for p in probes_of.get(r.get("id"), []) if f"probe:{p}" in files], files
        )
        for r in doc.get("cases") or []
        if isinstance(r, dict)
    ]
    probes = [
        f'<h3 id="{_anchor(k[6:])}">probe {esc(k[6:])}</h3>' + "".join(_exchange(e) for e in f.get("exchanges") or [])
        for k, f in files.items()
        if k.startswith("probe:")
    ]
    table = (
        "<table><thead><tr><th>case</th><th>level</th><th>verdict</th><th>requirement</th><th>behaviours</th>"
        "<th>note and evidence</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )
    shared = ("<h2>Shared probes</h2>" + "".join(probes)) if probes else ""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>conformance report</title>'
        f"<style>{CSS}</style></head><body>{''.join(head)}{table}{shared}</body></html>\n"
    )


def write_html(out_dir: str | Path, doc: dict[str, Any]) -> Path:
    """OUT/conformance.html from `doc` (the report's JSON document) and OUT/evidence when present."""
    from harness.conformance.evidence import EVIDENCE_DIR, load_store

    out = Path(out_dir)
    store, problem = None, ""
    if (out / EVIDENCE_DIR).is_dir():
        try:
            store = load_store(out)
        except DataError as exc:
            problem = str(exc)
    target = out / HTML_NAME
    atomic_write_text(target, render_html(doc, store, problem))
    return target
