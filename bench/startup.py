#!/usr/bin/env python3
"""Start-up and exit cost of the agent.

  bench/startup.py [--python PY] [--lib build/release/lib/libpyagent.so] [--rounds N]
                   [--small-rounds N] [--exit-rounds N] [--cold-rounds N] [--against OLD.so]
                   [--only TEXT] [--stages] [--json FILE]

Start-up: `PY -c pass`, `PY -c "import asyncio"`, `/bin/true`, `sh -c true`, each with and
without LD_PRELOAD=libpyagent.so, and two floors: `/bin/true` with an empty library preloaded,
and both Python cases with the least an in-process sampler does (bench/floor_sampler.c: a
perf event at the same rate, an empty handler, a file written at exit); `python -c pass` also
with that sampler loaded as pyagent's agent is, by a preloaded stub's `dlopen` in CPython only,
and (CPython 3.11) with its handler also walking the frames and naming each code object. Exit: a Python program that burns 50 ms of CPU (so that the
agent has samples to deliver) and exits, with the agent writing a local file (no server),
with PYAGENT_SERVER naming a closed port on 127.0.0.1 (refused at once) and a black hole
(a local listener that accepts and never answers). With --stages, `PY -c pass` also runs with the
agent stopped after each stage of its start (loaded and configured only; then also the
interpreter detected and the tables set up; then also sampling armed and the file written, at
1 Hz): the differences between those rows are what each stage costs. Cold: `PY -c pass` again,
each run after 1.5 s in which no process of the benchmark ran (--cold-rounds), with the agent
as it starts by default, with the agent on perf events, and the least sampler (a perf event):
the first per-task perf event on a machine that has none costs the kernel an RCU grace period
(5-20 ms), which back-to-back runs never see.

Each round runs, for every case, the baseline, the agent and the baseline again (A, B, A'),
in an order that rotates from round to round so that drift hits all alike; A' against A is
the noise floor. With --against, an earlier build of the library runs in the same rounds too
(A, B, C, A'), for its cost beside the current one's. `/bin/true` and `sh -c true` take a
millisecond each, so they get more rounds (--small-rounds). Time is wall-clock from spawn to reaped exit (os.posix_spawn, output to
/dev/null), and the child's CPU time (user + system, from wait4), which a loaded machine
disturbs less. Reported: medians, the interquartile range, and the agent's cost as the median
of the per-round differences B - A (the A/A column is the same for A' - A), the minor page
faults the agent adds (from wait4, which load does not move), and first what this machine
charges for a system call, for a fresh page's first touch and for one in a 2 MiB area not used
before (a page-table page more), measured in the same run: on a VM where a fault costs 10-20
us, the pages a library touches weigh more than its instructions.
Prints Markdown."""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BURN = "import time\nt = time.process_time() + 0.05\nwhile time.process_time() < t: pass"


def spawn(argv, env):
    """(seconds from spawn to reaped exit, the child's CPU seconds, its minor page faults);
    exits on a failing run."""
    fa = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
          (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
          (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0)]
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=fa)
    _, status, ru = os.wait4(pid, 0)
    t = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("run failed (%s): %s" % (os.waitstatus_to_exitcode(status), argv))
    return t, ru.ru_utime + ru.ru_stime, ru.ru_minflt


