#!/bin/sh
# in_root.sh: the Debian packages on a fresh Debian 12 minbase root. Run inside the root by
# tests/packaging/fresh_root.sh, with the .debs, this script and examples/shop.py in /debs.
#   1. apt-get install python3 ./pyagent_*.deb brings nothing beyond glibc for the agent
#      (no libunwind, no libcurl: it is only Recommended). zlib, liblzma and libgcc_s are on
#      every Debian root (dpkg needs them); that the agent does not load them is checked by
#      packaging.library.nothing_else_mapped.
#   2. the README's one-liner works exactly as written, the launcher finds the library,
#      pyagent --version names the version and commit, the manual pages are there, and
#      python3 imports pyagent.py (labels) with no pip: a no-op alone, labels under the agent
#   3. asked to upload without libcurl: one line says so, the local profile is written
#   4. apt-get install ./pyagent-collector_*.deb creates the service user; the collector,
#      started as that user, stores what an agent uploads; the unit names the right binary
set -eu
export DEBIAN_FRONTEND=noninteractive
fail() {
  echo "FAIL: $*"
  exit 1
}
installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }
total() { grep -v '^#' "$1" | awk '{s += $NF} END {print s + 0}'; }

apt-get update -qq
apt-get install -y -qq --no-install-recommends python3 /debs/pyagent_*.deb >/tmp/apt.log 2>&1 ||
  { cat /tmp/apt.log; fail "apt-get install ./pyagent_*.deb"; }
for p in libunwind8 libcurl4 libcurl3-gnutls; do
  if installed "$p"; then fail "installing pyagent brought $p"; fi
done
echo "agent package installed; no libunwind or libcurl on this root"

mkdir -p /work && cd /work
cp /debs/shop.py app.py
# The README's opening line, exactly (a bare name in LD_PRELOAD: the loader's search path).
LD_PRELOAD=libpyagent.so PYAGENT_RATE=250 python3 app.py 2 >out.txt 2>err.txt || fail "the one-liner: $(cat err.txt)"
[ ! -s err.txt ] || fail "the one-liner printed: $(cat err.txt)"
set -- pyagent.*.folded
[ -f "$1" ] || fail "the one-liner wrote no profile: $(ls)"
[ "$(total "$1")" -gt 0 ] || fail "the profile is empty"
grep -q '^# pyagent .*rate=250' "$1" || fail "the profile header: $(sed -n 1p "$1")"
echo "README one-liner: $(total "$1") samples in $1"
rm -f pyagent.*.folded

pyagent run --rate 100 -o launched.%p.folded -- python3 app.py 1 >/dev/null || fail "pyagent run"
set -- launched.*.folded
[ -f "$1" ] || fail "pyagent run wrote no profile"
pyagent-render top "$1" >top.txt || fail "pyagent-render top"
grep -q 'samples' top.txt || fail "pyagent-render top printed: $(cat top.txt)"
pyagent --version >version.txt || fail "pyagent --version exit status"
version=$(cat version.txt)
grep -Eq '^pyagent [0-9]+\.[0-9]+\.[0-9]+ \([0-9a-f]{7,}\)$' version.txt || fail "pyagent --version: $version"
pyagent --help >help.txt || fail "pyagent --help exit status"
for m in pyagent pyagent-render; do
  [ -f "/usr/share/man/man1/$m.1" ] || fail "no manual page $m(1)"
done
echo "launcher, renderer, $version, manual pages: ok"

# pyagent.py (labels) from the package, found by Debian's python3 with no pip: a no-op without
# the agent, labelled samples with it.
python3 -c 'import pyagent; assert not pyagent.enabled' 2>err.txt || fail "import pyagent without the agent: $(cat err.txt)"
cat >labels.py <<'PY'
import time
import pyagent
assert pyagent.enabled
with pyagent.labels(endpoint="/deb"):
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
PY
LD_PRELOAD=libpyagent.so PYAGENT_OUTPUT=/work/labels.folded python3 labels.py 2>err.txt || fail "labels.py: $(cat err.txt)"
grep -q '^thread:MainThread;labels:endpoint=/deb;' labels.folded || fail "no labelled samples: $(grep -v '^#' labels.folded)"
echo "pyagent.py: imported without pip, samples labelled"

# Uploads asked for, libcurl absent: one line, and the local profile still written.
PYAGENT_SERVER=http://127.0.0.1:9 PYAGENT_OUTPUT=/work/local.folded LD_PRELOAD=libpyagent.so \
  python3 app.py 1 >/dev/null 2>err.txt || fail "without libcurl the program failed: $(cat err.txt)"
[ "$(grep -c . err.txt)" = 1 ] && grep -q 'libcurl' err.txt || fail "without libcurl, stderr was: $(cat err.txt)"
[ "$(total local.folded)" -gt 0 ] || fail "without libcurl no local profile"
echo "without libcurl: $(cat err.txt)"

apt-get install -y -qq --no-install-recommends /debs/pyagent-collector_*.deb libcurl4 >/tmp/apt.log 2>&1 ||
  { cat /tmp/apt.log; fail "apt-get install ./pyagent-collector_*.deb"; }
getent passwd pyagent-collector >/dev/null || fail "no pyagent-collector user"
[ "$(stat -c %U /var/lib/pyagent-collector)" = pyagent-collector ] || fail "state directory not the user's"
unit=/usr/lib/systemd/system/pyagent-collector.service
grep -q '^User=pyagent-collector$' "$unit" || fail "the unit's user"
exe=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit")
[ -x "$exe" ] || fail "the unit runs $exe, which is not there"
[ -f /usr/share/man/man1/pyagent-collector.1 ] || fail "no manual page pyagent-collector(1)"

port=$((20000 + $$ % 20000))
db=/var/lib/pyagent-collector/profiles.db
setpriv --reuid=pyagent-collector --regid=pyagent-collector --init-groups \
  pyagent-collector --listen "127.0.0.1:$port" --db "$db" >/tmp/collector.log 2>&1 &
collector=$!
trap 'kill $collector 2>/dev/null || true' EXIT
get() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1"; }
i=0
until get "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; do
  i=$((i + 1))
  [ $i -lt 100 ] || fail "the collector did not come up: $(cat /tmp/collector.log)"
  sleep 0.1
done
[ "$(awk '/^Uid:/ {print $2}' /proc/$collector/status)" = "$(id -u pyagent-collector)" ] || fail "collector not running as its user"
PYAGENT_SERVER="http://127.0.0.1:$port" PYAGENT_APP_NAME=app PYAGENT_OUTPUT=/work/up.folded \
  LD_PRELOAD=libpyagent.so python3 app.py 2 >/dev/null 2>err.txt || fail "uploading run: $(cat err.txt)"
get "http://127.0.0.1:$port/render?query=app.cpu&from=$(($(date +%s) - 3600))&until=now&format=folded" >served.folded ||
  fail "the collector serves nothing: $(cat /tmp/collector.log)"
[ "$(total served.folded)" = "$(total up.folded)" ] && [ "$(total up.folded)" -gt 0 ] ||
  fail "local file $(total up.folded) samples, collector $(total served.folded)"
[ "$(stat -c %U "$db")" = pyagent-collector ] || fail "the database is not the user's"
echo "collector as user pyagent-collector: $(total served.folded) samples stored and served"
echo "packages: all checks passed"
