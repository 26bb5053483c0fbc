"""The committed matrix page as a reader opens it in Chromium at 1400 px: it does not scroll sideways, the id column
holds at least 20 characters a line, rows stay short, the header row and the id column stay in view, the switch shows
every row. Measured by a probe run on a copy of the page (the page itself has no script)."""

from __future__ import annotations

import json

import pytest

from tests.matrix.helpers import REPO
from tests.support.browser import layout, screenshot

PAGE = REPO / "matrix" / "results" / "matrix.html"

# geometry of the grid; `all` ticks the show-all switch first, `scroll` scrolls the grid box (x, y)
_PROBE = """function(){
  var all=%(all)s, scroll=%(scroll)s;
  if(all){document.getElementById('show-all').checked=true;}
  var d=document.documentElement, box=document.querySelector('.grid'), t=document.getElementById('grid');
  box.scrollLeft=scroll[0]; box.scrollTop=scroll[1];
  var rows=[].slice.call(t.querySelectorAll('tbody tr')).filter(function(r){return r.getBoundingClientRect().height>0});
  var idth=t.querySelector('tbody tr:not(.group) th.id'), cs=getComputedStyle(idth);
  var probe=document.createElement('span'); probe.style.whiteSpace='nowrap'; probe.textContent='cancel.concurrent-32';
  idth.querySelector('summary').appendChild(probe);
  var chars20=probe.getBoundingClientRect().width; probe.remove();
  var inner=idth.clientWidth-parseFloat(cs.paddingLeft)-parseFloat(cs.paddingRight);
  var line=parseFloat(getComputedStyle(idth.querySelector('summary')).lineHeight)||16;
  var b=box.getBoundingClientRect(), head=t.querySelector('thead th:nth-child(2)').getBoundingClientRect();
  var firstId=rows[rows.length-1].querySelector('th').getBoundingClientRect();
  return {docScroll:d.scrollWidth, docClient:d.clientWidth, boxScroll:box.scrollWidth, boxClient:box.clientWidth,
    rows:rows.length, maxRow:Math.max.apply(null,rows.map(function(r){return r.getBoundingClientRect().height})),
    idInner:inner, chars20:chars20, line:line, headTop:head.top-b.top, idLeft:firstId.left-b.left,
    height:d.scrollHeight};
}"""


def _measure(width: int, *, all_rows: bool = False, scroll: tuple[int, int] = (0, 0)) -> dict:
    return layout(PAGE, _PROBE % {"all": json.dumps(all_rows), "scroll": json.dumps(list(scroll))}, width=width)


@pytest.fixture(scope="module")
def doc() -> dict:
    return json.loads((REPO / "matrix" / "results" / "matrix.json").read_text())


def test_at_1400px_no_sideways_scroll_a_wide_id_column_and_short_rows(doc):
    m = _measure(1400)
    assert m["docScroll"] <= m["docClient"], m  # the page does not scroll sideways
    assert m["boxScroll"] <= m["boxClient"], m  # nor does the grid: every release is in view
    assert m["chars20"] <= m["idInner"], m  # a 20-character id fits on one line of the id column
    assert m["maxRow"] <= 3 * m["line"] + 4, m  # no row taller than three lines
    changed = sum(1 for r in doc["rows"] if r["first_changed"])
    groups = len({r["kind"] for r in doc["rows"]})
    assert m["rows"] == changed + groups, m  # the rows that change, under their group headers


def test_the_switch_shows_every_row_and_rows_stay_short(doc):
    m = _measure(1400, all_rows=True)
    assert m["rows"] == len(doc["rows"]) + len({r["kind"] for r in doc["rows"]}), m
    assert m["maxRow"] <= 3 * m["line"] + 4 and m["docScroll"] <= m["docClient"], m


def test_the_header_row_and_the_id_column_stay_in_view_when_the_grid_scrolls():
    m = _measure(1400, scroll=(0, 4000))
    assert abs(m["headTop"]) <= 1, m  # the release header stays at the top of the grid
    narrow = _measure(900, scroll=(400, 0))
    assert narrow["docScroll"] <= narrow["docClient"], narrow  # a narrow window: the grid scrolls, not the page
    assert narrow["boxScroll"] > narrow["boxClient"] and abs(narrow["idLeft"]) <= 1, narrow  # ids stay at the left


def test_screenshots_at_1400px(tmp_path):
    for height in (1000, 2400):
        shot = screenshot(PAGE, tmp_path / f"matrix-{height}.png", width=1400, height=height)
        assert shot.stat().st_size > 40_000  # a blank or unstyled page is far smaller
