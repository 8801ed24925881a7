#!/bin/sh
# pyagent: runs a program with libpyagent.so preloaded.
#   pyagent run [--rate N] [--mode cpu|wall|gil] [-o FILE] [--server URL] [--app NAME] -- COMMAND [ARGS...]
#   pyagent lib        prints the path of libpyagent.so
# Options become the PYAGENT_* environment variables (docs/configuration.md); the library is
# found next to this script (../lib) or in the directories it was installed to.
set -eu

usage() {
  echo "usage: pyagent run [--rate N] [--mode cpu|wall|gil] [-o FILE] [--server URL] [--app NAME] -- COMMAND [ARGS...]" >&2
  echo "       pyagent lib" >&2
  exit 2
}

find_lib() {
  here=$(dirname "$(readlink -f "$0")")
  for d in "$here/../lib" "$here/../lib/pyagent" "@CMAKE_INSTALL_PREFIX@/lib"; do
    if [ -f "$d/libpyagent.so" ]; then
      readlink -f "$d/libpyagent.so"
      return 0
    fi
  done
  echo "pyagent: cannot find libpyagent.so next to $0" >&2
  exit 1
}

[ $# -ge 1 ] || usage
cmd=$1
shift
case "$cmd" in
  lib) find_lib; exit 0 ;;
  run) ;;
  *) usage ;;
esac

need() { [ $# -ge 2 ] || { echo "pyagent: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) need "$@"; export PYAGENT_RATE="$2"; shift 2 ;;
    --mode) need "$@"; export PYAGENT_MODE="$2"; shift 2 ;;
    -o|--output) need "$@"; export PYAGENT_OUTPUT="$2"; shift 2 ;;
    --server) need "$@"; export PYAGENT_SERVER="$2"; shift 2 ;;
    --app) need "$@"; export PYAGENT_APP_NAME="$2"; shift 2 ;;
    --) shift; break ;;
    -*) echo "pyagent: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage
lib=$(find_lib)
export LD_PRELOAD="$lib${LD_PRELOAD:+ $LD_PRELOAD}"
exec "$@"
