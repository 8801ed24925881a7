#!/usr/bin/env bash
# Builds the libunwind that libpyagent.so links in statically, and prints its prefix.
#   scripts/libunwind.sh        -> ~/.cache/pyagent/libunwind-<version>-pic-nb (built once)
# Debian's libunwind-dev ships a static archive that is not position-independent (and its
# shared library pulls liblzma and libgcc_s into every profiled process), so the same source
# package Debian builds from is fetched with `apt-get source` and built with -fPIC, static
# only, without the LZMA/zlib mini-debuginfo readers and without the ptrace, coredump and
# setjmp parts, and without blocking signals around its caches (--disable-block-signals):
# Debian's build calls rt_sigprocmask about 100 times per unwind, half of a native sample's
# cost (docs/architecture.md, "Where the handler's time goes"); this libunwind is private to
# libpyagent.so and unwinds only inside our SIGPROF handler, where SIGPROF is blocked, with a
# per-thread cache (agent/native.c), so nothing it guards can be re-entered. The deb-src lines are derived from this machine's own apt sources, in a
# private apt state under the cache: the system's apt configuration is not touched.
# CMake runs this at configure time (agent/CMakeLists.txt); every machine builds the same way.
set -euo pipefail

version=1.6.2-3 # Debian 12's libunwind source package
cache=${PYAGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pyagent}
prefix=$cache/libunwind-$version-pic-nb
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

for tool in apt-get dpkg-source make cc; do
  command -v "$tool" >/dev/null || { say "needs $tool (scripts/deps.sh installs it)"; exit 1; }
done
work=$(mktemp -d "$cache/libunwind-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "building libunwind $version (position-independent, static) into $prefix"

# deb-src twins of this machine's deb sources (one-line and deb822 formats).
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial"
: >"$work/apt/sources.list"
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [ -f "$f" ] && sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' "$f" >>"$work/apt/sources.list"
done
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && sed 's/^Types:.*/Types: deb-src/' "$f" >"$work/apt/src-$(basename "$f")"
done
apt_opts=(-o "Dir::Etc::SourceList=$work/apt/sources.list" -o "Dir::Etc::SourceParts=$work/apt"
  -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
  -o "Debug::NoLocking=1" -o "APT::Sandbox::User=$(id -un)")
apt-get -qq "${apt_opts[@]}" update >"$work/apt.log" 2>&1 || {
  cat "$work/apt.log" >&2
  say "cannot read the Debian source index (network, or apt sources)"
  exit 1
}
(cd "$work" && apt-get -qq "${apt_opts[@]}" source --download-only "libunwind=$version") >>"$work/apt.log" 2>&1 || {
  cat "$work/apt.log" >&2
  say "cannot download the libunwind $version source package"
  exit 1
}
(cd "$work" && dpkg-source -q -x "libunwind_$version.dsc" src) >>"$work/apt.log" 2>&1 || {
  cat "$work/apt.log" >&2
  say "cannot unpack the libunwind source package"
  exit 1
}
(
  cd "$work/src"
  CFLAGS="-O2 -g -fPIC -fno-omit-frame-pointer" ./configure --prefix="$prefix.tmp" \
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
