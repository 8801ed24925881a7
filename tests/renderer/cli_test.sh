#!/usr/bin/env bash
# cli_test.sh - integration tests of pyagent-render on real files, one case per ctest:
#   cli_test.sh PATH/TO/pyagent-render CASE
# Assertions are about behaviour (totals, exit codes, messages, escaping), not golden files.
set -uo pipefail
RENDER=$1
CASE=$2
HERE=$(cd "$(dirname "$0")" && pwd)
GEN="python3 $HERE/../../bench/render/genprofile.py"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

fail() {
    echo "FAIL [$CASE]: $*" >&2
    exit 1
}
# Sum of the counts of a folded file (ignoring # lines).
total() { grep -v '^#' "$1" | awk '{s += $NF} END {printf "%d", s}'; }
expect_exit() { # expect_exit CODE STDERR_PATTERN COMMAND...
    local code=$1 pattern=$2
    shift 2
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    [ "$rc" = "$code" ] || fail "'$*' exited $rc, expected $code: $(cat "$T/err")"
    grep -Eq -- "$pattern" "$T/err" || fail "'$*': stderr lacks /$pattern/: $(cat "$T/err")"
}
# A command's output goes to a file before grep reads it: under pipefail, `cmd | grep -q`
# fails whenever grep's early exit leaves cmd to die of SIGPIPE (141).

case $CASE in
totals)
    $GEN --stacks 3000 --samples 50000 --seed 3 -o "$T/a.folded"
    [ "$(total "$T/a.folded")" = 50000 ] || fail "generator total"
    "$RENDER" export "$T/a.folded" -o "$T/b.folded" || fail "export"
    [ "$(total "$T/b.folded")" = 50000 ] || fail "export total $(total "$T/b.folded")"
    [ "$(grep -vc '^#' "$T/b.folded")" = 3000 ] || fail "unique stacks"
    grep -q '^# pyagent 1 rate=250 mode=cpu' "$T/b.folded" || fail "metadata lost"
    "$RENDER" flamegraph "$T/a.folded" -o "$T/a.html" || fail "flamegraph"
    grep -q '"total":50000' "$T/a.html" || fail "flamegraph total"
    ;;
merge)
    $GEN --stacks 500 --samples 7000 --seed 1 -o "$T/a.folded"
    $GEN --stacks 800 --samples 9000 --seed 2 -o "$T/b.folded"
    "$RENDER" export "$T/a.folded" "$T/b.folded" "$T/a.folded" -o "$T/m.folded" || fail "merge"
    [ "$(total "$T/m.folded")" = 23000 ] || fail "merged total $(total "$T/m.folded")"
    # the same stacks twice aggregate: unique stacks of a+b, not a+b+a
    n=$(cat "$T/a.folded" "$T/b.folded" | grep -v '^#' | sed 's/ [0-9]*$//' | sort -u | wc -l)
    [ "$(grep -vc '^#' "$T/m.folded")" = "$n" ] || fail "merged unique stacks"
    ;;
dialects)
    printf 'P4242;T0:4243;/srv/app.py:<module>:40;/srv/app.py:main:31 100\nP4242;T0:4244;/srv/app.py:<module>:40 5\n' >"$T/austin.txt"
    printf 'tid:77;app.py:<module>:3;app.py:f:9 4\ntid:78;app.py:<module>:3 1\n' >"$T/cpython.txt"
    printf 'process 12:"python app.py";thread (0x7F00);<module> (app.py:3);f (app.py:9) 7\n' >"$T/pyspy.txt"
    printf 'main;a;b 5\nmain;c 2\n' >"$T/plain.folded"
    "$RENDER" export "$T/austin.txt" -o "$T/o1" || fail "austin"
    grep -qx 'thread:4243;<module> (/srv/app.py:40);main (/srv/app.py:31) 100' "$T/o1" || fail "austin frames: $(cat "$T/o1")"
    "$RENDER" export "$T/cpython.txt" -o "$T/o2" || fail "cpython"
    grep -qx 'thread:77;<module> (app.py:3);f (app.py:9) 4' "$T/o2" || fail "cpython frames: $(cat "$T/o2")"
    "$RENDER" export "$T/pyspy.txt" -o "$T/o3" || fail "py-spy"
    grep -qx 'thread:0x7F00;<module> (app.py:3);f (app.py:9) 7' "$T/o3" || fail "py-spy frames: $(cat "$T/o3")"
    "$RENDER" export "$T/austin.txt" "$T/cpython.txt" "$T/pyspy.txt" "$T/plain.folded" -o "$T/all" || fail "mixed merge"
    [ "$(total "$T/all")" = 124 ] || fail "mixed total $(total "$T/all")"
    ;;
