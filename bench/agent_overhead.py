#!/usr/bin/env python3
"""Agent cost benchmark.

  bench/agent_overhead.py [--python PY] [--rounds N] [--lib build/release/lib/libpyagent.so]
  bench/agent_overhead.py --handler-per-version     (handler cost at depth 30, every interpreter)
  bench/agent_overhead.py --compare-lib OLD.so      (handler cost of an older build and this one,
                                                      and both builds' +CPU at 1 and 10 kHz)
  bench/agent_overhead.py --compare-lib OLD.so --gc (handler cost of both on a workload about
                                                      half inside the cyclic garbage collector)
  bench/agent_overhead.py --compare-lib OLD.so --asyncio (the same on five asyncio tasks: on
                                                      3.14+ every sample names its task)
  bench/agent_overhead.py --compare-lib OLD.so --threads (the same on four threads, one with
                                                      the GIL released, one raising, one handling)
  bench/agent_overhead.py --compare-lib OLD.so --fight (the same on four threads fighting for
                                                      the GIL)
  bench/agent_overhead.py --peers [--rounds N]       (1 kHz, 10 kHz, native; CPython 3.15's
                                                      profiling.sampling and Austin, same run)

1. Overhead: each workload runs N rounds; each round runs it without the agent, with it at
   100 Hz and at 250 Hz, in that order (alternating, so drift hits all three alike). The cost
   is the child's whole CPU time (user + system, from wait4: the agent's own thread
   included). Reported: the median over rounds of the with/without ratio.
2. Handler cost: a program spinning at stack depth 10, 30 and 100; the handler's own p50/p99
   (from the histogram in the profile header), median over runs.
3. The floor: bench/signal_floor (an empty handler's delivery cost on this machine).
Prints a Markdown report; --json FILE writes the numbers too."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKLOADS = ["fib", "deep", "strings", "objects", "generators", "json_roundtrip"]


def run_cpu(argv, env):
    """Runs argv; returns the child's CPU seconds (user + sys)."""
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=env["PWD"])
    _, status, ru = os.wait4(p.pid, 0)
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    if status != 0:
        sys.exit("benchmark run failed: %s\n%s" % (" ".join(argv), err))
    return ru.ru_utime + ru.ru_stime


def base_env(tmp):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYAGENT_") and k != "LD_PRELOAD"}
    env["PWD"] = tmp
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def agent_env(tmp, lib, rate, extra=None):
    env = base_env(tmp)
    env.update({"LD_PRELOAD": lib, "PYAGENT_RATE": str(rate), "PYAGENT_OUTPUT": os.path.join(tmp, "p.%p.folded")})
    env.update(extra or {})
    return env


def read_header(tmp):
    for name in os.listdir(tmp):
        if name.endswith(".folded"):
            with open(os.path.join(tmp, name)) as f:
                first = f.readline().split()
            os.unlink(os.path.join(tmp, name))
            return dict(kv.split("=", 1) for kv in first[3:] if "=" in kv)
    return {}


def calibrate(py, prog, tmp, seconds):
    """The repeat count (the workload's argv[1]) that makes it last about `seconds` of CPU,
    so that start-up costs do not stand in for the cost of sampling."""
    once = run_cpu([py, prog, "1"], base_env(tmp))
    return str(max(1, round(seconds / max(once, 1e-3))))


def overhead(py, lib, rounds, tmp):
    rows = []
    for w in WORKLOADS:
        prog = os.path.join(HERE, "workloads", w + ".py")
        reps = calibrate(py, prog, tmp, 3.0)
        ratios = {100: [], 250: []}
        bases = []
        for _ in range(rounds):
            b = run_cpu([py, prog, reps], base_env(tmp))
            bases.append(b)
            for rate in (100, 250):
                ratios[rate].append(run_cpu([py, prog, reps], agent_env(tmp, lib, rate)) / b)
                read_header(tmp)
        rows.append({
            "workload": w,
            "repeats": int(reps),
            "base_cpu_s": statistics.median(bases),
            "ratio_100": statistics.median(ratios[100]),
            "ratio_250": statistics.median(ratios[250]),
        })
    return rows


