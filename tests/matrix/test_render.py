"""Rows, first change, and the rendered pages (offline, escaped)."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

from markdown_it import MarkdownIt

from harness.matrix.observe import first_change, observe, rows
from harness.matrix.render import matrix_document, render_html, render_markdown
from harness.matrix.spec import load_spec
from tests.matrix.helpers import cell, write_spec

H = {"type": "histogram", "labels": ["model_name"], "buckets": ["1", "+Inf"]}


def _cells():
    return {
        "1.0.0": cell("1.0.0", metrics={"a": H, "old": {"type": "counter", "labels": [], "buckets": None}},
                      wire={"chat": ["choices", "usage"]}, cases={"c.one": {"verdict": "pass", "behaviours": []}}),
        "1.1.0": cell("1.1.0", metrics={"a": {**H, "buckets": ["1", "5", "+Inf"]}},
                      wire={"chat": ["choices", "usage", "kv_transfer_params=null"]},
                      cases={"c.one": {"verdict": "fail", "behaviours": ["role-repeated"]}}),
        "1.2.0": cell("1.2.0", status="failed"),
    }  # fmt: skip


def test_rows_say_the_first_release_where_each_changed():
    r = {(x["kind"], x["id"]): x for x in rows(["1.0.0", "1.1.0", "1.2.0"], _cells())}
    assert r[("metric", "old")]["first_changed"] == "1.1.0" and r[("metric", "old")]["values"]["1.1.0"] == "-"
    assert r[("metric", "a")]["first_changed"] == "1.1.0"  # a bucket added
    assert r[("metric", "a")]["values"]["1.0.0"] == "histogram{model_name} 2 buckets"
    assert r[("wire-key", "chat:kv_transfer_params=null")]["first_changed"] == "1.1.0"
    assert r[("wire-key", "chat:choices")]["first_changed"] is None
    assert r[("case", "c.one")]["values"]["1.1.0"] == "fail [role-repeated]"
    assert all(x["values"]["1.2.0"] is None for x in r.values())  # a failed cell is unknown, never a change


def test_first_change_lists_every_change_of_a_non_monotonic_row():
    vals = {"a": (True, 1), "b": (False, None), "c": (True, 2), "d": (True, 1)}
    assert first_change(["a", "b", "c", "d"], vals) == ("c", ["c", "d"])


def test_wire_key_observable_forms():
    c = _cells()["1.1.0"]
    assert observe(c, "wire-key", "usage") == (True, ["chat"])
    assert observe(c, "wire-key", "chat:usage") == (True, True)
    assert observe(c, "wire-key", "nope") == (True, "absent")
    assert observe(c, "flag", "--x") == (False, None)  # flags not captured: unknown
    assert observe(c, "wire-key", "completions:usage") == (False, None)  # endpoint not recorded: unknown
    c["golden_errors"] = {"chat": "prompt chat/x: request failed: connection reset"}
    assert observe(c, "wire-key", "chat:usage") == (False, None)  # a set failed: unknown, never absent


def test_pages_are_offline_and_escaped(tmp_path):
    spec = load_spec(write_spec(tmp_path, ["1.0.0", "1.1.0", "1.2.0"]))
    cells = _cells()
    evil = "<script>alert(1)</script>"
    cells["1.1.0"]["observables"]["metrics"][evil] = {"type": "gauge", "labels": [evil], "buckets": None}
    cells["1.2.0"]["reason"] = f'<img src="http://x/y.png"> {evil}'
    cells["1.2.0"]["log_tail"] = "</pre><iframe src=//x>"
    doc = matrix_document(spec, cells)
    page = render_html(doc)
    assert "<script" not in page and "<img" not in page and "<iframe" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    tags = _tags(page)
    allowed = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "table", "colgroup", "col",
               "thead", "tbody", "tr", "th", "td", "code", "span", "pre", "small", "b", "a", "ul", "li", "details",
               "summary", "div", "br", "input", "label", "svg", "line", "text", "polygon", "polyline", "circle", "rect"}  # fmt: skip
    assert {t for t, _ in tags} <= allowed
    assert all(name != "src" for _, attrs in tags for name, _v in attrs)
    assert all(v.startswith("#") for _, attrs in tags for name, v in attrs if name == "href")  # in-page links only
    assert "@import" not in page and "url(" not in page
    assert page.count('<tbody data-kind="') == 3  # cases, metrics, wire keys (no flags captured)
    md = render_markdown(doc)
    assert "| `old` | 1.1.0 |" in md and "failed at launch" in md
    rendered = MarkdownIt("commonmark").enable("table").render(md)  # as a Markdown viewer shows it
    assert "<script" not in rendered and "<code>&lt;script&gt;alert(1)&lt;/script&gt;</code>" in rendered
    assert doc["changed_rows"] >= 4 and doc["not_run"] == []


def _grid_rows(page: str) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(row class, id, [(cell class, glyph)]) of every grid row, in page order."""
    out = []
    for cls, ident, tds in re.findall(
        r'<tr class="(chgrow|same)"><th class="id" scope="row"><details><summary title="[^"]*">([^<]*)</summary>'
        r"<div>.*?</div></details></th>(.*?)</tr>",
        page,
    ):
        out.append((cls, html.unescape(ident), re.findall(r'<td class="([^"]+)" title="[^"]*">([^<]*)</td>', tds)))
    return out


