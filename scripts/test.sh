#!/usr/bin/env bash
# Sets everything up and runs the whole test suite: unit and integration tests on every
# CPython of the matrix (release build), unit tests under ASan+UBSan, concurrency tests under
# TSan, fuzz targets briefly, browser tests. Ends with one line "tests: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test || exit 1

passed=0
failed=0
failures=""
stage() { # stage NAME COMMAND...: runs a stage, counts ctest's results from its log
  local name=$1
  shift
  echo "=== $name"
  local log="build/stage-$name.log"
  mkdir -p build
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local p f
  p=$(grep -Eo '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1 | cut -d' ' -f1)
  f=$(grep -Eo '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1 | cut -d' ' -f3)
  if [ -z "$p" ]; then # ctest's own summary
    local line
    line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -1)
    if [ -n "$line" ]; then
      local total
      f=$(echo "$line" | sed -E 's/.*passed, ([0-9]+) tests failed out of ([0-9]+).*/\1/')
      total=$(echo "$line" | sed -E 's/.*failed out of ([0-9]+).*/\1/')
      p=$((total - f))
    fi
  fi
  p=${p:-0}
  f=${f:-0}
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; fi
  passed=$((passed + p))
  failed=$((failed + f))
  [ "$f" != 0 ] && failures="$failures $name"
  return 0
}

ctest_in() { # ctest_in BUILD_DIR LABEL_REGEX
  ctest --test-dir "$1" -L "$2" --output-on-failure --timeout 600 -j 2
}

stage pythons scripts/pythons.sh --ensure
stage build-release scripts/build.sh release
stage release ctest_in build/release 'unit|integration'
stage build-asan scripts/build.sh asan
stage asan ctest_in build/asan 'unit|fuzz'
stage build-tsan scripts/build.sh tsan
stage tsan ctest_in build/tsan 'tsan'
demo_check() { # the README's main job, stopped at the end
  PYAGENT_DEMO_STOP=1 PYAGENT_DEMO_SECONDS=4 PYAGENT_DEMO_PORT=$((20000 + RANDOM % 20000)) scripts/demo.sh >build/demo.log 2>&1
  local rc=$?
  tail -3 build/demo.log
  if [ $rc = 0 ]; then echo "1 passed, 0 failed"; else cat build/demo.log; echo "0 passed, 1 failed"; fi
  return $rc
}
stage demo demo_check
if [ -x tests/browser/run.sh ]; then
  stage browser tests/browser/run.sh build/release
fi

[ -n "$failures" ] && echo "failed stages:$failures"
echo "tests: $passed passed, $failed failed"
[ "$failed" = 0 ]
