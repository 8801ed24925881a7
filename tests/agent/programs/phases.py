"""Two busy phases with a pause between them, and when each happened (for time buckets).

    python phases.py OUT.json

burn_a runs until it has used 0.6 s of CPU, the program sleeps 1 s, burn_b uses 0.6 s of CPU
(CPU time, so that a loaded machine gives the same number of samples); OUT.json gets each
phase's start and end in Unix milliseconds (time.time(), the clock the agent's buckets use)."""
import json
import sys
import time


def burn_a(cpu):
    n, until = 0, time.thread_time() + cpu
    while time.thread_time() < until:
        n += sum(range(500))
    return n


def burn_b(cpu):
    n, until = 0, time.thread_time() + cpu
    while time.thread_time() < until:
        n += sum(range(500))
    return n


phases = {}
t = time.time()
burn_a(0.6)
phases["a"] = [t * 1000, time.time() * 1000]
time.sleep(1.0)
t = time.time()
burn_b(0.6)
phases["b"] = [t * 1000, time.time() * 1000]
with open(sys.argv[1], "w") as f:
    json.dump(phases, f)