gzip_pprof)
    $GEN --stacks 400 --samples 6000 -o "$T/a.folded"
    gzip -c "$T/a.folded" >"$T/a.folded.gz"
    "$RENDER" export "$T/a.folded.gz" -o "$T/b.folded" || fail "gzip input"
    [ "$(total "$T/b.folded")" = 6000 ] || fail "gzip total"
    "$RENDER" export "$T/a.folded" -o "$T/a.pb.gz" || fail "pprof export"
    [ "$(head -c2 "$T/a.pb.gz" | od -An -tx1 | tr -d ' ')" = 1f8b ] || fail "pprof not gzip"
    "$RENDER" export "$T/a.pb.gz" -o "$T/c.folded" || fail "pprof input"
    diff <(grep -v '^#' "$T/b.folded" | sort) <(grep -v '^#' "$T/c.folded" | sort) || fail "pprof round trip differs"
    gunzip -c "$T/a.pb.gz" >"$T/a.pb"
    "$RENDER" top "$T/a.pb" >"$T/top" || fail "plain pprof input"
    grep -q '^6000 samples' "$T/top" || fail "plain pprof total"
    cat "$T/a.folded.gz" "$T/a.folded.gz" >"$T/twice.gz"
    "$RENDER" top "$T/twice.gz" >"$T/top2" || fail "top of concatenated gzip members"
    grep -q '^12000 samples' "$T/top2" || fail "concatenated gzip members"
    ;;
malformed)
    printf 'a;b 1\na;b;c nope\n\nno_count\na;c 2\n' >"$T/bad.folded"
    expect_exit 0 'skipped 2 malformed lines \(first at line 2\)' "$RENDER" export "$T/bad.folded" -o "$T/o"
    [ "$(total "$T/o")" = 3 ] || fail "good lines lost"
    printf 'only garbage\nmore garbage\n' >"$T/garbage"
    expect_exit 1 'no valid stack in 2 lines.*first at line 1' "$RENDER" flamegraph "$T/garbage" -o "$T/g.html"
    [ ! -e "$T/g.html" ] || fail "output written for bad input"
    head -c 100 /dev/urandom >"$T/rand.gz"
    printf '\x1f\x8b\x08\x00garbage' >"$T/corrupt.gz"
    expect_exit 1 'gzip' "$RENDER" top "$T/corrupt.gz"
    printf '\x0a\x04\x08\x01\x10\x02\x12\xff\xff' >"$T/trunc.pb"
    expect_exit 1 'pprof' "$RENDER" top "$T/trunc.pb"
    ;;
empty_and_missing)
    : >"$T/empty.folded"
    expect_exit 1 'empty.folded: empty input' "$RENDER" flamegraph "$T/empty.folded" -o "$T/o.html"
    printf '# pyagent 1 rate=100\n' >"$T/header-only.folded"
    expect_exit 1 'no samples' "$RENDER" top "$T/header-only.folded"
    expect_exit 1 'cannot open .*missing.folded: No such file' "$RENDER" top "$T/missing.folded"
    mkdir "$T/dir"
    expect_exit 1 'dir' "$RENDER" top "$T/dir"
    printf 'a 1\n' >"$T/ok.folded"
    chmod 000 "$T/ok.folded"
    if [ "$(id -u)" != 0 ]; then
        expect_exit 1 'Permission denied' "$RENDER" top "$T/ok.folded"
    fi
    chmod 644 "$T/ok.folded"
    expect_exit 1 'cannot write' "$RENDER" flamegraph "$T/ok.folded" -o "$T/nodir/x.html"
    printf 'a;b 3\n' | "$RENDER" top - >"$T/top" || fail "top of stdin"
    grep -q '^3 samples' "$T/top" || fail "stdin input"
    ;;
