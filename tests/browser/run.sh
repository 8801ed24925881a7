#!/usr/bin/env bash
# run.sh BUILD_DIR - browser tests of pyagent-render's reports in headless Chromium.
# Sets up what it needs (Debian's chromium, npm's playwright-core from the lock file), runs
# every *.test.mjs with node's test runner, keeps screenshots in BUILD_DIR/artifacts/screenshots
# and ends with node's summary and one line "N passed, N failed".
set -uo pipefail
build=${1:-build/release}
build=$(cd "$build" 2>/dev/null && pwd) || { echo "run.sh: no build directory '$1'" >&2; exit 2; }
cd "$(dirname "$0")"
if [ ! -x "$build/bin/pyagent-render" ]; then
    echo "run.sh: $build/bin/pyagent-render is not built" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
if [ ! -x /usr/bin/chromium ]; then
    apt-get install -y chromium >/dev/null || { echo "run.sh: cannot install chromium" >&2; echo "0 passed, 1 failed"; exit 1; }
fi
"$PWD/../../scripts/npm-packages.sh" "$PWD" >/dev/null || { echo "0 passed, 1 failed"; exit 1; }
log=$(mktemp)
PA_BUILD_DIR=$build node --test --test-reporter=tap --test-concurrency=1 ./*.test.mjs 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
pass=$(grep -E '^# pass [0-9]+' "$log" | tail -1 | awk '{print $3}')
fail=$(grep -E '^# fail [0-9]+' "$log" | tail -1 | awk '{print $3}')
rm -f "$log"
pass=${pass:-0}
fail=${fail:-0}
if [ "$rc" != 0 ] && [ "$fail" = 0 ]; then fail=1; fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
