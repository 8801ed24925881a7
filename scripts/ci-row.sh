#!/usr/bin/env bash
# The test command, three times in a row, while another build loads the machine (issue 12:
# "./quickstart test passes 3 runs in a row while another build loads it").
#
#   scripts/ci-row.sh [RUNS] [REV]      (defaults: 3, HEAD)
#
# Each run is CI's own (.ci/run, which calls the README's test command) in a fresh clone of
# REV under $PYAGENT_ROW_DIR (default /var/tmp/pyagent-row), so nothing built by an earlier run
# is reused. Beside the runs, a load: a clean release build of another clone of REV, again
# and again with a pause of PYAGENT_ROW_PAUSE seconds (default 60) between builds. The load
# average is sampled every 30 s. Stops at the first failing run. Prints one line per run
# (exit status, seconds, the test count) and the load's range; exit status 0 if every run
# passed. Logs: $PYAGENT_ROW_DIR/run-N.log, load.log, builds.log.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
rev=$(git rev-parse "${2:-HEAD}")
dir=${PYAGENT_ROW_DIR:-/var/tmp/pyagent-row}
pause=${PYAGENT_ROW_PAUSE:-60}
src=$PWD
case "$runs" in '' | *[!0-9]*) echo "ci-row: RUNS must be a number, not '$runs'" >&2; exit 2 ;; esac
case "$dir" in /*/*) ;; *) echo "ci-row: PYAGENT_ROW_DIR must be an absolute path below a folder, not '$dir'" >&2; exit 2 ;; esac
rm -rf "$dir"
mkdir -p "$dir"

pids=()
cleanup() {
  for p in "${pids[@]}"; do
    kill -- "-$p" 2>/dev/null || kill "$p" 2>/dev/null || true
  done
}
trap cleanup EXIT

set -m # each background loop in its own process group, so that cleanup stops its children
(while :; do
  echo "$(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)" >>"$dir/load.log"
  sleep 30
done) &
pids+=($!)
git clone -q "$src" "$dir/load" && git -C "$dir/load" checkout -q "$rev"
mkdir -p "$dir/load/build"
[ -f build/pythons.txt ] && cp build/pythons.txt "$dir/load/build/"
(cd "$dir/load" && while :; do
  rm -rf build/release
  s=$SECONDS
  scripts/build.sh release >/dev/null 2>&1 && rc=0 || rc=$?
  echo "$(date -u +%T) build rc=$rc $((SECONDS - s)) s" >>"$dir/builds.log"
  sleep "$pause"
done) &
pids+=($!)
set +m

status=0
for i in $(seq "$runs"); do
  git clone -q "$src" "$dir/run-$i" && git -C "$dir/run-$i" checkout -q "$rev"
  s=$SECONDS
  (cd "$dir/run-$i" && CI=true bash .ci/run >"$dir/run-$i.log" 2>&1) && rc=0 || rc=$?
  tests=$(grep -E '^tests: ' "$dir/run-$i.log" | tail -1 || true)
  echo "ci-row: run $i of $runs at ${rev:0:7}: exit $rc, $((SECONDS - s)) s, ${tests:-no test count}"
  rm -rf "$dir/run-$i"
  if [ "$rc" != 0 ]; then
    status=1
    break
  fi
done
echo "ci-row: load average (1 min) from $(awk 'NR == 1 || $2 < m {m = $2} END {print m}' "$dir/load.log")" \
  "to $(awk '$2 > m {m = $2} END {print m}' "$dir/load.log");" \
  "$(cat "$dir/builds.log" 2>/dev/null | grep -c . || true) builds beside the runs"
exit $status
