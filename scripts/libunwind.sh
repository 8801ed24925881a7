#!/usr/bin/env bash
# Builds the libunwind that libpyagent.so links in statically, and prints its prefix.
#   scripts/libunwind.sh        -> ~/.cache/pyagent/libunwind-<version>-pic-nb-noplt (built once)
# Debian's libunwind-dev ships a static archive that is not position-independent (and its
# shared library pulls liblzma and libgcc_s into every profiled process), so the same source
# package Debian builds from is fetched with `apt-get source` and built with -fPIC, static
# only, without the LZMA/zlib mini-debuginfo readers and without the ptrace, coredump and
# setjmp parts (the source comes through scripts/debsrc.sh), and without blocking signals
# around its caches (--disable-block-signals): Debian's build calls rt_sigprocmask about 100
# times per unwind, half of a native sample's cost (docs/architecture.md, "Where the handler's
# time goes"); this libunwind is private to libpyagent.so and unwinds only inside our SIGPROF
# handler, with every asynchronous signal held around each call into it (agent/native.c,
# hold_signals: its step takes its register-state cache's mutex), so nothing it guards can be
# re-entered or left locked by a handler that jumps out. Compiled with -fno-plt: libunwind runs in the handler, so each
# function it calls must be bound when libpyagent.so is loaded, never by the loader's lazy
# resolver in signal context (docs/architecture.md, "Start-up cost").
# CMake runs this at configure time (agent/CMakeLists.txt); every machine builds the same way.
set -euo pipefail

version=1.6.2-3 # Debian 12's libunwind source package
cache=${PYAGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pyagent}
prefix=$cache/libunwind-$version-pic-nb-noplt
say() { echo "libunwind.sh: $*" >&2; }

if [ -f "$prefix/lib/libunwind.a" ] && [ -f "$prefix/include/libunwind.h" ]; then
  echo "$prefix"
  exit 0
fi
mkdir -p "$cache"
exec 9>"$cache/libunwind.lock"
flock 9 # one build at a time on a shared machine; the others then find it done
if [ -f "$prefix/lib/libunwind.a" ]; then
  echo "$prefix"
  exit 0
fi

for tool in make cc; do
  command -v "$tool" >/dev/null || { say "needs $tool (scripts/deps.sh installs it)"; exit 1; }
done
work=$(mktemp -d "$cache/libunwind-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "building libunwind $version (position-independent, static) into $prefix"
"$(dirname "$0")/debsrc.sh" libunwind "$version" "$work"
(
  cd "$work/src"
  CFLAGS="-O2 -g -fPIC -fno-plt -fno-omit-frame-pointer" ./configure --prefix="$prefix.tmp" \
    --disable-shared --enable-static --with-pic --disable-minidebuginfo --disable-zlibdebuginfo \
    --disable-coredump --disable-ptrace --disable-setjmp --disable-tests --disable-documentation \
    --disable-block-signals
  make -j "$(nproc)"
  make install
) >"$work/build.log" 2>&1 || {
  tail -40 "$work/build.log" >&2
  say "the libunwind build failed"
  exit 1
}
rm -rf "$prefix"
mv "$prefix.tmp" "$prefix"
echo "$prefix"
