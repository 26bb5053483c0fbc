#!/bin/sh
# Install what the load tests need beyond the venv: Debian's chromium for tests/load/test_report_browser.py.
set -e
if ! command -v chromium >/dev/null 2>&1; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
fi
