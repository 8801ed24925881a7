#!/usr/bin/env bash
# fresh_root.sh: the checks that need a machine with nothing on it, each in a fresh Debian 12
# minbase root (scripts/minbase.sh: cached debootstrap tarball, apt downloads shared).
#   fresh_root.sh demo       the tracked tree, copied in: `./quickstart demo` as a user says
#                            in one line what to do; as root it installs what it needs,
#                            builds, profiles, and every served report is checked
#   fresh_root.sh packages DEB_DIR   the .debs installed with apt-get (tests/packaging/in_root.sh)
#   fresh_root.sh image DEB_DIR      deploy/Dockerfile's runtime stage, run as a chroot
# Ends with "N passed, N failed" and the time the stage took. Root only.
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-}
t0=$SECONDS
root=${TMPDIR:-/tmp}/pyagent-fresh-$what.$$
trap 'scripts/minbase.sh drop "$root"' EXIT

result() { # result RC: the summary line test.sh counts, and the time taken (root removed)
  scripts/minbase.sh drop "$root"
  trap - EXIT
  echo "fresh root ($what): $((SECONDS - t0)) s"
  if [ "$1" = 0 ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
  exit "$1"
}

scripts/minbase.sh new "$root" || result 1
case "$what" in
  demo)
    mkdir -p "$root/src"
    git ls-files -z | tar --null -T - -cf - | tar -C "$root/src" -xf - || result 1
    # As a user, before anything is installed: one line naming what to run, and failure.
    scripts/minbase.sh run "$root" setpriv --reuid=65534 --regid=65534 --clear-groups \
      sh -c 'cd /src && ./quickstart demo' >"$root/user.out" 2>"$root/user.err"
    rc=$?
    if [ "$rc" = 0 ] || [ "$(grep -c . "$root/user.err")" != 1 ] || ! grep -q 'as root' "$root/user.err"; then
      echo "as a user, ./quickstart demo exited $rc and said:"
      cat "$root/user.out" "$root/user.err"
      result 1
    fi
    echo "as a user: $(cat "$root/user.err")"
    port=$((20000 + RANDOM % 20000))
    scripts/minbase.sh run "$root" sh -c "cd /src && PYAGENT_DEMO_STOP=1 PYAGENT_DEMO_SECONDS=4 \
      PYAGENT_DEMO_PORT=$port ./quickstart demo" >"$root/demo.log" 2>&1
    rc=$?
    if [ "$rc" != 0 ]; then cat "$root/demo.log"; result 1; fi
    tail -1 "$root/demo.log"
    # cmake --install of that build (prefix /usr/local), then the README's opening line as
    # written: the loader must find the bare name (ldconfig ran).
    scripts/minbase.sh run "$root" sh -c 'cmake --install /src/build/release >/dev/null &&
      mkdir /tmp/app && cd /tmp/app && cp /src/examples/shop.py app.py &&
      LD_PRELOAD=libpyagent.so PYAGENT_RATE=250 python3 app.py 1 >/dev/null &&
      grep -q "^# pyagent .*rate=250" pyagent.*.folded' || { echo "after cmake --install, the one-liner wrote no profile"; result 1; }
    echo "cmake --install, then LD_PRELOAD=libpyagent.so PYAGENT_RATE=250 python3 app.py: profile written"
    result 0
    ;;
  packages)
    debs=${2:?fresh_root.sh packages DEB_DIR}
    mkdir -p "$root/debs"
    cp "$debs"/*.deb tests/packaging/in_root.sh examples/shop.py "$root/debs/" || result 1
    scripts/minbase.sh run "$root" sh /debs/in_root.sh
    result $?
    ;;
  image)
    # deploy/Dockerfile's runtime stage, step by step: its RUN script, then its ENTRYPOINT
    # and CMD as its USER (on a free loopback port), then an agent of this build uploads to it.
    debs=${2:?fresh_root.sh image DEB_DIR}
    mkdir -p "$root/tmp/debs"
    cp "$debs"/*.deb "$root/tmp/debs/" && cp deploy/image-setup.sh "$root/tmp/" || result 1
    scripts/minbase.sh run "$root" sh /tmp/image-setup.sh /tmp/debs || result 1
    port=$((20000 + RANDOM % 20000))
    # USER, VOLUME, and ENTRYPOINT + CMD with --listen moved to the test's port, one per line.
    python3 - deploy/Dockerfile "$port" >"$root/image.spec" <<'PY' || result 1
import json, sys
stage = open(sys.argv[1]).read().replace("\\\n", " ").split("\nFROM ")[-1]
kw = {l.split(None, 1)[0]: l.split(None, 1)[1].strip() for l in stage.splitlines()[1:] if l.strip() and not l.startswith("#")}
argv = json.loads(kw["ENTRYPOINT"]) + json.loads(kw["CMD"])
argv[argv.index("--listen") + 1] = "127.0.0.1:" + sys.argv[2]
print(kw["USER"]); print(kw["VOLUME"]); print("\n".join(argv))
PY
    user=$(sed -n 1p "$root/image.spec")
    volume=$(sed -n 2p "$root/image.spec")
    mapfile -t argv < <(sed -n '3,$p' "$root/image.spec")
    user_id=$(chroot "$root" id -u "$user") || result 1
    [ "$(stat -c %u "$root$volume")" = "$user_id" ] || { echo "the volume $volume is not $user's"; result 1; }
    scripts/minbase.sh run "$root" setpriv --reuid="$user" --regid="$user" --init-groups \
      "${argv[@]}" >"$root/collector.log" 2>&1 &
    runner=$!
    ok=0
    for _ in $(seq 100); do
      curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && { ok=1; break; }
      sleep 0.1
    done
    rc=1
    if [ "$ok" = 1 ]; then
      pid=$(pgrep -f "^${argv[0]} .*127.0.0.1:$port" | sed -n 1p)
      uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
      # An agent of this build, pointed at the image's collector.
      PYAGENT_SERVER="http://127.0.0.1:$port" PYAGENT_APP_NAME=image PYAGENT_OUTPUT="$root/local.folded" \
        LD_PRELOAD="$PWD/build/release/lib/libpyagent.so" python3 examples/shop.py 2 >/dev/null
      curl -fsS "http://127.0.0.1:$port/render?query=image.cpu&from=$(($(date +%s) - 3600))&until=now&format=folded" \
        >"$root/served.folded"
      local_n=$(grep -v '^#' "$root/local.folded" | awk '{s += $NF} END {print s + 0}')
      served_n=$(grep -v '^#' "$root/served.folded" | awk '{s += $NF} END {print s + 0}')
      db_owner=$(stat -c %u "$root$volume/profiles.db" 2>/dev/null)
      echo "image: collector runs as uid $uid ($user is $user_id), database on the volume owned by uid" \
        "$db_owner, $served_n samples served of $local_n sent"
      if [ "$uid" = "$user_id" ] && [ "$uid" != 0 ] && [ "$db_owner" = "$user_id" ] &&
        [ "$local_n" -gt 0 ] && [ "$served_n" = "$local_n" ]; then
        rc=0
      fi
      kill "$pid"
    else
      echo "the image's collector did not come up:"
      cat "$root/collector.log"
    fi
    wait "$runner"
    result $rc
    ;;
  *) echo "usage: fresh_root.sh demo | packages DEB_DIR | image DEB_DIR" >&2; exit 2 ;;
esac
