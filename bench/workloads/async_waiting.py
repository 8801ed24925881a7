"""N asyncio tasks that wait the whole run (asyncio.sleep under a coroutine two deep), for
bench/async_cost.py: prints the CPU seconds of the process's threads but the main one (the
agent's tick thread: the program has no other thread) and the main thread's own, from
/proc/self/task/TID/schedstat (nanoseconds).

    python async_waiting.py N SECONDS"""
import asyncio
import os
import sys
import threading


async def leaf():
    await asyncio.sleep(3600)


async def waiter():
    await leaf()


async def main(n, seconds):
    tasks = [asyncio.create_task(waiter(), name="w%d" % i) for i in range(n)]
    await asyncio.sleep(seconds)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def cpu_ns(tid):
    """A thread's time on a CPU (schedstat's first field, in ns)."""
    with open("/proc/self/task/%d/schedstat" % tid) as f:
        return int(f.read().split()[0])


asyncio.run(main(int(sys.argv[1]), float(sys.argv[2])))
me = threading.get_native_id()
others = sum(cpu_ns(int(t)) for t in os.listdir("/proc/self/task") if int(t) != me)
print("%.6f %.6f" % (others / 1e9, cpu_ns(me) / 1e9))
