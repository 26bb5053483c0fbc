"""Rows, first change, and the rendered pages (offline, escaped)."""

from __future__ import annotations

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
    assert {t for t, _ in tags} <= {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "table", "tr",
                                    "th", "td", "code", "span", "pre", "small"}  # fmt: skip
    assert all(name not in ("src", "href") for _, attrs in tags for name, _v in attrs)
    assert "@import" not in page and "url(" not in page
    assert page.count('<table class="rows"') == 3  # cases, metrics, wire keys (no flags captured)
    md = render_markdown(doc)
    assert "| `old` | 1.1.0 |" in md and "failed at launch" in md
    rendered = MarkdownIt("commonmark").enable("table").render(md)  # as a Markdown viewer shows it
    assert "<script" not in rendered and "<code>&lt;script&gt;alert(1)&lt;/script&gt;</code>" in rendered
    assert doc["changed_rows"] >= 4 and doc["not_run"] == []


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
    assert tree.count('<table class="rows"') == 3
    assert tree.count("<th>1.1.0</th>") == 3  # each rows table has a column per release
    assert '<td class="first">1.1.0</td>' in tree and '<td class="since">1.1.0</td>' in tree


def test_committed_matrix_html_renders_every_row_and_release(tmp_path):
    """The committed page (matrix/results/matrix.html) as a user opens it: one column per release with a cell, one
    row per row of matrix.json, the release table naming every release of the spec."""
    import json

    from tests.matrix.helpers import REPO
    from tests.support.browser import dom

    results = REPO / "matrix" / "results"
    doc = json.loads((results / "matrix.json").read_text())
    tree = dom(results / "matrix.html")
    releases = [c["release"] for c in doc["releases"]]
    assert tree.count("<tr") == 1 + len(releases) + len(doc["rows"]) + len({r["kind"] for r in doc["rows"]})
    for v in releases:
        assert f"<td>{v}</td>" in tree  # the releases table
    changed = next(r for r in doc["rows"] if r["first_changed"])
    assert f'<td class="first">{changed["first_changed"]}</td>' in tree
