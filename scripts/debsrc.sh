#!/usr/bin/env bash
# Unpacks one version of a Debian source package into a directory:
#   scripts/debsrc.sh PACKAGE VERSION DIR      -> DIR/src holds the unpacked, patched source
# The deb-src lines are derived from this machine's own apt sources, in a private apt state
# under DIR: the system's apt configuration is not touched. Used by the scripts that build
# position-independent static libraries from the sources Debian builds its own from
# (scripts/libunwind.sh, scripts/protobuf-c.sh). Needs apt-get and dpkg-source (dpkg-dev).
set -euo pipefail

pkg=$1 version=$2 work=$3
say() { echo "debsrc.sh: $*" >&2; }
for tool in apt-get dpkg-source; do
  command -v "$tool" >/dev/null || { say "needs $tool (scripts/deps.sh installs it)"; exit 1; }
done
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
(cd "$work" && apt-get -qq "${apt_opts[@]}" source --download-only "$pkg=$version") >>"$work/apt.log" 2>&1 || {
  cat "$work/apt.log" >&2
  say "cannot download the $pkg $version source package"
  exit 1
}
dsc=$(cd "$work" && ls ./*.dsc | sed -n 1p)
(cd "$work" && dpkg-source -q -x "$dsc" src) >>"$work/apt.log" 2>&1 || {
  cat "$work/apt.log" >&2
  say "cannot unpack the $pkg source package"
  exit 1
}
