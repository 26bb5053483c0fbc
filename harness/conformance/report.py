"""Outputs from a saved SuiteReport dict: conformance.json, junit.xml, and a rich terminal table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

__all__ = ["write_outputs", "junit_xml", "print_table"]

STYLE = {"pass": "green", "fail": "bold red", "quirk": "yellow", "skip": "dim", "info": "cyan", "error": "bold magenta"}


def _short(v: Any, n: int = 90) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str, ensure_ascii=False)
    return s if len(s) <= n else s[: n - 1] + "…"


def junit_xml(doc: dict) -> str:
    cases = doc.get("cases", [])
    c = doc.get("counts", {})
    suite = ET.Element(
        "testsuite",
        name=f"conformance[{doc.get('expectations')}]",
        tests=str(len(cases)),
        failures=str(c.get("fail", 0)),
        errors=str(c.get("error", 0)),
        skipped=str(c.get("skip", 0)),
        time=f"{doc.get('duration_s', 0):.3f}",
    )
    for r in cases:
        tc = ET.SubElement(suite, "testcase", classname=r["id"].rsplit(".", 1)[0], name=r["id"], time=f"{r.get('duration_s', 0):.3f}")
        detail = f"{r['requirement']}\nbehaviour: {r.get('behaviour')}\nexpected: {_short(r.get('expected'), 500)}\nactual: {_short(r.get('actual'), 500)}\nchunk: {r.get('chunk')}\nnote: {r.get('note')}"
        if r["verdict"] == "fail":
            ET.SubElement(tc, "failure", message=f"{r.get('behaviour')}: {_short(r.get('actual'))}").text = detail
        elif r["verdict"] == "error":
            ET.SubElement(tc, "error", message=_short(r.get("note") or "error")).text = detail
        elif r["verdict"] == "skip":
            ET.SubElement(tc, "skipped", message=r.get("note") or "")
        else:
            ET.SubElement(tc, "system-out").text = f"{r['verdict']}: {r.get('behaviour') or ''} {r.get('note') or ''}".strip()
    root = ET.Element("testsuites")
    root.append(suite)
    return ET.tostring(root, encoding="unicode")


def write_outputs(doc: dict, out_dir: str | Path) -> tuple[Path, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    j = out / "conformance.json"
    j.write_text(json.dumps(doc, indent=2, default=str, ensure_ascii=False))
    x = out / "junit.xml"
    x.write_text(junit_xml(doc))
    return j, x


def print_table(doc: dict, console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = Table(title=f"conformance · {doc.get('engine', {}).get('name') or doc.get('engine', {}).get('url', '')} · expectations {doc.get('expectations')}")
    for col in ("case", "level", "verdict", "detail"):
        t.add_column(col, overflow="fold")
    for r in doc.get("cases", []):
        v = r["verdict"] + (" (unexpected pass)" if r.get("unexpected_pass") else "")
        if r["verdict"] in ("fail", "error"):
            parts = [r.get("behaviour") or ""]
            if r.get("expected") is not None or r.get("actual") is not None:
                parts.append(f"expected {_short(r.get('expected'), 60)}, got {_short(r.get('actual'), 60)}")
            if r.get("chunk") is not None:
                parts.append(f"@chunk {r['chunk']}")
            if r.get("note"):
                parts.append(_short(r["note"], 80))
            detail = " ".join(p for p in parts if p)
        elif r["verdict"] == "quirk":
            detail = f"{r.get('behaviour')}: {_short(r.get('quirk_reason'), 90)}"
        else:
            detail = _short(r.get("note") or (r.get("actual") if r["verdict"] == "info" else ""), 100)
        t.add_row(r["id"], r["level"], f"[{STYLE.get(r['verdict'], '')}]{v}[/]", detail)
    console.print(t)
    c = doc.get("counts", {})
    line = "  ".join(f"{k}={c.get(k, 0)}" for k in ("pass", "fail", "quirk", "skip", "info", "error"))
    console.print(f"{len(doc.get('cases', []))} cases in {doc.get('duration_s', 0):.1f}s: {line}")
    if doc.get("aborted"):
        console.print(f"[bold magenta]aborted: {doc['aborted']}[/]")
    if doc.get("unexpected_passes"):
        console.print(f"[yellow]expected quirks that no longer happen: {', '.join(doc['unexpected_passes'])}[/]")
