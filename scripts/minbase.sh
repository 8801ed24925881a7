#!/usr/bin/env bash
# Fresh Debian 12 roots for the tests that must run on "a machine with nothing on it".
#   scripts/minbase.sh new DIR            DIR becomes a fresh `debootstrap --variant=minbase
#                                         bookworm` root (from a cached tarball, built once)
#   scripts/minbase.sh run DIR CMD...     runs CMD as root inside DIR (chroot), with /proc and
#                                         /dev mounted and apt's downloads shared
#   scripts/minbase.sh drop DIR           unmounts whatever is left and removes DIR
# The root gets this machine's apt sources (/etc/apt/sources.list*). Downloaded .debs and
# package lists are kept in ~/.cache/pyagent/minbase-apt and bind-mounted into each root, so
# a run installs from the cache; the root itself starts empty every time. Root only.
set -euo pipefail

cache=${PYAGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pyagent}
tarball=$cache/minbase-bookworm.tar
say() { echo "minbase.sh: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "needs root (debootstrap, chroot, mount)"; exit 1; }

mirror() { # the Debian mirror this machine's apt uses; deb.debian.org when none is found
  local m
  m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | sed -nE 's,^.*(https?://[^ ]+/debian)/?( .*)?$,\1,p' | sed -n 1p)
  echo "${m:-http://deb.debian.org/debian}"
}

build_tarball() {
  command -v debootstrap >/dev/null || { say "needs debootstrap (scripts/deps.sh --test installs it)"; exit 1; }
  mkdir -p "$cache"
  exec 8>"$cache/minbase.lock"
  flock 8
  [ -f "$tarball" ] && return 0
  local tmp
  tmp=$(mktemp -d "$cache/minbase-build.XXXXXX")
  say "building the cached minbase root (once): debootstrap --variant=minbase bookworm"
  if ! debootstrap --variant=minbase bookworm "$tmp/root" "$(mirror)" >"$tmp/log" 2>&1; then
    tail -20 "$tmp/log" >&2
    rm -rf "$tmp"
    say "debootstrap failed"
    exit 1
  fi
  rm -f "$tmp/root/etc/apt/sources.list"
  cp -a /etc/apt/sources.list* "$tmp/root/etc/apt/" 2>/dev/null || true
  rm -rf "$tmp/root/var/cache/apt/archives/"*.deb "$tmp/root/var/lib/apt/lists/"*
  tar -C "$tmp/root" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  rm -rf "$tmp"
}

mounts_under() { # mount points under DIR, deepest first
  local dir
  dir=$(readlink -f "$1")
  awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r
}
unmount_all() {
  mounts_under "$1" | while read -r m; do umount -l "$m" 2>/dev/null || true; done
}
remove_root() { # never while /dev or the apt cache is still mounted inside
  [ -e "$1" ] || return 0
  unmount_all "$1"
  if [ -n "$(mounts_under "$1")" ]; then
    say "cannot unmount everything under $1; not removing it"
    exit 1
  fi
  rm -rf --one-file-system "$1"
}

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { say "usage: minbase.sh new|run|drop DIR [CMD...]"; exit 2; }
shift 2
case "$cmd" in
  new)
    build_tarball
    remove_root "$dir"
    mkdir -p "$dir"
    tar -C "$dir" -xf "$tarball"
    # A throw-away root: dpkg need not fsync every file it unpacks (as Debian's container
    # images do), which halves the time packages take to install on a loaded machine.
    echo force-unsafe-io >"$dir/etc/dpkg/dpkg.cfg.d/unsafe-io"
    ;;
  run)
    [ -x "$dir/bin/sh" ] || { say "$dir is not a root (minbase.sh new $dir first)"; exit 2; }
    mkdir -p "$cache/minbase-apt/archives/partial" "$cache/minbase-apt/lists/partial"
    # apt in two roots sharing one download cache would fail on each other's locks: runs on
    # one machine take turns.
    exec 7>"$cache/minbase-apt.lock"
    flock 7
    trap 'unmount_all "$dir"' EXIT
    mount -t proc proc "$dir/proc"
    mount --rbind /dev "$dir/dev"
    mount --make-rslave "$dir/dev"
    mount --bind "$cache/minbase-apt/archives" "$dir/var/cache/apt/archives"
    mount --bind "$cache/minbase-apt/lists" "$dir/var/lib/apt/lists"
    cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
    set +e
    chroot "$dir" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
    rc=$?
    set -e
    exit $rc
    ;;
  drop) remove_root "$dir" ;;
  *) say "usage: minbase.sh new|run|drop DIR [CMD...]"; exit 2 ;;
esac