usage)
    expect_exit 2 'usage' "$RENDER"
    expect_exit 2 "unknown command 'nope'" "$RENDER" nope x
    expect_exit 2 'no input profile' "$RENDER" top
    expect_exit 2 'required' "$RENDER" flamegraph x.folded
    expect_exit 2 'BASELINE CURRENT' "$RENDER" diff a -o x.html
    expect_exit 2 'bad --width' "$RENDER" flamegraph a -o x.svg --width 0
    "$RENDER" --help >"$T/help" || fail "--help exit status"
    grep -q 'flamegraph PROFILE' "$T/help" || fail "--help"
    printf 'a 1\n' >"$T/a"
    expect_exit 2 'bad regular expression' "$RENDER" top "$T/a" --include '('
    ;;
version)
    # The form of `pyagent --version`: the version, then the commit built from.
    "$RENDER" --version >"$T/out" 2>"$T/err" || fail "--version exited $?: $(cat "$T/err")"
    grep -Eqx 'pyagent-render [0-9]+\.[0-9]+\.[0-9]+ \(([0-9a-f]{7,}|unknown)\)' "$T/out" ||
        fail "--version printed: $(cat "$T/out")"
    ;;
escaping)
    $GEN --hostile -o "$T/evil.folded"
    "$RENDER" flamegraph "$T/evil.folded" -o "$T/e.html" || fail "html"
    [ "$(grep -o '</script' "$T/e.html" | wc -l)" = 3 ] || fail "a name closed a <script> element (the page has 3: data, sources, code)"
    grep -q '<img' "$T/e.html" && fail "markup injected into the HTML"
    grep -q 'u003c/script\\u003e\\u003cimg src=x' "$T/e.html" || fail "name not kept readable in JSON"
    grep -q "Flamegraph: evil.folded" "$T/e.html" || fail "title"
    "$RENDER" flamegraph "$T/evil.folded" -o "$T/e.svg" --title '<b>"t"</b>' || fail "svg"
    grep -q '<img\|<b>' "$T/e.svg" && fail "markup injected into the SVG"
    grep -q '&lt;/script&gt;&lt;img src=x' "$T/e.svg" || fail "svg name not escaped readably"
    grep -q '\\x00byte' "$T/e.svg" || fail "NUL not shown"
    if command -v xmllint >/dev/null; then xmllint --noout "$T/e.svg" || fail "svg not well-formed"; fi
    "$RENDER" export "$T/evil.folded" -o "$T/e.json" || fail "speedscope"
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$T/e.json" || fail "speedscope JSON invalid"
    "$RENDER" diff "$T/evil.folded" "$T/evil.folded" -o "$T/d.html" || fail "diff"
    [ "$(grep -o '</script' "$T/d.html" | wc -l)" = 3 ]  || fail "diff: name closed a script"
    "$RENDER" heatmap "$T/evil.folded" -o "$T/hm" || fail "heatmap"
    grep -rq '<img' "$T/hm" && fail "markup injected into the heatmap"
    grep -q 'evil&lt;/script&gt;.py' "$T/hm/index.html" || fail "heatmap file name not escaped readably"
    "$RENDER" top "$T/evil.folded" >"$T/top" || fail "top of evil names"
    grep -q $'\x01' "$T/top" && fail "control characters reach the terminal"
    ;;
diff_folded)
    $GEN --stacks 600 --samples 8000 -o "$T/a.folded"
    $GEN --stacks 600 --samples 8000 --variant 1 -o "$T/b.folded"
    "$RENDER" diff "$T/a.folded" "$T/b.folded" --format folded >"$T/d" || fail "diff folded"
    [ "$(awk '{s += $(NF-1)} END {print s}' "$T/d")" = "$(total "$T/a.folded")" ] || fail "before column"
    [ "$(awk '{s += $NF} END {print s}' "$T/d")" = "$(total "$T/b.folded")" ] || fail "after column"
    grep -q 'new_feature_0 (/srv/app/feature.py:1) 0 [0-9]' "$T/d" || fail "new stack not 0 before"
    "$RENDER" diff "$T/a.folded" "$T/b.folded" -o "$T/d.html" || fail "diff html"
    grep -q '"baseTotal":8000' "$T/d.html" || fail "diff html baseline total"
    ;;
