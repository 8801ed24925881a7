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
    stuck.py tasks     asyncio: task "holder" holds an asyncio.Lock and sleeps, "locked-out"
                       waits for the lock, "burner" burns CPU in task_burn() between
                       asyncio.sleep(0)s, and the main task waits for stdin's line (read in
                       the loop's executor)
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


async def tasks_holder(lock, held):
    async with lock:
        held.set()
        await asyncio.sleep(3600)  # HOLDER


async def tasks_locked(lock):
    async with lock:  # LOCKED
        pass


def task_burn():
    n = 0
    for i in range(100000): n += i  # TASKBURN


async def tasks_burner():
    while True:
        task_burn()
        await asyncio.sleep(0)


async def run_tasks():
    lock, held = asyncio.Lock(), asyncio.Event()
    tasks = [asyncio.create_task(tasks_holder(lock, held), name="holder")]
    await held.wait()
    tasks.append(asyncio.create_task(tasks_locked(lock), name="locked-out"))
    tasks.append(asyncio.create_task(tasks_burner(), name="burner"))
    await asyncio.sleep(0.5)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


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
if mode == "tasks":
    import asyncio
    asyncio.run(run_tasks())
    sys.exit(0)
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
