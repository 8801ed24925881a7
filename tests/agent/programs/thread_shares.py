"""Threads with a known split of their CPU time, for the per-thread state counts.

    python thread_shares.py OUT.json CPU_SECONDS [fight]

Four threads:

  Holder    plain arithmetic: the GIL held (bar the moments it waits to take it back)
  Releaser  SHA-256 of 4 MB buffers, the GIL released inside the digest, with a little
            arithmetic between two digests
  Raiser    raises an exception 60 calls deep and catches it at the top, again and again: the
            unwinding between the raise and the except block is an exception being raised
  Handler   the same arithmetic as Holder inside an except block half of its time, outside
            the other half

With "fight", four Fighter threads instead, fighting for the GIL: each repeats a little
arithmetic and a time.sleep(0), which releases the GIL and takes it back at once, so that
with the others running Python meanwhile taking it back means waiting for it (take_gil); the
switch interval is 0.1 ms, so that the GIL changes hands often. Each measures the CPU time it
spends in the sleep(0) calls ("switching": the release, the system call, the wait and the
taking over), an upper bound of its CPU time waiting for the GIL.

Each thread measures its own phases with time.thread_time() and stops once it has used
CPU_SECONDS; OUT.json gets, per thread name, its CPU time ("total") and the time of its
measured phase ("released", "handling", "switching"), and "gil": whether the build has a GIL."""
import hashlib
import json
import random
import sys
import threading
import time

from burn import burn_for as burn

OUT, CPU_SECONDS = sys.argv[1], float(sys.argv[2])
BUF = bytes(range(256)) * (4 * 4096)  # 4 MB
truth = {}


def holder():
    while time.thread_time() < CPU_SECONDS:
        burn(0.01)


def releaser():
    spent = 0.0
    while time.thread_time() < CPU_SECONDS:
        t0 = time.thread_time()
        hashlib.sha256(BUF).digest()
        spent += time.thread_time() - t0
        burn(0.002)
    return {"released": spent}


def dive(n):
    if n == 0:
        raise ValueError("deep")
    return dive(n - 1) + 1


def raiser():
    caught = 0
    while time.thread_time() < CPU_SECONDS:
        try:
            dive(60)
        except ValueError:
            caught += 1
    return {"caught": caught}


def handler():
    rng = random.Random(18)
    spent = 0.0
    while time.thread_time() < CPU_SECONDS:
        try:
            raise KeyError("handled")
        except KeyError:
            t0 = time.thread_time()
            burn(rng.uniform(0.5, 1.5) * 0.01)
            spent += time.thread_time() - t0
        burn(rng.uniform(0.5, 1.5) * 0.01)
    return {"handling": spent}


def fighter():
    spent = 0.0
    x = 0
    while time.thread_time() < CPU_SECONDS:
        for i in range(300):
            x += i * i
        t0 = time.thread_time()
        time.sleep(0)
        spent += time.thread_time() - t0
    return {"switching": spent}


def run(name, fn):
    got = fn() or {}
    got["total"] = time.thread_time()
    truth[name] = got


if sys.argv[3:] == ["fight"]:
    sys.setswitchinterval(0.0001)
    work = [("Fighter-%d" % i, fighter) for i in range(4)]
else:
    work = [("Holder", holder), ("Releaser", releaser), ("Raiser", raiser), ("Handler", handler)]
threads = [threading.Thread(target=run, args=(name, fn), name=name) for name, fn in work]
for t in threads:
    t.start()
for t in threads:
    t.join()
truth["gil"] = getattr(sys, "_is_gil_enabled", lambda: True)()
with open(OUT, "w") as f:
    json.dump(truth, f)
