#!/usr/bin/env bash
# The main job: set up, build, profile a real program (examples/shop.py) with libpyagent.so,
# write its reports, and serve them from pyagent-collector on loopback.
#   PYAGENT_DEMO_SECONDS   how long the example runs (default 12)
#   PYAGENT_DEMO_PORT      collector port (default 4040)
#   PYAGENT_DEMO_FOREGROUND=0  leave the collector in the background and return (tests use it
#                          with PYAGENT_DEMO_STOP=1 to stop it at the end)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh release

bin=build/release/bin
lib=build/release/lib/libpyagent.so
out=out/demo
port=${PYAGENT_DEMO_PORT:-4040}
seconds=${PYAGENT_DEMO_SECONDS:-12}
python=/usr/bin/python3
mkdir -p "$out"
rm -f "$out"/*.folded

# The collector, on loopback only.
"$bin/pyagent-collector" --listen "127.0.0.1:$port" --db "$out/profiles.db" >"$out/collector.log" 2>&1 &
collector=$!
trap 'kill $collector 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  curl -fsS "http://127.0.0.1:$port/" >/dev/null 2>&1 && break
  sleep 0.1
done

echo "== profiling examples/shop.py for ${seconds}s at 250 Hz (Python $($python -c 'import platform; print(platform.python_version())'))"
start=$(date +%s)
PYAGENT_RATE=250 PYAGENT_OUTPUT="$PWD/$out/shop.%p.folded" PYAGENT_UPLOAD_INTERVAL=5 \
  "$bin/pyagent" run -- "$python" examples/shop.py "$seconds"
until=$(($(date +%s) + 1))
profile=$(ls "$out"/shop.*.folded)

# Send the local profile to the collector (the Pyroscope ingest API).
curl -fsS -X POST --data-binary @"$profile" -H 'Content-Type: text/plain' \
  "http://127.0.0.1:$port/ingest?name=shop.cpu&from=$start&until=$until&sampleRate=250&spyName=pyagent&format=folded" >/dev/null

"$bin/pyagent-render" flamegraph "$profile" -o "$out/flamegraph.html" --title "shop.py"
"$bin/pyagent-render" flamegraph "$profile" -o "$out/flamegraph.svg" --title "shop.py"
"$bin/pyagent-render" heatmap "$profile" -o "$out/heatmap"
"$bin/pyagent-render" top "$profile" -n 10

echo
echo "== reports"
echo "profile (folded):   $PWD/$profile"
echo "flamegraph:         $PWD/$out/flamegraph.html"
echo "flamegraph (SVG):   $PWD/$out/flamegraph.svg"
echo "source heatmap:     $PWD/$out/heatmap/index.html"
echo "collector:          http://127.0.0.1:$port/"
echo "  flamegraph:       http://127.0.0.1:$port/render?query=shop.cpu&from=$((start - 60))&until=now&format=html"
echo "  folded:           http://127.0.0.1:$port/render?query=shop.cpu&from=$((start - 60))&until=now&format=folded"

if [ "${PYAGENT_DEMO_STOP:-0}" = 1 ]; then
  exit 0
fi
trap - EXIT
if [ "${PYAGENT_DEMO_FOREGROUND:-1}" = 1 ]; then
  echo
  echo "serving on http://127.0.0.1:$port/ (Ctrl-C stops the collector)"
  wait "$collector"
else
  echo "collector left running as pid $collector (kill $collector to stop it)"
fi
