"""conformance.html and upgrade.html: offline pages, every server string escaped, checked in headless Chromium (the DOM
it builds, not only the file): a case row per case with its verdict and evidence, and a hostile server's HTML shown as
text, never as an element. Under CI=true a missing Chromium fails (tests.conftest.unavailable)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import harness.upgrade.run as run
from harness.cli import main
from harness.conformance.html import render_html
from harness.upgrade.html import render_html as render_upgrade
from harness.upgrade.html import write_html as write_upgrade_html
from tests.support.badserver import BadServer
from tests.support.browser import dom
from tests.support.standin_server import serve
from tests.upgrade.test_run import NEW, OLD, calls  # noqa: F401 - `calls` is the fixture that fakes both sides

INJECTED = 'bad [/oops] [bold]request</pre></td><script id="injected">'


def _conform(capsys, url: str, out: Path, *extra: str) -> int:
    code = main(["conform", "--url", url, "--out", str(out), *extra])
    capsys.readouterr()
    return code


@pytest.fixture(scope="module")
def standin():
    srv = serve(0, api_key=None)
    yield srv
    srv.shutdown()


def test_conformance_html_renders_every_case_with_evidence(tmp_path, capsys, standin):
    out = tmp_path / "run"
    _conform(capsys, standin.base_url, out, "--expect", "tgi-3.3.5", "-k", "health", "-k", "chat.stream")
    doc = json.loads((out / "conformance.json").read_text())
    page = (out / "conformance.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page) and "<script" not in page  # offline
    d = dom(out / "conformance.html")
    rows = re.findall(r'<tr class="case" id="case-([^"]+)">', d)
    assert rows == [c["id"] for c in doc["cases"]]
    # the verdict cell of one case, as Chromium built it
    role = next(c for c in doc["cases"] if c["id"] == "chat.stream.role-once")
    assert re.search(r'id="case-chat\.stream\.role-once">.*?<td class="v v-quirk">quirk</td>', d, re.S)
    assert role["verdict"] == "quirk"
    # evidence: the health case's own exchange and the shared stream probe, linked
    assert "GET /health → HTTP 200" in d
    assert 'href="#probe-chat_stream"' in d and 'id="probe-chat_stream"' in d
    assert "POST /v1/chat/completions → HTTP 200" in d and "data: [DONE]" in d


def test_hostile_server_text_is_escaped_in_the_dom(tmp_path, capsys):
    out = tmp_path / "bad"
    with BadServer({"/v1/": "markup", "*": "ok"}) as s:
        _conform(capsys, s.url, out, "--expect", "vllm-0.11", "-k", "errors", "-k", "health")
    raw = (out / "conformance.html").read_text()
    assert INJECTED not in raw and "&lt;script id=&quot;injected&quot;&gt;" in raw
    d = dom(out / "conformance.html")
    assert not re.search(r"<script\b", d) and not re.search(r"<img\b", d)  # no element made from the server's text
    assert '&lt;script id="injected"&gt;' in d or "&lt;script id=&quot;injected&quot;&gt;" in d  # shown as text
    assert "<title>conformance report</title>" in d  # the onerror/script never ran (they would set the title)


def test_render_again_from_saved_json(tmp_path, capsys, standin):
    out = tmp_path / "run"
    _conform(capsys, standin.base_url, out, "--expect", "tgi-3.3.5", "-k", "health")
    first = (out / "conformance.html").read_text()
    (out / "conformance.html").unlink()
    assert main(["conform", "--render", str(out)]) == 0
    assert (out / "conformance.html").read_text() == first


def test_render_without_evidence_says_so():
    doc = {"engine": {"url": "http://127.0.0.1:1"}, "expectations": "openai", "counts": {"pass": 1}, "duration_s": 0,
           "cases": [{"id": "x.y", "level": "MUST", "requirement": "<b>r</b>", "verdict": "pass", "note": "<i>"}]}  # fmt: skip
    page = render_html(doc)
    assert "no evidence beside this report" in page and "&lt;b&gt;r&lt;/b&gt;" in page and "<i>" not in page


HOSTILE_UPGRADE = {
    "old": {"name": "old<script>x</script>", "ok": True, "engine": {"version": "1"}},
    "new": {"name": "new", "ok": False, "error": "<img src=x onerror=alert(1)>", "log_tail": "</pre><script>y</script>",
            "engine": {"version": "2"}},
    "comparison": {"conformance": {"expectations": "e", "cases": [
        {"id": "c<script>", "old": "pass", "new": "fail", "new_behaviour": "<b>ignored-field</b>"}]},
        "argument_surface": {"removed": ["--<script>flag"]}},
    "verdict": {"verdict": "blocking", "reasons": [{"level": "blocking", "text": "flag <script>z</script> removed"}]},
    "settings": {}, "created_at": "t", "wall_seconds": 1,
}  # fmt: skip


def test_upgrade_html_escapes_and_keeps_unknown_sections(tmp_path):
    (tmp_path / "upgrade.json").write_text(json.dumps(HOSTILE_UPGRADE))
    page = write_upgrade_html(tmp_path)
    d = dom(page)
    assert not re.search(r"<(script|img)\b", d)
    assert 'class="verdict blocking" id="verdict">Verdict: BLOCKING<' in d
    assert "argument surface" in d and "--&lt;script&gt;flag" in d  # an area the page has no layout for: shown
    assert "&lt;b&gt;ignored-field&lt;/b&gt;" in d
    assert render_upgrade(HOSTILE_UPGRADE) == page.read_text()  # re-rendered from the saved JSON: the same page


def test_run_upgrade_writes_upgrade_html_next_to_md(tmp_path, calls):  # noqa: F811 - the fixture imported above
    out = tmp_path / "u"
    report = run.run_upgrade(OLD, NEW, out, tolerance=0.02, margin=0.1, conformance=False, say=lambda s: None)
    assert (out / "upgrade.md").is_file()
    d = dom(out / "upgrade.html")
    assert f"Verdict: {report['verdict']['verdict'].upper()}" in d
    assert "Golden outputs" in d and "vllm-0.11.0-cpu" in d
