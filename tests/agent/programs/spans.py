"""Requests as OpenTelemetry root spans, with child spans, whose CPU is known, for
pyagent.SpanProcessor (tests/agent/test_agent.py, tests/uploader/test_upload.py).

    PYTHONPATH=DIST:LIBDIR python spans.py OUT.json CPU_SECONDS [REQUESTS [threads|asyncio|names]]

A TracerProvider of the real SDK with pyagent.SpanProcessor() and no exporter. Two threads
serve requests at once: thread A "GET /light" (1 unit each), thread B "POST /heavy" (2 units,
inside pyagent.labels(tenant="t1"), so its samples carry that label too) and, on thread A too,
"GET /remote" (1 unit), a root span whose parent is a remote span context (a request that
came with a traceparent). Each request does half its work in the root span and half in a
child span ("db" or "render"), in a function of its own, req_N, made for that request, so a
test knows which request (and so which root span) a sample belongs to. The main thread works
outside any span (outside_work). asyncio: the same requests served by three tasks of one
event loop at once (one task per kind), each request awaiting between its root span's half
and its child's, so that the loop switches tasks inside spans; outside_work runs in the loop's
thread before the tasks start. names: 1,100 root spans of as many names, which use up the
agent's 1,024 span names, then one request "GET /late" (all its CPU in one root span), whose
name the agent refuses: its samples carry span_id only. OUT.json: {"requests": {"req_N": [span_id as 16 hex digits,
span name, thread CPU seconds]}, "outside": seconds, "enabled": pyagent.enabled}."""
import asyncio
import json
import sys
import threading
import time

import pyagent
from burn import burn_for as spin
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

OUT, CPU = sys.argv[1], float(sys.argv[2])
REQUESTS = int(sys.argv[3]) if len(sys.argv) > 3 else 12
MODE = sys.argv[4] if len(sys.argv) > 4 else "threads"

provider = TracerProvider()
provider.add_span_processor(pyagent.SpanProcessor())
tracer = provider.get_tracer("spans.py")
requests = {}
lock = threading.Lock()


def make_request_function(n):
    """A function named req_N of its own per request."""
    scope = {"spin": spin}
    exec("def req_%d(seconds):\n    spin(seconds)\n" % n, scope)
    return scope["req_%d" % n]


def record(n, name, span, used):
    with lock:
        requests["req_%d" % n] = [format(span.get_span_context().span_id, "016x"), name, used]


def serve(n, name, child, units, parent=None):
    fn = make_request_function(n)
    seconds = CPU * units / (4.0 * REQUESTS)  # 1 + 2 + 1 units a request of each kind
    t0 = time.thread_time()
    with tracer.start_as_current_span(name, context=parent) as span:
        fn(seconds / 2)
        with tracer.start_as_current_span(child):
            fn(seconds / 2)
    record(n, name, span, time.thread_time() - t0)


async def serve_async(n, name, child, units, parent=None):
    """serve() in a task, switching to the others inside the root span: the CPU each part
    uses is measured apart, so the other tasks' turns are not counted."""
    fn = make_request_function(n)
    seconds = CPU * units / (4.0 * REQUESTS)
    with tracer.start_as_current_span(name, context=parent) as span:
        t0 = time.thread_time()
        fn(seconds / 2)
        used = time.thread_time() - t0
        await asyncio.sleep(0)
        with tracer.start_as_current_span(child):
            t0 = time.thread_time()
            fn(seconds / 2)
            used += time.thread_time() - t0
            await asyncio.sleep(0)
    record(n, name, span, used)


def remote_parent():
    ctx = trace.SpanContext(trace_id=0x5EED, span_id=0xFEED, is_remote=True,
                            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
    return trace.set_span_in_context(trace.NonRecordingSpan(ctx))


def thread_a():
    for i in range(REQUESTS):
        serve(2 * i, "GET /light", "db", 1)
        serve(1000 + i, "GET /remote", "db", 1, remote_parent())


def thread_b():
    with pyagent.labels(tenant="t1"):
        for i in range(REQUESTS):
            serve(2 * i + 1, "POST /heavy", "render", 2)


def outside_work(seconds):
    spin(seconds)


async def tasks():
    async def kind(start, name, child, units, parent=None, labelled=False):
        if labelled:
            with pyagent.labels(tenant="t1"):
                return await kind(start, name, child, units, parent)
        for i in range(REQUESTS):
            await serve_async(start + (2 * i if start < 1000 else i), name, child, units,
                              parent and parent())
    await asyncio.gather(kind(0, "GET /light", "db", 1), kind(1, "POST /heavy", "render", 2, labelled=True),
                         kind(1000, "GET /remote", "db", 1, remote_parent))


t0 = time.thread_time()
if MODE == "names":
    outside_work(CPU / 4)
    outside = time.thread_time() - t0
    for i in range(1100):
        with tracer.start_as_current_span("name %d" % i):
            pass
    serve(0, "GET /late", "db", 1)
elif MODE == "asyncio":
    outside_work(CPU / 4)
    outside = time.thread_time() - t0
    asyncio.run(tasks())
else:
    ts = [threading.Thread(target=thread_a, name="A"), threading.Thread(target=thread_b, name="B")]
    for t in ts:
        t.start()
    outside_work(CPU / 4)
    outside = time.thread_time() - t0
    for t in ts:
        t.join()
with open(OUT, "w") as f:
    json.dump({"requests": requests, "outside": outside, "enabled": pyagent.enabled}, f)