exports)
    printf '# pyagent 1 rate=100\nthread:A;f (a.py:1);g (a.py:5) 30\nthread:B;f (a.py:2);h (b.py:9) 10\n' >"$T/a.folded"
    "$RENDER" export "$T/a.folded" -o "$T/f.folded" --include 'h \(' || fail "include"
    [ "$(total "$T/f.folded")" = 10 ] || fail "include total"
    "$RENDER" export "$T/a.folded" -o "$T/f.folded" --exclude 'thread:A' || fail "exclude"
    [ "$(total "$T/f.folded")" = 10 ] || fail "exclude total"
    "$RENDER" export "$T/a.folded" -o "$T/n.folded" --by-function --merge-threads --normalize 100 || fail "transform"
    grep -qx 'f (a.py);g (a.py) 75' "$T/n.folded" || fail "normalised: $(cat "$T/n.folded")"
    "$RENDER" export "$T/a.folded" -o "$T/s.json" || fail "speedscope"
    python3 - "$T/s.json" <<'EOF' || fail "speedscope structure"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["$schema"].endswith("file-format-schema.json")
names = [f["name"] for f in d["shared"]["frames"]]
profs = {p["name"]: p for p in d["profiles"]}
assert set(profs) == {"thread:A", "thread:B"}, profs.keys()
a = profs["thread:A"]
assert a["type"] == "sampled" and a["weights"] == [30] and a["endValue"] == 30
assert [names[i] for i in a["samples"][0]] == ["f", "g"]
assert d["shared"]["frames"][a["samples"][0][1]]["line"] == 5
EOF
    "$RENDER" export "$T/a.folded" -o "$T/p.pb.gz" || fail "pprof"
    "$RENDER" export "$T/p.pb.gz" -o "$T/back.folded" || fail "pprof back"
    diff <(grep -v '^#' "$T/a.folded" | sort) <(grep -v '^#' "$T/back.folded" | sort) || fail "pprof round trip"
    grep -q 'rate=100' "$T/back.folded" || fail "pprof lost the rate"
    ;;
