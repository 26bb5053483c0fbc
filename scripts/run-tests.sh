#!/usr/bin/env bash
# The test suite in two pytest sessions (`make test` runs this; issue 34 item 7). First the unit tests, one core,
# while tests/support/prepare.py builds and verifies in the background what the engine tests need (llama-server,
# the engine and tool environments, the models); then the engine, Docker, Ray and slow tests, each engine started
# once in that session. Arguments go to both pytest runs. Exit: 0 only when both sessions pass.
set -uo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp "${TMPDIR:-/tmp}/harness-prepare.XXXXXX")
.venv/bin/python -m tests.support.prepare >"$log" 2>&1 &
prep=$!
trap 'kill "$prep" 2>/dev/null; rm -f "$log"' EXIT
start=$SECONDS

.venv/bin/pytest -m "not engine and not docker and not ray and not slow" "$@"
unit=$?
echo "run-tests: unit session done in $((SECONDS - start)) s (rc $unit); waiting for the preparation"
wait "$prep"
echo "run-tests: preparation ended after $((SECONDS - start)) s (rc $?):"
grep '^prepare:' "$log" || tail -n 20 "$log"

.venv/bin/pytest -m "engine or docker or ray or slow" "$@"
live=$?
echo "run-tests: all done in $((SECONDS - start)) s (unit rc $unit, live rc $live)"
# 5 = nothing collected (a -k that selects tests of one session only); a failure in either session fails the run
ok() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }
ok "$unit" && ok "$live" && ! { [ "$unit" -eq 5 ] && [ "$live" -eq 5 ]; }
