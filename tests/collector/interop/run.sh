#!/usr/bin/env bash
# run.sh BUILD_DIR TEST.test.mjs - one interoperability test (node's test runner) against the
# build's collector and agent. Sets up what it needs: Debian's chromium (the flame graph
# test), npm's packages from the lock file (npm ci, once, under a lock: ctest runs these tests
# side by side). Ends with node's summary and one line "N passed, N failed".
set -uo pipefail
build=${1:?build directory}
test=${2:?test file}
build=$(cd "$build" 2>/dev/null && pwd) || { echo "run.sh: no build directory '$1'" >&2; echo "0 passed, 1 failed"; exit 1; }
cd "$(dirname "$0")"
exec 9>.npm-install.lock
flock 9
if [ ! -d node_modules/@pyroscope/nodejs ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --no-audit --no-fund --prefer-offline >/dev/null 2>&1 || {
        echo "run.sh: npm ci failed" >&2
        echo "0 passed, 1 failed"
        exit 1
    }
fi
flock -u 9
log=$(mktemp)
PA_BUILD_DIR=$build node --test --test-reporter=tap "$test" >"$log" 2>&1
rc=$?
cat "$log"
pass=$(grep -E '^# pass [0-9]+' "$log" | tail -1 | awk '{print $3}')
fail=$(grep -E '^# fail [0-9]+' "$log" | tail -1 | awk '{print $3}')
rm -f "$log"
pass=${pass:-0}
fail=${fail:-0}
if [ "$rc" != 0 ] && [ "$fail" = 0 ]; then fail=1; fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
