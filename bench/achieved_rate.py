#!/usr/bin/env python3
"""Achieved sampling rate at rates beyond the kernel tick (a benchmark figure: tests only
check that perf events are used and pass the tick).

  bench/achieved_rate.py [--python PY] [--lib build/release/lib/libpyagent.so] [--runs N]

Runs tests/agent/programs/plain.py for 2 CPU-seconds at 1 kHz and 10 kHz, N times each,
and prints the timer the agent chose and the median achieved rate per CPU-second (the
profile header's achieved_rate)."""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def header(path):
    with open(path) as f:
        first = f.readline().split()
    return dict(w.split("=", 1) for w in first if "=" in w)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--lib", default=os.path.join(ROOT, "build/release/lib/libpyagent.so"))
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    prog = os.path.join(ROOT, "tests/agent/programs/plain.py")
    for rate in (1000, 10000):
        achieved, timers = [], set()
        for _ in range(a.runs):
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "p.folded")
                env = dict(os.environ, LD_PRELOAD=os.path.abspath(a.lib), PYAGENT_RATE=str(rate),
                           PYAGENT_OUTPUT=out)
                subprocess.run([a.python, prog, "2"], env=env, check=True, stdout=subprocess.DEVNULL)
                h = header(out)
                timers.add(h.get("timer", "?"))
                achieved.append(int(h.get("achieved_rate", 0)))
        print("%5d Hz asked: timer %s, achieved median %d/s (min %d, max %d, %d runs)"
              % (rate, "/".join(sorted(timers)), statistics.median(achieved), min(achieved),
                 max(achieved), len(achieved)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
