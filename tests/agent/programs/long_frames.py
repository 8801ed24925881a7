"""Runs argv[1] seconds of CPU through 24 call chains of 400 distinct functions, each function
with a 190-character name in a file of its own whose path is 900 characters long: about 1 KiB
of strings per frame, 450 KiB per chain, so that a profile that sampled ten chains is over
Grafana Pyroscope's 4 MiB per profile with a few dozen stacks. Each chain's leaf burns an equal
share of the CPU time. Prints a deterministic line."""
import sys
import time

CHAINS, DEPTH = 24, 400
PAD = "p" * 180
DIR = "/long_frames/" + "d" * 850


def name(c, d):
    return "c%02d_d%03d_%s" % (c, d, PAD)


ns = {"time": time}
for c in range(CHAINS):
    for d in range(DEPTH):
        if d + 1 < DEPTH:
            body = "    return %s(t)\n" % name(c, d + 1)
        else:
            body = "    end = time.process_time() + t\n    while time.process_time() < end:\n        pass\n"
        src = "def %s(t):\n%s" % (name(c, d), body)
        exec(compile(src, "%s/c%02d_d%03d.py" % (DIR, c, d), "exec"), ns)

share = float(sys.argv[1]) / CHAINS
for c in range(CHAINS):
    ns[name(c, 0)](share)
print("long frames done")
