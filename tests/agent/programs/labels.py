"""Labelled work whose split is known, for pyagent.labels (tests/agent/test_agent.py).

    python labels.py OUT.json threads|asyncio|nesting|api CPU_SECONDS

Each labelled region calls a function of its own (work_NAME), so a test can check that every
sample of that function carries that region's labels, and measures the thread CPU time spent
in it (time.thread_time()): OUT.json maps each expected label text ("" for none) to the
function's name and those seconds.

threads: threads A, B (twice A's work) and an unlabelled main thread, at once.
asyncio: tasks a, b, c (1:2:3) in one event loop, each labelled inside its task, switching at
    every step; task c creates a child task inside its labels, which inherits them and adds
    its own (contextvars: a task starts with its creator's context).
nesting: an outer block, an inner one adding a label, an inner one overriding it, one removing
    it (None), a decorated function and a decorated coroutine function.
api: what the module says (enabled, current()) and refuses, printed as JSON: the same with
    and without the agent."""
import asyncio
import json
import sys
import threading
import time

import pyagent
from burn import burn_for as spin

OUT, MODE = sys.argv[1], sys.argv[2]
CPU = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
truth = {}
lock = threading.Lock()


def measured(text, fn, seconds):
    t0 = time.thread_time()
    fn(seconds)
    with lock:
        name, seconds = truth.get(text, (fn.__name__, 0.0))
        truth[text] = (name, seconds + time.thread_time() - t0)


def work_a(s): spin(s)
def work_b(s): spin(s)
def work_c(s): spin(s)
def work_child(s): spin(s)
def work_main(s): spin(s)
def work_outer(s): spin(s)
def work_inner(s): spin(s)
def work_override(s): spin(s)
def work_removed(s): spin(s)
def work_decorated(s): spin(s)
def work_async_decorated(s): spin(s)


def threads():
    def run(name, fn, share):
        with pyagent.labels(worker=name):
            measured("worker=" + name, fn, CPU * share)

    ts = [threading.Thread(target=run, args=("A", work_a, 0.25), name="A"),
          threading.Thread(target=run, args=("B", work_b, 0.5), name="B")]
    for t in ts:
        t.start()
    measured("", work_main, CPU * 0.25)
    for t in ts:
        t.join()


async def task(name, fn, steps, share):
    with pyagent.labels(task=name):
        child = None
        if name == "c":
            child = asyncio.ensure_future(child_task(steps))
        for _ in range(steps):
            measured("task=" + name, fn, CPU * share / steps)
            await asyncio.sleep(0)
        if child:
            await child


async def child_task(steps):
    with pyagent.labels(step="child"):
        for _ in range(steps):
            measured("step=child,task=c", work_child, CPU / 12 / steps)
            await asyncio.sleep(0)


async def tasks():
    steps = 50
    await asyncio.gather(task("a", work_a, steps, 1 / 6), task("b", work_b, steps, 2 / 6),
                         task("c", work_c, steps, 3 / 6))


@pyagent.labels(kind="sync")
def decorated():
    measured("kind=sync", work_decorated, CPU / 6)


@pyagent.labels({"kind": "async", "http.route": "/x"})
async def async_decorated():
    measured('http.route=/x,kind=async', work_async_decorated, CPU / 6)


def nesting():
    with pyagent.labels(endpoint="/api", tenant="t1"):
        measured("endpoint=/api,tenant=t1", work_outer, CPU / 6)
        with pyagent.labels(stage="inner"):
            measured("endpoint=/api,stage=inner,tenant=t1", work_inner, CPU / 6)
        with pyagent.labels(tenant="t 2, \"quoted\""):
            measured('endpoint=/api,tenant="t 2, \\"quoted\\""', work_override, CPU / 6)
        with pyagent.labels(tenant=None):
            measured("endpoint=/api", work_removed, CPU / 6)
    decorated()
    asyncio.run(async_decorated())


def api():
    said = {"enabled": pyagent.enabled}
    with pyagent.labels(a="1"):
        with pyagent.labels(b="2", a="3"):
            said["nested"] = pyagent.current()
        said["outer"] = pyagent.current()
    said["after"] = pyagent.current()
    refused = []
    for kwargs in ({"service_name": "x"}, {"span_id": "x"}, {"span_name": "x"}, {"__name__": "x"}, {"9lives": "x"}, {"a-b": "x"},
                   {"a": ""}, {"a": "x" * 2049}, {"a": "bad\ud800"}, {"a": "line\nbreak"},
                   {"a": 7}, {"n%d" % i: "v" for i in range(17)}):
        try:
            with pyagent.labels(kwargs):
                pass
            refused.append(None)
        except (ValueError, TypeError) as e:
            refused.append("%s: %s" % (type(e).__name__, e))
    said["refused"] = refused
    print(json.dumps(said, sort_keys=True))


if MODE == "threads":
    threads()
elif MODE == "asyncio":
    asyncio.run(tasks())
elif MODE == "nesting":
    nesting()
elif MODE == "api":
    api()
with open(OUT, "w") as f:
    json.dump(truth, f)