def handler_cost(py, lib, depths, runs, tmp, seconds=3.0):
    rows = []
    prog = os.path.join(HERE, "workloads", "depth.py")
    for d in depths:
        p50, p99 = [], []
        for _ in range(runs):
            run_cpu([py, prog, str(d), str(seconds)], agent_env(tmp, lib, 250))
            h = read_header(tmp)
            p50.append(int(h.get("handler_p50_ns", 0)))
            p99.append(int(h.get("handler_p99_ns", 0)))
        rows.append({"depth": d, "p50_ns": statistics.median(p50), "p99_ns": statistics.median(p99)})
    return rows


def special_argv(py, workload, tmp, seconds):
    """The command line of a named workload from tests/agent/programs: "gc", the <GC> test's
    (reference cycles, about half the samples inside collections); "asyncio", the task test's
    (five tasks on one loop: nearly every sample under a task:NAME frame); "threads" and
    "fight", the per-thread state tests' (thread_shares.py: four threads, of which one mostly
    with the GIL released, one raising, one handling; or four threads fighting for the GIL),
    each thread seconds / 2 of CPU."""
    progs = os.path.join(ROOT, "tests", "agent", "programs")
    if workload == "gc":
        return [py, os.path.join(progs, "gc_share.py"), os.path.join(tmp, "gc.json"), str(seconds), "cycles", "alone"]
    if workload in ("threads", "fight"):
        return ([py, os.path.join(progs, "thread_shares.py"), os.path.join(tmp, "shares.json"), str(seconds / 2)]
                + (["fight"] if workload == "fight" else []))
    return [py, os.path.join(progs, "asyncio_tasks.py"), os.path.join(tmp, "tasks.json"), str(seconds)]


def handler_compare(py, libs, depths, runs, tmp, seconds=3.0, workload=None):
    """The handler's p50/p99 of several builds, alternating run by run so that the machine's
    drift falls on each alike: {lib: [{depth, p50s, p99s}]}. workload: one of special_argv's
    instead of depth.py (depth unused)."""
    prog = os.path.join(HERE, "workloads", "depth.py")
    got = {lib: {d: ([], []) for d in depths} for lib in libs}
    for _ in range(runs):
        for d in depths:
            for lib in libs:
                argv = (special_argv(py, workload, tmp, seconds) if workload
                        else [py, prog, str(d), str(seconds)])
                run_cpu(argv, agent_env(tmp, lib, 250))
                h = read_header(tmp)
                got[lib][d][0].append(int(h.get("handler_p50_ns", 0)))
                got[lib][d][1].append(int(h.get("handler_p99_ns", 0)))
    return {lib: [{"depth": d, "p50s": got[lib][d][0], "p99s": got[lib][d][1]} for d in depths]
            for lib in libs}


COMPARE_WORKLOADS = ["fib", "deep"]
COMPARE_RATES = [1000, 10000]


def cpu_compare(py, libs, rounds, tmp):
    """+CPU of several builds at COMPARE_RATES, each round running the workload without the
    agent and then with every build at every rate (alternating, as in overhead()):
    [{workload, lib, rate, ratios}]."""
    rows = []
    for w in COMPARE_WORKLOADS:
        prog = os.path.join(HERE, "workloads", w + ".py")
        reps = calibrate(py, prog, tmp, 3.0)
        got = {(lib, rate): [] for lib in libs for rate in COMPARE_RATES}
        for _ in range(rounds):
            b = run_cpu([py, prog, reps], base_env(tmp))
            for rate in COMPARE_RATES:
                for lib in libs:
                    got[(lib, rate)].append(run_cpu([py, prog, reps], agent_env(tmp, lib, rate)) / b)
                    read_header(tmp)
        rows += [{"workload": w, "lib": lib, "rate": rate, "ratios": got[(lib, rate)]}
                 for lib in libs for rate in COMPARE_RATES]
    return rows


SID = os.path.expanduser("~/.cache/pyagent/sid/root/usr/bin")
PEER_WORKLOADS = ["fib", "deep", "objects"]


