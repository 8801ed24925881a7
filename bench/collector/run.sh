#!/usr/bin/env bash
# Collector benchmarks: ingest throughput and latency (wrk, 50 connections, folded uploads of
# ~200 stacks) and query time (an hour of 10-second profiles from 20 apps). Prints RESULT
# lines and the medians over RUNS runs.
# usage: [THREADS=N] bench/collector/run.sh [BUILD_DIR] [RUNS] [SECONDS]
# (THREADS: the collector's --threads; unset, its default)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/release}
runs=${2:-5}
secs=${3:-10}
bin=$build/bin/pyagent-collector
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT

start() { # start SYNC: a fresh collector on a free port; sets pid and url
  rm -f "$work"/b.db*
  # The uploads stand for the last hour (ingest.lua, query_bench.py): from an hour ago on,
  # which Pyroscope's ingestion window (the collector's default) would refuse at its edge.
  "$bin" --listen 127.0.0.1:0 --db "$work/b.db" ${THREADS:+--threads "$THREADS"} --sync "$1" --reject-older-than 0 \
    >"$work/out" 2>"$work/err" &
  pid=$!
  for _ in $(seq 50); do grep -q listening "$work/out" && break; sleep 0.1; done
  url=$(grep -o 'http://[0-9.]*:[0-9]*' "$work/out")
}
stop() { kill "$pid"; wait "$pid" || true; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

for sync in full normal; do
  : >"$work/results"
  for _ in $(seq "$runs"); do
    start "$sync"
    wrk -t2 -c50 -d"${secs}s" --latency -s bench/collector/ingest.lua "$url" |
      grep RESULT | tee -a "$work/results"
    stop
  done
  for k in rps p50_ms p99_ms errors; do
    printf 'ingest sync=%s median %s: ' "$sync" "$k"
    grep -o "$k=[0-9.]*" "$work/results" | cut -d= -f2 | median
  done
done

start full
/usr/bin/python3 bench/collector/query_bench.py "$url" "$runs"
echo "database size for 7200 uploads: $(du -k "$work"/b.db* | awk '{s+=$1} END {print s}') KiB"
stop
