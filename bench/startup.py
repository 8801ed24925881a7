#!/usr/bin/env python3
"""Start-up and exit cost of the agent.

  bench/startup.py [--python PY] [--lib build/release/lib/libpyagent.so] [--rounds N]
                   [--exit-rounds N] [--json FILE]

Start-up: `PY -c pass`, `PY -c "import asyncio"`, `/bin/true`, `sh -c true`, each with and
without LD_PRELOAD=libpyagent.so, and the floor: `/bin/true` with an empty library preloaded. Exit: a Python program that burns 50 ms of CPU (so that the
agent has samples to deliver) and exits, with the agent writing a local file (no server),
with PYAGENT_SERVER naming a closed port on 127.0.0.1 (refused at once) and a black hole
(a local listener that accepts and never answers).

Each round runs, for every case, the baseline, the agent and the baseline again (A, B, A'),
in an order that rotates from round to round so that drift hits all alike; A' against A is
the noise floor. Time is wall-clock from spawn to reaped exit (os.posix_spawn, output to
/dev/null), and the child's CPU time (user + system, from wait4), which a loaded machine
disturbs less. Reported: medians, the interquartile range, and the agent's cost as the median
of the per-round differences B - A (the A/A column is the same for A' - A). Prints Markdown."""
import argparse
import json
import os
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
    """(seconds from spawn to reaped exit, the child's CPU seconds); exits on a failing run."""
    fa = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
          (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
          (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0)]
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=fa)
    _, status, ru = os.wait4(pid, 0)
    t = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("run failed (%s): %s" % (os.waitstatus_to_exitcode(status), argv))
    return t, ru.ru_utime + ru.ru_stime


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


def cases(py, lib, tmp):
    """[(name, argv, env without, env with, goal in ms)]."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYAGENT_", "PYROSCOPE_")) and k != "LD_PRELOAD"}
    base["PYTHONDONTWRITEBYTECODE"] = "1"

    def agent(server=None):
        e = dict(base, LD_PRELOAD=lib, PYAGENT_SPOOL_DIR=os.path.join(tmp, "spool"))
        if server:  # no local file then, as the default is
            e["PYAGENT_SERVER"] = server
        else:
            e["PYAGENT_OUTPUT"] = os.path.join(tmp, "p.%p.folded")
        return e

    sh = "/bin/sh"
    # The floor of any LD_PRELOADed agent: an empty library, loaded and nothing else.
    empty = os.path.join(tmp, "empty.so")
    with open(empty + ".c", "w") as f:
        f.write("int pyagent_bench_empty;\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", empty, empty + ".c"], check=True)
    out = [
        ("`python -c pass`", [py, "-c", "pass"], base, agent(), 1.0),
        ("`python -c \"import asyncio\"`", [py, "-c", "import asyncio"], base, agent(), 1.0),
        ("`/bin/true`", ["/bin/true"], base, agent(), 0.1),
        ("`sh -c true`", [sh, "-c", "true"], base, agent(), 0.1),
        ("`/bin/true`, an empty library preloaded (floor)", ["/bin/true"], base, dict(base, LD_PRELOAD=empty), 0.1),
    ]
    hole = BlackHole()
    exits = [
        ("exit, no server (local file)", [py, "-c", BURN], base, agent(), 0.0),
        ("exit, server refuses", [py, "-c", BURN], base, agent("http://127.0.0.1:%d" % closed_port()), 50.0),
        ("exit, black-hole server", [py, "-c", BURN], base, agent("http://127.0.0.1:%d" % hole.port), 1000.0),
    ]
    return out, exits


def stats(a, b, a2):
    """Medians and IQRs in ms of the three series; cost and A/A as medians of per-round deltas."""
    a, b, a2 = ([x * 1000 for x in xs] for xs in (a, b, a2))

    def iqr(xs):
        q = statistics.quantiles(xs, n=4)
        return q[2] - q[0]
    return {"without_ms": statistics.median(a), "without_iqr": iqr(a), "with_ms": statistics.median(b),
            "with_iqr": iqr(b), "cost_ms": statistics.median(y - x for x, y in zip(a, b)),
            "aa_ms": statistics.median(y - x for x, y in zip(a, a2))}


def measure(name, argv, env_a, env_b, goal, rounds):
    runs = [[], [], []]  # A, B, A'
    envs = [env_a, env_b, env_a]
    spawn(argv, env_a)  # warm the page cache
    spawn(argv, env_b)
    for r in range(rounds):
        for i in range(3):
            k = (r + i) % 3
            runs[k].append(spawn(argv, envs[k]))
    wall = stats(*([t for t, _ in xs] for xs in runs))
    cpu = stats(*([c for _, c in xs] for xs in runs))
    return {"case": name, "rounds": rounds, "goal_ms": goal, "wall": wall, "cpu": cpu}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default="/usr/bin/python3.11")
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "release", "lib", "libpyagent.so"))
    ap.add_argument("--rounds", type=int, default=40, help="rounds for the start-up cases")
    ap.add_argument("--exit-rounds", type=int, default=7, help="rounds for the exit cases")
    ap.add_argument("--json")
    a = ap.parse_args()
    lib = os.path.abspath(a.lib)
    if not os.path.exists(lib):
        sys.exit("no agent library at %s (scripts/build.sh release)" % lib)
    tmp = tempfile.mkdtemp(prefix="pyagent-startup-")
    start, exits = cases(a.python, lib, tmp)
    # The agent must really be there: a profile for `python -c pass`.
    spawn(start[0][1], start[0][3])
    if not any(n.endswith(".folded") for n in os.listdir(tmp)):
        sys.exit("the agent wrote no profile for `%s -c pass`: is %s the agent?" % (a.python, lib))
    print("Python: %s; agent: %s; %d rounds (start-up), %d rounds (exit); A, B, A' interleaved\n"
          % (a.python, lib, a.rounds, a.exit_rounds))
    print("| case | without: median (IQR) | with: median (IQR) | agent's cost | A/A | goal "
          "| CPU without | CPU cost | CPU A/A |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for c, n in [(c, a.rounds) for c in start] + [(c, a.exit_rounds) for c in exits]:
        r = measure(*c, n)
        rows.append(r)
        w, c = r["wall"], r["cpu"]
        print("| %s | %.2f ms (%.2f) | %.2f ms (%.2f) | %+.2f ms | %+.2f ms | %s%g ms | %.2f ms | %+.2f ms | %+.2f ms |"
              % (r["case"], w["without_ms"], w["without_iqr"], w["with_ms"], w["with_iqr"], w["cost_ms"],
                 w["aa_ms"], "≤ +" if r["goal_ms"] else "+", r["goal_ms"], c["without_ms"], c["cost_ms"],
                 c["aa_ms"]), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
