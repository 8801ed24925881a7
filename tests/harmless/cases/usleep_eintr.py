"""Harm 6: a C library's usleep (nanosleep: never restarted after a signal handler ran) must
not return early with EINTR: a CPU-time profiler must never interrupt a thread blocked in a
system call. Two threads alternate short CPU bursts and usleep through ctypes."""
import ctypes
import errno
import threading

from _util import burn

libc = ctypes.CDLL(None, use_errno=True)
results = {}


def sleeper(name):
    eintr = 0
    for _ in range(150):
        burn(0.0007)
        if libc.usleep(1000) != 0 and ctypes.get_errno() == errno.EINTR:
            eintr += 1
    results[name] = eintr


threads = [threading.Thread(target=sleeper, args=("t%d" % i,)) for i in range(2)]
for t in threads:
    t.start()
sleeper("main")
for t in threads:
    t.join()
for name in sorted(results):
    print("%s: usleep interrupted %d times" % (name, results[name]) if results[name] else "%s: usleep never interrupted" % name)
