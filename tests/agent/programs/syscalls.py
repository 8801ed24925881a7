"""A thread, Kernel, that spends almost all its CPU inside system calls (getrandom filling
64 KiB buffers, a little Python between them) until it has used argv[2] seconds, then 50 ms
in Python (in_python), so that a sample lands after its last system call (time after a
thread's last sample is never counted); writes its own CPU time (time.thread_time) and the
process's user and system time (os.times) to the JSON file named by argv[1]."""
import json
import os
import sys
import threading
import time

SECONDS = float(sys.argv[2])


def in_kernel():
    n = 0
    while time.thread_time() < SECONDS:
        n += len(os.urandom(1 << 16))
    return n


def in_python(seconds=0.05):
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        n += sum(range(1000))
    return n


def worker(out):
    in_kernel()
    in_python()
    out["thread_cpu"] = time.thread_time()


out = {}
t = threading.Thread(target=worker, args=(out,), name="Kernel")
t.start()
t.join()
times = os.times()
out.update(user=times.user, system=times.system)
with open(sys.argv[1], "w") as f:
    json.dump(out, f)