thread_states)
    # The header's per-thread counts (formats.md, thread_states): merged profiles add them up
    # thread by thread (a new thread is appended, a malformed entry left out); pprof and the
    # binary capture keep them; the report carries them to its sidebar. A name may hold ':',
    # '%' and spaces (the header's own percent-encoding covers those).
    printf '# pyagent 1 rate=250 mode=cpu gil_held=30 gil_released=10 gil_wait=2 exception=5 raising=1 thread_states=20:0:0:5:0:MainThread;10:10:2:0:1:pool%%20a:b%%2520\nthread:MainThread;main (/app/a.py:1) 20\nthread:pool a:b%%20;work (/app/a.py:2) 20\n' >"$T/a.folded"
    printf '# pyagent 1 rate=250 mode=cpu gil_held=7 gil_released=3 gil_wait=1 exception=0 raising=0 thread_states=4:3:1:0:0:pool%%20a:b%%2520;x:1:2:3:4:bad;3:0:0:0:0:Late\nthread:pool a:b%%20;work (/app/a.py:2) 7\nthread:Late;late (/app/a.py:3) 3\n' >"$T/b.folded"
    "$RENDER" export "$T/a.folded" "$T/b.folded" -o "$T/m.folded" || fail "merge"
    grep -q ' thread_states=20:0:0:5:0:MainThread;14:13:3:0:1:pool%20a:b%2520;3:0:0:0:0:Late\b' "$T/m.folded" ||
        fail "merged thread_states: $(head -1 "$T/m.folded")"
    grep -q ' gil_held=37 gil_released=13 gil_wait=3 exception=5 raising=1 ' "$T/m.folded" ||
        fail "merged counts: $(head -1 "$T/m.folded")"
    for ext in pb.gz pyacap; do
        "$RENDER" export "$T/m.folded" -o "$T/m.$ext" || fail "export $ext"
        "$RENDER" export "$T/m.$ext" -o "$T/back.folded" || fail "read $ext"
        grep -q ' thread_states=20:0:0:5:0:MainThread;14:13:3:0:1:pool%20a:b%2520;3:0:0:0:0:Late' "$T/back.folded" ||
            fail "$ext lost thread_states: $(head -1 "$T/back.folded")"
    done
    "$RENDER" flamegraph "$T/m.folded" -o "$T/m.html" || fail "flamegraph"
    grep -qF '"thread_states":"20:0:0:5:0:MainThread;14:13:3:0:1:pool a:b%20;3:0:0:0:0:Late"' "$T/m.html" ||
        fail "report's thread_states: $(grep -o '"thread_states":"[^"]*"' "$T/m.html")"
    grep -q 'id="thread-states"' "$T/m.html" || fail "no per-thread table in the report"
    # A hostile header's thread count is bounded (4,096 threads kept, the rest left out).
    { printf '# pyagent 1 rate=250 thread_states='; seq 5000 | awk '{printf "%s1:0:0:0:0:t%d", (NR > 1 ? ";" : ""), $1}'; printf '\nthread:t1;f (/app/a.py:1) 1\n'; } >"$T/many.folded"
    "$RENDER" export "$T/many.folded" "$T/many.folded" -o "$T/many2.folded" || fail "merge of many threads"
    n=$(head -1 "$T/many2.folded" | sed 's/.*thread_states=//; s/ .*//' | tr ';' '\n' | grep -c '^2:0:0:0:0:t')
    [ "$n" = 4096 ] || fail "$n threads kept of 5,000 (want 4,096, each counted twice)"
    # A profile of before thread_states still renders, with the process's counts only.
    printf '# pyagent 1 rate=250 mode=cpu gil_held=3 gil_released=1 exception=1\nthread:A;f (/app/a.py:1) 4\n' >"$T/old.folded"
    "$RENDER" flamegraph "$T/old.folded" -o "$T/old.html" || fail "old profile"
    grep -q '"gil_held":"3"' "$T/old.html" || fail "old profile's counts"
    ;;
capture)
    # A binary capture replays into every report exactly as the folded file it came from.
    $GEN --stacks 2000 --samples 30000 --seed 5 -o "$T/g.folded"
    printf '# pyagent 1 rate=100 mode=wall pid=9 bucket_ms=20 t0_ms=1763750000000\nthread:A;f (/app/a.py:1) @4 CALL;g (/app/a.py:5) @8:2-6 BINARY_OP 30\n#t 0:10,10 9:5\nthread:B;h [libc.so.6] 10\n' >"$T/t.folded"
    "$RENDER" export "$T/g.folded" "$T/t.folded" -o "$T/a.folded" || fail "merge"
    "$RENDER" export "$T/a.folded" -o "$T/a.pyacap" || fail "export by extension"
    [ "$(head -c 8 "$T/a.pyacap" | od -An -tx1 | tr -d ' \n')" = 895059414341500a ] || fail "magic"
    "$RENDER" export --format capture "$T/a.folded" -o - >"$T/b.bin" || fail "export --format capture"
    cmp -s "$T/a.pyacap" "$T/b.bin" || fail "--format capture differs from .pyacap"
    [ "$(stat -c %s "$T/a.pyacap")" -lt "$(($(stat -c %s "$T/a.folded") / 4))" ] || fail "not compact"
    "$RENDER" export "$T/a.pyacap" -o "$T/back.folded" || fail "capture to folded"
    cmp -s "$T/a.folded" "$T/back.folded" || fail "round trip: $(diff "$T/a.folded" "$T/back.folded" >"$T/rt.diff"; sed -n 1,5p "$T/rt.diff")"
    "$RENDER" export - -o "$T/stdin.folded" <"$T/a.pyacap" || fail "capture on stdin"
    cmp -s "$T/a.folded" "$T/stdin.folded" || fail "capture on stdin differs"
    for f in a.folded a.pyacap; do
        "$RENDER" flamegraph "$T/$f" --title t --no-source -o "$T/$f.html" || fail "flamegraph $f"
        "$RENDER" flamegraph "$T/$f" --title t -o "$T/$f.svg" || fail "svg $f"
        "$RENDER" heatmap "$T/$f" --title t -o "$T/$f.heat" >/dev/null || fail "heatmap $f"
        "$RENDER" top "$T/$f" >"$T/$f.top" || fail "top $f"
        for fmt in pprof speedscope firefox json pstats jsonl; do
            "$RENDER" export --format $fmt "$T/$f" --title t -o "$T/$f.$fmt" || fail "$fmt from $f"
        done
    done
    for x in html svg top pprof speedscope firefox json pstats jsonl; do
        cmp -s "$T/a.folded.$x" "$T/a.pyacap.$x" || fail "$x from the capture differs"
    done
    diff -r "$T/a.folded.heat" "$T/a.pyacap.heat" >/dev/null || fail "heatmap from the capture differs"
    "$RENDER" diff "$T/g.folded" "$T/a.folded" --title t -o "$T/d1.html" || fail "diff of folded files"
    "$RENDER" diff "$T/g.folded" "$T/a.pyacap" --title t -o "$T/d2.html" || fail "diff against a capture"
    cmp -s "$T/d1.html" "$T/d2.html" || fail "diff against the capture differs"
    # Several captures merge like their folded files do.
    "$RENDER" export "$T/t.folded" -o "$T/t.pyacap" || fail "export t"
    "$RENDER" export "$T/g.folded" "$T/t.pyacap" -o "$T/m.folded" || fail "merge a capture"
    cmp -s "$T/a.folded" "$T/m.folded" || fail "merged capture differs"
    # Broken captures: one line, exit 1, no output.
    head -c 100 "$T/a.pyacap" >"$T/cut.pyacap"
    expect_exit 1 '^pyagent-render: .*cut.pyacap: truncated' "$RENDER" flamegraph "$T/cut.pyacap" -o "$T/cut.html"
    [ "$(wc -l <"$T/err")" = 1 ] || fail "more than one line: $(cat "$T/err")"
    [ ! -e "$T/cut.html" ] || fail "an output was written"
    { head -c 8 "$T/a.pyacap"; printf '\002\000\001\000'; } >"$T/v2.pyacap"
    expect_exit 1 'capture version 2 is not supported' "$RENDER" export "$T/v2.pyacap" -o "$T/v2.folded"
    ;;
