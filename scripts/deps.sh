#!/usr/bin/env bash
# Installs the Debian packages that building and testing pyagent needs.
# As root it runs apt-get; otherwise it prints the exact line to run.
set -euo pipefail

build_pkgs="build-essential cmake pkg-config python3 zlib1g-dev libcurl4-openssl-dev
  libunwind-dev libmicrohttpd-dev libsqlite3-dev patchelf curl"
test_pkgs="libcmocka-dev clang libclang-rt-14-dev clang-format protobuf-compiler chromium nodejs
  npm hyperfine procps file binutils ca-certificates openssl wrk"

want="$build_pkgs"
[ "${1:-}" = "--test" ] && want="$build_pkgs $test_pkgs"

missing=""
for p in $want; do
  # Node.js may come from elsewhere than Debian (nodesource bundles npm, and Debian's npm
  # package then conflicts with it): working commands are enough.
  case "$p" in
    nodejs) command -v node >/dev/null && continue ;;
    npm) command -v npm >/dev/null && continue ;;
  esac
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" = 0 ]; then
  echo "deps: installing$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
else
  echo "deps: missing Debian packages; run as root:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends$missing" >&2
  exit 1
fi
