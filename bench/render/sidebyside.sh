#!/usr/bin/env bash
# sidebyside.sh [BUILD_DIR] - the same programs profiled by CPython 3.15's own profiler
# (python3.15 -m profiling.sampling) and by pyagent, both tools' flamegraph and heatmap
# rendered, and Chromium screenshots of each into docs/img/side-*.png (docs/reports.md).
#
# Programs: examples/shop.py (threads, json, re, sqlite, zlib), an asyncio service
# (bench/render/asyncio_service.py) and a numpy job (bench/render/numpy_job.py). CPython's
# profiler only profiles a target of its own version, so everything runs on sid's 3.15
# (build/pythons.txt); numpy for 3.15 comes from Debian sid's python3-numpy, unpacked into
# the cache beside sid's interpreters (no package is installed on the machine).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$repo/build/release}" && pwd)
out=${SIDE_DIR:-$build/sidebyside}
img=$repo/docs/img
seconds=${SECONDS_PER_RUN:-6}
py=$(awk '$1 == "sid-3.15" {print $2}' "$repo/build/pythons.txt")
[ -x "$py" ] || { echo "sidebyside.sh: no sid-3.15 in build/pythons.txt (scripts/pythons.sh --ensure)" >&2; exit 2; }
mkdir -p "$out" "$img"
render=$build/bin/pyagent-render

# numpy for sid's 3.15: unpacked once from sid's archive with the apt setup pythons.sh made.
numpy_root=${PYAGENT_CACHE:-$HOME/.cache/pyagent}/sid-numpy
if [ ! -d "$numpy_root/usr/lib/python3/dist-packages/numpy" ]; then
    sid=${PYAGENT_CACHE:-$HOME/.cache/pyagent}/sid/apt
    opts=(-o "Dir::Etc::SourceList=$sid/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$sid/lists" -o "Dir::Cache=$sid/cache")
    (cd "$sid/cache/archives" && apt-get "${opts[@]}" download python3-numpy libblas3 liblapack3 \
        libgfortran5 >/dev/null 2>&1) || echo "sidebyside.sh: cannot fetch sid's numpy; the numpy job is skipped" >&2
    mkdir -p "$numpy_root"
    for deb in "$sid"/cache/archives/{python3-numpy,libblas3,liblapack3,libgfortran5}_*.deb; do
        [ -e "$deb" ] && dpkg -x "$deb" "$numpy_root"
    done
fi
numpy_env=(PYTHONPATH="$numpy_root/usr/lib/python3/dist-packages"
    LD_LIBRARY_PATH="$numpy_root/usr/lib/x86_64-linux-gnu:$numpy_root/usr/lib/x86_64-linux-gnu/blas:$numpy_root/usr/lib/x86_64-linux-gnu/lapack")

programs=("shop:$repo/examples/shop.py $seconds" "asyncio:$here/asyncio_service.py $seconds"
    "numpy:$here/numpy_job.py $seconds")
for p in "${programs[@]}"; do
    name=${p%%:*}
    cmd=${p#*:}
    if [ "$name" = numpy ] && ! env "${numpy_env[@]}" "$py" -c 'import numpy' 2>/dev/null; then
        echo "numpy: skipped (numpy does not import on sid's 3.15)"
        continue
    fi
    # shellcheck disable=SC2086 # cmd is a script and its argument
    {
        env "${numpy_env[@]}" "$py" -m profiling.sampling run --flamegraph -a -r 1khz \
            -o "$out/$name.cpython.html" $cmd
        env "${numpy_env[@]}" "$py" -m profiling.sampling run --heatmap -a -r 1khz \
            -o "$out/$name.cpython-heatmap" $cmd
        env "${numpy_env[@]}" PYAGENT_OPCODES=1 LD_PRELOAD="$build/lib/libpyagent.so" \
            PYAGENT_RATE=1000 PYAGENT_OUTPUT="$out/$name.pyagent.folded" "$py" $cmd
    } >"$out/$name.log" 2>&1 || { echo "$name: a run failed, see $out/$name.log" >&2; exit 1; }
    "$render" flamegraph "$out/$name.pyagent.folded" -o "$out/$name.pyagent.html" \
        --title "pyagent: $name"
    rm -rf "$out/$name.pyagent-heatmap"
    "$render" heatmap "$out/$name.pyagent.folded" -o "$out/$name.pyagent-heatmap"
    echo "$name: profiled by both"
done
node "$here/sidebyside.mjs" "$out" "$img"
