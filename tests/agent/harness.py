"""Shared helpers of the integration tests: run a real program under the agent (or not),
read the folded profiles it leaves behind. Standard library only."""
import math
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import traceback
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "programs")
PROFILE_RE = re.compile(r"^pyagent\.(\d+)\.folded$")


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


class Profile:
    """A folded file in our dialect: header metadata and (frames, count) stacks."""

    def __init__(self, path):
        self.path = path
        self.meta = {}
        self.stacks = []
        self.times = {}  # stack index -> {bucket start (Unix ms): count}, from "#t" lines
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("# pyagent 1"):
                    for kv in line.split()[3:]:
                        k, _, v = kv.partition("=")
                        self.meta[k] = v
                    continue
                if line.startswith("#t ") and self.stacks:
                    self.times[len(self.stacks) - 1] = self._times(line[3:])
                    continue
                if not line or line.startswith("#"):
                    continue
                stack, _, count = line.rpartition(" ")
                self.stacks.append((stack.split(";"), int(count)))

    def _times(self, runs):
        """ "B:C,C B:C" (docs/formats.md, "Time") -> {bucket start ms: count}."""
        w, t0 = int(self.meta.get("bucket_ms", 0)), int(self.meta.get("t0_ms", 0))
        out = {}
        for run in runs.split():
            b, _, counts = run.partition(":")
            for k, c in enumerate(counts.split(",")):
                out[t0 + (int(b) + k) * w] = int(c)
        return out

    def total(self, pred=lambda frames: True):
        return sum(c for frames, c in self.stacks if pred(frames))

    def threads(self):
        return {frames[0] for frames, _ in self.stacks}


class Run:
    def __init__(self, rc, out, err, cwd):
        self.rc, self.out, self.err, self.cwd = rc, out, err, cwd

    def profiles(self):
        found = {}
        for name in os.listdir(self.cwd):
            m = PROFILE_RE.match(name)
            if m:
                found[int(m.group(1))] = Profile(os.path.join(self.cwd, name))
        return found

    def profile(self):
        ps = self.profiles()
        check(len(ps) == 1, "expected one profile, found %d: %s" % (len(ps), sorted(ps)))
        return next(iter(ps.values()))


class Context:
    def __init__(self, python, lib, launcher):
        self.python = python
        self.lib = lib
        self.launcher = launcher
        self.tmp = tempfile.mkdtemp(prefix="pyagent-it-")

    def cleanup(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def workdir(self):
        return tempfile.mkdtemp(dir=self.tmp)

    def run(self, argv, agent=True, env=None, timeout=300, cwd=None):
        """Runs argv (a program name from programs/ becomes python + its path)."""
        if argv and argv[0].endswith(".py"):
            argv = [self.python, os.path.join(PROGRAMS, argv[0])] + list(argv[1:])
        e = {k: v for k, v in os.environ.items() if not k.startswith(("PYAGENT_", "PYROSCOPE_"))}
        e.pop("LD_PRELOAD", None)
        e["PYTHONDONTWRITEBYTECODE"] = "1"
        if agent:
            e["LD_PRELOAD"] = self.lib
            e.setdefault("PYAGENT_RATE", "250")
        e.update(env or {})
        e = {k: v for k, v in e.items() if v is not None}  # None: unset (the agent's default)
        cwd = cwd or self.workdir()
        p = subprocess.run(argv, cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout)
        return Run(p.returncode, p.stdout, p.stderr, cwd)

    def same_as_without(self, argv, env=None, **kw):
        """Runs argv with and without the agent; asserts identical exit status and stdout."""
        with_agent = self.run(argv, agent=True, env=env, **kw)
        without = self.run(argv, agent=False, **kw)
        check(with_agent.rc == without.rc,
              "exit status %d with the agent, %d without\nstderr with: %s\nstderr without: %s"
              % (with_agent.rc, without.rc, with_agent.err[-2000:], without.err[-2000:]))
        check(with_agent.out == without.out,
              "stdout differs with the agent:\n--- with\n%s--- without\n%s" % (with_agent.out, without.out))
        return with_agent


def run_case(fn, ctx, label):
    """Runs one case, fn(ctx), then removes ctx's files: prints PASS or FAIL with the reason
    under label, returns the exit status (0 passed)."""
    t0 = time.time()
    try:
        fn(ctx)
    except Failure as e:
        print("FAIL %s: %s" % (label, e))
        return 1
    except Exception:
        traceback.print_exc()
        print("FAIL %s: unexpected error" % label)
        return 1
    finally:
        ctx.cleanup()
    print("PASS %s (%.1fs)" % (label, time.time() - t0))
    return 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(url, server, clients, requests):
    """Waits for the server, then `clients` concurrent clients send `requests` requests each."""
    for _ in range(200):
        check(server.poll() is None, "the server ended with %s" % server.returncode)
        try:
            urllib.request.urlopen(url, timeout=5).read()
            break
        except OSError:
            time.sleep(0.1)
    errors = []

    def client():
        for _ in range(requests):
            try:
                urllib.request.urlopen(url, timeout=30).read()
            except OSError as e:
                errors.append(e)
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not errors, "requests failed: %s" % errors[:3])


