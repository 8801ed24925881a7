#!/usr/bin/env bash
# Prints a directory holding protobuf-c's runtime source (protobuf-c/protobuf-c.c and .h),
# unpacked once from Debian 12's own source package:
#   scripts/protobuf-c.sh      -> ~/.cache/pyagent/protobuf-c-<version>-src
# Debian's libprotobuf-c.a is not position-independent, so it cannot go into libpyagent.so,
# and its shared library would be a dependency at load time. The runtime is one C file: the
# build compiles it with -fPIC into a static library of its own (proto/CMakeLists.txt), for
# the code protoc-c (protobuf-c-compiler, the same version) generates from proto/.
# CMake runs this at configure time.
set -euo pipefail

version=1.4.1-1 # Debian 12's protobuf-c source package (libprotobuf-c-dev 1.4.1-1+b1)
cache=${PYAGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pyagent}
dir=$cache/protobuf-c-$version-src
say() { echo "protobuf-c.sh: $*" >&2; }

if [ -f "$dir/protobuf-c/protobuf-c.c" ]; then
  echo "$dir"
  exit 0
fi
mkdir -p "$cache"
exec 9>"$cache/protobuf-c.lock"
flock 9 # one fetch at a time on a shared machine; the others then find it done
if [ -f "$dir/protobuf-c/protobuf-c.c" ]; then
  echo "$dir"
  exit 0
fi
work=$(mktemp -d "$cache/protobuf-c-fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "unpacking protobuf-c $version's source into $dir"
"$(dirname "$0")/debsrc.sh" protobuf-c "$version" "$work"
[ -f "$work/src/protobuf-c/protobuf-c.c" ] || { say "the source has no protobuf-c/protobuf-c.c"; exit 1; }
mkdir -p "$dir.tmp/protobuf-c"
cp "$work/src/protobuf-c/protobuf-c.c" "$work/src/protobuf-c/protobuf-c.h" "$dir.tmp/protobuf-c/"
cp "$work/src/LICENSE" "$dir.tmp/" 2>/dev/null || true
rm -rf "$dir"
mv "$dir.tmp" "$dir"
echo "$dir"