def peers(lib, rounds, tmp):
    """Ratios of total CPU (the profiler's own process included) against the same
    interpreter without profiling, all configurations alternating within each round."""
    setups = []
    py15, py13 = os.path.join(SID, "python3.15"), os.path.join(SID, "python3.13")
    austin = os.path.join(SID, "austin")
    if os.path.exists(py15):
        out = os.path.join(tmp, "tachyon.txt")
        setups.append((py15, [
            ("pyagent 1 kHz", lambda prog: [py15, prog], {"PYAGENT_RATE": "1000"}),
            ("pyagent 10 kHz", lambda prog: [py15, prog], {"PYAGENT_RATE": "10000"}),
            ("pyagent 250 Hz + native", lambda prog: [py15, prog], {"PYAGENT_RATE": "250", "PYAGENT_NATIVE": "1"}),
            ("profiling.sampling 1 kHz", lambda prog: [py15, "-m", "profiling.sampling", "run", "-r", "1khz", "--mode", "cpu", "--collapsed", "-o", out, prog], None),
            ("profiling.sampling 10 kHz", lambda prog: [py15, "-m", "profiling.sampling", "run", "-r", "10khz", "--mode", "cpu", "--collapsed", "-o", out, prog], None),
        ]))
    if os.path.exists(py13) and os.path.exists(austin):
        out = os.path.join(tmp, "austin.txt")
        setups.append((py13, [
            ("pyagent 1 kHz", lambda prog: [py13, prog], {"PYAGENT_RATE": "1000"}),
            ("pyagent 10 kHz", lambda prog: [py13, prog], {"PYAGENT_RATE": "10000"}),
            ("austin 1 kHz", lambda prog: [austin, "-s", "-i", "1000", "-o", out, py13, prog], None),
            ("austin 10 kHz", lambda prog: [austin, "-s", "-i", "100", "-o", out, py13, prog], None),
        ]))
    rows = []
    for py, configs in setups:
        for w in PEER_WORKLOADS:
            prog = os.path.join(HERE, "workloads", w + ".py")
            reps = calibrate(py, prog, tmp, 3.0)
            ratios = {name: [] for name, _, _ in configs}
            for _ in range(rounds):
                b = run_cpu([py, prog, reps], base_env(tmp))
                for name, argv, env in configs:
                    e = agent_env(tmp, lib, env["PYAGENT_RATE"], env) if env else base_env(tmp)
                    ratios[name].append(run_cpu(argv(prog) + [reps], e) / b)
                    read_header(tmp)
            for name, _, _ in configs:
                rows.append({"python": os.path.basename(py), "workload": w, "profiler": name,
                             "ratio": statistics.median(ratios[name])})
    return rows


def floor_ns():
    exe = os.path.join(ROOT, "build", "release", "bin", "signal_floor")
    out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    return float(out.split()[1])


