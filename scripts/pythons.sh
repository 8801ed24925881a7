#!/usr/bin/env bash
# The interpreter matrix: finds every CPython on this machine that pyagent is tested on, and
# provides the ones Debian 12 lacks (3.13, 3.14, 3.15) from Debian sid.
#
# The one idea: sid's interpreters are not installed, they are unpacked (dpkg -x) together
# with sid's own libc and libraries into one private root, and their ELF interpreter and
# RPATH are pointed into that root (patchelf). They then run on this Debian 12 host as
# ordinary binaries: no chroot, no container, no environment variable; subprocesses of
# sys.executable work, and a library built on Debian 12 can be LD_PRELOADed into them
# (sid's glibc is newer, and glibc is backward compatible).
#
#   scripts/pythons.sh --ensure [--out FILE] [--refresh]   find/provide, write the list
#   scripts/pythons.sh --ensure-ft [...]                    the same, and first build the
#                       free-threaded interpreters (--disable-gil) from sid's source packages
#                       when not cached (minutes of both CPUs; see docs/interpreters.md)
#   scripts/pythons.sh --list   [--out FILE]               print the list (ensure if missing)
#   scripts/pythons.sh --austin                            print the path of sid's austin
#   scripts/pythons.sh --ensure --testsuites                also unpack sid's regression suites
#   scripts/pythons.sh --otel-proto                        print the dist-packages of sid's
#                       python3-opentelemetry-proto and python3-protobuf, unpacked for sid's
#                       interpreters (OpenTelemetry's generated classes, for tests/uploader)
#                                                           (libpython3.X-testsuite) into its root
#   scripts/pythons.sh --aiohttp                           print the dist-packages of sid's
#                       python3-aiohttp and what it imports, unpacked for sid's interpreters
#   scripts/pythons.sh --otel                              print the dist-packages of sid's
#                       OpenTelemetry API, SDK and Flask instrumentation and what they import
#                       (pure Python; wrapt's C extension, built for sid's, falls back)
#
# The list (default build/pythons.txt), one interpreter a line, tab-separated:
#   NAME  PATH  KIND  VERSION  HEADERS
#   NAME     short unique id usable in a test name: pyenv-3.8, debian-3.11, sid-3.14-dbg
#   PATH     absolute path of the executable
#   KIND     shared (libpython is a NEEDED library) or static (linked into the executable);
#            suffix -ft for a free-threaded build
#   VERSION  sys.version_info in full, e.g. 3.14.2.final.0
#   HEADERS  directory holding that interpreter's Python.h (with internal/), or -
#
# Environment: PYAGENT_CACHE (default ~/.cache/pyagent; sid's root lives in $PYAGENT_CACHE/sid),
# PYAGENT_SID_VERSIONS (default "3.13 3.14 3.15"), PYAGENT_FT_VERSIONS (default "3.14 3.13": the
# free-threaded builds --ensure-ft tries; a cached one is listed by --ensure too). Progress goes
# to stderr, the summary to stdout. Exit status is 0 unless not a single interpreter was found. See docs/interpreters.md.
set -euo pipefail

cd "$(dirname "$0")/.."
repo=$(pwd)

mode=""
out="$repo/build/pythons.txt"
refresh=0
testsuites=0
ft=0
while [ $# -gt 0 ]; do
  case "$1" in
  --ensure | --list | --austin | --otel-proto | --aiohttp | --otel) mode=${1#--} ;;
  --ensure-ft) mode=ensure ft=1 ;;
  --out)
    [ $# -ge 2 ] || { echo "pythons: --out needs a file" >&2; exit 2; }
    out=$2
    shift
    ;;
  --refresh) refresh=1 ;;
  --testsuites) testsuites=1 ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
  *) echo "pythons: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$mode" ] || { echo "pythons: say --ensure, --list, --austin or --otel-proto (try --help)" >&2; exit 2; }
