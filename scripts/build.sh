#!/usr/bin/env bash
# Configures and builds one flavour of the tree: release (default), asan, tsan or package.
# Usage: scripts/build.sh [release|asan|tsan|package]   -> build/<flavour>
#   release, asan, tsan: the test builds (with the fault-injection hooks the tests use)
#   package: what ships (prefix /usr, no fault-injection hooks) and its Debian packages,
#            build/package/pyagent_VERSION_ARCH.deb and pyagent-collector_VERSION_ARCH.deb
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=${1:-release}
targets=()
case "$flavour" in
  release) opts=(-DCMAKE_BUILD_TYPE=Release -DPYAGENT_FAULT_INJECTION=ON) ;;
  asan) opts=(-DCMAKE_BUILD_TYPE=Debug -DPYAGENT_SANITIZE=ON -DCMAKE_C_COMPILER=clang -DPYAGENT_FAULT_INJECTION=ON) ;;
  tsan) opts=(-DCMAKE_BUILD_TYPE=Debug -DPYAGENT_TSAN=ON -DCMAKE_C_COMPILER=clang -DPYAGENT_FAULT_INJECTION=ON) ;;
  package)
    opts=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr -DPYAGENT_FAULT_INJECTION=OFF
      -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON)
    targets=(--target pyagent pyagent_core pyagent_wire pyagent-render pyagent-collector pyagent-inspect manpages)
    ;;
  *) echo "build.sh: unknown flavour '$flavour' (release, asan, tsan, package)" >&2; exit 2 ;;
esac
cmake -S . -B "build/$flavour" "${opts[@]}" >/dev/null
cmake --build "build/$flavour" -j "$(nproc)" "${targets[@]}" -- --no-print-directory >"build/$flavour.log" 2>&1 || {
  cat "build/$flavour.log" >&2
  echo "build.sh: the $flavour build failed" >&2
  exit 1
}
if [ "$flavour" = package ]; then
  rm -f build/package/*.deb
  (cd build/package && cpack -G DEB) >>"build/$flavour.log" 2>&1 || {
    cat "build/$flavour.log" >&2
    echo "build.sh: cpack failed" >&2
    exit 1
  }
fi
