"""The load report's "Throughput over time" chart (issue 21, seen by hand): a short run (the default `harness run`
load lasts ~0.2 s) gets bins that fit it, so the chart draws the run instead of one 1 s bin (one point, no line); a
run with nothing to draw says so in the chart's place. Checked in headless Chromium too."""

from __future__ import annotations

import re

import pytest

from harness.load.report import charts, write_reports
from harness.load.runner import Target, run_scenario
from harness.load.scenario import load_scenario
from harness.settings import LOADTESTS_DIR
from tests.load.fakeserver import FakeServer
from tests.support.browser import dom

THROUGHPUT = re.compile(r'<svg[^>]*aria-label="Throughput over time[^"]*".*?</svg>', re.S)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """The default `harness run` scenario against a fast fake engine: a run of well under a second."""
    out = tmp_path_factory.mktemp("short") / "load"
    with FakeServer(delay=0.002) as srv:
        run_scenario(load_scenario(LOADTESTS_DIR / "default.yaml"), Target(srv.url), out, progress=False)
    return out, write_reports(out)


@pytest.mark.parametrize("wall_s, want", [(0.2, 0.01), (0.5, 0.02), (5.0, 0.2), (20.0, 1.0), (600.0, 1.0),
                                          (None, 1.0), (0.0, 1.0), (0.0001, 0.001)])  # fmt: skip
def test_bin_width_fits_the_run(wall_s, want):
    from harness.load.report import timeline_bin_s

    assert timeline_bin_s(wall_s) == want


def test_a_short_run_gets_bins_that_fit_it(short_run):
    _, s = short_run
    tl = s["timeline"]
    assert tl["bin_s"] <= s["wall_s"] / 10  # about twenty bins, not one bin wider than the run
    assert len(tl["output_tokens_per_s"]) >= 10 and sum(v > 0 for v in tl["output_tokens_per_s"]) >= 5


def test_the_short_runs_throughput_chart_draws_lines(short_run):
    out, _ = short_run
    chart = THROUGHPUT.search((out / "report.html").read_text())
    assert chart, "no throughput chart in report.html"
    paths = re.findall(r'<path class="series" d="([^"]+)"', chart.group(0))
    assert len(paths) == 2 and all(d.count(" L") >= 10 for d in paths), paths


def test_a_chart_that_cannot_show_anything_says_why():
    tl = {"bin_s": 1.0, "output_tokens_per_s": [0.0, 0.0], "requests_per_s": [0.0, 0.0], "concurrency": [],
          "gauges": {"t": [], "kv_usage": [], "running": [], "waiting": []}}  # fmt: skip
    chart = next(c for c in charts({"timeline": tl}, []) if "Throughput over time" in c)
    assert 'class="series"' not in chart
    assert "nothing to draw: no output token and no finished request in the measured window" in chart


def test_a_one_bin_run_is_still_a_line():
    tl = {"bin_s": 0.001, "output_tokens_per_s": [3000.0], "requests_per_s": [1000.0], "concurrency": [],
          "gauges": {"t": [], "kv_usage": [], "running": [], "waiting": []}}  # fmt: skip
    chart = next(c for c in charts({"timeline": tl}, []) if "Throughput over time" in c)
    paths = re.findall(r'<path class="series" d="([^"]+)"', chart)
    assert len(paths) == 2 and all(" L" in d for d in paths), paths


def test_the_short_runs_chart_renders_in_headless_chromium(short_run):
    out, _ = short_run
    page = dom(out / "report.html")
    chart = THROUGHPUT.search(page)
    assert chart, "no throughput chart in the rendered page"
    paths = re.findall(r'<path class="series" d="([^"]+)"', chart.group(0))
    assert len(paths) == 2 and all(d.count(" L") >= 10 for d in paths)
    assert "ms bins)" in chart.group(0)  # the title says the bins are not seconds
