#!/usr/bin/env bash
# CPU per upload of HTTP ingest, a figure that a busy machine changes far less than throughput:
# the collector's user+system CPU seconds (/proc/PID/stat, all its threads) while wrk runs
# run.sh's workload (50 connections, ingest.lua), divided by the uploads stored (those wrk
# saw answered, and the few in flight when it stopped). wrk's own CPU per upload is shown
# too: on this machine it shares the two cores with the collector.
# Several binaries alternate run by run, so that each sees the same moments of a shared
# machine. Prints one line per run and each binary's median and range.
# usage: [THREADS=N] bench/collector/cpu_per_upload.sh RUNS SECONDS BINARY... (e.g.
# build/release/bin/pyagent-collector); THREADS: --threads for every binary (unset: each one's
# default)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-5}
secs=${2:-10}
shift 2
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
tck=$(getconf CLK_TCK)
cpu() { awk -v t="$tck" '{print ($14 + $15) / t}' "/proc/$1/stat"; }
for run in $(seq "$runs"); do
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    rm -f "$work"/b.db*
    "$bin" --listen 127.0.0.1:0 --db "$work/b.db" ${THREADS:+--threads "$THREADS"} --sync full --reject-older-than 0 \
      >"$work/out" 2>"$work/err" &
    pid=$!
    for _ in $(seq 50); do grep -q listening "$work/out" && break; sleep 0.1; done
    url=$(grep -o 'http://[0-9.]*:[0-9]*' "$work/out")
    c0=$(cpu "$pid")
    TIMEFORMAT='%U %S'
    { time wrk -t2 -c50 -d"${secs}s" --latency -s bench/collector/ingest.lua "$url" >"$work/wrk"; } 2>"$work/wrktime"
    # The uploads still in flight when wrk stops are decoded and stored without wrk seeing
    # their answer: let them finish, and count what was stored rather than what wrk saw.
    sleep 1
    c1=$(cpu "$pid")
    res=$(grep RESULT "$work/wrk")
    wrk_s=$(awk '{print $1 + $2}' "$work/wrktime")
    kill "$pid"
    wait "$pid" || true
    pid=
    n=$(sqlite3 "$work/b.db" 'select count(*) from uploads')
    load=$(cut -d' ' -f1 /proc/loadavg)
    echo "$res" | awk -v b="$i" -v n="$n" -v c0="$c0" -v c1="$c1" -v l="$load" -v w="$wrk_s" \
      '{printf "bin%d ok=%d cpu_s=%.2f ms_per_upload=%.3f wrk_ms_per_upload=%.3f load=%s %s %s %s\n", b, n, c1 - c0, 1000 * (c1 - c0) / n, 1000 * w / n, l, $3, $4, $5}' |
      tee -a "$work/results"
  done
done
i=0
for bin in "$@"; do
  i=$((i + 1))
  grep "^bin$i " "$work/results" | grep -o ' ms_per_upload=[0-9.]*' | cut -d= -f2 | sort -n |
    awk -v b="$bin" '{a[NR]=$1} END {m = NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2;
      printf "%s: CPU per upload median %.3f ms (%.3f-%.3f, %d runs); 2 idle cores: %.0f uploads/s\n", b, m, a[1], a[NR], NR, 2000/m}'
  grep "^bin$i " "$work/results" | grep -o 'wrk_ms_per_upload=[0-9.]*' | cut -d= -f2 | sort -n |
    awk '{a[NR]=$1} END {printf "  wrk itself: median %.3f ms CPU per upload\n", NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'
  grep "^bin$i " "$work/results" | grep -o 'rps=[0-9.]*' | cut -d= -f2 | sort -n |
    awk '{a[NR]=$1} END {printf "  wrk uploads/s median %.0f (%.0f-%.0f)\n", NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2, a[1], a[NR]}'
done
