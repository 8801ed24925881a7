"""Runs argv[1] seconds of wall time: 50 ms of CPU, then 100 ms of sleep, over and over, in
two functions; prints a deterministic line. For upload tests, where the server comes and goes
while the program runs."""
import sys
import time


def crunch():
    end = time.thread_time() + 0.05
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


def rest():
    time.sleep(0.1)


deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    crunch()
    rest()
print("steady done")
