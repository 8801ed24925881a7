#!/usr/bin/env bash
# bench.sh [BUILD_DIR [capture]] - the renderer on a production-sized profile: 100k unique stacks,
# 1M samples (about 50 MB folded), made by genprofile.py. Measures, over RUNS runs (median):
#   - pyagent-render flamegraph: wall time and peak RSS (/usr/bin/time -v)
#   - pyagent-render diff of two such profiles: wall time and peak RSS
#   - the flamegraph page in Chromium: load + first draw, one zoom, one search
#   - flamegraph.pl on the same input when FLAMEGRAPH_PL points to it, and the ratio
#   - the binary capture against folded and pprof: sizes, writing, reading (capture_comparison)
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

measure() { # measure NAME COMMAND... -> "median_seconds max_rss_mb median_cpu_seconds" over $runs runs
    local name=$1
    shift
    local times=() cpus=() rss=0
    for _ in $(seq "$runs"); do
        /usr/bin/time -v "$@" 2>"time.$name" >/dev/null
        local t m c
        t=$(awk -F': ' '/Elapsed \(wall clock\)/ {split($2, a, ":"); print a[1] * 60 + a[2]}' "time.$name")
        m=$(awk -F': ' '/Maximum resident set size/ {print $2}' "time.$name")
        c=$(awk -F': ' '/(User|System) time \(seconds\)/ {s += $2} END {print s}' "time.$name")
        times+=("$t")
        cpus+=("$c")
        [ "$m" -gt "$rss" ] && rss=$m
    done
    echo "$(median "${times[@]}") $((rss / 1024)) $(median "${cpus[@]}")"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

# The binary capture against folded and pprof (bench.sh BUILD_DIR capture runs only this):
# big.folded, and shop.folded (examples/shop.py under the agent for 8 s: wall mode, 1 kHz,
# instructions, time buckets). Sizes; writing (export from the folded file, and from the
# capture so that the reading is cheap); reading (top -n 1: parse, then one small table).
capture_comparison() {
    if [ ! -s shop.folded ]; then
        LD_PRELOAD=$build/lib/libpyagent.so PYAGENT_MODE=wall PYAGENT_RATE=1000 PYAGENT_OPCODES=1 \
            PYAGENT_OUTPUT=$work/shop.folded python3 "$here/../../examples/shop.py" 8 >/dev/null
    fi
    local p f fmt ext t m c
    for p in big shop; do
        gzip -6 -c $p.folded >$p.folded.gz
        echo "capture, $p: $(grep -vc '^#' $p.folded) stacks, $(grep -c '^#t' $p.folded || true) timed;" \
            "folded $(stat -c %s $p.folded) B, folded gzip -6 $(stat -c %s $p.folded.gz) B"
        for fmt in capture pprof; do
            ext=$([ $fmt = pprof ] && echo pb.gz || echo pyacap)
            read -r t m c < <(measure write "$render" export $p.folded -o $p.$ext)
            echo "  $fmt: $(stat -c %s $p.$ext) B; written from folded ${t} s (${c} s CPU)"
            read -r t m c < <(measure write "$render" export $p.pyacap -o x.$ext)
            echo "  $fmt: written from the capture ${t} s (${c} s CPU, ${m} MB)"
        done
        for f in $p.folded $p.folded.gz $p.pb.gz $p.pyacap; do
            read -r t m c < <(measure read "$render" top -n 1 $f)
            echo "  read $f: ${t} s (${c} s CPU), peak RSS ${m} MB"
        done
        "$render" export $p.pyacap -o $p.back.folded
        cmp -s <("$render" export $p.folded -o -) $p.back.folded && echo "  capture -> folded: identical"
    done
}
if [ "${2:-}" = capture ]; then
    capture_comparison
    exit 0
fi

echo "input: $work/big.folded, $((size / 1000000)) MB, $(grep -vc '^#' big.folded) unique stacks, $runs runs each"
read -r fg_t fg_m _ < <(measure flamegraph "$render" flamegraph big.folded -o big.html)
echo "pyagent-render flamegraph: median ${fg_t} s, peak RSS ${fg_m} MB, output $(($(stat -c %s big.html) / 1000)) kB"
read -r df_t df_m _ < <(measure diff "$render" diff big.folded big2.folded -o diff.html)
echo "pyagent-render diff:       median ${df_t} s, peak RSS ${df_m} MB"
read -r sv_t sv_m _ < <(measure svg "$render" flamegraph big.folded -o big.svg)
echo "pyagent-render flamegraph -o svg: median ${sv_t} s, peak RSS ${sv_m} MB, output $(($(stat -c %s big.svg) / 1000)) kB"
if [ -d "$here/../../tests/browser/node_modules/playwright-core" ]; then
    echo "chromium flamegraph page: $(node "$here/pageload.mjs" big.html 3)"
    echo "chromium diff page:       $(node "$here/pageload.mjs" diff.html 3)"
else
    echo "chromium: skipped (run tests/browser/run.sh once to install playwright-core)"
fi
if [ -n "${FLAMEGRAPH_PL:-}" ]; then
    read -r pl_t pl_m _ < <(RUNS=1 measure flamegraph_pl perl "$FLAMEGRAPH_PL" big.folded)
    echo "flamegraph.pl: ${pl_t} s, peak RSS ${pl_m} MB; pyagent-render is $(awk -v a="$pl_t" -v b="$fg_t" 'BEGIN {printf "%.1f", a / b}')x faster"
else
    echo "flamegraph.pl: not run (set FLAMEGRAPH_PL=/path/to/flamegraph.pl)"
fi
capture_comparison
