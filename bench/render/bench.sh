#!/usr/bin/env bash
# bench.sh [BUILD_DIR] - the renderer on a production-sized profile: 100k unique stacks,
# 1M samples (about 50 MB folded), made by genprofile.py. Measures, over RUNS runs (median):
#   - pyagent-render flamegraph: wall time and peak RSS (/usr/bin/time -v)
#   - pyagent-render diff of two such profiles: wall time and peak RSS
#   - the flamegraph page in Chromium: load + first draw, one zoom, one search
#   - flamegraph.pl on the same input when FLAMEGRAPH_PL points to it, and the ratio
# Targets (issue 18): flamegraph <= 0.25 s and <= 100 MB; page < 2 s; diff < 2 s.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../../build/release}" && pwd)
render=$build/bin/pyagent-render
runs=${RUNS:-5}
work=${BENCH_DIR:-$build/bench-render}
mkdir -p "$work"
cd "$work"
if [ ! -s big.folded ] || [ ! -s big2.folded ]; then
    python3 "$here/genprofile.py" --stacks 100000 --samples 1000000 --depth 7 -o big.folded
    python3 "$here/genprofile.py" --stacks 100000 --samples 1000000 --depth 7 --variant 1 -o big2.folded
fi
size=$(stat -c %s big.folded)

measure() { # measure NAME COMMAND... -> "median_seconds max_rss_mb" over $runs runs
    local name=$1
    shift
    local times=() rss=0
    for _ in $(seq "$runs"); do
        /usr/bin/time -v "$@" 2>"time.$name" >/dev/null
        local t m
        t=$(awk -F': ' '/Elapsed \(wall clock\)/ {split($2, a, ":"); print a[1] * 60 + a[2]}' "time.$name")
        m=$(awk -F': ' '/Maximum resident set size/ {print $2}' "time.$name")
        times+=("$t")
        [ "$m" -gt "$rss" ] && rss=$m
    done
    local med
    med=$(printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
    echo "$med $((rss / 1024))"
}

echo "input: $work/big.folded, $((size / 1000000)) MB, $(grep -vc '^#' big.folded) unique stacks, $runs runs each"
read -r fg_t fg_m < <(measure flamegraph "$render" flamegraph big.folded -o big.html)
echo "pyagent-render flamegraph: median ${fg_t} s, peak RSS ${fg_m} MB, output $(($(stat -c %s big.html) / 1000)) kB"
read -r df_t df_m < <(measure diff "$render" diff big.folded big2.folded -o diff.html)
echo "pyagent-render diff:       median ${df_t} s, peak RSS ${df_m} MB"
read -r sv_t sv_m < <(measure svg "$render" flamegraph big.folded -o big.svg)
echo "pyagent-render flamegraph -o svg: median ${sv_t} s, peak RSS ${sv_m} MB, output $(($(stat -c %s big.svg) / 1000)) kB"
if [ -d "$here/../../tests/browser/node_modules/playwright-core" ]; then
    echo "chromium flamegraph page: $(node "$here/pageload.mjs" big.html 3)"
    echo "chromium diff page:       $(node "$here/pageload.mjs" diff.html 3)"
else
    echo "chromium: skipped (run tests/browser/run.sh once to install playwright-core)"
fi
if [ -n "${FLAMEGRAPH_PL:-}" ]; then
    read -r pl_t pl_m < <(RUNS=1 measure flamegraph_pl perl "$FLAMEGRAPH_PL" big.folded)
    echo "flamegraph.pl: ${pl_t} s, peak RSS ${pl_m} MB; pyagent-render is $(awk -v a="$pl_t" -v b="$fg_t" 'BEGIN {printf "%.1f", a / b}')x faster"
else
    echo "flamegraph.pl: not run (set FLAMEGRAPH_PL=/path/to/flamegraph.pl)"
fi
