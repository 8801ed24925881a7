"""Deep recursion, generators, coroutines and asyncio, exceptions, many threads."""
import asyncio
import sys
import threading
import time

sys.setrecursionlimit(20000)


def burn(seconds):
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        x += 1
    return x


def deep(n):
    if n == 0:
        return burn(0.6)
    return deep(n - 1) + 0


def producer():
    for i in range(4000000):
        yield i * 2


def consume_generator():
    return sum(v for v in producer() if v % 3)


async def coro_work(n):
    x = 0
    for i in range(n):
        x += i
        if i % 100000 == 0:
            await asyncio.sleep(0)
    return x


async def run_coroutines():
    return await asyncio.gather(*(coro_work(1500000) for _ in range(4)))


def raise_and_catch():
    caught = 0
    for i in range(300000):
        try:
            raise ValueError(i)
        except ValueError:
            caught += 1
    return caught


def many_threads():
    # 5 ms of CPU each: CPU-time timers fire on the scheduler tick (4 ms here), so a thread
    # much shorter than a tick is rarely sampled at all.
    def tiny():
        burn(0.005)

    for _ in range(10):
        ts = [threading.Thread(target=tiny) for _ in range(20)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


deep(5000)
print("generator", consume_generator() > 0)
print("coroutines", len(asyncio.run(run_coroutines())))
print("exceptions", raise_and_catch())
many_threads()
print("shapes done")
