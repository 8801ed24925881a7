"""A known share of CPU time inside the cyclic garbage collector.

    python gc_share.py OUT.json CPU_SECONDS cycles|plain [alone]

cycles: make_cycles() builds reference cycles (garbage the moment they are made, so only the
collector frees them) and, between batches, burns a random amount of plain arithmetic so that
collections fall at no fixed phase of the sampling timer. gc.callbacks time every collection
with time.thread_time() (start to stop); OUT.json gets that time and make_cycles()'s own
thread CPU time, whose ratio is the measured GC share ("gc", "total"), and the same in wall
time, time.perf_counter() ("gc_wall", "total_wall": what wall mode counts, which includes
the time the thread waited for a CPU on a loaded machine).

Unless "alone" is given, a second thread, Hasher, hashes 4 MB with SHA-256 in a loop
meanwhile (the GIL released inside, held only between two calls): it is on a CPU while
collections run.

plain: gc.disable(), and make_cycles() builds the same objects without cycles (reference
counting frees them): no collection runs, OUT.json says how many did (0).

Both work until make_cycles() has used CPU_SECONDS of its thread's CPU time, so the number of
samples follows from CPU time, not from how loaded the machine is."""
import gc
import hashlib
import json
import os
import random
import sys
import threading
import time

OUT, CPU_SECONDS, MODE = sys.argv[1], float(sys.argv[2]), sys.argv[3]
ALONE = sys.argv[4:] == ["alone"]
gc_time = gc_wall = 0.0
gc_count = 0
gc_started = gc_started_wall = 0.0


def gc_timer(phase, info):
    global gc_time, gc_wall, gc_count, gc_started, gc_started_wall
    if phase == "start":
        gc_started_wall = time.perf_counter()
        gc_started = time.thread_time()
    else:
        gc_time += time.thread_time() - gc_started
        gc_wall += time.perf_counter() - gc_started_wall
        gc_count += 1


def make_cycles(cpu, cycles):
    # The random lengths are drawn beforehand: no Python function but this one (and
    # gc_timer) runs while the collector may start, so <GC> has this frame as its parent.
    spins = [random.randrange(50, 400) for _ in range(997)]
    keep = k = 0
    end = time.thread_time() + cpu
    while time.thread_time() < end:
        for _ in range(200):
            a = [1, 2]
            b = [a, 3]
            if cycles:
                a.append(b)
            keep += len(b)
        x = 0
        k = (k + 1) % len(spins)
        for i in range(spins[k]):
            x += i * i
    return keep


def hasher(stop):
    data = os.urandom(4 << 20)
    while not stop.is_set():
        hashlib.sha256(data).digest()


stop = threading.Event()
other = threading.Thread(target=hasher, args=(stop,), name="Hasher")
if not ALONE:
    other.start()
if MODE == "plain":
    gc.disable()
else:
    # Fewer, longer collections (60-75% of the CPU, 300-700 collections in 4 s): what
    # happens at a collection's edges, counted as <GC> but outside the start-to-stop time
    # (the callbacks' own cost; with perf-event timers about 40 us a collection more,
    # docs/interpreters.md), shrinks beside each collection's. At 10,000 (1,500 collections)
    # the perf timer's share was 1-2.7 points above the measured one, the CPU timer's not.
    gc.set_threshold(50000, 10, 10)
    gc.callbacks.append(gc_timer)
w0, t0 = time.perf_counter(), time.thread_time()
make_cycles(CPU_SECONDS, MODE == "cycles")
total, total_wall = time.thread_time() - t0, time.perf_counter() - w0
gc.callbacks[:] = []
stop.set()
if not ALONE:
    other.join()
with open(OUT, "w") as f:
    json.dump({"gc": gc_time, "total": total, "gc_wall": gc_wall, "total_wall": total_wall,
               "collections": gc_count}, f)
print("gc_share done")
