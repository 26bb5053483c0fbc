"""The HTML report loads offline in a real headless browser (Debian's chromium) and its charts render."""

import re

import pytest

from harness.load.report import write_reports
from harness.load.runner import Target, run_scenario
from harness.load.scenario import parse_scenario
from tests.load.fakeserver import FakeServer
from tests.support.browser import chromium


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    sc = parse_scenario(
        {
            "name": "browser",
            "prompt_unit": "char",
            "scrape_interval_s": 0.1,
            "bounds": {"max_requests": 10, "max_duration_s": 10},
            "arrival": {"kind": "constant", "rate": 30.0},
            "prompt_tokens": {"kind": "fixed", "value": 4},
            "output_tokens": {"kind": "fixed", "value": 6},
        },
        "<t>",
    )
    with FakeServer(delay=0.005) as srv:
        run_scenario(sc, Target(srv.url), out, progress=False)
    write_reports(out)
    return out


def test_html_is_self_contained(report_dir):
    html = (report_dir / "report.html").read_text()
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', html)  # nothing fetched from a network
    assert "<script" not in html
    assert html.count('class="series"') >= 5


def test_report_renders_in_headlesschromium(report_dir):
    url = (report_dir / "report.html").as_uri()
    p = chromium("--dump-dom", url)
    assert p.returncode == 0, p.stderr[-2000:]
    dom = p.stdout
    assert 'id="verdict"' in dom and "PASS" in dom
    assert dom.count("<svg") >= 4 and dom.count('class="series"') >= 5
    paths = re.findall(r'<path class="series" d="([^"]+)"', dom)
    assert all(re.fullmatch(r"M[-\d.,]+( L[-\d.,]+)*", d) for d in paths)
    assert sum(" L" in d for d in paths) >= 4  # the CDFs and the concurrency steps draw lines
    shot = report_dir / "shot.png"
    p = chromium(f"--screenshot={shot}", "--window-size=1200,2000", url)
    assert p.returncode == 0 and shot.stat().st_size > 20_000  # a blank page is a few KB