def test_grid_shows_a_glyph_per_cell_changed_rows_first_and_absent_distinctly(tmp_path):
    spec = load_spec(write_spec(tmp_path, ["1.0.0", "1.1.0", "1.2.0"]))
    cells = _cells()
    cells["1.0.0"]["observables"]["conformance"]["cases"]["a.same"] = {"verdict": "pass", "behaviours": []}
    cells["1.1.0"]["observables"]["conformance"]["cases"]["a.same"] = {"verdict": "pass", "behaviours": []}
    cells["1.0.0"]["observables"]["conformance"]["cases"]["resp.create"] = {"verdict": "pass", "behaviours": []}
    cells["1.1.0"]["observables"]["conformance"]["cases"]["resp.create"] = {"verdict": "absent", "behaviours": []}
    page = render_html(matrix_document(spec, cells))
    grid = _grid_rows(page)
    cases = [r for r in grid if r[1] in ("a.same", "c.one", "resp.create")]
    assert [r[1] for r in cases] == ["c.one", "resp.create", "a.same"]  # the changed rows first, unchanged last
    assert [r[0] for r in cases] == ["chgrow", "chgrow", "same"]  # unchanged rows are hidden until the switch
    by_id = {r[1]: r[2] for r in grid}
    assert by_id["c.one"] == [("pass", "\u2713"), ("fail chg", "\u2717"), ("unk", "?")]  # 1.2.0 failed: unknown
    assert by_id["resp.create"][1] == ("absent chg", "\u2205")  # an endpoint not served: its own glyph and colour
    assert by_id["old"] == [("present", "\u2022"), ("none chg", "\u2013"), ("unk", "?")]
    assert 'title="fail [role-repeated] (changed here)"' in page  # the value on hover
    assert '<input type="checkbox" id="show-all">' in page and "#show-all:not(:checked)~.grid tr.same" in page
    assert page.index("Conformance cases") < page.index("Metric families") < page.index("Wire keys")


def test_each_release_says_what_changed_there(tmp_path):
    spec = load_spec(write_spec(tmp_path, ["1.0.0", "1.1.0", "1.2.0"]))
    doc = matrix_document(spec, _cells())
    got = {(i["kind"], i["id"]): (i["before"], i["after"]) for i in doc["changes_by_release"]["1.1.0"]}
    assert got[("case", "c.one")] == ("pass", "fail [role-repeated]")
    assert got[("metric", "old")] == ("counter", "-")
    assert set(doc["changes_by_release"]) == {"1.1.0"}  # 1.2.0 failed: nothing known changed there
    page = render_html(doc)
    assert "<b>1.1.0</b>: 4 changed" in page
    assert '<a class="n" href="#rel-1.1.0">4</a>' in page and 'id="rel-1.1.0"' in page  # the count under its column
    assert '<th class="fail" title="1.2.0: failed at launch">1.2.0<br><span class="n">failed</span></th>' in page
    assert "<code>old</code>: removed (was counter)" in page and "added: yes" in page
    md = render_markdown(doc)
    assert "- **1.1.0**: conformance cases (1): `c.one`" in md


def test_a_failed_cell_is_one_line_with_its_log_folded_and_no_escapes(tmp_path):
    spec = load_spec(write_spec(tmp_path, ["1.0.0", "1.1.0", "1.2.0"]))
    cells = _cells()
    cells["1.2.0"]["log_tail"] = "\x1b[1;36m(APIServer pid=1)\x1b[0;0m RuntimeError: boom\n" * 50
    cells["1.2.0"]["log_errors"] = ["\x1b[31mImportError: libstdc++\x1b[0m"]
    doc = matrix_document(spec, cells)
    page = render_html(doc)
    line = re.search(r'<li class="failed-line">(.*?)</li>', page, re.S)
    assert line is not None
    head, _, folded = line.group(1).partition("<details>")
    assert "\n" not in head and "failed at launch" in head and "engine exited with code 1" in head
    assert folded.startswith("<summary>log</summary><pre>ImportError: libstdc++")
    assert "(APIServer pid=1) RuntimeError: boom" in folded
    assert "\x1b" not in page and "[1;36m" not in page and "\\x1b" not in page
    assert re.search(r"\| 1\.2\.0 \| failed at launch: engine exited with code 1 \|", render_markdown(doc))


def _perf(median: float, low: float, high: float) -> dict:
    fig = {"median": median, "low": low, "high": high}
    return {"scenario": {"name": "fixed"}, "ready_s": 30.0, "rounds": [], "figures": {"output_tokens_per_s": fig}}


