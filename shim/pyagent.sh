#!/bin/sh
# pyagent: runs a program with libpyagent.so preloaded (see usage below).
# Options become the PYAGENT_* environment variables (docs/configuration.md); the library is
# found next to this script (../lib) or in the directory it was installed to.
# Exit status: the program's own; 2 for a usage error (one line on stderr); 1 when the
# library cannot be found.
set -eu

usage() {
  cat <<'EOF'
NAME
    pyagent - run a Python program under the pyagent CPU profiler

SYNOPSIS
    pyagent run [--rate N] [--mode cpu|wall|gil] [-o FILE] [--server URL] [--app NAME] -- COMMAND [ARGS...]
    pyagent dump [--async] PID
    pyagent top PID
    pyagent lib
    pyagent --help | --version

DESCRIPTION
    run      executes COMMAND with libpyagent.so in LD_PRELOAD (any preload already there is
             kept); every CPython process it starts is profiled.
    dump     prints every thread's Python stack of process PID, which runs under the agent,
             now: its name, what it waits in, and its frames, most recent call last, with
             file, line and source line, like a traceback. No ptrace rights are needed: the
             agent inside the process answers, to the same user or root only, while the
             program is inside a C call or deadlocked on the GIL too. --async adds every
             asyncio task (3.11+): whether it runs, and a waiting task's await chain down to
             what it waits on (<await sleep>, <await lock>, <await Future>, <ready>).
    top      a live view of process PID over the same channel: functions by self and total
             share of the last 10 seconds, refreshed every second, all threads or one.
             Keys: s sort by self, t by total, n next thread, a all threads, i count waiting
             threads too, q quit. A program running asyncio tasks gets a table of them
             below: the share of the window each ran and waited, and its commonest wait.
    lib      prints the path of libpyagent.so.

OPTIONS
    --rate N         samples per CPU-second per thread, 1 to 10000 (PYAGENT_RATE, default 100)
    --mode M         cpu (default), wall or gil (PYAGENT_MODE)
    -o, --output F   profile file; %p becomes the process id (PYAGENT_OUTPUT)
    --server URL     upload to a pyagent-collector or Pyroscope server (PYAGENT_SERVER)
    --app NAME       application name at the server (PYAGENT_APP_NAME)

    Every other setting is an environment variable: see docs/configuration.md.

    dump and top reach the agent through an abstract Unix socket its agent thread listens on
    (PYAGENT_DUMP: auto, the default, listens whenever the process has a thread of ours: it
    starts threads or uploads; 1 in every profiled process; 0 never). A process in another
    network namespace is reached as root; otherwise run pyagent under `nsenter -t PID -n`.

EXIT STATUS
    run: COMMAND's own; 2 for a usage error; 1 when libpyagent.so cannot be found.
    dump, top: 0 when the process answered; 1 when it did not (no such process, no agent,
    another user's; one line on stderr); 2 for a usage error.
EOF
}

bad() { # one clear line, exit 2
  echo "pyagent: $*; see pyagent --help" >&2
  exit 2
}

find_lib() {
  here=$(dirname "$(readlink -f "$0")")
  for d in "$here/../lib" "$here/../lib/pyagent" "@CMAKE_INSTALL_FULL_LIBDIR@"; do
    if [ -f "$d/libpyagent.so" ]; then
      readlink -f "$d/libpyagent.so"
      return 0
    fi
  done
  echo "pyagent: cannot find libpyagent.so next to $0 or in @CMAKE_INSTALL_FULL_LIBDIR@" >&2
  exit 1
}

[ $# -ge 1 ] || bad "no command given"
cmd=$1
shift
case "$cmd" in
  -h | --help | help) usage; exit 0 ;;
  --version) echo "pyagent @PROJECT_VERSION@ (@PYAGENT_GIT_COMMIT@)"; exit 0 ;;
  lib) find_lib; exit 0 ;;
  dump | top)
    here=$(dirname "$(readlink -f "$0")")
    for tool in "$here/pyagent-inspect" "@CMAKE_INSTALL_FULL_LIBEXECDIR@/pyagent/pyagent-inspect"; do
      [ -x "$tool" ] && exec "$tool" "$cmd" "$@"
    done
    echo "pyagent: cannot find pyagent-inspect next to $0 or in @CMAKE_INSTALL_FULL_LIBEXECDIR@/pyagent" >&2
    exit 1
    ;;
  run) ;;
  *) bad "unknown command '$cmd' (run, dump, top, lib)" ;;
esac

need() { [ $# -ge 2 ] || bad "$1 needs a value"; }
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --rate)
      need "$@"
      case "$2" in
        '' | *[!0-9]*) bad "--rate '$2' is not a whole number from 1 to 10000" ;;
      esac
      # Leading zeros and huge values: compare the digits, not a number the shell may overflow.
      r=$2
      while [ "${r#0}" != "$r" ]; do r=${r#0}; done
      if [ -z "$r" ] || [ ${#r} -gt 5 ] || [ "$r" -gt 10000 ]; then
        bad "--rate '$2' is not a whole number from 1 to 10000"
      fi
      export PYAGENT_RATE="$r"
      shift 2
      ;;
    --mode)
      need "$@"
      case "$2" in
        cpu | wall | gil) export PYAGENT_MODE="$2" ;;
        *) bad "--mode '$2' is not cpu, wall or gil" ;;
      esac
      shift 2
      ;;
    -o | --output) need "$@"; [ -n "$2" ] || bad "$1 needs a file name"; export PYAGENT_OUTPUT="$2"; shift 2 ;;
    --server) need "$@"; [ -n "$2" ] || bad "--server needs a URL"; export PYAGENT_SERVER="$2"; shift 2 ;;
    --app) need "$@"; [ -n "$2" ] || bad "--app needs a name"; export PYAGENT_APP_NAME="$2"; shift 2 ;;
    --) shift; break ;;
    -*) bad "unknown option '$1'" ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || bad "no program to run after the options"
lib=$(find_lib)
export LD_PRELOAD="$lib${LD_PRELOAD:+ $LD_PRELOAD}"
exec "$@"
