#!/usr/bin/env bash
# run.sh BUILD_DIR TEST.test.mjs - one interoperability test (node's test runner) against the
# build's collector and agent. Installs npm's packages from the lock file where the test
# command's stage has not (scripts/npm-packages.sh, under a lock: ctest runs these tests side
# by side). Ends with node's summary and one line "N passed, N failed".
set -uo pipefail
build=${1:?build directory}
test=${2:?test file}
build=$(cd "$build" 2>/dev/null && pwd) || { echo "run.sh: no build directory '$1'" >&2; echo "0 passed, 1 failed"; exit 1; }
cd "$(dirname "$0")"
here=$PWD
# The test command installs them in a stage of its own first; this is for a test run alone.
"$here/../../../scripts/npm-packages.sh" "$here" >/dev/null || { echo "0 passed, 1 failed"; exit 1; }
log=$(mktemp)
# Shown as it runs: a test that ctest stops at its timeout has said how far it got.
PA_BUILD_DIR=$build node --test --test-reporter=tap "$test" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
pass=$(grep -E '^# pass [0-9]+' "$log" | tail -1 | awk '{print $3}')
fail=$(grep -E '^# fail [0-9]+' "$log" | tail -1 | awk '{print $3}')
rm -f "$log"
pass=${pass:-0}
fail=${fail:-0}
if [ "$rc" != 0 ] && [ "$fail" = 0 ]; then fail=1; fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
