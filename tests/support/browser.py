"""Headless Chromium (Debian's `chromium`) for the tests that check a rendered page: a fresh profile each time, no
network services, no sandbox (root). Missing under CI=true is a failure, never a skip (tests.conftest.unavailable)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.conftest import unavailable

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

__all__ = ["CHROMIUM", "chromium", "dom", "layout", "screenshot"]


def chromium(*args: str) -> subprocess.CompletedProcess:
    if not CHROMIUM:
        unavailable("chromium not installed (scripts/system-deps.sh installs it)")  # fails under CI=true
    prof = tempfile.mkdtemp()
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={prof}", *args]  # fmt: skip
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    finally:
        shutil.rmtree(prof, ignore_errors=True)


def dom(page: Path) -> str:
    """The DOM Chromium builds from file://page."""
    p = chromium("--dump-dom", Path(page).resolve().as_uri())
    assert p.returncode == 0, p.stderr[-2000:]
    assert "<html" in p.stdout, p.stderr[-2000:]
    return p.stdout


_PROBE = """<script>(function(){{var r;try{{r=JSON.stringify(({js})());}}catch(e){{r=JSON.stringify({{error:String(e)}});}}
var p=document.createElement('pre');p.id='harness-probe';p.textContent=r;document.body.appendChild(p);}})();</script>"""


def layout(page: Path, js: str, *, width: int = 1400, height: int = 1000) -> dict:
    """What `js` (a function expression returning a JSON value) sees in the page laid out at width x height: the page
    is copied next to itself with the probe appended (the page under test is not changed), Chromium runs it and the
    DOM it dumps carries the answer."""
    import html
    import json
    import re

    page = Path(page).resolve()
    probe_dir = Path(tempfile.mkdtemp())
    try:
        copy = probe_dir / page.name
        copy.write_text(page.read_text(encoding="utf-8") + _PROBE.format(js=js), encoding="utf-8")
        p = chromium(f"--window-size={width},{height}", "--dump-dom", copy.as_uri())
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)
    assert p.returncode == 0, p.stderr[-2000:]
    m = re.search(r'<pre id="harness-probe">(.*?)</pre>', p.stdout, re.S)
    assert m, "the probe did not run: " + p.stderr[-2000:]
    return json.loads(html.unescape(m.group(1)))


def screenshot(page: Path, shot: Path, *, width: int = 1400, height: int = 2000) -> Path:
    p = chromium(
        f"--screenshot={shot}", f"--window-size={width},{height}", "--hide-scrollbars", Path(page).resolve().as_uri()
    )
    assert p.returncode == 0 and shot.is_file(), p.stderr[-2000:]
    return shot
