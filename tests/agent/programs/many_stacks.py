"""Runs argv[1] seconds of CPU spread over 100,000 functions, so that a profile taken at a
high rate holds more unique stacks than one Grafana Pyroscope profile may (16,000). Prints a
deterministic line."""
import sys
import time

N = 100000
ns = {}
exec(compile("".join("def f%d(n):\n    for _ in range(n):\n        pass\n" % i for i in range(N)), "many_stacks_gen.py", "exec"), ns)
fs = [ns["f%d" % i] for i in range(N)]
# CPU time, not wall time: a loaded machine gives the same number of samples, and stacks.
end = time.process_time() + float(sys.argv[1])
while time.process_time() < end:
    for f in fs:
        f(20)
print("many done")
