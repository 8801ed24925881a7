#!/usr/bin/env python3
"""Two builds of the agent on the same program, as concurrent pinned pairs.

  python3 bench/pair_libs.py --old OLD/libpyagent.so [--new build/release/lib/libpyagent.so]
        [--python PY] [--rate 10000] [--rounds 8] [--workload fib] [--seconds 3]
        [--env NAME=VALUE ...] [--json FILE]

Every round runs two pairs, each pair's two sides started together and pinned to CPUs 0 and 1
(taskset), the sides swapped from round to round: OLD against NEW, and NEW against NEW (the
A/A pair: what the machine's noise alone gives). Each side runs bench/workloads/WORKLOAD.py
for a fixed amount of work (calibrated once to about SECONDS of CPU without the agent) with
PYAGENT_RATE=RATE; its cost is the process's CPU time (user + system, wait4), the agent's own
threads included. Reported: NEW/OLD − 1 and the A/A pair's second/first − 1, median [min, max]
over rounds, NEW/OLD divided by the same round's A/A (whose sides ran on the same CPUs), and each build's handler p50 from the profile headers (what the histogram sees:
the part of the handler between its two clock reads)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from agent_overhead import agent_env, base_env, calibrate, read_header  # noqa: E402


def start(argv, env, cpu):
    return subprocess.Popen(["taskset", "-c", str(cpu)] + argv, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=env["PWD"])


def finish(p):
    _, status, ru = os.wait4(p.pid, 0)
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    if status != 0:
        sys.exit("a run failed (status %d): %s" % (status, err[-2000:]))
    return ru.ru_utime + ru.ru_stime


def pair(argv, envs, swap):
    """Runs argv under envs[0] and envs[1] at once, on CPUs 0 and 1 (1 and 0 when swap):
    the two CPU times, in envs' order."""
    ps = [start(argv, env, (i + swap) % 2) for i, env in enumerate(envs)]
    return [finish(p) for p in ps]


def summary(xs):
    return "%+.2f%% [%+.2f, %+.2f]" % (100 * statistics.median(xs), 100 * min(xs), 100 * max(xs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", default=os.path.join(ROOT, "build", "release", "lib", "libpyagent.so"))
    ap.add_argument("--python", default="/usr/bin/python3.11")
    ap.add_argument("--rate", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--workload", default="fib", help="one of bench/workloads that takes a repetition count")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for both builds' runs")
    ap.add_argument("--json")
    a = ap.parse_args()
    extra = dict(kv.split("=", 1) for kv in a.env)
    prog = os.path.join(HERE, "workloads", a.workload + ".py")
    with tempfile.TemporaryDirectory() as t0, tempfile.TemporaryDirectory() as t1:
        reps = calibrate(a.python, prog, t0, a.seconds)
        argv = [a.python, prog, reps]
        new_vs_old, aa, p50 = [], [], {"old": [], "new": []}
        for r in range(a.rounds):
            swap = r % 2
            old_cpu, new_cpu = pair(argv, [agent_env(t0, a.old, a.rate, extra), agent_env(t1, a.new, a.rate, extra)], swap)
            p50["old"].append(int(read_header(t0).get("handler_p50_ns", 0)))
            p50["new"].append(int(read_header(t1).get("handler_p50_ns", 0)))
            new_vs_old.append(new_cpu / old_cpu - 1)
            x, y = pair(argv, [agent_env(t0, a.new, a.rate, extra), agent_env(t1, a.new, a.rate, extra)], swap)
            read_header(t0)
            read_header(t1)
            aa.append(y / x - 1)
            print("round %d: new/old %+.2f%%, A/A %+.2f%% (old %.2f s, new %.2f s)"
                  % (r + 1, 100 * new_vs_old[-1], 100 * aa[-1], old_cpu, new_cpu), file=sys.stderr)
        base = pair(argv, [base_env(t0), base_env(t1)], 0)
    print("%s, %s at %d Hz, %d rounds (%s):" % (os.path.basename(a.python), a.workload, a.rate, a.rounds,
                                                " ".join(a.env) or "default settings"))
    # The same round's A/A pair has its sides on the same CPUs: dividing by it takes out what
    # one CPU costs more than the other in that round (the sides are swapped every round).
    corrected = [(1 + x) / (1 + y) - 1 for x, y in zip(new_vs_old, aa)]
    print("  NEW/OLD CPU: %s; A/A: %s; NEW/OLD over the round's A/A: %s"
          % (summary(new_vs_old), summary(aa), summary(corrected)))
    print("  handler p50: OLD %.0f ns, NEW %.0f ns (median over rounds); the workload alone: %.2f s of CPU"
          % (statistics.median(p50["old"]), statistics.median(p50["new"]), statistics.median(base)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"new_vs_old": new_vs_old, "aa": aa, "p50": p50, "base": base, "rate": a.rate,
                       "workload": a.workload, "python": a.python}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
