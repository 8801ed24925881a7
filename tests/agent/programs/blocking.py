"""Blocking calls that must behave exactly as without a profiler, each in its own thread so
that a wall-clock sampler interrupts all of them at once. Prints deterministic results;
exits 1 if any call returned early, failed, or returned something else."""
import ctypes
import os
import select
import socket
import subprocess
import sys
import threading
import time

results = {}
bad = []


def timed(name, want_at_least, fn, first=None):
    # first: what makes the call return (a timer's start), begun after t0, so that the timer's
    # own wait never starts before the clock does (it did, by 25 ms, on a loaded machine)
    t0 = time.monotonic()
    if first:
        first()
    try:
        value = fn()
    except Exception as e:  # the exception is the result for some calls
        value = type(e).__name__
    elapsed = time.monotonic() - t0
    # Timed waits may end a few ms early by clock granularity (3.8's locks use the wall
    # clock); an interrupted call returning early would come back far sooner.
    if elapsed < want_at_least - 0.02:
        bad.append("%s returned after %.3f s, before %.3f s" % (name, elapsed, want_at_least))
    results[name] = value


def sleep():
    timed("sleep", 1.0, lambda: time.sleep(1.0))


def select_timeout():
    r, w = os.pipe()
    timed("select", 1.0, lambda: select.select([r], [], [], 1.0))


def recv_timeout():
    a, b = socket.socketpair()
    a.settimeout(1.0)
    timed("recv timeout", 1.0, lambda: a.recv(10))


def recv_data():
    a, b = socket.socketpair()
    timer = threading.Timer(0.5, lambda: b.sendall(b"hello"))
    timed("recv data", 0.5, lambda: a.recv(10), first=timer.start)


def subprocess_wait():
    timed("subprocess", 1.0, lambda: subprocess.run(["sleep", "1"]).returncode)


def lock_timeout():
    lock = threading.Lock()
    lock.acquire()
    timed("lock timeout", 1.0, lambda: lock.acquire(timeout=1.0))


def lock_released():
    lock = threading.Lock()
    lock.acquire()
    timer = threading.Timer(0.5, lock.release)
    timed("lock released", 0.5, lambda: lock.acquire(), first=timer.start)


def c_read():
    libc = ctypes.CDLL(None, use_errno=True)
    r, w = os.pipe()
    timer = threading.Timer(0.5, lambda: os.write(w, b"12345"))
    buf = ctypes.create_string_buffer(16)

    def read():
        n = libc.read(r, buf, 16)  # plain read(2) from C: no PEP 475 retry around it
        return (n, ctypes.get_errno() if n < 0 else 0, buf.raw[: max(n, 0)])

    timed("C read", 0.5, read, first=timer.start)


threads = [threading.Thread(target=f, name=f.__name__) for f in
           (sleep, select_timeout, recv_timeout, recv_data, subprocess_wait, lock_timeout,
            lock_released, c_read)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for k in sorted(results):
    print(k, results[k])
for b in bad:
    print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
