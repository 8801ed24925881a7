"""Known CPU split: the main thread alternates between two pure-Python functions (30/70),
a second thread compresses with zlib (the GIL is released inside), or with argv[3] "python"
runs a pure-Python loop (in parallel on a free-threaded build). Each measures its own CPU
with time.thread_time(); the truth goes to the JSON file named by argv[1].

Both threads work until the process's own CPU clock (time.process_time()) reaches argv[2]
seconds: the CPU time used, and so the samples expected at a given rate, follow from that
and not from how loaded the machine is, whichever thread the scheduler favours."""
import json
import os
import random
import sys
import threading
import time
import zlib

CPU_SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
truth = {}


def spin_a(t):
    x = 0
    end = time.thread_time() + t
    while time.thread_time() < end:
        for i in range(2000):
            x += i * i
    return x


def spin_b(t):
    x = 0
    end = time.thread_time() + t
    while time.thread_time() < end:
        for i in range(2000):
            x ^= i * 3
    return x


def main_work(out=truth, clock=time.process_time):
    """Until clock() reaches CPU_SECONDS; blocked.py's threads run it on their own clocks."""
    a = b = 0.0
    while clock() < CPU_SECONDS:
        t0 = time.thread_time()
        # Random lengths (mean 3 ms and 7 ms) so the split cannot alias with the
        # scheduler tick that drives CPU-time timers.
        spin_a(random.uniform(0.001, 0.005))
        t1 = time.thread_time()
        spin_b(random.uniform(0.003, 0.011))
        t2 = time.thread_time()
        a += t1 - t0
        b += t2 - t1
    out["spin_a"] = a
    out["spin_b"] = b


def compress_work():
    data = os.urandom(1 << 18) * 16
    start = time.thread_time()
    while time.process_time() < CPU_SECONDS:
        zlib.compress(data, 6)
    truth["compressor"] = time.thread_time() - start


def spin_c():
    x = 0
    for i in range(20000):
        x += i & 7
    return x


def python_work():
    start = time.thread_time()
    while time.process_time() < CPU_SECONDS:
        spin_c()
    truth["burner"] = time.thread_time() - start


if __name__ == "__main__":  # blocked.py borrows main_work
    # argv[3] "python": the second thread runs Python too (spin_c), which a free-threaded build
    # runs in parallel with the main thread's; "Burner" then, not "Compressor".
    if len(sys.argv) > 3 and sys.argv[3] == "python":
        t = threading.Thread(target=python_work, name="Burner")
    else:
        t = threading.Thread(target=compress_work, name="Compressor")
    t.start()
    main_work()
    t.join()
    # Whether the two threads could run in parallel: a free-threaded build runs without a GIL
    # unless something turned it on (PYTHON_GIL=1, an extension module not marked safe).
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    with open(sys.argv[1] + ".gil", "w") as f:
        json.dump(gil, f)
    with open(sys.argv[1], "w") as f:
        json.dump(truth, f)
    print("accuracy done")
