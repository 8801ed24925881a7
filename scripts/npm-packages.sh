#!/usr/bin/env bash
# npm-packages.sh [DIR...] - installs npm's packages from each DIR's lock file (npm ci), where
# node_modules is missing or older than the lock file. Default DIRs: every test directory with
# a package-lock.json (the interoperability clients, the browser tests). One install at a time
# per directory (a lock file beside it): ctest runs tests that share a directory side by side.
# The test command runs this as a stage of its own before any test starts, so that a test's
# time is its own and not an install's (a first install is 30 s on an idle machine and was
# minutes on CI's loaded one: a test that did it ran into its 10-minute timeout).
# Ends with "N passed, N failed" (one per directory); exit status 1 if any install failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# = 0 ]; then
    set -- "$root/tests/collector/interop" "$root/tests/browser"
fi
pass=0
fail=0
for dir in "$@"; do
    if [ ! -f "$dir/package-lock.json" ]; then
        echo "npm-packages: no package-lock.json in $dir" >&2
        fail=$((fail + 1))
        continue
    fi
    (
        cd "$dir" || exit 1
        exec 9>.npm-install.lock
        flock 9
        if [ -f node_modules/.package-lock.json ] && [ ! package-lock.json -nt node_modules/.package-lock.json ]; then
            exit 0
        fi
        t0=$SECONDS
        log=$(mktemp)
        # Two tries: the registry is across a network.
        for try in 1 2; do
            if npm ci --no-audit --no-fund --prefer-offline >"$log" 2>&1; then
                echo "npm-packages: $dir installed in $((SECONDS - t0)) s"
                rm -f "$log"
                exit 0
            fi
            echo "npm-packages: npm ci in $dir failed (try $try):" >&2
            tail -20 "$log" >&2
        done
        rm -f "$log"
        exit 1
    ) && pass=$((pass + 1)) || fail=$((fail + 1))
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
