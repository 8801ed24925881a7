"""asyncio tasks with a known split of their time between running and what they wait on
(PYAGENT_ASYNC=1 in wall mode samples every task).

    python async_split.py OUT.json SECONDS          the split
    python async_split.py OUT.json SECONDS many N   N tasks sleeping (more than the cap per tick)

One event loop, six tasks that live for the whole run (SECONDS of wall time, then all are
cancelled together):
  - sleeper0, sleeper1: await asyncio.sleep(0.02) in a loop, in nap();
  - holder: takes an asyncio.Lock and sleeps in hold() with it held;
  - locked: waits for that lock in want_lock(), the whole run;
  - future: awaits a future that is never set, in outer_wait() -> inner_wait();
  - mixed: in a loop, burns 100 ms of CPU in mixed_burn(), then sleeps 200 ms in mixed();
    the wall time it spent from entering the burn to entering the sleep ("run") and from
    there to resuming ("wait") is measured with time.perf_counter() and written to OUT.json,
    with the tasks' names and the wall time they lived ("life").
Under load the burn stretches (the thread is preempted) and the measured split follows.
Meanwhile a thread Side runs an event loop of its own whose task "side-nap" sleeps in
side_nap() until the main loop is done; OUT.json gets the name of Side's main task
("side_main")."""
import asyncio
import json
import sys
import threading
import time

from wsgi_burn import app_burn

out, seconds = sys.argv[1], float(sys.argv[2])
truth = {"run": 0.0, "wait": 0.0}


def mixed_burn(cpu):
    return app_burn(cpu)


async def nap():
    while True:
        await asyncio.sleep(0.02)


async def hold(lock, held):
    async with lock:
        held.set()
        while True:
            await asyncio.sleep(0.05)


async def want_lock(lock):
    async with lock:
        pass


async def inner_wait(fut):
    return await fut


async def outer_wait(fut):
    return await inner_wait(fut)


async def mixed():
    while True:
        t0 = time.perf_counter()
        mixed_burn(0.1)
        t1 = time.perf_counter()
        truth["run"] += t1 - t0
        try:
            await asyncio.sleep(0.2)
        finally:  # the last wait ends in the cancellation, and counts to there
            truth["wait"] += time.perf_counter() - t1


side_done = threading.Event()
side_started = threading.Event()


async def side_nap():
    while not side_done.is_set():
        await asyncio.sleep(0.02)


async def side_main():
    truth["side_main"] = asyncio.current_task().get_name()
    nap = asyncio.create_task(side_nap(), name="side-nap")
    side_started.set()
    await nap


async def main():
    loop = asyncio.get_running_loop()
    tasks, side = [], None
    if len(sys.argv) <= 3:  # Side's loop runs first: its start does not keep these waiting
        side = threading.Thread(target=asyncio.run, args=(side_main(),), name="Side")
        side.start()
        await loop.run_in_executor(None, side_started.wait)
    if len(sys.argv) > 3 and sys.argv[3] == "many":
        tasks = [asyncio.create_task(nap(), name="many%d" % i) for i in range(int(sys.argv[4]))]
    else:
        lock, held = asyncio.Lock(), asyncio.Event()
        fut = loop.create_future()
        tasks.append(asyncio.create_task(hold(lock, held), name="holder"))
        await held.wait()
        tasks += [asyncio.create_task(nap(), name="sleeper0"),
                  asyncio.create_task(nap(), name="sleeper1"),
                  asyncio.create_task(want_lock(lock), name="locked"),
                  asyncio.create_task(outer_wait(fut), name="future"),
                  asyncio.create_task(mixed(), name="mixed")]
    start = time.perf_counter()
    await asyncio.sleep(seconds)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    truth["life"] = time.perf_counter() - start
    truth["names"] = [t.get_name() for t in tasks]
    if side:
        side_done.set()
        side.join()


asyncio.run(main())
with open(out, "w") as f:
    json.dump(truth, f)
