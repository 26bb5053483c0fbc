"""What a gateway changes for clients: the same engine checked directly and through the gateway, case by case.

    cmp = compare(direct_doc, gateway_doc)     # two conformance.json documents (dicts): pure, no I/O
    write_comparison(cmp, DIR)                 # DIR/comparison.json, comparison.xml (JUnit), comparison.html

A case is changed when its verdict differs between the two runs; it is worse when the gateway's verdict is further
from a pass (pass, quirk-absent, info < skip < quirk < fail, error), and a MUST case that is worse makes the
comparison fail (`ok` False). Cases only one run has are listed apart, never counted as changed. Every string may
come from a server (notes, actual values): the renderers escape it as the conformance reports do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from harness.net import redact_url
from harness.outputs import atomic_write_text

__all__ = ["COMPARISON_NAMES", "compare", "comparison_junit", "comparison_html", "summary_lines", "write_comparison"]

COMPARISON_NAMES = ("comparison.json", "comparison.xml", "comparison.html")
FORMAT = 1
# how far a verdict is from what a client wants: a higher rank through the gateway is worse
RANK = {"pass": 0, "quirk-absent": 0, "info": 0, "skip": 1, "absent": 1, "inconclusive": 1, "quirk": 2, "fail": 3,
        "error": 3, "expected-intermittent": 2}  # fmt: skip


def _cases(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(c["id"]): c for c in doc.get("cases") or [] if isinstance(c, dict) and "id" in c}


def _side(doc: dict[str, Any]) -> dict[str, Any]:
    given = doc.get("engine")
    engine: dict[str, Any] = given if isinstance(given, dict) else {}
    out = {"url": redact_url(engine.get("url", "")), "expectations": doc.get("expectations"),
           "counts": doc.get("counts") or {}, "aborted": doc.get("aborted"), "liveness": doc.get("liveness")}  # fmt: skip
    if engine.get("engine_url"):
        out["engine_url"] = redact_url(engine["engine_url"])
    return out


def _tags(r: dict[str, Any]) -> list[str]:
    tags = [t for t in r.get("behaviours") or [] if isinstance(t, str)]
    return tags or ([str(r["behaviour"])] if r.get("behaviour") else [])


def _short(v: Any, n: int = 160) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str, ensure_ascii=False)
    return s if len(s) <= n else s[: n - 1] + "…"


def _what(d: dict[str, Any], g: dict[str, Any]) -> str:
    """One line: the verdicts, and what the gateway's run saw (its tags and what it got, or its note)."""
    line = f"{d['verdict']} -> {g['verdict']}"
    tags = _tags(g) if g["verdict"] in ("fail", "error", "quirk") else _tags(d)
    if tags:
        line += f" ({', '.join(tags)})"
    said = g if g["verdict"] in ("fail", "error", "quirk", "skip") else d
    if said.get("actual") is not None and said["verdict"] == "fail":
        line += f"; got {_short(said['actual'], 100)}"
    if said.get("note"):
        line += f"; {_short(said['note'], 140)}"
    return line


def _row(cid: str, d: dict[str, Any], g: dict[str, Any]) -> dict[str, Any]:
    # a case one run did not judge (skip: no key configured, no token ids to choose from) is neither worse nor better
    # inconclusive likewise: the model did not do what the case needs on that side (no call, no reasoning)
    one_sided = bool({"skip", "inconclusive"} & {d["verdict"], g["verdict"]}) and d["verdict"] != g["verdict"]
    worse = not one_sided and RANK.get(g["verdict"], 3) > RANK.get(d["verdict"], 3)
    return {"id": cid, "level": g.get("level") or d.get("level"), "requirement": g.get("requirement") or "",
            "direct": d["verdict"], "gateway": g["verdict"], "changed": d["verdict"] != g["verdict"], "worse": worse,
            "one_sided": one_sided,
            "direct_behaviours": _tags(d), "gateway_behaviours": _tags(g),
            "what": _what(d, g) if d["verdict"] != g["verdict"] else ""}  # fmt: skip


