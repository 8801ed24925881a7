#!/usr/bin/env python3
"""What labels cost (docs/benchmarks.md, "Labels").

  bench/labels_cost.py [--python PY] [--lib build/release/lib/libpyagent.so] [--runs N]

1. The handler: bench/workloads/labelled.py spins at stack depth 30 at 250 Hz, with pyagent
   not imported, imported without labels, inside pyagent.labels(...), and inside it in a
   context of 40 other variables, and (span profiles) inside pyagent.labels and one
   OpenTelemetry root span with pyagent.SpanProcessor, or a new root span every 4 ms (sid's
   SDK, scripts/pythons.sh --otel); the runs alternate between the six so that drift falls on
   each alike. Reported: the median over runs of the handler's p50 and p99 (profile header),
   and of its mean from the header's histogram.
2. The program: what one `with pyagent.labels(...)` costs the code that enters and leaves it
   (timeit, a label set already interned, and one made of a new value each time), with and
   without the agent; and what pyagent.SpanProcessor adds to a root span's start and end.
Prints a Markdown report."""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from agent_overhead import agent_env, base_env, read_header, run_cpu  # noqa: E402

MODES = ["none", "unlabelled", "labelled", "crowded", "spanned", "requests"]


def hist_mean_ns(hist):
    """The mean of the header's handler_hist (FLOOR:COUNT,...; four buckets per doubling, each
    taken at its middle): finer than the p50's bucket when programs differ by less than one."""
    total = n = 0.0
    for item in hist.split(","):
        floor, count = (int(x) for x in item.split(":"))
        step = (1 << (floor.bit_length() - 1)) / 4.0
        total += (floor + step / 2) * count
        n += count
    return total / n if n else 0.0
TIMEIT = r'''
import timeit, pyagent
n = 200000
same = timeit.timeit("with L(endpoint='/api', tenant='t1'): pass", globals={"L": pyagent.labels}, number=n)
i = iter(range(10**9))
new = timeit.timeit("with L(request=str(next(i) % 4000)): pass", globals={"L": pyagent.labels, "i": i}, number=20000)
import contextvars
v = contextvars.ContextVar("v")
scale = timeit.timeit("v.reset(v.set(1))", globals={"v": v}, number=n)
print("%.3f %.3f %.3f %s" % (same / n * 1e6, new / 20000 * 1e6, scale / n * 1e6, pyagent.enabled))
'''
SPAN_TIMEIT = r'''
import timeit, pyagent
from opentelemetry.sdk.trace import TracerProvider
bare, bridged = TracerProvider(), TracerProvider()
bridged.add_span_processor(pyagent.SpanProcessor())
n = 20000
times = [timeit.timeit("with t.start_as_current_span('GET /api/orders'): pass",
                       globals={"t": p.get_tracer("bench")}, number=n) / n * 1e6 for p in (bare, bridged)]
print("%.2f %.2f %s" % (times[0], times[1], pyagent.enabled))
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(HERE), "build/release/lib/libpyagent.so"))
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=2.0)
    a = ap.parse_args()
    lib = os.path.abspath(a.lib)
    prog = os.path.join(HERE, "workloads", "labelled.py")
    got = {m: ([], [], []) for m in MODES}
    otel = subprocess.run([os.path.join(os.path.dirname(HERE), "scripts", "pythons.sh"), "--otel"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        pypath = {"PYTHONPATH": os.pathsep.join((otel, os.path.dirname(lib)))}
        for _ in range(a.runs):
            for m in MODES:
                run_cpu([a.python, prog, m, str(a.seconds)], agent_env(tmp, lib, 250, pypath))
                h = read_header(tmp)
                got[m][0].append(int(h.get("handler_p50_ns", 0)))
                got[m][1].append(int(h.get("handler_p99_ns", 0)))
                got[m][2].append(hist_mean_ns(h.get("handler_hist", "")))
        print("Python %s, %d alternating runs of %.1f s each, 250 Hz, stack depth 30\n" % (a.python, a.runs, a.seconds))
        print("| program | handler p50: median (range) | handler p99: median | mean (histogram): median (range) |")
        print("|---|---|---|---|")
        for m in MODES:
            p50, p99, mean = got[m]
            print("| %s | %.2f µs (%.2f–%.2f) | %.2f µs | %.2f µs (%.2f–%.2f) |"
                  % (m, statistics.median(p50) / 1000, min(p50) / 1000, max(p50) / 1000,
                     statistics.median(p99) / 1000, statistics.median(mean) / 1000, min(mean) / 1000,
                     max(mean) / 1000))
        print("\n| `with pyagent.labels(...)`, made, entered and left | same set | a new set each time (of 4,000) | for scale: a ContextVar set and reset | labels reach the agent |")
        print("|---|---|---|---|---|")
        for name, env in (("without the agent", base_env(tmp)), ("with the agent", agent_env(tmp, lib, 250))):
            env = dict(env, **pypath)
            out = subprocess.run([a.python, "-c", TIMEIT], env=env, cwd=tmp, capture_output=True, text=True)
            same, new, scale, enabled = out.stdout.split() if out.returncode == 0 else ("?", "?", "?", out.stderr[-200:])
            print("| %s | %s µs | %s µs | %s µs | %s |" % (name, same, new, scale, enabled))
            read_header(tmp)
        print("\n| a root span, started and ended (`with start_as_current_span(...): pass`) | SDK alone | SDK + pyagent.SpanProcessor | labels reach the agent |")
        print("|---|---|---|---|")
        for name, env in (("without the agent", base_env(tmp)), ("with the agent", agent_env(tmp, lib, 250))):
            env = dict(env, **pypath)
            out = subprocess.run([a.python, "-c", SPAN_TIMEIT], env=env, cwd=tmp, capture_output=True, text=True)
            bare, bridged, enabled = out.stdout.split() if out.returncode == 0 else ("?", "?", out.stderr[-200:])
            print("| %s | %s µs | %s µs | %s |" % (name, bare, bridged, enabled))
            read_header(tmp)


if __name__ == "__main__":
    main()
