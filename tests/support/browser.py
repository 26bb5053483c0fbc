"""Headless Chromium (Debian's `chromium`) for the tests that check a rendered page: a fresh profile each time, no
network services, no sandbox (root). Missing under CI=true is a failure, never a skip (tests.conftest.unavailable)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.conftest import unavailable

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

__all__ = ["CHROMIUM", "chromium", "dom"]


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
