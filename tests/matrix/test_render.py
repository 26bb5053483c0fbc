"""Rows, first change, and the rendered pages (offline, escaped)."""

from __future__ import annotations

from html.parser import HTMLParser

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
    assert "<script>" not in md
    assert doc["changed_rows"] >= 4 and doc["not_run"] == []


def _tags(page: str) -> list[tuple[str, list]]:
    found: list[tuple[str, list]] = []

    class P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append((tag, attrs))

    P().feed(page)
    return found
