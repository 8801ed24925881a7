"""Known shares of CPU time with the GIL held, with it released, and handling an exception.

    python thread_states.py OUT.json CPU_SECONDS [sleeper]

One thread (the main one) repeats three phases of random lengths, so that none falls at a
fixed phase of the sampling timer, until the thread has used CPU_SECONDS of CPU time:

  held       plain arithmetic (the GIL held throughout)
  released   SHA-256 of a 4 MB buffer (OpenSSL's digest runs with the GIL released; only the
             call's set-up and the digest object's creation hold it, microseconds of ~10 ms)
  exception  the same arithmetic inside an except block, half of it in a generator run from
             the block (the generator's own, empty exception item is on top of the thread's
             stack while it runs; sys.exc_info() still sees the one being handled)

time.thread_time() around each phase; OUT.json gets the three times and the thread's CPU
time at the end ("total": start-up and imports included, which hold the GIL), whose ratios
are the measured shares. With "sleeper", a second thread sleeps meanwhile (wall mode: its
samples are of a thread without the GIL)."""
import hashlib
import json
import random
import sys
import threading
import time

from burn import burn_for as burn

OUT, CPU_SECONDS = sys.argv[1], float(sys.argv[2])
BUF = bytes(range(256)) * (4 * 4096)  # 4 MB


def burn_steps(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        yield burn(0.001)


def held(seconds):
    return burn(seconds)


def released(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        hashlib.sha256(BUF).digest()


def handling(seconds):
    try:
        raise ValueError("handled")
    except ValueError:
        burn(seconds / 2)
        for _ in burn_steps(seconds / 2):
            pass


def sleeper():
    while True:
        time.sleep(0.05)


def main():
    if sys.argv[3:] == ["sleeper"]:
        threading.Thread(target=sleeper, name="Sleeper", daemon=True).start()
    rng = random.Random(18)
    spent = {"held": 0.0, "released": 0.0, "exception": 0.0}
    phases = [("held", held, 0.020), ("released", released, 0.025), ("exception", handling, 0.015)]
    while sum(spent.values()) < CPU_SECONDS:
        for name, fn, mean in phases:
            t0 = time.thread_time()
            fn(rng.uniform(0.5, 1.5) * mean)
            spent[name] += time.thread_time() - t0
    spent["total"] = time.thread_time()
    with open(OUT, "w") as f:
        json.dump(spent, f)


main()
