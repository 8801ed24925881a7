#!/usr/bin/env python3
"""Where the handler's time goes in one real application, seen by perf (linux-perf).

  python3 bench/realapps/perf_handler.py [--app flask] [--rate 1000] [--native] [--quick]

Runs the application of run.py once under pyagent, pinned to one CPU, inside
`perf record -e cpu-clock -F 20000 -g` (a software clock: this VM has no hardware counters),
the server under wrk as in run.py. Then, from `perf script`, the samples whose call chain
passes through the agent's signal handler (on_sigprof): their share of the program's samples,
and their self time by function (kernel functions included, for the system calls the handler
makes), and by the agent's function that called out of the agent (inclusive). Prints
Markdown. Benchmarks report, they do not assert."""
import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as realapps  # noqa: E402


def record(app, cfg, work, out, seconds):
    r = realapps.Run(app, cfg, 1, work, "perf")
    r.argv = ["perf", "record", "-q", "-e", "cpu-clock", "-F", "20000", "-g", "-o", out, "--"] + r.argv
    if app.server:
        r.start()
        realapps.wait_http(r, time.monotonic() + 120)
        subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c8", "-d%ds" % seconds, "-s",
                        os.path.join(realapps.HERE, "wrk.lua"), "http://127.0.0.1:%d" % r.port],
                       check=True, capture_output=True)
        master = realapps.find_cmd(r.pid, "gunicorn")
        os.kill(master, 15)
        r.proc.wait()
    else:
        r.start()
        r.proc.wait()
    return r.profiles()


def analyse(data):
    text = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym,dso"], capture_output=True,
                          text=True).stdout
    total = inside = 0
    self_time, ours, entries = collections.Counter(), collections.Counter(), collections.Counter()
    for block in text.split("\n\n"):
        frames = []
        for line in block.strip().splitlines():
            parts = line.split(None, 1)
            if len(parts) == 2:
                sym, _, dso = parts[1].rpartition(" (")
                frames.append((sym, dso.rstrip(")")))
        if not frames:
            continue
        total += 1
        at = next((i for i, (s, _) in enumerate(frames) if s == "on_sigprof"), None)
        if at is None:
            continue
        inside += 1
        sym, dso = frames[0]
        where = "kernel" if "kernel" in dso else os.path.basename(dso)
        self_time["%s [%s]" % (sym, where)] += 1
        # The innermost function of ours on the chain: what the time is spent for.
        mine = next((s for s, d in frames[:at + 1] if "libpyagent" in d), "on_sigprof")
        ours[mine] += 1
        # Time in the kernel: which call out of the handler entered it (the first frame
        # outside the kernel, then the agent's function that made the call).
        if where == "kernel":
            user = [(s, d) for s, d in frames[:at + 1] if "kernel" not in d]
            if user:
                site = user[0][0]
                caller = next((s for s, d in user if "libpyagent" in d), "?")
                entries["%s ← %s" % (site, caller) if site != caller else site] += 1
            else:
                entries["(no user frame)"] += 1
    return total, inside, self_time, ours, entries


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--app", default="flask", choices=[a.name for a in realapps.APPS])
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--native", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--lib", default=os.path.join(realapps.ROOT, "build", "release", "lib", "libpyagent.so"))
    a = ap.parse_args()
    if not shutil.which("perf"):
        sys.exit("perf_handler: no perf (scripts/deps.sh --bench installs linux-perf)")
    realapps.LIB = os.path.abspath(a.lib)
    app = next(cls for cls in realapps.APPS if cls.name == a.app)(a.quick)
    work = tempfile.mkdtemp(prefix="pyagent-perf-")
    app.prepare(work)
    cfg = realapps.Config("pyagent", realapps.PY311, a.rate, native=a.native)
    data = os.path.join(work, "perf.data")
    profs = record(app, cfg, work, data, a.seconds)
    total, inside, self_time, ours, entries = analyse(data)
    top = max(profs, key=lambda h: int(h.get("samples", 0))) if profs else {}
    print("perf on %s under pyagent at %d Hz%s (load %s): %d perf samples, %d in the handler (%.1f%%); "
          "header: handler p50 %s ns, p99 %s ns, signals %s\n" % (
              a.app, a.rate, " native" if a.native else "", realapps.loadavg(), total, inside,
              100.0 * inside / max(total, 1), top.get("handler_p50_ns"), top.get("handler_p99_ns"), top.get("signals")))
    print("| self time in the handler, by function | share of the handler |\n|---|---|")
    for s, n in self_time.most_common(15):
        print("| `%s` | %.1f%% |" % (s, 100.0 * n / max(inside, 1)))
    print("\n| innermost agent function on the chain | share of the handler |\n|---|---|")
    for s, n in ours.most_common(12):
        print("| `%s` | %.1f%% |" % (s, 100.0 * n / max(inside, 1)))
    print("\n| kernel time in the handler, by the call that entered it | share of the handler |\n|---|---|")
    for s, n in entries.most_common(8):
        print("| `%s` | %.1f%% |" % (s, 100.0 * n / max(inside, 1)))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