def compare(direct: dict[str, Any], gateway: dict[str, Any]) -> dict[str, Any]:
    """The comparison document of two conformance.json documents (the engine checked directly, then through the
    gateway): every case both ran, which ones the gateway changes, which MUST cases it makes worse."""
    dc, gc = _cases(direct), _cases(gateway)
    rows = [_row(cid, dc[cid], gc[cid]) for cid in gc if cid in dc]
    changed = [r["id"] for r in rows if r["changed"]]
    worse_must = [r["id"] for r in rows if r["changed"] and r["worse"] and r["level"] == "MUST"]
    n = len(changed)
    worse = [r["id"] for r in rows if r["changed"] and r["worse"]]
    one_sided = [r["id"] for r in rows if r["changed"] and r["one_sided"]]
    better = [r["id"] for r in rows if r["changed"] and not r["worse"] and not r["one_sided"]]
    return {
        "format": FORMAT,
        "direct": _side(direct),
        "gateway": _side(gateway),
        "verdict": f"the gateway changes {n} case{'' if n == 1 else 's'} for clients: {len(worse)} worse "
        f"({len(worse_must)} MUST), {len(better)} better, {len(one_sided)} judged in one run only",
        "ok": not worse_must,
        "changed": changed,
        "worse": worse,
        "better": better,
        "one_sided": one_sided,
        "worse_must": worse_must,
        # the same verdict for other reasons (a vLLM quirk replaced by a gateway quirk): not a verdict change, shown
        "behaviours_changed": [
            r["id"]
            for r in rows
            if not r["changed"]
            and r["direct"] != "pass"
            and set(r["direct_behaviours"]) != set(r["gateway_behaviours"])
        ],
        "only_direct": [cid for cid in dc if cid not in gc],
        "only_gateway": [cid for cid in gc if cid not in dc],
        "cases": rows,
    }


def summary_lines(cmp: dict[str, Any]) -> list[str]:
    """What the terminal shows: the verdict, then one line per changed case."""
    g = cmp["gateway"]
    lines = [f"comparison: {cmp['verdict']} (gateway {g['url']} in front of engine {g.get('engine_url', '?')})"]
    lines += [f"  {r['id']}: {r['what']}" for r in cmp["cases"] if r["changed"]]
    for key, what in (
        ("behaviours_changed", "same verdict, other behaviours"),
        ("only_direct", "only in the direct run"),
        ("only_gateway", "only in the gateway run"),
    ):
        if cmp[key]:
            lines.append(f"  {what}: {', '.join(cmp[key])}")
    return lines