cpython_exports)
    printf '# pyagent 1 rate=100 mode=wall\nthread:A;main (a.py:1);f (a.py:5);g (a.py:9) 30\nthread:B;main (a.py:1);f (a.py:5);f (a.py:5);h (b.py:9) @12:4-9 LOAD_ATTR 10\nthread:B;<idle> 5\nthread:C;run (é.py:2);read [libc.so.6] 3000000000\n' >"$T/a.folded"
    "$RENDER" export "$T/a.folded" -o "$T/a.pstats" || fail "pstats"
    "$RENDER" export "$T/a.folded" -o "$T/a.out" --format jsonl || fail "jsonl"
    # The reports' data keeps the instruction's column span (the flamegraph's tooltip shows @12:4-9).
    "$RENDER" export "$T/a.folded" -o "$T/a.report.json" || fail "report json"
    python3 -c 'import json, sys; f = json.load(open(sys.argv[1]))["frames"]; i = f["off"].index(12); assert (f["col"][i], f["endcol"][i]) == (4, 9) and f["col"].count(-1) == len(f["col"]) - 1, f' "$T/a.report.json" || fail "report json without the column span"
    python3 - "$T/a.pstats" "$T/a.out" <<'EOF' || fail "pstats/jsonl content"
import json, pstats, sys
s = pstats.Stats(sys.argv[1]).stats
total = 30 + 10 + 5 + 3000000000
assert sum(v[0] for v in s.values()) == total, s
assert abs(sum(v[2] for v in s.values()) - total / 100) < 1e-3
cc, nc, tt, ct, callers = s[("a.py", 5, "f")]
assert (cc, nc) == (0, 40) and tt == 0 and abs(ct - 0.4) < 1e-9, s[("a.py", 5, "f")]
assert callers == {("a.py", 1, "main"): 40, ("a.py", 5, "f"): 10}, callers
assert s[("a.py", 9, "g")][:2] == (30, 30) and abs(s[("a.py", 9, "g")][2] - 0.3) < 1e-9
assert s[("~", 0, "<idle>")][:2] == (5, 5)
assert s[("libc.so.6", 0, "read")][:2] == (3000000000, 3000000000)
assert s[("libc.so.6", 0, "read")][4] == {("é.py", 2, "run"): 3000000000}
assert not any(k[2].startswith("thread:") for k in s)

