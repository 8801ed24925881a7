#!/usr/bin/env bash
# Installs the Debian packages that building and testing pyagent needs.
# As root it runs apt-get; otherwise it prints the exact line to run.
#   scripts/deps.sh            build
#   scripts/deps.sh --test     build + tests
#   scripts/deps.sh --bench    build + the real applications of bench/realapps (issue 16)
set -euo pipefail

# tmux runs `pyagent top` in a terminal, util-linux's setpriv and unshare run the processes
# `pyagent dump` is refused or must reach (tests/agent/test_agent.py, dump_*, top_in_tmux).
# libunwind is built from Debian's source package (scripts/libunwind.sh: dpkg-dev unpacks
# it); cmocka is needed by the build's unit-test targets; libdeflate compresses the
# collector's stored profiles (docs/architecture.md). The -dev packages at the end of the
# test list build the free-threaded CPython of the matrix (scripts/pythons.sh --ensure-ft;
# zlib and sqlite are among the build's; Debian 12 has no libmpdec-dev: the bundled one).
build_pkgs="build-essential dpkg-dev cmake pkg-config python3 zlib1g-dev libcurl4-openssl-dev
  protobuf-c-compiler libprotobuf-c-dev
  libmicrohttpd-dev libsqlite3-dev libdeflate-dev libcmocka-dev patchelf curl ca-certificates"
test_pkgs="clang libclang-rt-14-dev clang-format protobuf-compiler chromium nodejs
  npm hyperfine procps file binutils openssl wrk debootstrap libpython3.11-testsuite
  uwsgi-core uwsgi-plugin-python3 gunicorn python3-flask python3-uvicorn python3-fastapi apache2
  libapache2-mod-wsgi-py3
  python3-celery python3-redis redis-server golang-go golang-github-google-pprof-dev
  tmux util-linux
  libffi-dev libssl-dev libbz2-dev liblzma-dev libreadline-dev libexpat1-dev uuid-dev
  libncurses-dev"

# bench/realapps/run.py: the programs it measures (Debian's own builds), wrk to load the
# web service, and perf for the handler's profile (docs/architecture.md).
bench_pkgs="gunicorn python3-flask wrk python3-sphinx mypy black python3-numpy python3-pandas
  linux-perf"

want="$build_pkgs"
case "${1:-}" in
  --test) want="$build_pkgs $test_pkgs" ;;
  --bench) want="$build_pkgs $bench_pkgs" ;;
esac

missing=""
for p in $want; do
  # Node.js may come from elsewhere than Debian (nodesource bundles npm, and Debian's npm
  # package then conflicts with it): working commands are enough.
  case "$p" in
    nodejs) command -v node >/dev/null && continue ;;
    npm) command -v npm >/dev/null && continue ;;
  esac
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" = 0 ]; then
  echo "deps: installing$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
else
  echo "deps: missing Debian packages; as root, run: apt-get update && apt-get install -y --no-install-recommends$missing" >&2
  exit 1
fi
