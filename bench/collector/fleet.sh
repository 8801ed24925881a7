#!/usr/bin/env bash
# Fleet-scale benchmark: HOURS hours of PROCS processes uploading every 10 s, loaded through
# the store API by collector_fleet (which also times the queries in-process), then served by
# pyagent-collector: the same queries over HTTP, Grafana's querier.v1 calls among them, and
# HTTP ingest (wrk, 50 connections, as run.sh) alone and while day-long /render queries run
# back to back.
# usage: bench/collector/fleet.sh [BUILD_DIR] [HOURS] [PROCS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/release}
hours=${2:-24}
procs=${3:-50}
secs=${4:-10}
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

echo "RESULT loadavg_before=$(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bin/collector_fleet" "$work/fleet.db" "$hours" "$procs"
echo "RESULT db_files_kib=$(du -k "$work"/fleet.db* | awk '{s+=$1} END {print s}')"

# wrk's 50 connections stand for 50 agents but all come from one address: lift the
# per-address connection limit (64), which they would otherwise meet while the previous
# run's connections are being closed. The fleet's day of profiles and ingest.lua's uploads
# (from an hour ago on) lie outside Pyroscope's ingestion window, the collector's default.
"$build/bin/pyagent-collector" --listen 127.0.0.1:0 --db "$work/fleet.db" --retention 0 \
  --reject-older-than 0 --query-timeout 60s --max-connections-per-client 1024 >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 100); do grep -q listening "$work/out" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.]*:[0-9]*' "$work/out")
now=$(date +%s)
end=$((now - 600))
timed() { # timed NAME PATH [JSON]: median of 3 GETs (POSTs of JSON when given), seconds
  local post=()
  [ $# -gt 2 ] && post=(-H 'Content-Type: application/json' --data-binary "$3")
  for _ in 1 2 3; do
    curl -s -o /dev/null -w '%{time_total} %{http_code}\n' "${post[@]}" "$url$2"
  done | sort -n | sed -n 2p | {
    read -r t code
    echo "RESULT http $1 median_s=$t status=$code"
    [ "$code" = 200 ] || echo "fleet.sh: $1 answered $code" >&2
  }
}
querier() { # querier NAME METHOD FROM UNTIL [MORE_JSON]: a querier.v1 call for app0's CPU
  timed "$1" "/querier.v1.QuerierService/$2" "{\"profileTypeID\":\"process_cpu:samples:count:cpu:nanoseconds\",\"labelSelector\":\"{service_name=\\\"app0\\\"}\",\"start\":\"${3}000\",\"end\":\"${4}000\"${5:-}}"
}
q='app0.cpu'
timed hour_folded "/render?query=$q&from=$((end - 3600))&until=$end&format=folded"
timed hour_html "/render?query=$q&from=$((end - 3600))&until=$end"
timed day_folded "/render?query=$q&from=$((end - hours * 3600))&until=$end&format=folded"
timed day_html "/render?query=$q&from=$((end - hours * 3600))&until=$end"
timed diff_two_hours "/diff?query=$q&leftFrom=$((end - 7200))&leftUntil=$((end - 3600))&rightFrom=$((end - 3600))&rightUntil=$end"
timed day_label "/render?query=app1.cpu%7Bpod%3D~%22app1-1.*%22%7D&from=$((end - hours * 3600))&until=$end&format=folded"
timed apps "/api/apps"
# Grafana's calls (querier.v1, JSON): a flame graph and a breakdown by pod, hour and day.
querier merge_stacktraces_hour SelectMergeStacktraces $((end - 3600)) $end
querier merge_stacktraces_day SelectMergeStacktraces $((end - hours * 3600)) $end
querier select_series_hour SelectSeries $((end - 3600)) $end ',"step":15,"groupBy":["pod"]'
querier select_series_day SelectSeries $((end - hours * 3600)) $end ',"step":300,"groupBy":["pod"]'

wrk -t2 -c50 -d"${secs}s" --latency -s bench/collector/ingest.lua "$url" | grep RESULT |
  sed 's/^RESULT/RESULT ingest_alone/'
sleep 2
( while kill -0 "$pid" 2>/dev/null && [ ! -e "$work/stop" ]; do
    curl -s -o /dev/null "$url/render?query=$q&from=$((end - hours * 3600))&until=$end&format=folded"
  done ) &
loop=$!
wrk -t2 -c50 -d"${secs}s" --latency -s bench/collector/ingest.lua "$url" | grep RESULT |
  sed 's/^RESULT/RESULT ingest_during_day_queries/'
touch "$work/stop"
echo "RESULT loadavg_after=$(cut -d' ' -f1-3 /proc/loadavg)"
echo "RESULT collector_stderr_lines=$(wc -l <"$work/err")"
sort "$work/err" | uniq -c | sort -rn | head -5
wait "$loop" || true
kill "$pid"
wait "$pid" || true
pid=