def comparison_junit(cmp: dict[str, Any]) -> str:
    """JUnit: one failing testcase per case whose verdict the gateway changes."""
    from harness.conformance.report import _xml

    rows = [r for r in cmp["cases"] if r["changed"]]
    suite = ET.Element("testsuite", name="gateway-comparison", tests=str(len(rows)), failures=str(len(rows)),
                       errors="0", skipped="0")  # fmt: skip
    for r in rows:
        tc = ET.SubElement(suite, "testcase", classname=_xml(r["id"]).rsplit(".", 1)[0], name=_xml(r["id"]))
        how = _how(r).replace("one-sided", "judged in one run only")
        detail = (f"{r['requirement']}\nlevel: {r['level']}\ndirect: {r['direct']} {r['direct_behaviours']}\n"
                  f"gateway: {r['gateway']} {r['gateway_behaviours']}\n{r['what']}")  # fmt: skip
        ET.SubElement(tc, "failure", message=_xml(f"the gateway changes it ({how}): {r['what']}")).text = _xml(detail)
    root = ET.Element("testsuites", name=_xml(cmp["verdict"]))
    root.append(suite)
    return ET.tostring(root, encoding="unicode")


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1400px}
table{border-collapse:collapse;width:100%;table-layout:fixed}th,td{border:1px solid #ccc;padding:3px 6px;
vertical-align:top;text-align:left;overflow-wrap:anywhere}th{background:#f2f2f2}td:nth-child(2){overflow-wrap:normal}
col.id{width:20em}col.lv{width:8em}col.v{width:7em}.v{font-weight:bold}.v-pass{color:#17702a}.v-fail{color:#b00020}
.v-error{color:#8a1a8a}.v-quirk{color:#9a6a00}.v-quirk-absent{color:#c77700}.v-skip{color:#777}.v-info{color:#0b6aa2}
.worse{background:#fdecee}.better{background:#eaf6ec}.one-sided{background:#f4f4f4}.muted{color:#666}
"""


def _how(row: dict[str, Any]) -> str:
    return "worse" if row["worse"] else "one-sided" if row["one_sided"] else "better"


def _cell(verdict: str) -> str:
    from harness.conformance.html import esc

    return f'<td class="v v-{esc(verdict)}">{esc(verdict)}</td>'


def comparison_html(cmp: dict[str, Any]) -> str:
    """The page a person reads: the verdict, both runs, and a table of the changed cases (worse first)."""
    from harness.conformance.html import esc

    d, g = cmp["direct"], cmp["gateway"]
    rows = sorted((r for r in cmp["cases"] if r["changed"]), key=lambda r: (not r["worse"], r["one_sided"], r["id"]))
    body = "".join(
        f'<tr class="{_how(r)}"><td>{esc(r["id"])}</td><td>{esc(r["level"])}</td>'
        f"{_cell(r['direct'])}{_cell(r['gateway'])}<td>{esc(r['what'])}"
        f'<div class="muted">{esc(r["requirement"])}</div></td></tr>'
        for r in rows
    )
    same = [r["id"] for r in cmp["cases"] if not r["changed"]]
    only = "".join(
        f"<p>{what}: {esc(', '.join(cmp[k]))}</p>"
        for k, what in (
            ("behaviours_changed", "same verdict, other behaviours"),
            ("only_direct", "only in the direct run"),
            ("only_gateway", "only in the gateway run"),
        )
        if cmp[k]
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>gateway comparison</title>'
        f"<style>{CSS}</style></head><body><h1>Gateway comparison: {esc(cmp['verdict'])}</h1>"
        f"<p>gateway <b>{esc(g['url'])}</b> in front of engine <b>{esc(g.get('engine_url', ''))}</b></p>"
        f'<p>direct run (<a href="direct/conformance.html">report</a>): {esc(d["url"])}, expectations '
        f"{esc(d['expectations'])}; {_counts(d)}</p>"
        f'<p>through the gateway (<a href="gateway/conformance.html">report</a>): expectations '
        f"{esc(g['expectations'])}; {_counts(g)}</p>{only}"
        '<table><colgroup><col class="id"><col class="lv"><col class="v"><col class="v"><col></colgroup>'
        "<thead><tr><th>case</th><th>level</th><th>direct</th><th>gateway</th><th>what changed</th></tr></thead>"
        f"<tbody>{body}</tbody></table>"
        f"<details><summary>{len(same)} case(s) with the same verdict</summary><p>{esc(', '.join(same))}</p></details>"
        "</body></html>\n"
    )


def _counts(side: dict[str, Any]) -> str:
    from harness.conformance.html import esc

    c = side.get("counts") or {}
    text = ", ".join(f"{k} {v}" for k, v in c.items() if v)
    if side.get("aborted"):
        text += f"; aborted: {side['aborted']}"
    return esc(text)


def write_comparison(cmp: dict[str, Any], out_dir: str | Path) -> Path:
    """DIR/comparison.json, comparison.xml and comparison.html (the caller checked DIR first: output_dir)."""
    out = Path(out_dir)
    atomic_write_text(out / COMPARISON_NAMES[0], json.dumps(cmp, indent=2, ensure_ascii=False, default=str) + "\n")
    atomic_write_text(out / COMPARISON_NAMES[1], comparison_junit(cmp))
    atomic_write_text(out / COMPARISON_NAMES[2], comparison_html(cmp))
    return out / COMPARISON_NAMES[0]