def share_tolerance(want, n):
    """2 points plus three standard deviations of a binomial count of n samples (percent)."""
    q = want / 100.0
    return 2.0 + 300.0 * math.sqrt(q * (1 - q) / n)


def load_routes(base, server, clients=4, requests=25):
    """/burn and /nap of an async_routes.py server (programs/) loaded at the same time:
    `clients` clients on each route, `requests` requests each."""
    errors = []

    def route(name):
        try:
            load(base + name, server, clients, requests)
        except Failure as e:
            errors.append(e)
    threads = [threading.Thread(target=route, args=(name,)) for name in ("burn", "nap")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not errors, "loading the routes: %s" % errors[:1])


def check_route_split(p, truth):
    """An async_routes.py server's profile under PYAGENT_ASYNC=1: every sample of a route's
    handler is under a request's task frame on the loop's thread (MainThread), /nap's that
    wait end in <await sleep> right under nap_route(), and /burn's share of both routes'
    samples is its share of their measured wall time (truth: async_routes.py's OUT.json)
    within share_tolerance."""
    got, wrong = {"burn": 0, "nap": 0}, []
    for frames, n in p.stacks:
        names = [f.split(" (", 1)[0] for f in frames]
        route = "burn" if "burn_route" in names else "nap" if "nap_route" in names else None
        if not route:
            continue
        got[route] += n
        task = next((i for i, f in enumerate(frames) if f.startswith("task:")), None)
        if frames[0] != "thread:MainThread" or task is None or task > names.index(route + "_route"):
            wrong.append((frames, n))
        elif route == "nap" and frames[-1].startswith("<") and (frames[-1] != "<await sleep>" or
                                                                 names[-2] != "nap_route"):
            wrong.append((frames, n))
    n = got["burn"] + got["nap"]
    check(n > 0, "no samples of the routes")
    # Wall mode reads a thread's stack from the tick thread when the thread was off a CPU for
    # a period, and the thread may run again by then: such a read can end early, above the
    # task's coroutine frame (a stack torn by the read; modes.md, "wall"). One in a hundred at
    # most, never more.
    check(sum(c for f, c in wrong) <= n // 100,
          "route samples not under their task, or waiting elsewhere: %d of %d: %r" % (
              sum(c for f, c in wrong), n, [f for f, _ in wrong[:2]]))
    share, want = 100.0 * got["burn"] / n, 100.0 * truth["burn"] / (truth["burn"] + truth["nap"])
    tol = share_tolerance(want, n)
    check(abs(share - want) <= tol, "/burn has %.1f%% of the routes' samples, %.1f%% of their wall time "
          "(tolerance %.1f); samples %r, seconds %r" % (share, want, tol, got, truth))
    print("%d requests; /burn %.1f%% of %d route samples, %.1f%% of the handlers' wall time (tolerance %.1f); "
          "%d samples torn above their task" % (truth["requests"], share, n, want, tol, sum(c for f, c in wrong)))
