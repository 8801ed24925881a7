#!/usr/bin/env python3
"""What PYAGENT_ASYNC=1 adds to wall mode's tick (docs/benchmarks.md, "asyncio: every task").

  bench/async_cost.py [--python PY ...] [--lib build/release/lib/libpyagent.so] [--runs N]
                      [--tasks 10,100,1000] [--seconds S] [--rate HZ]

bench/workloads/async_waiting.py keeps N tasks waiting for S seconds under the agent in wall
mode at HZ, with PYAGENT_ASYNC=0 and =1 alternating run by run. The program has no thread
but the agent's tick thread, so the process's CPU time minus its main thread's is the tick
thread's; the median difference between the two settings, divided by the ticks (S x HZ), is
what reading every task costs a tick, and divided by N, a task. Prints a Markdown table."""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(py, lib, n, seconds, rate, on):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYAGENT_")}
    with tempfile.TemporaryDirectory() as out:
        env.update(LD_PRELOAD=lib, PYAGENT_MODE="wall", PYAGENT_RATE=str(rate), PYAGENT_ASYNC=on,
                   PYAGENT_OUTPUT=os.path.join(out, "pyagent.%p.folded"))
        p = subprocess.run([py, os.path.join(HERE, "workloads", "async_waiting.py"), str(n), str(seconds)],
                           env=env, capture_output=True, text=True, check=True)
    return float(p.stdout.split()[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", action="append")
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "release", "lib", "libpyagent.so"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tasks", default="10,100,1000")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rate", type=int, default=100)
    a = ap.parse_args()
    ticks = a.seconds * a.rate
    print("| interpreter | tasks | tick thread, ASYNC=0 | ASYNC=1 | added per tick | per task |")
    print("|---|---|---|---|---|---|")
    for py in a.python or [sys.executable]:
        version = subprocess.run([py, "-c", "import sys; print(sys.version.split()[0])"],
                                 capture_output=True, text=True).stdout.strip()
        for n in (int(x) for x in a.tasks.split(",")):
            off, on = [], []
            for _ in range(a.runs):
                off.append(run(py, a.lib, n, a.seconds, a.rate, "0"))
                on.append(run(py, a.lib, n, a.seconds, a.rate, "1"))
            d = statistics.median(on) - statistics.median(off)
            print("| %s | %d | %.3f s | %.3f s | %.1f µs | %.2f µs |" % (
                version, n, statistics.median(off), statistics.median(on), d / ticks * 1e6, d / ticks / n * 1e6))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
