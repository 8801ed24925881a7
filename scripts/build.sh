#!/usr/bin/env bash
# Configures and builds one flavour of the tree: release (default), asan or tsan.
# Usage: scripts/build.sh [release|asan|tsan]   -> build/<flavour>
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=${1:-release}
case "$flavour" in
  release) opts=(-DCMAKE_BUILD_TYPE=Release) ;;
  asan) opts=(-DCMAKE_BUILD_TYPE=Debug -DPYAGENT_SANITIZE=ON -DCMAKE_C_COMPILER=clang) ;;
  tsan) opts=(-DCMAKE_BUILD_TYPE=Debug -DPYAGENT_TSAN=ON -DCMAKE_C_COMPILER=clang) ;;
  *) echo "build.sh: unknown flavour '$flavour' (release, asan, tsan)" >&2; exit 2 ;;
esac
cmake -S . -B "build/$flavour" "${opts[@]}" >/dev/null
cmake --build "build/$flavour" -j "$(nproc)" -- --no-print-directory >"build/$flavour.log" 2>&1 || {
  cat "build/$flavour.log" >&2
  echo "build.sh: the $flavour build failed" >&2
  exit 1
}