def test_performance_charts_draw_each_figure_with_its_band_and_gaps(tmp_path):
    versions = ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]
    spec = load_spec(write_spec(tmp_path, versions))
    cells = {v: cell(v) for v in versions}
    cells["1.0.0"]["perf"] = _perf(100, 95, 104)
    cells["1.1.0"]["perf"] = _perf(99, 96, 103)
    cells["1.2.0"]["perf"] = None  # an old cell: no perf stage
    cells["1.3.0"]["perf"] = _perf(60, 58, 63)
    for v in versions:
        cells[v]["timings"] = {"ready_s": 35.0 + versions.index(v)}
    doc = matrix_document(spec, cells)
    fig = doc["performance"]["figures"]["output_tokens_per_s"]
    assert set(fig) == {"1.0.0", "1.1.0", "1.3.0"} and fig["1.3.0"] == {"median": 60.0, "low": 58.0, "high": 63.0}
    assert doc["performance"]["ready_s"]["1.0.0"] == 30.0 and doc["performance"]["ready_s"]["1.2.0"] == 37.0
    page = render_html(doc)
    chart = page[page.index("<h3>output_tokens_per_s</h3>") :].split("</svg>")[0]
    assert chart.count('<polygon class="band"') == 1  # 1.0.0-1.1.0; 1.2.0 has none, so 1.3.0 stands alone
    assert chart.count('<rect class="band"') == 1 and chart.count('<circle class="point"') == 3
    assert "<title>1.3.0: 60 (band 58\u201363)</title>" in chart
    ys = [float(y) for y in re.findall(r'<circle class="point" cx="[\d.]+" cy="([\d.]+)"', chart)]
    assert ys[2] > ys[0] + 40  # the slower release is drawn lower, well outside the others' band
    assert "no figure for 1.2.0" in page[page.index("<h3>output_tokens_per_s</h3>") :]
    assert "| 1.3.0 | 30.0 | 60 (58 to 63) |" in render_markdown(doc)


def _tags(page: str) -> list[tuple[str, list]]:
    found: list[tuple[str, list]] = []

    class P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append((tag, attrs))

    P().feed(page)
    return found


def test_since_is_where_the_newest_value_began():
    r = {(x["kind"], x["id"]): x for x in rows(["1.0.0", "1.1.0", "1.2.0"], _cells())}
    assert r[("metric", "a")]["since"] == "1.1.0"  # 3 buckets since 1.1.0 (1.2.0 failed: unknown, skipped)
    assert r[("wire-key", "chat:choices")]["since"] == "1.0.0"  # never changed: as in the first release


def test_matrix_html_renders_in_headless_chromium(tmp_path):
    from tests.support.browser import dom

    spec = load_spec(write_spec(tmp_path, ["1.0.0", "1.1.0", "1.2.0"]))
    cells = _cells()
    cells["1.2.0"]["reason"] = '<script id="injected">x</script>'
    page = tmp_path / "matrix.html"
    page.write_text(render_html(matrix_document(spec, cells)))
    tree = dom(page)
    assert "<script" not in tree and '&lt;script id="injected"&gt;' in tree  # text, not markup
    assert tree.count('<tbody data-kind="') == 3
    assert tree.count("<th>1.1.0</th>") + tree.count('<th title="1.1.0: ') == 1  # one grid, a column per release
    assert '<td class="fail chg" title="fail [role-repeated] (changed here)">' in tree


def test_committed_matrix_html_renders_every_row_and_release(tmp_path):
    """The committed page (matrix/results/matrix.html) as a user opens it: one grid column per release with a cell,
    one grid row per row of matrix.json, the releases table naming every release."""
    import json

    from tests.matrix.helpers import REPO
    from tests.support.browser import dom

    results = REPO / "matrix" / "results"
    doc = json.loads((results / "matrix.json").read_text())
    tree = dom(results / "matrix.html")
    releases = [c["release"] for c in doc["releases"]]
    assert len(_grid_rows(tree)) == len(doc["rows"])
    assert all(len(cells) == len(releases) for _cls, _id, cells in _grid_rows(tree))
    for v in releases:
        assert f"<td>{v}</td>" in tree  # the releases table
    for v, items in doc["changes_by_release"].items():
        assert f"<b>{v}</b>: {len(items)} changed" in tree


def test_committed_pages_are_rendered_from_the_committed_cells(tmp_path):
    """matrix.json/md/html in matrix/results are what the committed cells render to today (re-render after a change
    to the cells or to the renderer: `write_pages`)."""
    import shutil

    from harness.matrix.render import write_pages
    from tests.matrix.helpers import REPO

    results = REPO / "matrix" / "results"
    copy = tmp_path / "results"
    shutil.copytree(results / "cells", copy / "cells")
    write_pages(load_spec(REPO / "matrix" / "vllm-cpu.yaml"), copy)
    for name in ("matrix.json", "matrix.md", "matrix.html"):
        assert (copy / name).read_text() == (results / name).read_text(), f"{name} is stale: re-render it"
