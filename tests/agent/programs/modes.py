"""Work whose shares are known, for the sampling modes. argv[1]: JSON file for the truth.
- native: compress() spends its time in zlib's C code, py_work() in Python.
- wall: sleeper() sleeps (no CPU), spinner() burns CPU, both measured in wall time.
- gil: two threads take turns on the GIL, a third sleeps (and says how much CPU it used)."""
import json
import os
import sys
import threading
import time
import zlib

mode = sys.argv[2]
truth = {}
data = os.urandom(1 << 18) * 8


def compress(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        zlib.compress(data, 6)


def py_work(seconds):
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(1000):
            x += i


def sleeper(seconds, out=None):
    time.sleep(seconds)
    if out is not None:  # the CPU time the thread used, from its start to here
        out["sleepy_cpu"] = time.thread_time()


def spinner(seconds):
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += 1


if mode == "native":
    t0 = time.thread_time()
    compress(2.0)
    t1 = time.thread_time()
    py_work(2.0)
    t2 = time.thread_time()
    truth = {"compress": t1 - t0, "py_work": t2 - t1}
elif mode == "wall":
    # User-mode work first: under a perf event the kernel time before it (start-up, the page
    # faults of `data`) is weighed onto the next user-mode sample, which must land here and
    # not in sleeper() (docs/modes.md).
    py_work(0.05)
    t0, c0 = time.monotonic(), time.thread_time()
    sleeper(1.5)
    t1, c1 = time.monotonic(), time.thread_time()
    spinner(1.5)
    t2 = time.monotonic()
    truth = {"sleeper": t1 - t0, "spinner": t2 - t1, "sleeper_cpu": c1 - c0}
elif mode == "gil":
    ts = [threading.Thread(target=spinner, args=(2.0,), name="spin%d" % i) for i in range(2)]
    ts.append(threading.Thread(target=sleeper, args=(2.0, truth), name="sleepy"))
    for t in ts:
        t.start()
    for t in ts:
        t.join()
with open(sys.argv[1], "w") as f:
    json.dump(truth, f)
print("modes done", mode)
