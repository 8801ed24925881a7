"""asyncio tasks that come and go as fast as the loop can make them (PYAGENT_ASYNC=1's reads
race their ends): for SECONDS of wall time, bursts of 200 tasks that each await a few of
asyncio.sleep(0), a lock, a queue and a future, then finish; eager tasks too on 3.12+.
Prints how many tasks ran and a checksum of their results, the same with or without the
agent.

    python async_churn.py SECONDS"""
import asyncio
import sys
import time


async def one(i, lock, queue):
    await asyncio.sleep(0)
    async with lock:
        await queue.put(i)
    fut = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(fut.set_result, i * 3)
    got = await fut
    await asyncio.sleep(0)
    return got + await queue.get()


async def main(seconds):
    if hasattr(asyncio, "eager_task_factory"):
        asyncio.get_running_loop().set_task_factory(asyncio.eager_task_factory)
    lock, queue = asyncio.Lock(), asyncio.Queue()
    end, total, n = time.monotonic() + seconds, 0, 0
    while time.monotonic() < end:
        results = await asyncio.gather(*(asyncio.create_task(one(i, lock, queue), name="c%d" % i)
                                         for i in range(200)))
        total += sum(results)
        n += len(results)
    # The sum does not depend on the number of bursts: one burst's sum times the bursts.
    print("bursts of 200 tasks all done:", n % 200 == 0, "checksum ok:", total == (n // 200) * sum(4 * i for i in range(200)))


asyncio.run(main(float(sys.argv[1])))