def pythons():
    path = os.path.join(ROOT, "build", "pythons.txt")
    with open(path) as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if not cols[2].endswith("-ft"):
                yield cols[0], cols[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=os.path.expanduser("~/.pyenv/versions/3.11.7/bin/python3.11"))
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "release", "lib", "libpyagent.so"))
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--handler-runs", type=int, default=5)
    ap.add_argument("--handler-per-version", action="store_true")
    ap.add_argument("--compare-lib", help="a second build's libpyagent.so: handler cost and +CPU of both, alternating")
    ap.add_argument("--gc", action="store_true", help="with --compare-lib: the garbage collector's workload")
    ap.add_argument("--asyncio", action="store_true", help="with --compare-lib: the asyncio tasks' workload")
    ap.add_argument("--threads", action="store_true", help="with --compare-lib: four threads in four states")
    ap.add_argument("--fight", action="store_true", help="with --compare-lib: four threads fighting for the GIL")
    ap.add_argument("--peers", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not os.path.exists(a.python):
        a.python = "/usr/bin/python3"
    lib = os.path.abspath(a.lib)
    tmp = tempfile.mkdtemp(prefix="pyagent-bench-")
    result = {}
    if a.peers:
        result["peers"] = peers(lib, a.rounds, tmp)
        print("| interpreter | profiler | " + " | ".join(PEER_WORKLOADS) + " | median |")
        print("|---|---|" + "---|" * (len(PEER_WORKLOADS) + 1))
        keys = []
        for r in result["peers"]:
            if (r["python"], r["profiler"]) not in keys:
                keys.append((r["python"], r["profiler"]))
        for py, prof in keys:
            vals = [r["ratio"] for r in result["peers"] if (r["python"], r["profiler"]) == (py, prof)]
            print("| %s | %s | %s | %+.1f%% |" % (py, prof, " | ".join("%+.1f%%" % ((v - 1) * 100) for v in vals),
                                                 (statistics.median(vals) - 1) * 100))
    elif a.compare_lib:
        libs = [os.path.abspath(a.compare_lib), lib]
        workload = ("gc" if a.gc else "asyncio" if a.asyncio else "threads" if a.threads
                    else "fight" if a.fight else None)
        depths = [0] if workload else [10, 30, 100]
        result["compare"] = handler_compare(a.python, libs, depths, a.handler_runs, tmp, 2.0 if workload else 3.0,
                                            workload)
        print("Python: %s; %d alternating runs per %s\n" % (a.python, a.handler_runs, "build" if workload else "depth"))
        print("| %s | build | handler p50: median (range) | handler p99: median (range) |"
              % ("workload" if workload else "stack depth"))
        print("|---|---|---|---|")
        for i, r in enumerate(result["compare"][libs[0]]):
            for name, l in (("base", libs[0]), ("this", libs[1])):
                x = result["compare"][l][i]
                print("| %s | %s | %.2f µs (%.2f–%.2f) | %.2f µs (%.2f–%.2f) |" % (
                    workload or x["depth"], name, statistics.median(x["p50s"]) / 1000, min(x["p50s"]) / 1000,
                    max(x["p50s"]) / 1000, statistics.median(x["p99s"]) / 1000,
                    min(x["p99s"]) / 1000, max(x["p99s"]) / 1000))
        result["compare_cpu"] = cpu_compare(a.python, libs, a.rounds, tmp) if a.rounds > 0 else []
        if a.rounds > 0:  # --rounds 0: the handler's cost alone
            print("\n%d alternating rounds per workload; +CPU against the same run without the agent\n" % a.rounds)
            print("| workload | rate | build | +CPU: median (range) |")
            print("|---|---|---|---|")
        for r in result["compare_cpu"]:
            pct = [(x - 1) * 100 for x in r["ratios"]]
            print("| %s | %d Hz | %s | %+.2f%% (%+.2f to %+.2f) |" % (
                r["workload"], r["rate"], "base" if r["lib"] == libs[0] else "this",
                statistics.median(pct), min(pct), max(pct)))
    elif a.handler_per_version:
        print("| interpreter | handler p50 at depth 30 | p99 |")
        print("|---|---|---|")
        result["per_version"] = []
        for name, py in pythons():
            r = handler_cost(py, lib, [30], a.handler_runs, tmp, seconds=2.0)[0]
            result["per_version"].append(dict(r, python=name))
            print("| %s | %.2f µs | %.2f µs |" % (name, r["p50_ns"] / 1000, r["p99_ns"] / 1000))
    else:
        fl = floor_ns()
        result["floor_ns"] = fl
        print("Python: %s; %d alternating rounds per workload; signal delivery floor %.2f µs\n" % (a.python, a.rounds, fl / 1000))
        print("| workload | CPU without (s) | +CPU at 100 Hz | +CPU at 250 Hz |")
        print("|---|---|---|---|")
        result["overhead"] = overhead(a.python, lib, a.rounds, tmp)
        for r in result["overhead"]:
            print("| %s | %.3f | %+.2f%% | %+.2f%% |" % (r["workload"], r["base_cpu_s"], (r["ratio_100"] - 1) * 100, (r["ratio_250"] - 1) * 100))
        m100 = statistics.median(r["ratio_100"] for r in result["overhead"])
        m250 = statistics.median(r["ratio_250"] for r in result["overhead"])
        print("| **median of workloads** | | %+.2f%% | %+.2f%% |" % ((m100 - 1) * 100, (m250 - 1) * 100))
        print("\n| stack depth | handler p50 | handler p99 |")
        print("|---|---|---|")
        result["handler"] = handler_cost(a.python, lib, [10, 30, 100], a.handler_runs, tmp)
        for r in result["handler"]:
            print("| %d | %.2f µs | %.2f µs |" % (r["depth"], r["p50_ns"] / 1000, r["p99_ns"] / 1000))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
