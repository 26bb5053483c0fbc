"""Outputs from a suite document (harness.conformance.model.SuiteDocument): conformance.json, junit.xml, and a rich
terminal table; and conformance.json read back into the model.

Everything in a report may come from the server (error messages, chunk contents): the table escapes rich markup,
junit.xml drops characters XML cannot hold, conformance.json is strict JSON (a NaN becomes the string "nan"), and
the engine URL is shown and stored without its user:password@. Files are written atomically (mode from the umask).
The renderers take the document or its dict form (`SuiteDocument.to_dict()`); what is written is always checked
against the model first.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from harness.conformance.html import target_line
from harness.conformance.model import SuiteDocument
from harness.errors import DataError
from harness.net import redact_url
from harness.outputs import atomic_write_text
from harness.readers import read_json
from harness.shown import shown

__all__ = ["write_outputs", "read_report", "junit_xml", "print_table", "to_json", "scrub_report", "OUTPUT_NAMES",
           "MAX_REPORT_BYTES", "target_line"]  # fmt: skip

OUTPUT_NAMES = ("conformance.json", "junit.xml", "conformance.html")
MAX_REPORT_BYTES = 64 << 20  # a conformance.json is tens of KB
Doc = SuiteDocument | dict[str, Any]
_XML_INVALID = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

STYLE = {"pass": "green", "fail": "bold red", "quirk": "yellow", "skip": "dim", "info": "cyan", "error": "bold magenta",
         "quirk-absent": "bold yellow", "absent": "blue", "inconclusive": "dim cyan",
         "expected-intermittent": "dark_orange"}  # fmt: skip
# the summary line's order
COUNTED = ("pass", "fail", "quirk", "quirk-absent", "skip", "info", "error", "absent", "inconclusive",
           "expected-intermittent")  # fmt: skip


def _tags(r: dict[str, Any]) -> str:
    """The primary behaviour, then the other tags the check saw."""
    main = r.get("behaviour") or ""
    others = [t for t in (r.get("behaviours") or []) if t != main]
    return main + (f" (+{', '.join(others)})" if others else "")


def _short(v: Any, n: int = 90) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str, ensure_ascii=False)
    return s if len(s) <= n else s[: n - 1] + "…"


def _finite(obj: Any) -> Any:
    """The document with every non-finite float as a string, so conformance.json stays strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return repr(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def scrub_report(report: Any, secrets: list[str | None]) -> None:
    """A suite report (harness.conformance.runner.SuiteReport) with every secret, and any 6+ character run that
    begins or ends one, cut out of every string it holds (harness.secrets.scrub_tree), in place: what a server echoed
    back (an error message quoting the Authorization header, a body cut through the key) reaches no output."""
    from harness.conformance.model import CaseResult
    from harness.secrets import scrub

    keys = [k for k in secrets if k]
    if not keys:
        return
    # What the harness wrote itself (a case's id, level and requirement; the manifest's name, kind and version; the
    # expectation file's name) is kept as it is: a key that shares six characters with it must not rename a case or
    # an engine. Everything a server could have put there is scrubbed.
    report.results = [CaseResult(**_kept(r.to_dict(), _OWN_RESULT_FIELDS, keys)) for r in report.results]
    report.engine = _kept(report.engine, _OWN_ENGINE_FIELDS, keys)
    for name in ("aborted", "liveness"):
        value = getattr(report, name, None)
        if isinstance(value, str):
            setattr(report, name, scrub(value, keys))


_OWN_RESULT_FIELDS = frozenset({"id", "level", "requirement"})
_OWN_ENGINE_FIELDS = frozenset({"name", "kind", "version"})


def _kept(record: dict[str, Any], own: frozenset[str], keys: list[str]) -> dict[str, Any]:
    """The record's values scrubbed, but not its field names (the harness's: a key starting `engine_` must not turn
    `engine_url` into `***_url`), nor the values of its `own` fields."""
    from harness.secrets import scrub_tree

    return {k: v if k in own else scrub_tree(v, keys) for k, v in record.items()}


def _plain(doc: Doc) -> dict[str, Any]:
    return doc.to_dict() if isinstance(doc, SuiteDocument) else doc


def _redacted(doc: dict[str, Any]) -> dict[str, Any]:
    engine = doc.get("engine")
    if isinstance(engine, dict):
        urls = {k: redact_url(engine[k]) for k in ("url", "engine_url") if k in engine}
        doc = {**doc, "engine": {**engine, **urls}}
    return doc


def to_json(doc: Doc) -> str:
    return json.dumps(_finite(_redacted(_plain(doc))), indent=2, default=str, ensure_ascii=False, allow_nan=False)


def _xml(text: Any) -> str:
    return _XML_INVALID.sub("\ufffd", str(text))


def junit_xml(doc: Doc) -> str:
    doc = _plain(doc)
    cases = doc.get("cases", [])
    c = doc.get("counts", {})
    suite = ET.Element(
        "testsuite",
        name=_xml(f"conformance[{doc.get('expectations')}]"),
        tests=str(len(cases)),
        failures=str(c.get("fail", 0)),
        errors=str(c.get("error", 0)),
        skipped=str(c.get("skip", 0) + c.get("absent", 0) + c.get("inconclusive", 0)),
        time=f"{doc.get('duration_s', 0):.3f}",
    )
    for r in cases:
        tc = ET.SubElement(
            suite,
            "testcase",
            classname=_xml(r["id"]).rsplit(".", 1)[0],
            name=_xml(r["id"]),
            time=f"{r.get('duration_s', 0):.3f}",
        )
        detail = f"{r['requirement']}\nbehaviour: {_tags(r)}\nexpected: {_short(r.get('expected'), 500)}\nactual: {_short(r.get('actual'), 500)}\nchunk: {r.get('chunk')}\nnote: {r.get('note')}"
        rate = _junit_repeat(tc, r)  # a repeated case: its class and every outcome's count, not one sample
        detail = f"{rate}\n{detail}" if rate else detail
        at_rate = f" [{rate}]" if rate else ""
        if r["verdict"] == "fail":
            ET.SubElement(tc, "failure", message=_xml(f"{_tags(r)}: {_short(r.get('actual'))}{at_rate}")).text = _xml(
                detail
            )
        elif r["verdict"] == "error":
            ET.SubElement(tc, "error", message=_xml(_short(r.get("note") or "error") + at_rate)).text = _xml(detail)
        elif r["verdict"] == "skip":
            ET.SubElement(tc, "skipped", message=_xml(r.get("note") or ""))
        elif r["verdict"] == "absent":  # the endpoint is not served: nothing to judge, said as such
            ET.SubElement(tc, "skipped", message=_xml(f"absent: {r.get('note') or ''}".strip()))
        elif r["verdict"] == "inconclusive":  # the model did not do what the case needs: not judged, said so
            what = (
                f"inconclusive: {r.get('behaviour') or ''}: {r.get('note') or ''}; the model: {_short(r.get('actual'))}"
            )
            ET.SubElement(tc, "skipped", message=_xml(what))
        else:
            ET.SubElement(tc, "system-out").text = _xml(
                f"{r['verdict']}: {r.get('behaviour') or ''} {r.get('note') or ''}".strip() + at_rate
            )
    root = ET.Element("testsuites")
    root.append(suite)
    return ET.tostring(root, encoding="unicode")


def _junit_repeat(tc: ET.Element, r: dict[str, Any]) -> str:
    """A repeated case's `<properties>` (its class, then each outcome and its count) and the same as one line ("" for
    a case judged once: its testcase is what it always was)."""
    from harness.conformance.repeat import class_text, outcomes_text

    rep = r.get("repeat")
    if not isinstance(rep, dict):
        return ""
    props = ET.SubElement(tc, "properties")
    ET.SubElement(props, "property", name="repeat.class", value=_xml(class_text(rep)))
    for o in rep.get("outcomes") or []:
        tags = "+".join(o.get("behaviours") or [])
        ET.SubElement(props, "property", name=_xml(f"outcome.{o.get('verdict')}{'.' + tags if tags else ''}"),
                      value=f"{o.get('count')}/{rep.get('n')}")  # fmt: skip
    return f"{class_text(rep)}: {outcomes_text(rep)}"


def write_outputs(doc: Doc, out_dir: str | Path) -> tuple[Path, Path]:
    """Write both files atomically, from the model (a dict is checked against it first: DataError if it does not fit).
    The caller checked `out_dir` first (harness.outputs.output_dir), before any work."""
    model = doc if isinstance(doc, SuiteDocument) else SuiteDocument.from_dict(doc, "suite report to write")
    out = Path(out_dir)
    j, x = out / OUTPUT_NAMES[0], out / OUTPUT_NAMES[1]
    atomic_write_text(j, to_json(model))
    atomic_write_text(x, junit_xml(model))
    from harness.conformance.html import write_html  # conformance.html beside it, with the evidence when there is some

    write_html(out, model.to_dict())
    return j, x


def read_report(path: str | Path) -> SuiteDocument:
    """A conformance.json read back through the model (bounded, strict JSON; one DataError naming file and field)."""
    raw = read_json(path, "conformance report", max_bytes=MAX_REPORT_BYTES, error=DataError)
    return SuiteDocument.from_dict(raw, str(path))


def print_table(doc: Doc, console: Any = None) -> None:
    doc = _plain(doc)
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    def cell(text: object) -> str:
        """Server text is data: never rich markup, and its control characters shown escaped (a server that sends
        ESC[2K or an OSC title sequence must not redraw the line or retitle the terminal)."""
        return escape(shown(text))

    console = console or Console()
    given = doc.get("engine")
    engine: dict[str, Any] = given if isinstance(given, dict) else {}
    target = target_line(engine)
    t = Table(title=cell(f"conformance · {target} · expectations {doc.get('expectations')}"))
    for col in ("case", "level", "verdict", "detail"):
        t.add_column(col, overflow="fold")
    for r in doc.get("cases", []):
        v = r["verdict"] + (" (unexpected pass)" if r.get("unexpected_pass") and r["verdict"] == "pass" else "")
        if r["verdict"] in ("fail", "error"):
            parts = [_tags(r)]
            if r.get("expected") is not None or r.get("actual") is not None:
                parts.append(f"expected {_short(r.get('expected'), 60)}, got {_short(r.get('actual'), 60)}")
            if r.get("chunk") is not None:
                parts.append(f"@chunk {r['chunk']}")
            if r.get("note"):
                parts.append(_short(r["note"], 80))
            detail = " ".join(p for p in parts if p)
        elif r["verdict"] == "quirk":
            detail = (
                f"{'+'.join(r.get('behaviours') or [r.get('behaviour') or ''])}: {_short(r.get('quirk_reason'), 90)}"
            )
        elif r["verdict"] == "quirk-absent":
            detail = f"passed like the reference; {_short(r.get('note'), 60)} ({_short(r.get('quirk_reason'), 40)})"
        elif r["verdict"] == "inconclusive":  # what the model did, so a reader sees why nothing was judged
            detail = (
                f"{r.get('behaviour') or ''}: {_short(r.get('note'), 50)}; the model: {_short(r.get('actual'), 40)}"
            )
        else:
            detail = _short(r.get("note") or (r.get("actual") if r["verdict"] == "info" else ""), 100)
        if isinstance(r.get("repeat"), dict):  # a repeated case: the rate of every outcome, not one sample
            from harness.conformance.repeat import class_text, outcomes_text

            v += f" · {class_text(r['repeat'])}"
            detail = f"{outcomes_text(r['repeat'])}; {detail}"
        t.add_row(cell(r["id"]), cell(r["level"]), f"[{STYLE.get(r['verdict'], '')}]{cell(v)}[/]", cell(detail))
    console.print(t)
    c = doc.get("counts", {})
    line = "  ".join(f"{k}={c.get(k, 0)}" for k in COUNTED)
    console.print(cell(f"{len(doc.get('cases', []))} cases in {doc.get('duration_s', 0):.1f}s: {line}"))
    rep = doc.get("repeat")
    if isinstance(rep, dict):
        console.print(cell(f"repeat {rep.get('n')} ({rep.get('passes')} passes"
                           f"{', a fresh launch each' if rep.get('restart') else ''}): {rep.get('stable')} stable, "
                           f"{rep.get('intermittent')} intermittent, {rep.get('unexpected_samples')} unexpected "
                           f"sample(s){'; ' + str(rep['stopped']) if rep.get('stopped') else ''}"))  # fmt: skip
    if doc.get("liveness"):  # which check said the server was still there after a failed case
        console.print(escape(f"liveness check: {shown(doc['liveness'])}"))
    if doc.get("aborted"):
        console.print(f"[bold magenta]aborted: {cell(doc['aborted'])}[/]")
    if doc.get("unexpected_passes"):
        console.print(
            f"[yellow]quirk-absent (declared quirks that did not happen; not a failure, update the expectation file): "
            f"{cell(', '.join(str(p) for p in doc['unexpected_passes']))}[/]"
        )
