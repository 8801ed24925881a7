"""A profiler of the program's own whose SIGPROF handler takes CPU time.

    python own_sigprof_slow.py OUT.json CPU_SECONDS PROFSPIN_SO

profspin.so (tests/harmless/helpers/profspin.c) installs a C SIGPROF handler and ITIMER_PROF
every 20 ms of CPU time; each call burns 6 ms of CPU inside the handler (longer than a
tick, 4 ms here, so that tick-driven timers fire during it). work() runs until the
thread has used CPU_SECONDS. OUT.json: the thread's CPU time from the start of the timer to its
end ("total", the handler's included) and the handler's calls ("calls")."""
import ctypes
import json
import sys
import time

OUT, CPU, LIB = sys.argv[1], float(sys.argv[2]), sys.argv[3]
lib = ctypes.CDLL(LIB)
lib.profspin_start.argtypes = [ctypes.c_long, ctypes.c_long]
lib.profspin_stop.restype = ctypes.c_long


def work(end):
    x = 0
    while time.thread_time() < end:
        for i in range(1000):
            x += i * i
    return x


t0 = time.thread_time()
if lib.profspin_start(20000, 6000) != 0:
    sys.exit("profspin_start failed")
work(t0 + CPU)
calls = lib.profspin_stop()
total = time.thread_time() - t0
with open(OUT, "w") as f:
    json.dump({"total": total, "calls": calls}, f)
print("own_sigprof_slow done")
