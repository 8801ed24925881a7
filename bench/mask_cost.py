#!/usr/bin/env python3
"""What a thread pays to block and unblock SIGPROF (signal.pthread_sigmask) under each timer:
a perf event has no descriptor, so blocking ends it and unblocking makes a new one
(docs/architecture.md, "Timers and modes"); a POSIX timer is stopped and started.

  bench/mask_cost.py [--python PY] [--lib build/release/lib/libpyagent.so] [--pairs N]

Prints the median, over 5 runs, of microseconds per block-and-unblock pair without the agent,
with PYAGENT_TIMER=cpu and with PYAGENT_TIMER=perf (1 kHz)."""
import argparse
import os
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOOP = r"""
import signal, sys, time
n = int(sys.argv[1])
t = time.perf_counter()
for _ in range(n):
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGPROF])
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGPROF])
print((time.perf_counter() - t) / n * 1e6)
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--lib", default=os.path.join(ROOT, "build/release/lib/libpyagent.so"))
    ap.add_argument("--pairs", type=int, default=5000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        for name, extra in (("no agent", None), ("cpu", "cpu"), ("perf", "perf")):
            env = dict(os.environ)
            if extra:
                env.update(LD_PRELOAD=a.lib, PYAGENT_TIMER=extra, PYAGENT_RATE="1000",
                           PYAGENT_OUTPUT=os.path.join(d, "p.%p.folded"))
            runs = [float(subprocess.run([a.python, "-c", LOOP, str(a.pairs)], env=env,
                                         check=True, capture_output=True, text=True).stdout)
                    for _ in range(5)]
            print(f"{name:9} {statistics.median(runs):6.1f} us per block and unblock")


if __name__ == "__main__":
    main()
