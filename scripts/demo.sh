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
rm -rf "$out"/*.folded "$out"/profiles.db* "$out"/spool  # each demo starts from a clean slate

# The collector, on loopback only.
"$bin/pyagent-collector" --listen "127.0.0.1:$port" --db "$out/profiles.db" >"$out/collector.log" 2>&1 &
collector=$!
trap 'kill $collector 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  curl -fsS "http://127.0.0.1:$port/" >/dev/null 2>&1 && break
  sleep 0.1
done

echo "== profiling examples/shop.py for ${seconds}s at 250 Hz (Python $($python -c 'import platform; print(platform.python_version())'))"
echo "   uploading every 5 s to the collector at http://127.0.0.1:$port/ and writing a local file"
start=$(date +%s)
PYAGENT_UPLOAD_INTERVAL=5 PYAGENT_SPOOL_DIR="$PWD/$out/spool" PYAGENT_TAGS=env=demo \
  "$bin/pyagent" run --rate 250 -o "$PWD/$out/shop.%p.folded" --server "http://127.0.0.1:$port" \
  --app shop -- "$python" examples/shop.py "$seconds"
profile=$(ls "$out"/shop.*.folded)

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
base="http://127.0.0.1:$port"
range="from=$((start - 60))&until=now"
mid=$(((start + $(date +%s)) / 2))
urls=("$base/?app=shop.cpu" "$base/render?query=shop.cpu%7Benv%3Ddemo%7D&$range&format=html"
  "$base/render?query=shop.cpu&$range&format=folded" "$base/heatmap?query=shop.cpu&$range"
  "$base/diff?query=shop.cpu&leftFrom=$start&leftUntil=$mid&rightFrom=$mid&rightUntil=now")
echo "collector:          ${urls[0]}"
echo "  flamegraph:       ${urls[1]}"
echo "  folded:           ${urls[2]}"
echo "  heatmap:          ${urls[3]}"
echo "  diff (2nd half against 1st): ${urls[4]}"

if [ "${PYAGENT_DEMO_STOP:-0}" = 1 ]; then
  # Used by the test suite: every report must be served, and the collector must hold
  # exactly the samples of the local file.
  for u in "${urls[@]}"; do
    curl -fsSL -o /dev/null "$u" || { echo "demo: $u is not served" >&2; exit 1; }
  done
  local_total=$(grep -v '^#' "$profile" | awk '{s += $NF} END {print s + 0}')
  served_total=$(curl -fsS "${urls[2]}" | grep -v '^#' | awk '{s += $NF} END {print s + 0}')
  if [ "$local_total" != "$served_total" ] || [ "$local_total" = 0 ]; then
    echo "demo: local file has $local_total samples, the collector $served_total" >&2
    exit 1
  fi
  echo "demo: all reports served; $served_total samples at the collector, as in the local file"
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