recs = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8")]
types = [r["type"] for r in recs]
assert types[0] == "meta" and types[-1] == "end", types
assert types == sorted(types, key=["meta", "string_table", "frame_table", "agg", "end"].index)
assert len({r["run_id"] for r in recs}) == 1 and all(r["v"] == 0 for r in recs)
assert recs[0]["sample_interval_usec"] == 10000 and recs[0]["mode"] == "wall"
strs = {e["str_id"]: e["value"] for r in recs if r["type"] == "string_table" for e in r["strings"]}
frames = {f["frame_id"]: f for r in recs if r["type"] == "frame_table" for f in r["frames"]}
agg = {e["frame_id"]: e for r in recs if r["type"] == "agg" for e in r["entries"]}
assert all(r["samples_total"] == total for r in recs if r["type"] in ("agg", "end"))
by = {(strs[f["path_str_id"]], f["line"], strs[f["func_str_id"]]): i for i, f in frames.items()}
assert agg[by[("a.py", 5, "f")]]["self"] == 0 and agg[by[("a.py", 5, "f")]]["cumulative"] == 40
h = frames[by[("b.py", 9, "h")]]
assert (h["col"], h["end_col"]) == (4, 9) and "end_line" not in h, h
assert "col" not in frames[by[("a.py", 9, "g")]]
assert sum(e["self"] for e in agg.values()) == total
EOF
    ;;
top)
    printf 'thread:A;main (a.py:1);rec (a.py:5);rec (a.py:5);leaf (a.py:9) 6\nthread:A;main (a.py:1);other (a.py:20) 4\n' >"$T/a.folded"
    "$RENDER" top "$T/a.folded" -n 3 >"$T/t" || fail "top"
    grep -q '^10 samples' "$T/t" || fail "summary"
    grep -Eq '60\.00% +6 +60\.00% +6 +leaf \(a.py\)' "$T/t" || fail "self row: $(cat "$T/t")"
    grep -Eq '0\.00% +0 +60\.00% +6 +rec \(a.py\)' "$T/t" || fail "recursion counted twice: $(cat "$T/t")"
    [ "$(grep -Ec '^ +[0-9.]+% ' "$T/t")" = 6 ] || fail "limit -n 3 (two tables of 3 rows)"
    "$RENDER" top "$T/a.folded" --by line >"$T/t" || fail "top --by line"
    grep -q 'leaf (a.py:9)' "$T/t" || fail "--by line"
    ;;
heatmap)
    mkdir -p "$T/src/app" "$T/outside"
    for i in $(seq 1 30); do echo "line_$i = $i  # <i>$i</i>"; done >"$T/src/app/main.py"
    echo "secret = 1" >"$T/outside/secret.py"
    ln -s "$T/outside/secret.py" "$T/src/app/link.py"
    cat >"$T/p.folded" <<EOF
