#!/usr/bin/env bash
# Sets everything up and runs the whole test suite: unit and integration tests on every
# CPython of the matrix (release build), unit tests under ASan+UBSan, concurrency tests under
# TSan, fuzz targets briefly, browser tests. Ends with one line "tests: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test || exit 1

mkdir -p build
rm -f build/stage-*.result
stage() { # stage NAME COMMAND...: runs a stage, counts its results from its log (ctest's summary, or a plain closing line)
  local name=$1
  shift
  echo "=== $name"
  local log="build/stage-$name.log"
  mkdir -p build
  local t0=$SECONDS
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name took $((SECONDS - t0)) s"
  local p="" f="" line
  # ctest's own summary first: the output of a failing test (--output-on-failure) may hold
  # plain "N passed, N failed" lines of its own (the harmlessness runner's), which must not
  # stand for the stage.
  line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -1)
  if [ -n "$line" ]; then
    local total
    f=$(echo "$line" | sed -E 's/.*passed, ([0-9]+) tests failed out of ([0-9]+).*/\1/')
    total=$(echo "$line" | sed -E 's/.*failed out of ([0-9]+).*/\1/')
    p=$((total - f))
  else
    line=$(grep -Eo '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    p=$(echo "$line" | cut -d' ' -f1)
    f=$(echo "$line" | cut -d' ' -f3)
  fi
  p=${p:-0}
  f=${f:-0}
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; fi
  # One result file per stage: stages that run beside others (below) report the same way.
  echo "$p $f" >"build/stage-$name.result"
  return 0
}

ctest_in() { # ctest_in BUILD_DIR LABEL_REGEX
  # Three at a time on two CPUs: a good part of the suite waits (uploads to a server that is
  # gone, stalls, timeouts) rather than computes, and every test must hold under a loaded
  # machine anyway (issue 12: the test command passes while another build loads it).
  ctest --test-dir "$1" -L "$2" --output-on-failure --timeout 600 -j 3
}

# --ensure-ft: the free-threaded interpreter is built once from sid's source (minutes of both
# CPUs) and cached with the others.
stage pythons scripts/pythons.sh --ensure-ft
# sid's packages that integration cases import (aiohttp for asyncio tasks, OpenTelemetry for
# span profiles), fetched once here rather than first by whichever case runs first; the cases
# ask pythons.sh again and find them cached. A failure here fails the stage.
sid_test_packages() { scripts/pythons.sh --aiohttp >/dev/null && scripts/pythons.sh --otel >/dev/null; }
stage sid-packages sid_test_packages
# npm's packages of the interoperability and browser tests, before any test runs (a test that
# installed them first ran into its timeout on CI's loaded machine).
stage npm-packages scripts/npm-packages.sh
stage build-release scripts/build.sh release
# Beside the release stage, which leaves part of both CPUs idle while its tests wait (uploads,
# stalls, sleeps), run the stages that mostly wait too: CPython's suites (their modules sleep
# for most of their time) and the fresh roots (copying, installing). Each writes its own log,
# shown when it ends; the release stage's tests must hold on a loaded machine anyway.
cpython_suites() { # CPython's own regression tests (a subset chosen for risk) without and with the agent
  scripts/pythons.sh --ensure --testsuites >/dev/null || return 1
  # The timeout is generous because the machine is shared with the release stage: a module
  # that times out on one side only would count as a difference.
  # cpu@100 is the default configuration (POSIX CPU timers on x86-64 Linux 5.9+); cpu@1000
  # runs on perf events.
  scripts/cpython-suites.py --subset ci --python debian-3.11 --python sid-3.15 \
    --agent cpu@100 --agent cpu@1000 --agent wall@250 -j 4 --timeout 300 --quiet
}
package_contents() { # what ships: glibc only, only the interposed exports, no fault injection
  local n=0 f=0 c
  for c in glibc_only exports no_fault_injection; do
    if python3 tests/packaging/test_library.py --lib build/package/lib/libpyagent.so \
      --test-lib build/release/lib/libpyagent.so --map shim/libpyagent.map "$c"; then
      n=$((n + 1))
    else
      f=$((f + 1))
    fi
  done
  echo "$n passed, $f failed"
  [ "$f" = 0 ]
}
packaging_stages() {
  # The README's first command on a fresh Debian 12 minbase root (prints the time it took).
  stage fresh-root tests/packaging/fresh_root.sh demo
  # The .deb packages, installed with apt-get on a fresh root.
  stage build-package scripts/build.sh package
  stage package-contents package_contents
  stage packages tests/packaging/fresh_root.sh packages build/package
  # deploy/Dockerfile's runtime image, built step by step in a fresh root (no Docker engine here).
  stage image tests/packaging/fresh_root.sh image build/package
}
demo_check() { # the README's main job, stopped at the end
  PYAGENT_DEMO_STOP=1 PYAGENT_DEMO_SECONDS=4 PYAGENT_DEMO_PORT=$((20000 + RANDOM % 20000)) scripts/demo.sh >build/demo.log 2>&1
  local rc=$?
  tail -3 build/demo.log
  if [ $rc = 0 ]; then echo "1 passed, 0 failed"; else cat build/demo.log; echo "0 passed, 1 failed"; fi
  return $rc
}
other_checks() { # the sanitizer builds, the README's main job and the browser's reports
  stage build-asan scripts/build.sh asan
  stage asan ctest_in build/asan 'unit|fuzz'
  stage build-tsan scripts/build.sh tsan
  stage tsan ctest_in build/tsan 'tsan'
  stage demo demo_check
  if [ -x tests/browser/run.sh ]; then
    stage browser tests/browser/run.sh build/release
  fi
}
t_side=$SECONDS
(stage cpython-suites cpython_suites) >build/side-cpython-suites.log 2>&1 &
side_cpython=$!
# The packaging stages end after about a third of the release stage; the sanitizer builds,
# the demo and the browser (which ran after the release stage, two minutes of CI's critical
# path) follow them on the same side.
{
  packaging_stages >build/side-packaging.log 2>&1
  other_checks >build/side-checks.log 2>&1
} &
side_packaging=$!
echo "=== beside the release stage: cpython-suites (build/side-cpython-suites.log)," \
  "fresh-root, build-package, package-contents, packages, image (build/side-packaging.log)," \
  "then build-asan, asan, build-tsan, tsan, demo, browser (build/side-checks.log)"

