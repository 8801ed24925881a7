"""asyncio tasks with known names and a known split of CPU time between them.

    python asyncio_tasks.py OUT.json CPU_SECONDS

One event loop runs five tasks round-robin: alpha, beta and gamma (named with create_task's
name=) burn 1, 2 and 3 units of arithmetic per step, in coroutines of their own
(work_alpha, ...); two more, created without a name, run anon_work at 1 unit per step and so
carry asyncio's default names (Task-N, as their get_name() says). Every step ends in
await asyncio.sleep(0), so the loop switches task after each. The CPU time of each step is
measured with time.thread_time(); OUT.json gets each task's name (get_name()) with its CPU
seconds, under "tasks", the default names under "default_names", and the name of the task
that runs main() (asyncio.run's, which only awaits the others) under "main".

Meanwhile a plain thread, Plain, burns arithmetic outside any event loop; a thread Side runs
an event loop of its own whose task "side" burns in side_work() (so that two loops' tasks
run at once: on 3.11-3.13 both are in one dict of running tasks); and the main thread burns
some in plain_before() before its loop starts. OUT.json also gets the names of Side's tasks
("side": side_work's, "side_main": asyncio.run's there). The loop runs until the tasks have used
CPU_SECONDS of CPU time together, so the number of samples follows from CPU time, not from
how loaded the machine is."""
import asyncio
import json
import sys
import threading
import time

UNIT = 20000
cpu = {}
budget = float(sys.argv[2])
done = threading.Event()
side_names = {"side": "side"}


def spin(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


async def step(units):
    t0 = time.thread_time()
    spin(units * UNIT)
    name = asyncio.current_task().get_name()
    cpu[name] = cpu.get(name, 0.0) + time.thread_time() - t0
    await asyncio.sleep(0)


def over():
    return sum(cpu.values()) >= budget


async def work_alpha():
    while not over():
        await step(1)


async def work_beta():
    while not over():
        await step(2)


async def work_gamma():
    while not over():
        await step(3)


async def anon_work():
    while not over():
        await step(1)


async def main():
    tasks = [asyncio.create_task(work_alpha(), name="alpha"),
             asyncio.create_task(work_beta(), name="beta"),
             asyncio.create_task(work_gamma(), name="gamma"),
             asyncio.create_task(anon_work()),
             asyncio.create_task(anon_work())]
    await asyncio.gather(*tasks)
    return [t.get_name() for t in tasks[3:]], asyncio.current_task().get_name()


async def side_work():
    while not done.is_set():
        spin(UNIT)
        await asyncio.sleep(0)


async def side_main():
    side_names["side_main"] = asyncio.current_task().get_name()
    await asyncio.create_task(side_work(), name="side")


def side_thread():
    asyncio.run(side_main())


def plain_thread():
    while not done.is_set():
        spin(UNIT)


def plain_before():
    t0 = time.thread_time()
    while time.thread_time() - t0 < 0.2:
        spin(UNIT)


plain_before()
threads = [threading.Thread(target=plain_thread, name="Plain"), threading.Thread(target=side_thread, name="Side")]
for th in threads:
    th.start()
default_names, main_name = asyncio.run(main())
done.set()
for th in threads:
    th.join()
with open(sys.argv[1], "w") as f:
    json.dump(dict(side_names, tasks=cpu, default_names=default_names, main=main_name), f)