thread:Main;<module> (/build/app/main.py:3);work (/build/app/main.py:10);work (/build/app/main.py:10);leaf (/build/app/main.py:20) 5
thread:Main;<module> (/build/app/main.py:3);x (/build/app/link.py:1) 2
thread:Main;<module> (/build/app/main.py:3);y ($T/outside/secret.py:1) 2
thread:Main;<module> (/build/app/main.py:3);loads (/usr/lib/python3.11/json/__init__.py:346) 3
EOF
    "$RENDER" heatmap "$T/p.folded" -o "$T/hm" --source-root /build="$T/src" || fail "heatmap"
    [ -f "$T/hm/index.html" ] || fail "no index"
    page=$(grep -o 'href="file-[0-9]*.html">/build/app/main.py' "$T/hm/index.html" | grep -o 'file-[0-9]*.html')
    [ -n "$page" ] || fail "main.py not in index"
    grep -q 'id="group-own"' "$T/hm/index.html" && grep -q 'id="group-stdlib"' "$T/hm/index.html" || fail "groups"
    grep -q 'line_10 = 10  # &lt;i&gt;10&lt;/i&gt;' "$T/hm/$page" || fail "source not shown/escaped"
    grep -Eq 'id="line-10" class="hot".*title="[0-9.]+% of all samples">0</td><td class="n" title="[0-9.]+% of all samples">5</td>' "$T/hm/$page" || fail "recursive line counted twice"
    grep -Eq 'id="line-20" class="hot".*>5</td><td class="n" [^>]*>5</td>' "$T/hm/$page" || fail "leaf self/total"
    grep -rq 'secret = 1' "$T/hm" && fail "read a file outside the source root"
    grep -rq 'outside the' "$T/hm" || fail "outside files not reported as such"
    grep -rq 'source not available' "$T/hm" || fail "missing source not reported"
    grep -q "<li class=\"card\" data-total=\"12\" data-self=\"5\".*<a href=\"$page\">/build/app/main.py</a>.*<b>3</b> lines and <b>3</b> functions sampled.*<a href=\"$page#line-3\">line 3</a>" "$T/hm/index.html" || fail "main.py's card: samples, lines and functions sampled, hottest line"
    grep -q 'c-spec' "$T/hm/index.html" && fail "specialization without instruction data"
    cat >"$T/op.folded" <<EOF
thread:Main;<module> (/build/app/main.py:3) @2 CALL;f (/build/app/main.py:10) @8:0-7 LOAD_ATTR_INSTANCE_VALUE 3
thread:Main;<module> (/build/app/main.py:3) @2 CALL;f (/build/app/main.py:20) @4 BINARY_OP 1
EOF
    "$RENDER" heatmap "$T/op.folded" -o "$T/hmo" --source-root /build="$T/src" || fail "heatmap with instructions"
    grep -q 'id="line-10" class="hot" style="[^"]*;--spec:1.000" data-spec="1.000"' "$T/hmo/file-0.html" || fail "line on a specialized instruction"
    grep -q 'id="line-20" class="hot" style="[^"]*;--spec:0.000" data-spec="0.000"' "$T/hmo/file-0.html" || fail "line on an unspecialized instruction"
    grep -q 'id="by-spec"' "$T/hmo/file-0.html" || fail "no specialization toggle"
    grep -q '<td class="ln">@8</td>.*LOAD_ATTR_INSTANCE_VALUE.* <span class="cols">columns 0-7</span> <code class="span"><mark>line_10</mark> = 10  # &lt;i&gt;10&lt;/i&gt;</code>' "$T/hmo/file-0.html" || fail "instruction's column span not shown on its line"
    row4=$(grep '<td class="ln">@4</td>' "$T/hmo/file-0.html") || fail "no row for instruction @4"
    case $row4 in *'class="cols"'*) fail "columns shown for an instruction without a span" ;; esac
    grep -q '<b>37.5%</b> specialized' "$T/hmo/index.html" || fail "file's specialization (3 of 4 + 4 samples)"
    ;;
svg)
    $GEN --stacks 300 --samples 3000 -o "$T/a.folded"
    "$RENDER" flamegraph "$T/a.folded" -o "$T/a.svg" --title 'My title' --width 900 --minwidth 2 --colors hot --inverted --reverse || fail "svg"
    grep -q 'width="900"' "$T/a.svg" || fail "width"
    grep -q '>My title</text>' "$T/a.svg" || fail "title"
    grep -q 'data-inverted="1"' "$T/a.svg" || fail "inverted"
    grep -q 'omitted' "$T/a.svg" || fail "minwidth pruning not reported"
    grep -q '(3000 samples, 100.00%)' "$T/a.svg" || fail "root total"
    if command -v xmllint >/dev/null; then xmllint --noout "$T/a.svg" || fail "svg not well-formed"; fi
    "$RENDER" flamegraph "$T/a.folded" -o "$T/b.html" --format svg || fail "--format svg"
    [ "$(head -c 5 "$T/b.html")" = '<?xml' ] || fail "--format svg ignored"
    ;;
*)
    fail "unknown case"
    ;;
esac
echo "ok [$CASE]"