stage release ctest_in build/release 'unit|integration'

wait "$side_packaging"
cat build/side-packaging.log
cat build/side-checks.log
wait "$side_cpython"
cat build/side-cpython-suites.log
echo "=== the stages beside the release stage ended $((SECONDS - t_side)) s after they started"

passed=0
failed=0
failures=""
for r in build/stage-*.result; do
  name=${r#build/stage-}
  name=${name%.result}
  read -r p f <"$r"
  passed=$((passed + p))
  failed=$((failed + f))
  [ "$f" != 0 ] && failures="$failures $name"
done
# The last lines each failing ctest test printed, again at the very end: CI's record keeps the
# head and tail of this output, and a failure's reason was lost between them (CI, 2026-11-28:
# three tests failed, the output of two never shown).
failure_tails() { # failure_tails LOG: each "***Failed" (or Timeout) block's last 12 lines, less TAP's counts
  awk '
    function flush() { if (name != "") { print "--- " name; s = n > 12 ? n - 12 : 0; for (i = s + 1; i <= n; i++) print buf[i] } name = ""; n = 0 }
    /^ *[0-9]+\/[0-9]+ Test +#[0-9]+: .*\*\*\*/ { flush(); name = $0; next }
    /^ *Start +[0-9]+: |^ *[0-9]+\/[0-9]+ Test +#[0-9]+: / { flush(); next }
    name != "" && !/^(# [a-z_]+ [0-9.]+|1\.\.[0-9]+| *\.\.\.|)$/ { buf[++n] = substr($0, 1, 300) }
    END { flush() }' "$1"
}
for r in build/stage-*.result; do
  read -r p f <"$r"
  log=${r%.result}.log
  if [ "$f" != 0 ] && [ -f "$log" ] && grep -q '\*\*\*Failed\|\*\*\*Timeout\|\*\*\*Exception' "$log"; then
    echo "=== what the failing tests of ${log#build/stage-} printed last"
    failure_tails "$log"
  fi
done
[ -n "$failures" ] && echo "failed stages:$failures"
echo "tests: $passed passed, $failed failed"
[ "$failed" = 0 ]