case "$out" in /*) ;; *) out="$repo/$out" ;; esac

cache=${PYAGENT_CACHE:-$HOME/.cache/pyagent}
sid=$cache/sid
root=$sid/root # the final place; patched binaries embed this path, so it must not move
sid_versions=${PYAGENT_SID_VERSIONS:-3.13 3.14 3.15}
ft_versions=${PYAGENT_FT_VERSIONS:-3.14 3.13}
# Libraries sid's interpreters (and austin) load; apt-cache depends on the interpreter
# packages names these. The dynamic loader comes with libc6.
sid_libs="libc6 libgcc-s1 libssl3t64 libexpat1 zlib1g libffi8 libzstd1 liblzma5 libbz2-1.0
  libsqlite3-0 libuuid1 libncursesw6 libtinfo6 libreadline8t64 libmpdec4 libdb5.3t64
  libgdbm6t64 media-types"
austin_libs="libunwind8 libsframe3"

log() { echo "pythons: $*" >&2; }

# ---------------------------------------------------------------------------------------
# Probing one interpreter

# probe PY: prints "VERSION<TAB>GIL_DISABLED<TAB>INCLUDE_DIR" or fails.
probe() {
  "$1" -I -c '
import sys, sysconfig
v = sys.version_info
print("%d.%d.%d.%s.%d\t%s\t%s" % (v.major, v.minor, v.micro, v.releaselevel, v.serial,
      sysconfig.get_config_var("Py_GIL_DISABLED") or 0, sysconfig.get_paths()["include"]))
' 2>/dev/null
}

# kind PATH: shared when libpython is among the executable's NEEDED libraries.
kind() {
  local needed
  if command -v readelf >/dev/null; then
    needed=$(readelf -d "$1" 2>/dev/null | grep NEEDED || true)
  else
    needed=$(ldd "$1" 2>/dev/null || true)
  fi
  case "$needed" in *libpython*) echo shared ;; *) echo static ;; esac
}

declare -A seen_path=() seen_name=()
entries=()

# add NAME PATH: probes PATH and records it, unless it is older than 3.8 or already listed.
add() {
  local name=$1 path=$2 real info version ft inc k
  real=$(realpath -e "$path" 2>/dev/null) || return 0
  [ -z "${seen_path[$real]:-}" ] || return 0
  if ! info=$(probe "$path"); then
    log "skipping $path: it does not run"
    return 0
  fi
  IFS=$'\t' read -r version ft inc <<<"$info"
  case "$version" in 3.[0-7].*) return 0 ;; 2.*) return 0 ;; esac
  seen_path[$real]=1
  k=$(kind "$real")
  [ "$ft" = 1 ] && k="$k-ft"
  [ -f "$inc/Python.h" ] || inc=-
  if [ -n "${seen_name[$name]:-}" ]; then
    local i=2
    while [ -n "${seen_name[$name-$i]:-}" ]; do i=$((i + 1)); done
    name=$name-$i
  fi
  seen_name[$name]=1
  entries+=("$name"$'\t'"$path"$'\t'"$k"$'\t'"$version"$'\t'"$inc")
}

# ---------------------------------------------------------------------------------------
# Debian sid's interpreters

# The Debian mirror this machine already uses (deb822 or one-line format), so that sid comes
# from the same host; deb.debian.org when none is configured.
debian_mirror() {
  local m
  m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
    2>/dev/null | grep -Eo 'https?://[^ ]+/debian/?( |$)' | grep -v security | sed -n 1p | tr -d ' ')
  echo "${m:-http://deb.debian.org/debian}"
}

apt_opts=()
sid_apt_setup() {
  mkdir -p "$sid/apt/lists/partial" "$sid/apt/cache/archives/partial"
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg signed=""
  [ -f "$keyring" ] && signed="[signed-by=$keyring] "
  echo "deb ${signed}$(debian_mirror) sid main" >"$sid/apt/sources.list"
  # Dir::State::status=/dev/null: this host's installed packages must not influence what
  # sid resolves, and nothing here is ever installed.
  apt_opts=(-o "Dir::Etc::SourceList=$sid/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$sid/apt/lists" -o "Dir::Cache=$sid/apt/cache"
    -o Dir::State::status=/dev/null -o APT::Get::AllowUnauthenticated=false
    -o APT::Sandbox::User=root) # the cache is root's own; _apt could not write there
}

sid_has() { # sid_has PACKAGE: sid carries PACKAGE for amd64
  apt-cache "${apt_opts[@]}" show --no-all-versions "$1" >/dev/null 2>&1
}

sid_version_of() {
  apt-cache "${apt_opts[@]}" show --no-all-versions "$1" 2>/dev/null | sed -n 's/^Version: //p' | sed -n 1p
}

need_patchelf() {
  command -v patchelf >/dev/null && return 0
  if [ "$(id -u)" = 0 ]; then
    log "installing patchelf"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends patchelf >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patchelf >/dev/null; }
  fi
  command -v patchelf >/dev/null || { log "patchelf is missing (apt-get install patchelf)"; return 1; }
}

# The stamp says what the root was built for; a run that wants the same does no network work.
stamp_key() { echo "versions=$sid_versions austin=1 format=1"; }

# sid_verify PY: the interpreter runs, finds its stdlib and extension modules, starts itself
# as a subprocess, and accepts a Debian-12-built library in LD_PRELOAD.
sid_verify() {
  local py=$1 err
  if ! err=$("$py" -c 'import sys, zlib, hashlib, ssl, sqlite3, multiprocessing, asyncio, decimal, ctypes, lzma, bz2, readline
import subprocess
out = subprocess.run([sys.executable, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True, check=True).stdout
assert out.strip() == sys.prefix, (out, sys.prefix)' 2>&1); then
    log "$py fails its self-test: $(echo "$err" | tail -1)"
    return 1
  fi
  local z
  for z in /lib/x86_64-linux-gnu/libz.so.1 /usr/lib/x86_64-linux-gnu/libz.so.1; do
    [ -e "$z" ] || continue
    if ! err=$(LD_PRELOAD=$z "$py" -c pass 2>&1) || [ -n "$err" ]; then
      log "$py does not accept LD_PRELOAD=$z: $err"
      return 1
    fi
    break
  done
  # Extension modules that cannot load are not fatal (tkinter needs Tk, which is not
  # provided) but are worth a line.
  local bad
  bad=$("$py" -c '
import importlib, importlib.machinery, os, sys
# (Not sysconfig: Debian'"'"'s patched scheme names lib/python3.N for a python3.Nt built from source.)
d = next(p for p in sys.path if p.endswith("/lib-dynload"))
bad = []
for f in sorted(os.listdir(d)):
    # The release and debug builds share this directory; each loads only its own suffix.
    if not f.endswith(tuple(s for s in importlib.machinery.EXTENSION_SUFFIXES if s != ".so")):
        continue
    m = f.split(".")[0]
    if m in ("_tkinter",) or m.startswith("_test") or m.startswith("xx"):
        continue
    try:
        importlib.import_module(m)
    except Exception as e:
        bad.append("%s (%s)" % (m, e))
print(", ".join(bad))' 2>&1 || true)
  [ -z "$bad" ] || log "$py: extension modules that do not load: $bad"
  return 0
}

# Points every absolute symlink in the root at the same path inside the root; otherwise,
# e.g. usr/lib64/ld-linux-x86-64.so.2 -> /usr/lib/..., they would resolve on the host.
sid_fix_symlinks() {
  local dir=$1 final=$2 l t
  while IFS= read -r -d '' l; do
    t=$(readlink "$l")
    case "$t" in /*) ln -sfn "$final$t" "$l" ;; esac
  done < <(find "$dir" -type l -print0)
}

sid_build() {
  need_patchelf || return 1
  sid_apt_setup
  log "sid: apt-get update ($(debian_mirror) sid main)"
  if ! apt-get "${apt_opts[@]}" -qq update >&2; then
    log "sid: apt-get update failed; no sid interpreters"
    return 1
  fi

  local pkgs="" v p status="" austin=0
  for v in $sid_versions; do
    if ! sid_has "python$v-minimal"; then
      log "sid: Debian sid no longer carries python$v (or not yet); skipping it"
      status="$status$v missing"$'\n'
      continue
    fi
    for p in "python$v-minimal" "libpython$v-minimal" "libpython$v-stdlib" "python$v" \
      "libpython$v" "libpython$v-dev"; do
      if sid_has "$p"; then pkgs="$pkgs $p"; else log "sid: $p is missing in sid"; fi
    done
    for p in "python$v-dbg" "libpython$v-dbg" "python$v-nogil" "libpython$v-nogil"; do
      if sid_has "$p"; then pkgs="$pkgs $p"; fi
    done
    status="$status$v $(sid_version_of "python$v-minimal")"$'\n'
  done
  # Versions newer than the list that sid already has are worth knowing about.
  local newest
  newest=$(apt-cache "${apt_opts[@]}" pkgnames python3. 2>/dev/null |
    sed -n 's/^python\(3\.[0-9]*\)-minimal$/\1/p' | sort -V | tail -1)
  case " $sid_versions " in *" $newest "*) ;; *) [ -z "$newest" ] || log "sid: note: sid also carries python$newest (add it to PYAGENT_SID_VERSIONS)" ;; esac
  [ -n "$pkgs" ] || { log "sid: none of $sid_versions is in sid"; return 1; }
  for p in $sid_libs; do
    if sid_has "$p"; then pkgs="$pkgs $p"; else log "sid: library package $p is not in sid"; fi
  done
  if sid_has austin; then
    pkgs="$pkgs austin"
    austin=1
    for p in $austin_libs; do sid_has "$p" && pkgs="$pkgs $p"; done
  else
    log "sid: no austin package in sid"
  fi

  # Download and unpack into scratch directories; only a complete, patched root is renamed
  # into place, so an interrupted run leaves nothing that a later run would trust.
  local dl=$sid/download.partial tmp=$sid/root.partial
  rm -rf "$dl" "$tmp"
  mkdir -p "$dl" "$tmp"
  log "sid: downloading $(echo "$pkgs" | wc -w) packages"
  # shellcheck disable=SC2086
  if ! (cd "$dl" && apt-get "${apt_opts[@]}" -qq download $pkgs >&2); then
    log "sid: apt-get download failed"
    return 1
  fi
  log "sid: unpacking into $root"
  local deb
  for deb in "$dl"/*.deb; do dpkg-deb -x "$deb" "$tmp"; done
  # The -dev packages' static libpython archives are a third of the size and of no use here.
  find "$tmp/usr/lib" -name 'libpython*.a' -delete

  local ld
  ld=$(find "$tmp/usr/lib64" "$tmp/lib64" "$tmp/usr/lib/x86_64-linux-gnu" "$tmp/lib/x86_64-linux-gnu" \
    -maxdepth 1 -type f -name 'ld-linux-x86-64.so.2' 2>/dev/null | sed -n 1p)
  [ -n "$ld" ] || { log "sid: libc6 brought no ld-linux-x86-64.so.2"; return 1; }
  ld=$root${ld#"$tmp"}
  sid_fix_symlinks "$tmp" "$root"
  local f rpath="$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu"
  for f in "$tmp"/usr/bin/*; do
    if [ ! -f "$f" ] || [ -L "$f" ]; then continue; fi
    patchelf --print-interpreter "$f" >/dev/null 2>&1 || continue # not a dynamic ELF
    patchelf --set-interpreter "$ld" --force-rpath --set-rpath "$rpath" "$f"
  done

  rm -rf "$root.old"
  [ -e "$root" ] && mv "$root" "$root.old"
  mv "$tmp" "$root"
  rm -rf "$root.old" "$dl"

  # Verify each interpreter in its final place, record the outcome in the stamp.
  local line ok="" py
  while read -r v line; do
    [ -n "$v" ] || continue
    if [ "$line" = missing ]; then ok="$ok$v missing"$'\n'; continue; fi
    py=$root/usr/bin/python$v
    if [ -x "$py" ] && sid_verify "$py"; then
      ok="$ok$v ok $line"$'\n'
      if [ -x "$root/usr/bin/python${v}d" ]; then
        if sid_verify "$root/usr/bin/python${v}d"; then ok="$ok${v}d ok $line"$'\n'; fi
      fi
      if [ -x "$root/usr/bin/python${v}t" ]; then
        if sid_verify "$root/usr/bin/python${v}t"; then ok="$ok${v}t ok $line"$'\n'; fi
      fi
    else
      ok="$ok$v broken $line"$'\n'
    fi
  done <<<"$status"
  if [ "$austin" = 1 ] && [ -x "$root/usr/bin/austin" ]; then
    if "$root/usr/bin/austin" --version >/dev/null 2>&1; then
      ok="${ok}austin ok $(sid_version_of austin)"$'\n'
    else
      log "sid: austin does not run"
    fi
  fi
  { stamp_key; printf '%s' "$ok"; } >"$root/.stamp.partial"
  mv "$root/.stamp.partial" "$root/.stamp"
}

sid_ensure() {
  mkdir -p "$sid"
  # One builder at a time; a second --ensure waits and then finds the stamp.
  exec 9>"$sid/.lock"
  flock 9
  if [ "$refresh" = 0 ] && [ -f "$root/.stamp" ] && [ "$(head -1 "$root/.stamp")" = "$(stamp_key)" ]; then
    log "sid: cached in $root"
  else
    sid_build || log "sid: could not provide sid interpreters"
  fi
  if [ "$testsuites" = 1 ]; then
    sid_testsuites || log "sid: could not provide the test suites"
  fi
  flock -u 9
}

# sid_testsuites: unpacks each sid interpreter's libpython3.X-testsuite (the `test` package,
# what `python3.X -m test` runs) into the root, at the interpreter's own version, so that
# scripts/cpython-suites.py can run CPython's regression suites on them. Cached: $root/.testsuites
# lists the versions unpacked; the root's rebuild drops it together with the suites.
# Uses the package lists the root was built from; only when they no longer name the package
# at the interpreter's version are they updated.
sid_testsuites() {
  local mark=$root/.testsuites v state ver pkgs="" want="" dl=$sid/testsuites.partial
  [ -f "$root/.stamp" ] || { log "sid: no root to add test suites to"; return 1; }
  sid_apt_setup
  while read -r v state ver; do
    case "$v" in 3.*[0-9]) ;; *) continue ;; esac
    [ "$state" = ok ] || continue
    if grep -qx "$v $ver" "$mark" 2>/dev/null; then continue; fi
    pkgs="$pkgs libpython$v-testsuite=$ver"
    want="$want$v $ver"$'\n'
  done <"$root/.stamp"
  if [ -z "$pkgs" ]; then
    log "sid: test suites cached in $root"
    return 0
  fi
  # shellcheck disable=SC2086
  sid_download "$dl" $pkgs || { log "sid: sid has moved on: rebuild the root with --ensure --refresh --testsuites"; return 1; }
  sid_fix_symlinks "$dl/x" "$root"
  cp -a "$dl/x/." "$root/"
  rm -rf "$dl"
  printf '%s' "$want" >>"$mark"
}

# sid_download DIR PKG...: downloads sid's packages (PKG or PKG=VERSION) and unpacks them all
# into DIR/x, updating the package lists once if they no longer name them.
sid_download() {
  local dl=$1 updated=0 deb
  shift
  rm -rf "$dl"
  mkdir -p "$dl"
  log "sid: downloading $*"
  while ! (cd "$dl" && apt-get "${apt_opts[@]}" -qq download "$@" >&2); do
    if [ "$updated" = 1 ]; then
      log "sid: cannot download $*"
      rm -rf "$dl"
      return 1
    fi
    log "sid: apt-get update (the package lists predate these versions)"
    apt-get "${apt_opts[@]}" -qq update >&2 || return 1
    updated=1
  done
  mkdir -p "$dl/x"
  for deb in "$dl"/*.deb; do dpkg-deb -x "$deb" "$dl/x"; done
}

# sid_packages DIR MARK PKG...: sid's packages PKG... unpacked once into $sid/DIR (apart from
# the root, whose stamp they do not change), unless $sid/DIR/MARK exists already; prints their
# dist-packages directory.
sid_packages() {
  local dir=$sid/$1 mark=$2
  shift 2
  mkdir -p "$sid"
  exec 9>"$sid/.lock"
  flock 9
  if [ ! -e "$dir/$mark" ]; then
    sid_apt_setup
    [ -d "$sid/apt/lists" ] && ls "$sid/apt/lists"/*Packages* >/dev/null 2>&1 ||
      apt-get "${apt_opts[@]}" -qq update >&2 || return 1
    sid_download "$dir.partial" "$@" || return 1
    rm -rf "$dir"
    mv "$dir.partial/x" "$dir"
    rm -rf "$dir.partial"
  fi
  flock -u 9
  echo "$dir/usr/lib/python3/dist-packages"
}

# otel_proto: sid's OpenTelemetry protocol classes and the protobuf runtime they need, pure
# Python packages for sid's interpreters.
otel_proto() {
  sid_packages otel-proto usr/lib/python3/dist-packages/opentelemetry/proto/profiles \
    python3-opentelemetry-proto python3-protobuf
}

# aiohttp: sid's aiohttp and the packages it imports (their C extensions built for sid's
# supported interpreters; elsewhere their pure-Python fallbacks run; typing_extensions for
# interpreters before 3.13), for the asyncio task cases of tests/agent.
aiohttp() {
  sid_packages aiohttp usr/lib/python3/dist-packages/typing_extensions.py python3-aiohttp \
    python3-multidict python3-yarl python3-frozenlist python3-aiosignal python3-propcache \
    python3-aiohappyeyeballs python3-attr python3-idna python3-typing-extensions
}

# otel: sid's OpenTelemetry API and SDK, and Flask's instrumentation with what it imports, for
# the span-profile cases of tests/agent (pyagent.SpanProcessor). All pure Python but wrapt,
# whose pure-Python fallback runs where its C extension was not built for the interpreter;
# typing_extensions and packaging for interpreters (sid's) that have none. Flask itself is
# Debian 12's (python3-flask), for /usr/bin/python3.11.
otel() {
  sid_packages otel usr/lib/python3/dist-packages/opentelemetry/instrumentation/flask \
    python3-opentelemetry-api python3-opentelemetry-sdk \
    python3-opentelemetry-semantic-conventions python3-opentelemetry-instrumentation \
    python3-opentelemetry-instrumentation-wsgi python3-opentelemetry-instrumentation-flask \
    python3-opentelemetry-util-http python3-wrapt python3-packaging python3-typing-extensions
}

# ---------------------------------------------------------------------------------------
# Free-threaded interpreters, built from sid's source packages
#
# sid ships no free-threaded binary package, so --ensure-ft builds one per minor version of
# $ft_versions: `apt-get source` (Debian's patches applied) through a private deb-src
# configuration beside the binary one (its own lists: the binary lists are not touched), then
# configure --disable-gil, static (no --enable-shared), make -j2, make install into a scratch
# DESTDIR that is renamed into $sid/ft-3.N only when complete and verified. The stamp
# ($sid/ft-3.N/.stamp) names the source version it was built from; a cached build costs no
# network and no compiler. The newest source version the archive serves is used (the index may
# name a version whose files the mirror no longer has).

ft_stamp_key() { echo "ft format=1"; }

ft_apt_setup() {
  local d=$sid/apt-src keyring=/usr/share/keyrings/debian-archive-keyring.gpg signed=""
  mkdir -p "$d/lists/partial" "$d/cache/archives/partial"
  [ -f "$keyring" ] && signed="[signed-by=$keyring] "
  echo "deb-src ${signed}$(debian_mirror) sid main" >"$d/sources.list"
  ft_apt_opts=(-o "Dir::Etc::SourceList=$d/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$d/lists" -o "Dir::Cache=$d/cache" -o Dir::State::status=/dev/null
    -o APT::Sandbox::User=root)
}

# ft_source V DIR: unpacks the newest downloadable python$V source into DIR/src; prints its
# version.
ft_source() {
  local v=$1 dir=$2 ver
  rm -rf "$dir"
  mkdir -p "$dir"
  for ver in $(apt-cache "${ft_apt_opts[@]}" showsrc "python$v" 2>/dev/null |
    sed -n 's/^Version: //p' | sort -rV); do
    if (cd "$dir" && apt-get "${ft_apt_opts[@]}" -qq source --download-only "python$v=$ver" \
      >"$dir/apt.log" 2>&1); then
      if (cd "$dir" && dpkg-source -q -x ./*.dsc src >>"$dir/apt.log" 2>&1); then
        echo "$ver"
        return 0
      fi
      log "ft: cannot unpack python$v $ver: $(tail -1 "$dir/apt.log")"
      return 1
    fi
    log "ft: the mirror does not serve python$v $ver's source ($(grep -m1 -o '[0-9]\{3\} .*Found' "$dir/apt.log" || tail -1 "$dir/apt.log"))"
    rm -f "$dir"/*.dsc "$dir"/*.tar.*
  done
  return 1
}

# ft_verify PY: sid_verify's checks, and the GIL is off and the build says so.
ft_verify() {
  sid_verify "$1" || return 1
  local err
  if ! err=$("$1" -c 'import sys, sysconfig
assert sysconfig.get_config_var("Py_GIL_DISABLED") == 1
assert not sys._is_gil_enabled()' 2>&1); then
    log "$1 is not free-threaded: $(echo "$err" | tail -1)"
    return 1
  fi
}

# ft_build V: builds python$V with --disable-gil into $sid/ft-$V.
ft_build() {
  local v=$1 prefix=$sid/ft-$1 work=$sid/ft-$1.build ver t0=$SECONDS
  log "ft: building python${v}t from sid's source package (make -j2; some minutes)"
  ver=$(ft_source "$v" "$work") || { log "ft: no source for python$v"; rm -rf "$work"; return 1; }
  log "ft: python$v $ver unpacked; configure"
  # A build that fails is not tried again by every run (--refresh does); its logs stay.
  echo "$ver" >"$sid/ft-$v.failed"
  # The bundled libmpdec: Debian 12 has no libmpdec-dev.
  if ! (cd "$work/src" && ./configure --disable-gil --prefix="$prefix" --with-ensurepip=no \
    --without-doc-strings --without-system-libmpdec >"$work/configure.log" 2>&1); then
    log "ft: configure failed: $(tail -3 "$work/configure.log")"
    return 1
  fi
  if ! (cd "$work/src" && make -j2 >"$work/make.log" 2>&1 &&
    make install DESTDIR="$work/dest" >"$work/install.log" 2>&1); then
    log "ft: make failed (see $work/*.log): $(tail -3 "$work/make.log")"
    return 1
  fi
  rm -rf "$prefix"
  mv "$work/dest$prefix" "$prefix"
  if ! ft_verify "$prefix/bin/python${v}t"; then
    rm -rf "$prefix"
    return 1
  fi
  { ft_stamp_key; echo "${v}t ok $ver"; } >"$prefix/.stamp"
  rm -rf "$work" "$sid/ft-$v.failed"
  log "ft: python${v}t $ver built in $((SECONDS - t0)) s"
}

ft_ensure() {
  local v
  mkdir -p "$sid"
  exec 9>"$sid/.lock"
  flock 9
  for v in $ft_versions; do
    if [ "$refresh" = 0 ] && [ "$(head -1 "$sid/ft-$v/.stamp" 2>/dev/null)" = "$(ft_stamp_key)" ]; then
      log "ft: python${v}t cached in $sid/ft-$v"
      continue
    fi
    if [ "$refresh" = 0 ] && [ -f "$sid/ft-$v.failed" ]; then
      log "ft: python${v}t did not build from $(cat "$sid/ft-$v.failed") (logs in $sid/ft-$v.build; --refresh tries again)"
      continue
    fi
    if [ -z "${ft_apt_opts+x}" ]; then
      ft_apt_setup
      apt-get "${ft_apt_opts[@]}" -qq update >&2 || { log "ft: apt-get update (deb-src) failed"; break; }
    fi
    ft_build "$v" || log "ft: could not build python${v}t"
  done
  flock -u 9
}

# ---------------------------------------------------------------------------------------
# Discovery

ensure() {
  local d v
  # pyenv builds, oldest first.
  local pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
  for d in $(printf '%s\n' "$pyenv_root"/versions/3.* | sort -V); do
    v=$(basename "$d")
    [ -x "$d/bin/python${v%.*}" ] || continue
    add "pyenv-${v%.*}" "$d/bin/python${v%.*}"
  done

  # Debian's own, then anything else called python3.N on PATH (pyenv shims excluded: they
  # are scripts that end in one of the builds above).
  for d in /usr/bin/python3.*; do
    [[ "$(basename "$d")" =~ ^python3\.[0-9]+t?$ ]] || continue
    add "debian-${d##*python}" "$d"
  done
  local IFS_save=$IFS p
  IFS=:
  for p in $PATH; do
    IFS=$IFS_save
    case "$p" in */.pyenv/* | "$pyenv_root"/*) continue ;; esac
    for d in "$p"/python3.*; do
      if ! [[ "$(basename "$d")" =~ ^python3\.[0-9]+t?$ ]] || [ ! -x "$d" ]; then continue; fi
      case "$(realpath "$d")" in "$pyenv_root"/*) continue ;; esac
      add "path-${d##*python}" "$d"
    done
  done
  IFS=$IFS_save

  sid_ensure
  [ "$ft" = 0 ] || ft_ensure
  local missing="" state rest
  if [ -f "$root/.stamp" ]; then
    while read -r v state rest; do
      case "$v" in versions=* | austin) continue ;; esac
      if [ "$state" != ok ]; then
        missing="$missing sid-$v($state)"
        continue
      fi
      case "$v" in
      *d) add "sid-${v%d}-dbg" "$root/usr/bin/python$v" ;;
      *t) add "sid-${v%t}-ft" "$root/usr/bin/python$v" ;;
      *) add "sid-$v" "$root/usr/bin/python$v" ;;
      esac
    done <"$root/.stamp"
  fi
  local built
  for v in $ft_versions; do
    if read -r built state rest < <(sed -n 2p "$sid/ft-$v/.stamp" 2>/dev/null) && [ "$state" = ok ]; then
      add "sid-$v-ft" "$sid/ft-$v/bin/python$built"
    elif [ "$ft" = 1 ]; then
      missing="$missing sid-$v-ft"
    fi
  done
  for v in $sid_versions; do
    grep -q "^$v ok" "$root/.stamp" 2>/dev/null || case "$missing" in *"sid-$v("*) ;; *) missing="$missing sid-$v" ;; esac
  done

  mkdir -p "$(dirname "$out")"
  printf '%s\n' "${entries[@]}" >"$out.partial"
  mv "$out.partial" "$out"

  echo "pythons: ${#entries[@]} interpreters in $out:"
  local e
  for e in "${entries[@]}"; do
    IFS=$'\t' read -r v p d rest <<<"$e"
    printf '  %-16s %-9s %s\n' "$v" "$d" "$p"
  done
  [ -z "$missing" ] || echo "pythons: missing:$missing"
  [ -x "$root/usr/bin/austin" ] && grep -q '^austin ok' "$root/.stamp" 2>/dev/null &&
    echo "pythons: austin: $root/usr/bin/austin"
  [ "${#entries[@]}" -gt 0 ] || { echo "pythons: no CPython found" >&2; return 1; }
}

case "$mode" in
ensure) ensure ;;
otel-proto) otel_proto ;;
aiohttp) aiohttp ;;
otel) otel ;;
list)
  [ -s "$out" ] || ensure >&2
  cat "$out"
  ;;
austin)
  [ -f "$root/.stamp" ] || ensure >&2
  grep -q '^austin ok' "$root/.stamp" 2>/dev/null || { echo "pythons: sid's austin is not available" >&2; exit 1; }
  echo "$root/usr/bin/austin"
  ;;
esac
