"""A program to dump (test_agent.py dump_*): it starts, says "ready" on stdout, then stays as
its mode says until its stdin ends (or it is killed).

    stuck.py threads   three named threads: one in time.sleep, one burning CPU, one blocked on
                       a lock; the main thread waits on stdin
    stuck.py gil       a thread spinning in Python, and the main thread in a C call that keeps
                       the GIL (ctypes.PyDLL calls libc's sleep without releasing it): a
                       deadlock on the GIL; stdin is never read
    stuck.py single    no thread: the main thread waits on stdin
    stuck.py burn      one thread burning CPU in burn(), the main thread waits on stdin
    stuck.py fds       two sleeping threads; on stdin's first line it prints its descriptors
                       (/proc/self/fd), its thread count and the number a new open() gets
    stuck.py task      asyncio: the main thread's loop runs a task named stuck-task whose
                       coroutine blocks in time.sleep (until killed)
Lines the test looks for end in a marker comment."""
import ctypes
import os
import re
import sys
import threading
import time

mode = sys.argv[1]
stop = False
lock = threading.Lock()
lock.acquire()


def sleeper():
    time.sleep(3600)  # SLEEP


def burner():
    n = 0
    while not stop: n += 1  # BURN


def blocked():
    lock.acquire()  # BLOCKED


def spin():
    while True: sum(range(100))  # SPIN


def hold_gil():
    ctypes.PyDLL(None).sleep(3600)  # HOLD


def burn():
    n = 0
    while True: n += 1  # TOP


async def stuck_task():
    print("ready", flush=True)
    time.sleep(3600)  # TASK


async def run_task():
    import asyncio
    await asyncio.create_task(stuck_task(), name="stuck-task")


def start(name, fn):
    threading.Thread(target=fn, name=name, daemon=True).start()


if mode == "threads":
    start("sleeper", sleeper)
    start("burner", burner)
    start("blocked", blocked)
elif mode == "gil":
    start("spinner", spin)
elif mode == "burn":
    start("burner", burn)
elif mode == "fds":
    start("nap1", sleeper)
    start("nap2", sleeper)
if mode == "task":
    import asyncio
    asyncio.run(run_task())
time.sleep(0.5)  # every thread is where it stays
print("ready", flush=True)
if mode == "gil":
    hold_gil()
line = sys.stdin.readline()  # WAIT
if mode == "fds":
    seen = []
    for f in sorted(int(f) for f in os.listdir("/proc/self/fd")):
        try:  # the listing's own descriptor is closed by now
            seen.append((f, re.sub(r"\[\d+\]", "", os.readlink("/proc/self/fd/%d" % f))))
        except OSError:
            pass
    print("fds:", seen)
    print("threads:", len(os.listdir("/proc/self/task")))
    fd = os.open(os.devnull, os.O_RDONLY)
    print("new descriptor:", fd)