class BlackHole:
    """A listener on 127.0.0.1 that accepts every connection and never reads or answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held = []
        threading.Thread(target=self.loop, daemon=True).start()

    def loop(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(c)
            # The agent's connection is closed by the agent; keep the list short.
            self.held = self.held[-256:]


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cases(py, lib, tmp, against=None):
    """[(name, argv, env without, [env with, env with the earlier library], goal in ms, small)]."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYAGENT_", "PYROSCOPE_")) and k != "LD_PRELOAD"}
    base["PYTHONDONTWRITEBYTECODE"] = "1"

    def one(library, server):
        e = dict(base, LD_PRELOAD=library, PYAGENT_SPOOL_DIR=os.path.join(tmp, "spool"))
        if server:  # no local file then, as the default is
            e["PYAGENT_SERVER"] = server
        else:
            e["PYAGENT_OUTPUT"] = os.path.join(tmp, "p.%p.folded")
        return e

    def agent(server=None):
        return [one(library, server) for library in [lib] + ([against] if against else [])]

    sh = "/bin/sh"
    # The floor of any LD_PRELOADed agent: an empty library, loaded and nothing else.
    empty = os.path.join(tmp, "empty.so")
    with open(empty + ".c", "w") as f:
        f.write("int pyagent_bench_empty;\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", empty, empty + ".c"], check=True)
    # The floor of any in-process sampler (bench/floor_sampler.c): loaded, a perf event on the
    # main thread at the agent's default rate, an empty handler, a file written at exit.
    least = os.path.join(tmp, "floor_sampler.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", least,
                    os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor_sampler.c")], check=True)
    least_env = dict(base, LD_PRELOAD=least, FLOOR_OUT=os.path.join(tmp, "floor"))
    # The same sampler loaded as pyagent's agent is: a stub preloaded (the same library) loads
    # it with dlopen when the process is CPython (FLOOR_LOAD); then also walking the Python
    # frames and naming each code object at its first sight (FLOOR_WALK, CPython 3.11 only).
    least_core = os.path.join(tmp, "floor_core.so")
    shutil.copyfile(least, least_core)
    loaded_env = dict(least_env, FLOOR_LOAD=least_core)
    walk_env = dict(loaded_env, FLOOR_WALK="1")
    walks = subprocess.run([py, "-c", "import sys; print(sys.version_info[:2] == (3, 11))"],
                           capture_output=True, text=True).stdout.strip() == "True"
    # The agent stopped after each of its start-up stages (--stages): loaded and configured
    # only (PYAGENT_ENABLE=0); also the interpreter detected and the tables and uploader set up,
    # then stopped for want of an output (PYAGENT_OUTPUT=/dev/null); also sampling started,
    # the death signals watched and the profile written at exit, with next to no sample
    # (PYAGENT_RATE=1). The full row adds the samples at the default rate.
    on = agent()[0]
    staged = [
        ("`python -c pass`, stage 1: loaded, configured, disabled", [py, "-c", "pass"], base,
         [dict(on, PYAGENT_ENABLE="0")], 1.0, False),
        ("`python -c pass`, stage 2: + detection, tables, uploader; no output", [py, "-c", "pass"], base,
         [dict(on, PYAGENT_OUTPUT="/dev/null")], 1.0, False),
        ("`python -c pass`, stage 3: + sampling armed, deaths watched, file written; 1 Hz", [py, "-c", "pass"],
         base, [dict(on, PYAGENT_RATE="1")], 1.0, False),
    ]
    out = [
        ("`python -c pass`", [py, "-c", "pass"], base, agent(), 1.0, False),
        ("`python -c \"import asyncio\"`", [py, "-c", "import asyncio"], base, agent(), 1.0, False),
        ("`python -c pass`, the least sampler (floor)", [py, "-c", "pass"], base, [least_env], 1.0, False),
        ("`python -c \"import asyncio\"`, the least sampler (floor)", [py, "-c", "import asyncio"], base,
         [least_env], 1.0, False),
        ("`python -c pass`, the least sampler loaded by a stub's `dlopen` (floor)", [py, "-c", "pass"], base,
         [loaded_env], 1.0, False),
    ] + ([
        ("`python -c pass`, the least sampler loaded by a stub, walking and naming frames (floor)",
         [py, "-c", "pass"], base, [walk_env], 1.0, False),
    ] if walks else []) + [
        ("`/bin/true`", ["/bin/true"], base, agent(), 0.1, True),
        ("`sh -c true`", [sh, "-c", "true"], base, agent(), 0.1, True),
        ("`/bin/true`, an empty library preloaded (floor)", ["/bin/true"], base, [dict(base, LD_PRELOAD=empty)],
         0.1, True),
    ]
    hole = BlackHole()
    exits = [
        ("exit, no server (local file)", [py, "-c", BURN], base, agent(), 0.0, False),
        ("exit, server refuses", [py, "-c", BURN], base, agent("http://127.0.0.1:%d" % closed_port()), 50.0, False),
        ("exit, black-hole server", [py, "-c", BURN], base, agent("http://127.0.0.1:%d" % hole.port), 1000.0,
         False),
    ]
    # Cold starts: every run after 1.5 s in which no process of this benchmark ran. The kernel
    # switches its perf scheduler hooks off 1 s after the last per-task perf event on the
    # machine ends (perf_sched_work), and the first such event made then waits for an RCU grace
    # period (account_event: static_branch_enable, synchronize_rcu). Back-to-back runs, as in
    # the rows above, keep the hooks on and never see it; a command run now and then does.
    # (Another process holding a per-task perf event, a `perf record` or a profiled service,
    # keeps them on too: then these rows read as the warm ones.)
    # No goal of their own (the issue's goals are the warm rows'): they show what the timer's
    # kind costs when the kernel's perf hooks are off.
    colds = [
        ("`python -c pass`, cold (1.5 s idle before each run)", [py, "-c", "pass"], base, [on], None, False),
        ("`python -c pass`, cold, the agent on perf events (`PYAGENT_TIMER=perf`)", [py, "-c", "pass"], base,
         [dict(on, PYAGENT_TIMER="perf")], None, False),
        ("`python -c pass`, cold, the least sampler (floor, a perf event)", [py, "-c", "pass"], base, [least_env],
         None, False),
    ]
    return out, exits, staged, colds


def stats(a, b, a2, c=None):
    """Medians and IQRs in ms of the series; costs and A/A as medians of per-round deltas."""
    a, b, a2 = ([x * 1000 for x in xs] for xs in (a, b, a2))

    def iqr(xs):
        q = statistics.quantiles(xs, n=4)
        return q[2] - q[0]
    out = {"without_ms": statistics.median(a), "without_iqr": iqr(a), "with_ms": statistics.median(b),
           "with_iqr": iqr(b), "cost_ms": statistics.median(y - x for x, y in zip(a, b)),
           "aa_ms": statistics.median(y - x for x, y in zip(a, a2))}
    if c:
        out["against_cost_ms"] = statistics.median(y * 1000 - x for x, y in zip(a, c))
    return out


def measure(name, argv, env_a, env_bs, goal, rounds, pause=0.0):
    envs = [env_a] + env_bs + [env_a]  # A, B, (C,) A'
    runs = [[] for _ in envs]
    for e in envs[:-1]:  # warm the page cache
        spawn(argv, e)
    for r in range(rounds):
        for i in range(len(envs)):
            k = (r + i) % len(envs)
            time.sleep(pause)
            runs[k].append(spawn(argv, envs[k]))
    order = [0, 1, len(envs) - 1] + ([2] if len(envs) == 4 else [])
    wall = stats(*([t for t, _, _ in runs[k]] for k in order))
    cpu = stats(*([c for _, c, _ in runs[k]] for k in order))
    faults = statistics.median(b[2] - a[2] for a, b in zip(runs[0], runs[1]))
    return {"case": name, "rounds": rounds, "goal_ms": goal, "wall": wall, "cpu": cpu, "faults": faults}


FLOOR_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
int main(void) {
    enum { ROUNDS = 41, CALLS = 2000, PAGES = 64 };
    const size_t area = 2UL << 20;
    double sc[ROUNDS], pf[ROUNDS], pa[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        double t = now();
        for (int i = 0; i < CALLS; i++)
            syscall(SYS_getppid);
        sc[r] = (now() - t) / CALLS;
        char *p = mmap(NULL, PAGES * 4096L, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return 1;
        t = now();
        for (int i = 0; i < PAGES; i++)
            p[i * 4096L] = 1;
        pf[r] = (now() - t) / PAGES;
        munmap(p, PAGES * 4096L);
        /* One page in each of PAGES 2 MiB areas nothing else uses: each first touch also
         * costs the kernel a page-table page. */
        char *q = mmap(NULL, (PAGES + 1) * area, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (q == MAP_FAILED)
            return 1;
        char *a = (char *)(((unsigned long)q + area - 1) & ~(area - 1));
        t = now();
        for (int i = 0; i < PAGES; i++)
            a[i * area] = 1;
        pa[r] = (now() - t) / PAGES;
        munmap(q, (PAGES + 1) * area);
    }
    qsort(sc, ROUNDS, sizeof *sc, cmp);
    qsort(pf, ROUNDS, sizeof *pf, cmp);
    qsort(pa, ROUNDS, sizeof *pa, cmp);
    printf("%.3f %.3f %.3f\n", sc[ROUNDS / 2], pf[ROUNDS / 2], pa[ROUNDS / 2]);
    return 0;
}
"""


def goal_text(goal_ms):
    """The goal column: "≤ +1 ms", "+0 ms" (nothing at all), or "-" (a row without a goal)."""
    if goal_ms is None:
        return "-"
    return "%s%g ms" % ("≤ +" if goal_ms else "+", goal_ms)


def machine_floor(tmp):
    """(a system call, a fresh page's first touch, a first touch in a 2 MiB area not used
    before) in microseconds, medians: what this machine charges for what a preloaded library
    adds at start-up besides instructions (base/reserve.h)."""
    src, exe = os.path.join(tmp, "floor.c"), os.path.join(tmp, "floor")
    with open(src, "w") as f:
        f.write(FLOOR_C)
    subprocess.run(["cc", "-O2", "-o", exe, src], check=True)
    out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1]), float(out[2])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default="/usr/bin/python3.11")
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "release", "lib", "libpyagent.so"))
    ap.add_argument("--rounds", type=int, default=40, help="rounds for the start-up cases")
    ap.add_argument("--small-rounds", type=int, help="rounds for /bin/true and sh -c true (default 10 x --rounds)")
    ap.add_argument("--exit-rounds", type=int, default=7, help="rounds for the exit cases")
    ap.add_argument("--cold-rounds", type=int, default=8,
                    help="rounds for the cold start-up cases (each run after 1.5 s idle; 0: none)")
    ap.add_argument("--against", help="an earlier build of the library, measured in the same rounds")
    ap.add_argument("--only", help="run only the cases whose name contains TEXT (e.g. 'pass', 'exit')")
    ap.add_argument("--stages", action="store_true",
                    help="also `python -c pass` with the agent stopped after each start-up stage")
    ap.add_argument("--json")
    a = ap.parse_args()
    lib = os.path.abspath(a.lib)
    against = os.path.abspath(a.against) if a.against else None
    for path in [lib] + ([against] if against else []):
        if not os.path.exists(path):
            sys.exit("no agent library at %s (scripts/build.sh release)" % path)
    small = a.small_rounds or 10 * a.rounds
    tmp = tempfile.mkdtemp(prefix="pyagent-startup-")
    start, exits, staged, colds = cases(a.python, lib, tmp, against)
    if a.stages:
        start = start[:1] + staged + start[1:]
    # The agent must really be there: a profile for `python -c pass`.
    spawn(start[0][1], start[0][3][0])
    if not any(n.endswith(".folded") for n in os.listdir(tmp)):
        sys.exit("the agent wrote no profile for `%s -c pass`: is %s the agent?" % (a.python, lib))
    print("Python: %s; agent: %s%s; %d rounds (start-up; %d for /bin/true and sh -c true), %d rounds (exit), "
          "%d rounds (cold); A, B, %sA' interleaved\n"
          % (a.python, lib, "; earlier library: %s" % against if against else "", a.rounds, small, a.exit_rounds,
             a.cold_rounds, "C, " if against else ""))
    syscall_us, fault_us, area_us = machine_floor(tmp)
    print("This machine: a system call %.2f us, a fresh page's first touch (a minor fault) %.2f us, "
          "a first touch in a 2 MiB area not used before %.2f us (medians)\n" % (syscall_us, fault_us, area_us))
    print("| case | rounds | without: median (IQR) | with: median (IQR) | agent's cost | A/A | goal "
          "| CPU without | CPU cost | CPU A/A | page faults added |%s"
          % (" earlier library's cost | its CPU cost |" if against else ""))
    print("|---|---|---|---|---|---|---|---|---|---|---|%s" % ("---|---|" if against else ""))
    rows = []
    for c in start + exits + (colds if a.cold_rounds else []):
        if a.only and a.only not in c[0]:
            continue
        cold = c in colds
        r = measure(*c[:5], a.exit_rounds if c in exits else a.cold_rounds if cold else small if c[5] else a.rounds,
                    pause=1.5 if cold else 0.0)
        rows.append(r)
        w, cp = r["wall"], r["cpu"]
        earlier = ""
        if "against_cost_ms" in w:
            earlier = " %+.3f ms | %+.3f ms |" % (w["against_cost_ms"], cp["against_cost_ms"])
        elif against:
            earlier = " | |"
        print("| %s | %d | %.2f ms (%.2f) | %.2f ms (%.2f) | %+.3f ms | %+.3f ms | %s | %.2f ms | %+.3f ms | "
              "%+.3f ms | %+g |%s"
              % (r["case"], r["rounds"], w["without_ms"], w["without_iqr"], w["with_ms"], w["with_iqr"], w["cost_ms"],
                 w["aa_ms"], goal_text(r["goal_ms"]), cp["without_ms"], cp["cost_ms"],
                 cp["aa_ms"], r["faults"], earlier), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"syscall_us": syscall_us, "fault_us": fault_us, "area_us": area_us, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
