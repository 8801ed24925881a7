#!/usr/bin/env python3
"""The agent's cost on real applications from Debian's packages (issue 16).

  python3 bench/realapps/run.py [--rounds N] [--apps LIST] [--configs WORDS] [--quick]
                                [--no-peers] [--json FILE] [--lib build/release/lib/libpyagent.so]

Applications (--apps, comma-separated; default all):
  flask   gunicorn (sync worker, -w 1) serving a Flask + Jinja2 app (flaskapp.py) under wrk
          (wrk.lua: a page, a JSON API, a search); throughput, wrk's p50/p99 latency and the
          server's CPU per request, over a fixed window after a warm-up
  sphinx  Sphinx 5 building HTML with -j 2 from a tree that sphinx-apidoc generates from
          Debian's click (a page per module; autodoc, napoleon); itsdangerous with --quick
  mypy    mypy (Debian's, compiled with mypyc) checking a copy of Debian's click sources
          (itsdangerous with --quick)
  black   black --check --fast over a copy of Debian's werkzeug (flask with --quick)
  numpy   numpy_job.py: BLAS products, FFTs, sorting, small-array steps driven from Python
  pandas  pandas_job.py: merge, group-by, pivot, rolling window, string ops, CSV
  loop    bench/workloads/depth.py at depth 30: our loop benchmark, as the reference for the
          handler's time (handler configurations only)

How: every measurement is a pair of the same program started at the same moment, each
pinned to its own CPU with taskset (the CPU swapped from round to round): the program
without a profiler (A) against the program with one (B). An A/A pair, both without, runs in
every round as the noise floor. Per pair: wall time, CPU time of the whole process tree
(wait4 on reap.py, a subreaper that also collects workers that left the tree; for the server,
/proc over the wrk window) with a profiler's own processes included,
peak RSS of the tree (summed VmRSS, polled 5 times a second), and for the server wrk's
requests/s and latency. Reported: the median and range over rounds of B/A - 1, and of
B - A for RSS. For pyagent also the handler's p50/p99 from the profile header (the process
with the most samples; median over rounds) and handler_hist summed over every process and
round.

Configurations: pyagent at 100 Hz, 250 Hz, 1 kHz (perf task-clock past the tick) and 250 Hz
with native frames (the step cache, and libunwind for every frame as before it), on Debian's
python3.11 (--configs picks by name: `--apps numpy,pandas --configs "250 Hz" --no-peers` is
native mode's comparison); Austin (sid's, scripts/pythons.sh --austin) at
250 Hz and 1 kHz with -s (on-CPU samples only) and -C (children), launching the program;
and, on sid's python3.15 with Debian's dist-packages on PYTHONPATH, for the applications
whose packages import there, pyagent and CPython's `profiling.sampling` (--mode cpu, with
--subprocesses where the program forks) at 250 Hz and 1 kHz against a 3.15 baseline.
After the pairs, the machine's floor (bench/handler_floor.c, one copy pinned to each CPU):
what reading 64 cache lines of 256 KiB, and 256 of 8 MiB, costs inside a perf-driven SIGPROF
handler at 250 Hz and 1 kHz here, warm and cold, so that the handler figures can be read
against what any in-process sampler would pay on the same machine (--no-floor leaves it out).
Benchmarks report, they do not assert."""
import argparse
import json
import re
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY311 = "/usr/bin/python3.11"
SID = os.path.expanduser(os.path.join(os.environ.get("PYAGENT_CACHE", "~/.cache/pyagent"), "sid", "root", "usr", "bin"))
PY315 = os.path.join(SID, "python3.15")
DIST = "/usr/lib/python3/dist-packages"
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print("realapps: " + msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# Process trees, read from /proc

def tree(pid):
    """pid and all its descendants alive now."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir("/proc/%d/task" % p):
                with open("/proc/%d/task/%s/children" % (p, t)) as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def tree_sum(pid, name, value):
    """Sum over the live tree of value(text of /proc/PID/name); processes gone meanwhile
    count nothing."""
    total = 0
    for p in tree(pid):
        try:
            with open("/proc/%d/%s" % (p, name)) as f:
                total += value(f.read())
        except (OSError, IndexError, ValueError):
            pass
    return total


def tree_rss(pid):
    return tree_sum(pid, "statm", lambda t: int(t.split()[1]) * PAGE)


def tree_cpu(pid):
    """User + system seconds of the live tree (threads included)."""
    fields = lambda t: t.rsplit(")", 1)[1].split()  # noqa: E731 (the name may hold spaces)
    return tree_sum(pid, "stat", lambda t: int(fields(t)[11]) + int(fields(t)[12])) / TICK


def find_cmd(pid, word):
    """The topmost process of the tree whose command line contains word."""
    for p in sorted(tree(pid)):
        try:
            with open("/proc/%d/cmdline" % p, "rb") as f:
                if word.encode() in f.read():
                    return p
        except OSError:
            pass
    return None


# ---------------------------------------------------------------------------------------
# Profiles: pyagent's header

def read_profiles(d):
    """Headers of every pyagent profile under d: list of dicts (handler_hist parsed)."""
    out = []
    for name in sorted(os.listdir(d)):
        if not name.endswith(".folded"):
            continue
        with open(os.path.join(d, name)) as f:
            first = f.readline().split()
        if first[:2] != ["#", "pyagent"]:
            continue
        h = dict(kv.split("=", 1) for kv in first[3:] if "=" in kv)
        hist = {}
        for item in filter(None, h.get("handler_hist", "").split(",")):
            floor, count = item.split(":")
            hist[int(floor)] = hist.get(int(floor), 0) + int(count)
        h["hist"] = hist
        out.append(h)
    return out


def hist_quantile(hist, q):
    n = sum(hist.values())
    if not n:
        return 0
    seen = 0
    for floor in sorted(hist):
        seen += hist[floor]
        if seen >= q * n:
            return floor
    return max(hist)


HIST_BANDS = [(0, 1000), (1000, 2000), (2000, 5000), (5000, 10000), (10000, 20000), (20000, 50000), (50000, None)]


def hist_bands(hist):
    n = sum(hist.values()) or 1
    out = []
    for lo, hi in HIST_BANDS:
        c = sum(v for k, v in hist.items() if k >= lo and (hi is None or k < hi))
        out.append(100.0 * c / n)
    return out


# ---------------------------------------------------------------------------------------
# Applications

class App:
    """One program: prepare() makes its inputs once; argv(py, run_dir) is one run's command
    line (run_dir: a fresh folder for that run's outputs); server apps add url paths."""
    server = False
    forks = False       # the program forks workers: peers must follow children
    configs_only = None  # restrict to these configuration names (loop)
    only_311 = None      # why the program is not run under python3.15
    cpu_minimum = 0.0

    def __init__(self, quick):
        self.quick = quick

    def prepare(self, work):
        pass

    def env(self):
        return {}


def copy_package(work, app, pkg):
    """A private copy of one of Debian's installed packages, the tree an app works on."""
    dst = os.path.join(work, app + "-src", pkg)
    if not os.path.exists(dst):
        shutil.copytree(os.path.join(DIST, pkg), dst)
    return dst


class Flask(App):
    name, server, forks = "flask", True, True

    def argv(self, py, run_dir, port):
        return [py, "-m", "gunicorn", "-w", "1", "-b", "127.0.0.1:%d" % port, "--chdir", HERE,
                "--log-level", "warning", "flaskapp:app"]


class Sphinx(App):
    name, forks = "sphinx", True

    def prepare(self, work):
        self.src = os.path.join(work, "sphinx-src")
        if os.path.exists(self.src):
            return
        os.makedirs(self.src)
        pkg = "itsdangerous" if self.quick else "click"
        subprocess.run([PY311, "-m", "sphinx.ext.apidoc", "-q", "-e", "-M", "-o", self.src, os.path.join(DIST, pkg)],
                       check=True, capture_output=True)
        pages = sorted(n[:-4] for n in os.listdir(self.src) if n.endswith(".rst"))
        ext = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
        with open(os.path.join(self.src, "conf.py"), "w") as f:
            f.write('project = "realapps"\n'
                    'extensions = %r\n'
                    'autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}\n' % ext)
        with open(os.path.join(self.src, "index.rst"), "w") as f:
            f.write("Index\n=====\n\n.. toctree::\n   :maxdepth: 2\n\n" + "".join("   %s\n" % p for p in pages))

    def argv(self, py, run_dir):
        return [py, "-m", "sphinx", "-b", "html", "-j", "2", "-q", "-E", "-d", os.path.join(run_dir, "doctrees"),
                self.src, os.path.join(run_dir, "html")]


class Mypy(App):
    name = "mypy"
    # Debian's mypy is compiled with mypyc for 3.11; under 3.15 it would fall back to its
    # pure-Python sources: another program, several times slower, so not compared there.
    only_311 = "Debian's mypy is compiled (mypyc) for python3.11 only"

    def prepare(self, work):
        self.src = copy_package(work, self.name, "itsdangerous" if self.quick else "click")

    def argv(self, py, run_dir):
        return [py, "-m", "mypy", "--no-incremental", "--cache-dir", os.devnull, "--no-error-summary",
                "--python-executable", PY311, self.src]


class Black(App):
    name, forks = "black", True

    def prepare(self, work):
        self.src = copy_package(work, self.name, "flask" if self.quick else "werkzeug")

    def argv(self, py, run_dir):
        # --fast: black 23.1's safety check compares ASTs through ast.Str, gone in 3.14+; the
        # same flag on both interpreters keeps them the same program.
        return [py, "-m", "black", "--check", "--fast", "-q", self.src]


class Job(App):
    """A script of ours over Debian's numpy/pandas: SCRIPT ROUNDS (fixed work)."""

    def __init__(self, quick, name, script, rounds):
        super().__init__(quick)
        self.name, self.script, self.rounds = name, script, rounds[0] if quick else rounds[1]

    def argv(self, py, run_dir):
        return [py, os.path.join(HERE, self.script), str(self.rounds)]

    def env(self):
        return {"OPENBLAS_NUM_THREADS": "1"}


def Numpy(quick):
    return Job(quick, "numpy", "numpy_job.py", (20, 80))


def Pandas(quick):
    return Job(quick, "pandas", "pandas_job.py", (8, 30))


Numpy.name, Pandas.name = "numpy", "pandas"


class Loop(App):
    name = "loop"
    configs_only = ("pyagent 250 Hz", "pyagent 1 kHz")

    def argv(self, py, run_dir):
        return [py, os.path.join(ROOT, "bench", "workloads", "depth.py"), "30", "1.5" if self.quick else "4"]


APPS = [Flask, Sphinx, Mypy, Black, Numpy, Pandas, Loop]


# ---------------------------------------------------------------------------------------
# Configurations: how a program is started under each profiler

class Config:
    def __init__(self, name, python, rate=None, native=False, peer=None, unwind=None):
        self.name, self.python, self.rate, self.native, self.peer = name, python, rate, native, peer
        self.unwind = unwind  # PYAGENT_NATIVE_UNWIND (None: the default, the step cache)

    def wrap(self, app, argv, run_dir):
        """The command line and extra environment of one run of argv under this profiler."""
        env = {}
        if self.rate and not self.peer:
            env = {"LD_PRELOAD": LIB, "PYAGENT_RATE": str(self.rate), "PYAGENT_OUTPUT": os.path.join(run_dir, "p.%p.folded")}
            if self.native:
                env["PYAGENT_NATIVE"] = "1"
            if self.unwind:
                env["PYAGENT_NATIVE_UNWIND"] = self.unwind
        if self.peer == "austin":
            argv = [AUSTIN, "-s", "-i", str(1000000 // self.rate)] + (["-C"] if app.forks else []) + \
                   ["-o", os.path.join(run_dir, "austin.txt")] + argv
        elif self.peer == "tachyon":
            argv = [argv[0], "-m", "profiling.sampling", "run", "-r", str(self.rate), "--mode", "cpu", "--collapsed",
                    "-o", os.path.join(run_dir, "tachyon.txt")] + (["--subprocesses"] if app.forks else []) + \
                   (["-m"] if argv[1] == "-m" else []) + argv[(2 if argv[1] == "-m" else 1):]
        return argv, env


def configs(peers):
    c = [Config("pyagent 100 Hz", PY311, 100), Config("pyagent 250 Hz", PY311, 250),
         Config("pyagent 1 kHz", PY311, 1000), Config("pyagent 250 Hz native", PY311, 250, native=True),
         # libunwind for every frame, as before the step cache (architecture.md, item 5)
         Config("pyagent 250 Hz native, libunwind only", PY311, 250, native=True, unwind="libunwind")]
    if peers and AUSTIN:
        c += [Config("austin 250 Hz", PY311, 250, peer="austin"), Config("austin 1 kHz", PY311, 1000, peer="austin")]
    if peers and os.path.exists(PY315):
        c += [Config("pyagent 250 Hz", PY315, 250), Config("pyagent 1 kHz", PY315, 1000),
              Config("profiling.sampling 250 Hz", PY315, 250, peer="tachyon"),
              Config("profiling.sampling 1 kHz", PY315, 1000, peer="tachyon")]
    return c


def imports_under(py, app):
    mod = {"flask": "flask, gunicorn", "sphinx": "sphinx", "mypy": "mypy", "black": "black",
           "numpy": "numpy", "pandas": "pandas", "loop": "sys"}[app.name]
    r = subprocess.run([py, "-c", "import " + mod], env=dict(base_env(py), PWD=os.getcwd()),
                       capture_output=True, text=True)
    return r.returncode == 0, (r.stderr.strip().splitlines() or [""])[-1]


# ---------------------------------------------------------------------------------------
# Running pairs

def base_env(py):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYAGENT_") and k != "LD_PRELOAD"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if py == PY315:
        # Debian's packages are installed for 3.11; the pure-Python ones import under 3.15.
        env["PYTHONPATH"] = DIST
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Run:
    """One side of a pair: a program pinned to one CPU."""

    def __init__(self, app, config, cpu, work, tag):
        self.app, self.config, self.cpu = app, config, cpu
        self.dir = tempfile.mkdtemp(prefix=tag + "-", dir=work)
        self.py = config.python
        self.port = free_port() if app.server else None
        argv = app.argv(self.py, self.dir, self.port) if app.server else app.argv(self.py, self.dir)
        argv, extra = config.wrap(app, argv, self.dir)
        env = base_env(self.py)
        env.update(app.env())
        env.update(extra)
        # Each run its own cache folders: black and others must not find the last run's work.
        env["XDG_CACHE_HOME"] = os.path.join(self.dir, "cache")
        # A batch program runs under reap.py, so that workers that leave its tree (3.14+'s
        # forkserver) still count; it costs both sides of a pair the same.
        reaper = [] if app.server else [PY311, "-S", os.path.join(HERE, "reap.py")]
        self.argv = ["taskset", "-c", str(cpu)] + reaper + argv
        self.env = env
        self.peak_rss = 0
        self.status = None

    def start(self):
        self.err = open(os.path.join(self.dir, "stderr"), "w+")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(self.argv, env=self.env, cwd=self.dir, stdout=subprocess.DEVNULL, stderr=self.err)
        self.pid = self.proc.pid

    def poll(self):
        """True once the program has exited (its rusage then recorded)."""
        if self.status is not None:
            return True
        pid, status, ru = os.wait4(self.pid, os.WNOHANG)
        if pid == 0:
            return False
        self.wall = time.monotonic() - self.t0
        self.cpu_s = ru.ru_utime + ru.ru_stime
        self.status = os.waitstatus_to_exitcode(status)
        self.proc.returncode = self.status
        return True

    def sample_rss(self):
        if self.status is None:
            self.peak_rss = max(self.peak_rss, tree_rss(self.pid))

    def failed(self, ok=(0,)):
        if self.status in ok:
            return None
        self.err.seek(0)
        return "%s exited %s: %s\n%s" % (self.app.name, self.status, " ".join(self.argv), self.err.read()[-3000:])

    def profiles(self):
        return read_profiles(self.dir)


def run_batch_pair(a, b):
    for r in (a, b):
        r.start()
    last = 0.0
    while not all([a.poll(), b.poll()]):  # both polled every time: each one's exit is timed
        now = time.monotonic()
        if now - last >= 0.2:
            a.sample_rss()
            b.sample_rss()
            last = now
        time.sleep(0.01)
    ok = (0, 1) if a.app.name in ("mypy", "black") else (0,)  # they exit 1 on findings
    for r in (a, b):
        msg = r.failed(ok)
        if msg:
            raise RuntimeError(msg)
    return [{"wall": r.wall, "cpu": r.cpu_s, "rss": r.peak_rss} for r in (a, b)]


def wait_http(run, deadline):
    url = "http://127.0.0.1:%d/" % run.port
    while time.monotonic() < deadline:
        if run.poll():
            raise RuntimeError(run.failed(()) or "server exited")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                resp.read()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("server on port %d did not answer" % run.port)


def parse_wrk(text):
    out = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        w = line.split()
        if line.startswith("Requests/sec:"):
            out["rps"] = float(w[1])
        elif "requests in" in line:
            out["requests"] = int(w[0])
        elif "Latency Distribution" in line:
            for l2 in lines[i + 1:i + 5]:
                q, v = l2.split()
                out["p" + q.rstrip("%")] = wrk_time(v)
    return out


def wrk_time(v):
    for unit, scale in (("us", 1e-6), ("ms", 1e-3), ("s", 1.0), ("m", 60.0)):
        if v.endswith(unit):
            return float(v[:-len(unit)]) * scale
    return float(v)


def run_server_pair(a, b, seconds, warmup):
    for r in (a, b):
        r.start()
    try:
        deadline = time.monotonic() + 120
        for r in (a, b):
            wait_http(r, deadline)
        # Warm-up: a running service has seen its code before the window opens.
        for r in (a, b):
            warm = subprocess.run(["taskset", "-c", str(r.cpu), "wrk", "-t1", "-c4", "-d%ds" % warmup,
                                   "-s", os.path.join(HERE, "wrk.lua"), "http://127.0.0.1:%d" % r.port],
                                  capture_output=True, text=True)
            if warm.returncode:
                raise RuntimeError("wrk failed: " + warm.stderr)
        cpu0 = [tree_cpu(r.pid) for r in (a, b)]
        wrks = [subprocess.Popen(["taskset", "-c", str(r.cpu), "wrk", "-t1", "-c8", "-d%ds" % seconds, "--latency",
                                  "-s", os.path.join(HERE, "wrk.lua"), "http://127.0.0.1:%d" % r.port],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in (a, b)]
        end = time.monotonic() + seconds + 30
        while any(w.poll() is None for w in wrks) and time.monotonic() < end:
            a.sample_rss()
            b.sample_rss()
            time.sleep(0.2)
        cpu1 = [tree_cpu(r.pid) for r in (a, b)]
        outs = [parse_wrk(w.communicate()[0]) for w in wrks]
    finally:
        for r in (a, b):
            if r.status is None:
                master = find_cmd(r.pid, "gunicorn") if r.config.peer else r.pid
                os.kill(master or r.pid, signal.SIGTERM)
        end = time.monotonic() + 30
        while not all([a.poll(), b.poll()]):
            if time.monotonic() > end:
                for r in (a, b):
                    if r.status is None:
                        for p in tree(r.pid):
                            os.kill(p, signal.SIGKILL)
                end = float("inf")
            time.sleep(0.05)
    res = []
    for r, o, c0, c1 in zip((a, b), outs, cpu0, cpu1):
        if "rps" not in o or not o.get("requests"):
            raise RuntimeError("wrk gave no result for %s" % r.argv)
        res.append(dict(o, cpu=c1 - c0, cpu_per_req=(c1 - c0) / o["requests"], rss=r.peak_rss))
    return res


def run_pair(app, py, config, rnd, work, args):
    """One pair: A (no profiler) on one CPU, B under config on the other; config None is
    the A/A pair (no profiler on either side), the noise floor."""
    ca, cb = (0, 1) if rnd % 2 == 0 else (1, 0)
    a = Run(app, Config("base", py), ca, work, "a")
    b = Run(app, config or Config("base", py), cb, work, "b")
    if app.server:
        ra, rb = run_server_pair(a, b, args.seconds, args.warmup)
    else:
        ra, rb = run_batch_pair(a, b)
    prof = b.profiles() if config and config.rate and not config.peer else []
    for r in (a, b):
        r.err.close()
        shutil.rmtree(r.dir, ignore_errors=True)
    return ra, rb, prof


# ---------------------------------------------------------------------------------------
# Summary

def med_range(vals, fmt):
    if not vals:
        return "—"
    if len(vals) == 1:
        return fmt % vals[0]
    return (fmt + " [" + fmt + ", " + fmt + "]") % (statistics.median(vals), min(vals), max(vals))


def summarize(app, key, pairs):
    """pairs: list of (A result, B result, profiles) over rounds."""
    s = {"app": app.name, "config": key}
    if app.server:
        s["throughput"] = [rb["rps"] / ra["rps"] - 1 for ra, rb, _ in pairs]
        s["cpu"] = [rb["cpu_per_req"] / ra["cpu_per_req"] - 1 for ra, rb, _ in pairs]
        s["p50_ms"] = [rb["p50"] * 1000 for _, rb, _ in pairs]
        s["p99_ms"] = [rb["p99"] * 1000 for _, rb, _ in pairs]
        s["base_p50_ms"] = [ra["p50"] * 1000 for ra, _, _ in pairs]
        s["base_p99_ms"] = [ra["p99"] * 1000 for ra, _, _ in pairs]
        s["base_rps"] = [ra["rps"] for ra, _, _ in pairs]
    else:
        s["wall"] = [rb["wall"] / ra["wall"] - 1 for ra, rb, _ in pairs]
        s["cpu"] = [rb["cpu"] / ra["cpu"] - 1 for ra, rb, _ in pairs]
        s["base_wall"] = [ra["wall"] for ra, _, _ in pairs]
        s["base_cpu"] = [ra["cpu"] for ra, _, _ in pairs]
    s["rss_mb"] = [(rb["rss"] - ra["rss"]) / 2**20 for ra, rb, _ in pairs]
    s["base_rss_mb"] = [ra["rss"] / 2**20 for ra, _, _ in pairs]
    hist, p50, p99, samples = {}, [], [], []
    for _, _, profs in pairs:
        if not profs:
            continue
        top = max(profs, key=lambda h: int(h.get("samples", 0)))
        p50.append(int(top.get("handler_p50_ns", 0)))
        p99.append(int(top.get("handler_p99_ns", 0)))
        samples.append(sum(int(h.get("samples", 0)) for h in profs))
        for h in profs:
            for k, v in h["hist"].items():
                hist[k] = hist.get(k, 0) + v
    if p50:
        s.update(handler_p50_ns=p50, handler_p99_ns=p99, samples=samples, hist=hist)
    return s


def pct(vals):
    return med_range([v * 100 for v in vals], "%+.1f%%")


def table(rows, heads, cells):
    """A Markdown table: app, python, profiler, cells(row)..., extra RSS, handler p50/p99."""
    if not rows:
        return
    heads = ["app", "python", "profiler"] + heads + ["extra RSS", "handler p50", "handler p99"]
    print("| " + " | ".join(heads) + " |")
    print("|" + "---|" * len(heads))
    for s in rows:
        print("| " + " | ".join([s["app"], s["python"], s["config"]] + cells(s) + [
            med_range(s["rss_mb"], "%+.1f MB"),
            med_range([v / 1000 for v in s.get("handler_p50_ns", [])], "%.2f µs"),
            med_range([v / 1000 for v in s.get("handler_p99_ns", [])], "%.1f µs")]) + " |")
    print()


def print_report(results, meta):
    print("## Real applications: %s\n" % meta["when"])
    print("Load average at start %s, at end %s; %d rounds; lib %s\n" % (meta["load_start"], meta["load_end"], meta["rounds"], meta["lib"]))
    for note in meta["notes"]:
        print("- " + note)
    if meta["notes"]:
        print()
    print("Median [min, max] over rounds of each pair, B against A started together on the other CPU.\n")
    table([s for s in results if "wall" in s], ["+wall", "+CPU"], lambda s: [pct(s["wall"]), pct(s["cpu"])])
    table([s for s in results if "throughput" in s],
          ["throughput", "CPU per request", "p50 latency (A → B)", "p99 latency (A → B)"],
          lambda s: [pct(s["throughput"]), pct(s["cpu"])] +
                    ["%.2f → %.2f ms" % (statistics.median(s["base_" + q]), statistics.median(s[q])) for q in ("p50_ms", "p99_ms")])
    hists = [s for s in results if s.get("hist")]
    if hists:
        heads = ["<1 µs", "1–2", "2–5", "5–10", "10–20", "20–50", "≥50 µs"]
        print("handler_hist, summed over processes and rounds (share of samples per band):\n")
        print("| app | python | profiler | handler runs | " + " | ".join(heads) + " | p50 (hist) | p99 (hist) |")
        print("|---|---|---|---|" + "---|" * (len(heads) + 2))
        for s in hists:
            print("| %s | %s | %s | %d | %s | %.1f µs | %.1f µs |" % (
                s["app"], s["python"], s["config"], sum(s["hist"].values()),
                " | ".join("%.0f%%" % v for v in hist_bands(s["hist"])),
                hist_quantile(s["hist"], 0.5) / 1000, hist_quantile(s["hist"], 0.99) / 1000))
        print()


FLOOR_RATES = (250, 1000)
FLOOR_WALKS = ((64, 256), (256, 8192))  # (cache lines, over how many KiB)


def machine_floor(lib, seconds):
    """bench/handler_floor.c in the same run, one copy pinned to each CPU as the pairs run:
    a walk over LINES cache lines of SPAN KiB inside a perf-driven SIGPROF handler (and
    inline, and warm),
    the time any in-process sampler's handler pays here for reading that many lines that
    nothing else touched since the last sample."""
    exe = os.path.join(os.path.dirname(os.path.dirname(lib)), "bin", "handler_floor")
    if not os.path.exists(exe):
        return None
    rows = []
    for rate in FLOOR_RATES:
        for lines, span in FLOOR_WALKS:
            procs = [subprocess.Popen(["taskset", "-c", str(cpu), exe, str(rate), str(lines), str(seconds), str(span)],
                                      stdout=subprocess.PIPE, text=True) for cpu in (0, 1)]
            got = {}
            for pr in procs:
                out, _ = pr.communicate()
                if pr.returncode != 0:
                    raise RuntimeError("handler_floor failed: %r" % out)
                for line in out.splitlines():
                    m = re.match(r"^(\w+) p50_us=([\d.]+) p99_us=([\d.]+)", line)
                    if m:
                        got.setdefault(m.group(1), []).append((float(m.group(2)), float(m.group(3))))
            rows.append({"rate": rate, "lines": lines, "span_kib": span, "modes": got})
    return rows


def print_floor(rows):
    print("The machine's floor in the same run (`bench/handler_floor.c`, one copy on each CPU): a walk over")
    print("LINES cache lines scattered over SPAN, timed as the agent times its handler; p50 / p99 of each")
    print("CPU's copy. `signal`: inside a SIGPROF handler driven by a perf task-clock event at the rate,")
    print("while the program touches no memory; `again`: the same walk repeated at once (warm);")
    print("`inline`: the walk done by the program itself at the rate, no signal.\n")
    print("| rate | lines | span | signal p50 | signal p99 | again p50 | inline p50 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        m = r["modes"]
        cell = lambda k, i: " / ".join("%.2f µs" % v[i] for v in m.get(k, []))
        print("| %d Hz | %d | %d KiB | %s | %s | %s | %s |" % (r["rate"], r["lines"], r["span_kib"], cell("signal", 0),
                                                             cell("signal", 1), cell("again", 0), cell("inline", 0)))
    print()


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    global LIB, AUSTIN
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=None, help="pairs per configuration (default 3; 1 with --quick)")
    ap.add_argument("--apps", default=",".join(a.name for a in APPS))
    ap.add_argument("--quick", action="store_true", help="smaller inputs and shorter windows, to validate the harness")
    ap.add_argument("--no-peers", action="store_true", help="pyagent only (no Austin, no profiling.sampling)")
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "release", "lib", "libpyagent.so"))
    ap.add_argument("--seconds", type=int, default=None, help="wrk window for flask (default 8; 3 with --quick)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--configs", default=None,
                    help="only the configurations whose name contains one of these comma-separated words "
                         "(e.g. native); the A/A pair always runs")
    ap.add_argument("--no-floor", action="store_true", help="leave out the machine's floor (bench/handler_floor.c)")
    ap.add_argument("--json")
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    args.seconds = args.seconds or (3 if args.quick else 8)
    LIB = os.path.abspath(args.lib)
    if not os.path.exists(LIB):
        sys.exit("realapps: no %s (scripts/build.sh release)" % LIB)
    AUSTIN = os.path.join(SID, "austin") if os.path.exists(os.path.join(SID, "austin")) else None
    if os.cpu_count() < 2 or len(os.sched_getaffinity(0)) < 2:
        sys.exit("realapps: needs two CPUs to pin the pairs on")
    names = args.apps.split(",")
    unknown = [n for n in names if n not in [a.name for a in APPS]]
    if unknown:
        sys.exit("realapps: unknown app %s (known: %s)" % (", ".join(unknown), ", ".join(a.name for a in APPS)))
    apps = [cls(args.quick) for cls in APPS if cls.name in names]
    work = tempfile.mkdtemp(prefix="pyagent-realapps-")
    meta = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_start": loadavg(), "rounds": rounds,
            "lib": LIB, "quick": args.quick, "notes": []}
    if not AUSTIN and not args.no_peers:
        meta["notes"].append("Austin not found (scripts/pythons.sh --ensure unpacks sid's): left out")
    if not os.path.exists(PY315) and not args.no_peers:
        meta["notes"].append("no sid python3.15 (scripts/pythons.sh --ensure): profiling.sampling left out")
    plan = []
    for app in apps:
        app.prepare(work)
        cs = [c for c in configs(not args.no_peers) if not app.configs_only or
              (c.name in app.configs_only and c.python == PY311)]
        if args.configs:
            cs = [c for c in cs if any(w in c.name for w in args.configs.split(","))]
        if any(c.python == PY315 for c in cs) and app.only_311:
            meta["notes"].append("%s: no python3.15 rows (%s)" % (app.name, app.only_311))
            cs = [c for c in cs if c.python != PY315]
        if any(c.python == PY315 for c in cs):
            ok, why = imports_under(PY315, app)
            if not ok:
                meta["notes"].append("%s does not run under python3.15 (%s): no profiling.sampling row" % (app.name, why))
                cs = [c for c in cs if c.python != PY315]
        groups = {}
        for c in cs:
            groups.setdefault(c.python, []).append(c)
        for py, group in groups.items():
            plan.append((app, py, ([None] if not app.configs_only else []) + group))
    results = []
    t_start = time.monotonic()
    for app, py, group in plan:
        pairs = {id(c): [] for c in group}
        try:
            for rnd in range(rounds):
                for c in group:
                    label = c.name if c else "A/A"
                    t0 = time.monotonic()
                    ra, rb, prof = run_pair(app, py, c, rnd, work, args)
                    pairs[id(c)].append((ra, rb, prof))
                    log("%s %s %s round %d: %.1f s (load %s)" % (app.name, os.path.basename(py), label, rnd + 1,
                                                                 time.monotonic() - t0, loadavg()))
        except RuntimeError as e:
            # A program that imports but fails under an interpreter (Debian's packages are
            # for 3.11), or a broken run: say so in the report and go on with the others.
            last = [l for l in str(e).splitlines() if l.strip()][-1]
            meta["notes"].append("%s failed under %s (%s): its rows for that interpreter are left out" % (app.name, os.path.basename(py), last.strip()))
            log(str(e))
            continue
        for c in group:
            s = summarize(app, c.name if c else "A/A (no profiler)", pairs[id(c)])
            s["python"] = os.path.basename(py) + (" (sid)" if py == PY315 else " (Debian)")
            results.append(s)
    floor = None if args.no_floor else machine_floor(LIB, 2 if args.quick else 4)
    meta["load_end"] = loadavg()
    meta["minutes"] = (time.monotonic() - t_start) / 60
    print_report(results, meta)
    if floor:
        print_floor(floor)
    elif not args.no_floor:
        print("No handler_floor next to the library (scripts/build.sh release builds it): the floor is left out.\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results, "floor": floor}, f, indent=1, default=str)
    shutil.rmtree(work, ignore_errors=True)


LIB = AUSTIN = None

if __name__ == "__main__":
    main()
