"""Process pools and servers from Debian's packages, end to end, under libpyagent.so: every
process that runs Python leaves its profile, and the CPU time the profiles show (samples /
rate) matches the CPU time the processes used within 5%; with --collector, every process
also uploads to a real pyagent-collector, which must hold, per process (its `pid` label),
exactly the samples of that process's local file.

    python3 test_servers.py --python /usr/bin/python3.11 --lib libpyagent.so [--collector EXE] CASE
    python3 test_servers.py --list

Debian's servers run Debian's interpreter (/usr/bin/python3.11), so these cases run on it
only. The CPU a process used is read from /proc/PID/stat (utime + stime) until it exits (a
watcher thread, every 5 ms), and for the whole tree from getrusage(RUSAGE_CHILDREN) once the
server has exited and been waited for; the pool's and Celery's workers also report their
CPU time with each task's result."""
import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "uploader"))  # test_upload
from harness import (PROGRAMS, Context, Failure, Run, check, check_route_split, free_port, load,  # noqa: E402
                     load_routes, run_case)
from test_upload import Collector, folded_stacks  # noqa: E402

APP = "servers"

TICK = os.sysconf("SC_CLK_TCK")
# 2 workers, 4 clients x 40 requests x 20 ms: about 1.6 s of CPU per worker.
CLIENTS, REQUESTS = 4, 40
# Below this much CPU a process is checked for its profile only: 5% of it is less than the
# 10 ms resolution of /proc/PID/stat and the 4 ms of one sample at 250 Hz.
MEASURED = 0.5
UNCOVERED = 0.15  # s a process may spend where no sample can be (profiles_match)
TAIL = 4  # periods a process's sampling covered after its threads' last samples (profiles_match)


def has_frame(name):
    return lambda frames: any(f.split(" (", 1)[0].endswith(name) for f in frames)


def stat_cpu(pid):
    """utime + stime of pid in seconds, its parent pid and its exit signal; None once it is
    gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK, int(fields[1]), int(fields[35])


def runs_python(pid):
    """(pid's executable is an interpreter, it has libpython mapped: a server that embeds it,
    Apache's mod_wsgi, uWSGI), or None once it is gone."""
    try:
        exe = os.path.basename(os.readlink("/proc/%d/exe" % pid)).startswith("python")
        with open("/proc/%d/maps" % pid) as f:
            return exe, "libpython" in f.read()
    except OSError:
        return None


class Watcher(threading.Thread):
    """Follows the process tree under root: the last CPU time read of every process in it,
    and which of them ran Python (python_cpu: a server may run other programs for a moment,
    which have no profile of their own: under a loaded CI machine the watcher saw one in
    Celery's worker tree, with 0.0 s of CPU)."""

    def __init__(self, root):
        super().__init__(daemon=True)
        self.root, self.cpu, self.done = root, {root: 0.0}, threading.Event()
        self.exe_python, self.embeds = {}, set()

    def python_cpu(self):
        """The CPU of the processes that ran Python: the root (the server under test), every
        process that had libpython mapped at some look (Apache's parent unmaps it as it shuts
        down), and those whose executable was an interpreter at the last look (a child forked
        by Python that then runs another program is that program), or could not be looked at."""
        return {pid: c for pid, c in self.cpu.items()
                if pid == self.root or pid in self.embeds or self.exe_python.get(pid) is not False}

    def scan(self):
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) not in self.cpu:
                s = stat_cpu(int(name))
                # Exit signal 0: not a child the program can wait for, but the agent's perf
                # helper (agent/timers.c), which lives ~60 us; the tree is the program's own.
                if s and s[1] in self.cpu and s[2] != 0:
                    self.cpu[int(name)] = s[0]

    def run(self):
        n = 0
        while not self.done.is_set():
            if n % 20 == 0:
                self.scan()
            n += 1
            for pid in list(self.cpu):
                s = stat_cpu(pid)
                if s:
                    self.cpu[pid] = s[0]
                    if n % 20 == 1 or pid not in self.exe_python:
                        seen = runs_python(pid)
                        if seen is not None:
                            self.exe_python[pid] = seen[0]
                            if seen[1]:
                                self.embeds.add(pid)
            time.sleep(0.005)


def upload_env(ctx, cwd):
    """With a collector: every process uploads each second (and at its end) as APP; the spool
    is the run's own, writable by the servers' unprivileged workers (Apache's www-data)."""
    if not ctx.collector:
        return {}
    spool = os.path.join(cwd, "spool")
    os.makedirs(spool, exist_ok=True)
    os.chmod(spool, 0o777)
    return {"PYAGENT_SERVER": "http://127.0.0.1:%d" % ctx.collector.port, "PYAGENT_APP_NAME": APP,
            "PYAGENT_UPLOAD_INTERVAL": "1", "PYAGENT_SPOOL_DIR": spool,
            "PYAGENT_OUTPUT": os.path.join(cwd, "pyagent.%p.folded")}


def uploads_match(ctx, profs, what):
    """The collector holds, for each process, as many samples as its local file."""
    if not ctx.collector:
        return
    bad = []
    for pid, p in sorted(profs.items()):
        url = "http://127.0.0.1:%d/render?query=%s&from=0&until=now&format=folded" % (
            ctx.collector.port, urllib.parse.quote('%s.cpu{pid="%d"}' % (APP, pid)))
        try:
            got = sum(folded_stacks(urllib.request.urlopen(url, timeout=60).read().decode()).values())
        except urllib.error.HTTPError as e:
            got = "HTTP %d" % e.code
        if got != p.total():
            bad.append("pid %d: local file %d samples, collector %s" % (pid, p.total(), got))
    check(not bad, "%s: uploads differ from the local files:\n  %s\ncollector log: %s"
          % (what, "\n  ".join(bad), open(ctx.collector.log, errors="replace").read()[-1500:]))
    print("%s: the collector holds every process's samples (%d processes)" % (what, len(profs)))


def serve(ctx, argv, port, cwd, env=None, drive=None):
    """Runs a server under the agent, loads it (HTTP on port, or drive(server)), stops it with
    SIGTERM; returns the CPU time of each process of its tree that ran Python (/proc), of the
    whole tree (rusage) and its stderr."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PYAGENT_", "PYROSCOPE_"))}
    e.update(LD_PRELOAD=ctx.lib, PYAGENT_RATE="250", PYAGENT_OUTPUT=os.path.join(cwd, "pyagent.%p.folded"),
             PYTHONDONTWRITEBYTECODE="1")
    e.update(upload_env(ctx, cwd))
    e.update(env or {})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # A session of its own: Apache stops its children with a signal to its process group.
    p = subprocess.Popen(argv, cwd=cwd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         start_new_session=True)
    w = Watcher(p.pid)
    w.start()
    failure = None
    try:
        if drive:
            drive(p)
        else:
            load("http://127.0.0.1:%d/" % port, p, CLIENTS, REQUESTS)
    except Failure as e:
        failure = e
    finally:
        if p.returncode is None:
            p.terminate()
        err = p.communicate(timeout=60)[1].decode(errors="replace")
        w.done.set()
        w.join()
    check(failure is None, "%s\n%s" % (failure, err[-3000:]))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    check(p.returncode == 0, "%s ended with %d: %s" % (argv[0], p.returncode, err[-2000:]))
    tree = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return w.python_cpu(), tree, err


def profiles_match(ctx, cwd, cpu, tree, what, python_pids=None, workers=None):
    """Every process in python_pids (default: every process of the tree) has a profile, with
    app_burn in those of the workers (default: the processes but the tree's root, cpu's first
    key, that used MEASURED s or more). Each process that used MEASURED s or more, and the whole
    tree (unless tree is None): the profiles within 5% of the CPU time their sampling covered
    (the headers' cpu_s), and the CPU time sampling did not cover within 5% plus UNCOVERED a
    process: what a process spends before its agent starts (exec, the loader, a server's own C
    start-up before it loads Python), in the agent's own threads and in its final flush is no
    sample's. On a VM whose page faults cost 10-20 us, that passed 5% of a gunicorn arbiter's
    0.7 s (0.11 s)."""
    profs = Run(0, "", "", cwd).profiles()
    python_pids = set(cpu) if python_pids is None else python_pids
    missing = python_pids - set(profs)
    check(not missing, "%s: no profile of %s (profiles %s, processes %s)"
          % (what, sorted(missing), sorted(profs), {p: round(c, 3) for p, c in cpu.items()}))
    stray = set(profs) - set(cpu)
    check(not stray, "%s: profiles of processes outside the tree: %s" % (what, sorted(stray)))
    lines, bad = [], []
    total = covered = 0.0

    def matches(got, cov, used, rate):
        # TAIL periods: what a process's threads used after their last sample (a perf event
        # signals in user mode only, so the kernel work a process ends with, its memory's
        # release, waits for a sample that never comes). A gunicorn arbiter (0.5 s of CPU) lost
        # 2-3 periods in most runs and 6.5 in one beside three CPU burners (5.3%, over 5%).
        return (abs(got - cov) <= 0.05 * cov + TAIL / rate
                and used - cov <= 0.05 * used + UNCOVERED * (used > 0))

    for pid in sorted(profs):
        p = profs[pid]
        rate = int(p.meta["rate"])
        got, cov = p.total() / rate, float(p.meta["cpu_s"])
        total += got
        covered += cov
        burn = p.total(has_frame("_burn")) / rate
        lines.append("pid %d: profile %.3f s (%.3f s in *_burn), sampling covered %.3f s, /proc %.3f s, timer %s"
                     % (pid, got, burn, cov, cpu[pid], p.meta.get("timer")))
        if cpu[pid] >= MEASURED and not matches(got, cov, cpu[pid], rate):
            bad.append(pid)
    if tree is not None:
        lines.append("tree: profiles %.3f s, sampling covered %.3f s, rusage %.3f s" % (total, covered, tree))
    report = "%s:\n  %s" % (what, "\n  ".join(lines))
    print(report)
    root = next(iter(cpu))
    burning = workers if workers is not None else [
        pid for pid in profs if cpu[pid] >= MEASURED and pid != root]
    check(len(burning) >= 2, "%s: fewer than 2 processes did the work\n%s" % (what, report))
    for pid in burning:
        check(profs[pid].total(has_frame("_burn")) > 0, "%s: no sample of *_burn in %d\n%s" % (what, pid, report))
    check(not bad, "%s: CPU of %s differs by more than 5%%\n%s" % (what, bad, report))
    tails = sum(TAIL / int(p.meta["rate"]) for p in profs.values())
    check(tree is None or (abs(total - covered) <= 0.05 * covered + tails
                           and tree - covered <= 0.05 * tree + UNCOVERED * len(profs)),
          "%s: whole tree differs by more than 5%%\n%s" % (what, report))
    uploads_match(ctx, profs, what)


def gunicorn_run(ctx, what, extra, module="wsgi_burn:application"):
    gunicorn = shutil.which("gunicorn")
    check(gunicorn, "needs Debian's gunicorn")
    port, cwd = free_port(), ctx.workdir()
    cpu, tree, err = serve(ctx, [gunicorn, "--workers", "2", "--bind", "127.0.0.1:%d" % port,
                                 "--chdir", PROGRAMS] + extra + [module], port, cwd)
    profiles_match(ctx, cwd, cpu, tree, what)


def test_gunicorn_sync(ctx):
    """gunicorn, 2 sync workers: the arbiter and both workers are profiled, the CPU matches."""
    gunicorn_run(ctx, "gunicorn sync", [])


def test_gunicorn_gthread(ctx):
    """gunicorn, 2 gthread workers of 2 threads each."""
    gunicorn_run(ctx, "gunicorn gthread", ["--worker-class", "gthread", "--threads", "2"])


def test_gunicorn_preload(ctx):
    """gunicorn --preload: the app is imported in the arbiter before the workers fork."""
    gunicorn_run(ctx, "gunicorn preload", ["--preload"])


def test_gunicorn_uvicorn(ctx):
    """gunicorn with 2 uvicorn workers (asyncio) serving an ASGI app."""
    check(subprocess.run([ctx.python, "-c", "import uvicorn.workers"], capture_output=True).returncode == 0,
          "needs Debian's python3-uvicorn")
    gunicorn_run(ctx, "gunicorn uvicorn", ["--worker-class", "uvicorn.workers.UvicornWorker"],
                 module="asgi_burn:app")


def collector_stacks(ctx, selector):
    """The collector's folded stacks of servers.cpu with selector ("" or {k="v",...})."""
    url = "http://127.0.0.1:%d/render?query=%s&from=0&until=now&format=folded" % (
        ctx.collector.port, urllib.parse.quote("%s.cpu%s" % (APP, selector)))
    return folded_stacks(urllib.request.urlopen(url, timeout=60).read().decode())


def burn_total(stacks, fn):
    """Samples of the folded stacks with fn in them."""
    return sum(c for stack, c in stacks.items() if has_frame(fn)(stack.split(";")))


def test_fastapi_async_routes(ctx):
    """FastAPI under uvicorn (Debian's python3-fastapi and python3-uvicorn, uvicorn's asyncio
    loop) with PYAGENT_ASYNC=1 in wall mode: two routes of known cost, /burn (20 ms of CPU)
    and /nap (20 ms in asyncio.sleep), loaded at once, 4 clients x 25 requests each: every
    sample of either route's handler is under the task uvicorn runs its request in
    (task:Task-N, on the loop's thread), /nap's waiting samples end in <await sleep> right
    under nap_route(), and /burn's share of the two routes' samples is its share of the
    handlers' measured wall time within 2 points plus three standard deviations."""
    check(subprocess.run([ctx.python, "-c", "import fastapi, uvicorn"], capture_output=True).returncode == 0,
          "needs Debian's python3-fastapi and python3-uvicorn (scripts/deps.sh --test)")
    port, cwd = free_port(), ctx.workdir()
    truth = os.path.join(cwd, "truth.json")
    serve(ctx, [ctx.python, os.path.join(PROGRAMS, "async_routes.py"), "fastapi", str(port), truth], port, cwd,
          env={"PYAGENT_MODE": "wall", "PYAGENT_ASYNC": "1"},
          drive=lambda server: load_routes("http://127.0.0.1:%d/" % port, server))
    profs = Run(0, "", "", cwd).profiles()
    check(len(profs) == 1, "expected one profile, found %d" % len(profs))
    import json
    check_route_split(next(iter(profs.values())), json.load(open(truth)))


def test_flask_route_labels(ctx):
    """Flask under gunicorn (2 sync workers) labels each request with its route through
    pyagent.labels (before_request / teardown_request): in every worker's profile each sample
    of a view's work carries its route's labels, and the collector's query by label,
    servers.cpu{route="/heavy"}, returns the /heavy view's stacks and none of /light's (and
    the other way round), while the unlabelled query still holds both."""
    check(ctx.collector, "needs --collector")
    gunicorn = shutil.which("gunicorn")
    check(gunicorn, "needs Debian's gunicorn")
    port, cwd = free_port(), ctx.workdir()

    def drive(server):
        for route in ("heavy", "light"):
            load("http://127.0.0.1:%d/%s" % (port, route), server, CLIENTS, REQUESTS // 2)

    serve(ctx, [gunicorn, "--workers", "2", "--bind", "127.0.0.1:%d" % port, "--chdir", PROGRAMS,
                "flask_labels:app"], port, cwd, env={"PYTHONPATH": os.path.dirname(ctx.lib)}, drive=drive)
    want = {"heavy_burn": "labels:route=/heavy", "light_burn": "labels:route=/light"}
    wrong, seen = [], {k: 0 for k in want}
    for pid, p in Run(0, "", "", cwd).profiles().items():
        for frames, c in p.stacks:
            for fn, label in want.items():
                if has_frame(fn)(frames):
                    seen[fn] += c
                    if len(frames) < 2 or frames[1] != label:
                        wrong.append("pid %d: %s under %r" % (pid, fn, frames[:2]))
    check(all(seen.values()), "no samples of a view: %r" % seen)
    check(not wrong, "samples without their route's labels: %s" % "; ".join(wrong[:5]))

    heavy, light = collector_stacks(ctx, '{route="/heavy"}'), collector_stacks(ctx, '{route="/light"}')
    both = collector_stacks(ctx, "")
    report = "heavy_burn/light_burn samples: {route=/heavy} %d/%d, {route=/light} %d/%d, all %d/%d" % (
        burn_total(heavy, "heavy_burn"), burn_total(heavy, "light_burn"), burn_total(light, "heavy_burn"),
        burn_total(light, "light_burn"), burn_total(both, "heavy_burn"), burn_total(both, "light_burn"))
    check(burn_total(heavy, "heavy_burn") > 0 and burn_total(heavy, "light_burn") == 0, report)
    check(burn_total(light, "light_burn") > 0 and burn_total(light, "heavy_burn") == 0, report)
    check(burn_total(both, "heavy_burn") == burn_total(heavy, "heavy_burn") and
          burn_total(both, "light_burn") == burn_total(light, "light_burn"), report)
    check(not any("labels:" in stack for stack in both), "a labels frame reached the collector's stacks")
    print(report)


def test_flask_span_profiles(ctx):
    """Span profiles in a real server: Flask under gunicorn (2 sync workers) traced by sid's
    OpenTelemetry Flask instrumentation, with pyagent.SpanProcessor on the tracer provider.
    In every worker's profile each sample of a view's work carries the labels of its request's
    root span: span_name "GET /heavy" or "GET /light" (the instrumentation's names) and a
    span_id of 16 lowercase hex digits, one per request (never shared by the two routes).
    At the collector, servers.cpu{span_name="GET /heavy"} holds all the /heavy view's samples
    and none of /light's (and the other way round); span_id is not a series label there
    (a series per request would grow without bound), so a query by one finds nothing."""
    check(ctx.collector, "needs --collector")
    gunicorn = shutil.which("gunicorn")
    check(gunicorn, "needs Debian's gunicorn")
    pythons_sh = os.path.join(PROGRAMS, "..", "..", "..", "scripts", "pythons.sh")
    dist = subprocess.run([pythons_sh, "--otel"], capture_output=True, text=True)
    check(dist.returncode == 0, "no OpenTelemetry from sid: %s" % dist.stderr[-2000:])
    port, cwd = free_port(), ctx.workdir()

    def drive(server):
        for route in ("heavy", "light"):
            load("http://127.0.0.1:%d/%s" % (port, route), server, CLIENTS, REQUESTS // 2)

    serve(ctx, [gunicorn, "--workers", "2", "--bind", "127.0.0.1:%d" % port, "--chdir", PROGRAMS,
                "flask_spans:app"], port, cwd,
          env={"PYTHONPATH": os.pathsep.join((dist.stdout.strip(), os.path.dirname(ctx.lib)))}, drive=drive)
    want = {"heavy_burn": "GET /heavy", "light_burn": "GET /light"}
    wrong, seen, ids = [], {k: 0 for k in want}, {k: set() for k in want}
    for pid, p in Run(0, "", "", cwd).profiles().items():
        for frames, c in p.stacks:
            for fn, name in want.items():
                if has_frame(fn)(frames):
                    seen[fn] += c
                    text = frames[1][len("labels:"):] if len(frames) > 1 and frames[1].startswith("labels:") else ""
                    pairs = dict(kv.split("=", 1) for kv in text.split(",")) if text else {}
                    if (set(pairs) != {"span_id", "span_name"} or pairs["span_name"] != name or
                            not re.fullmatch("[0-9a-f]{16}", pairs["span_id"])):
                        wrong.append("pid %d: %s under %r" % (pid, fn, frames[:2]))
                    else:
                        ids[fn].add(pairs["span_id"])
    check(all(seen.values()), "no samples of a view: %r" % seen)
    check(not wrong, "samples without their root span's labels: %s" % "; ".join(wrong[:5]))
    check(not ids["heavy_burn"] & ids["light_burn"], "a span id under both routes")
    # Each request of 30 ms at 250 Hz is sampled about 7 times: nearly every one is seen.
    check(len(ids["heavy_burn"]) >= CLIENTS * REQUESTS // 4, "%d span ids for %d /heavy requests"
          % (len(ids["heavy_burn"]), CLIENTS * REQUESTS // 2))

    heavy = collector_stacks(ctx, '{span_name="GET /heavy"}')
    light = collector_stacks(ctx, '{span_name="GET /light"}')
    one_id = collector_stacks(ctx, '{span_id="%s"}' % sorted(ids["heavy_burn"])[0])
    report = ("heavy_burn/light_burn samples: local %d/%d, {span_name=GET /heavy} %d/%d, "
              "{span_name=GET /light} %d/%d; %d and %d span ids" % (
                  seen["heavy_burn"], seen["light_burn"], burn_total(heavy, "heavy_burn"),
                  burn_total(heavy, "light_burn"), burn_total(light, "heavy_burn"),
                  burn_total(light, "light_burn"), len(ids["heavy_burn"]),
                  len(ids["light_burn"])))
    check(burn_total(heavy, "heavy_burn") == seen["heavy_burn"] and burn_total(heavy, "light_burn") == 0, report)
    check(burn_total(light, "light_burn") == seen["light_burn"] and burn_total(light, "heavy_burn") == 0, report)
    check(not one_id, "span_id is a series label at the collector: %r" % list(one_id)[:2])
    print(report)


def uwsgi_serve(ctx, what, extra):
    uwsgi = shutil.which("uwsgi")
    check(uwsgi and os.path.exists("/usr/lib/uwsgi/plugins/python3_plugin.so"),
          "needs Debian's uwsgi-core and uwsgi-plugin-python3")
    port, cwd = free_port(), ctx.workdir()
    cpu, tree, err = serve(ctx, [uwsgi, "--plugin", "python3", "--master", "--processes", "2",
                                 "--http-socket", "127.0.0.1:%d" % port, "--die-on-term",
                                 "--wsgi-file", os.path.join(PROGRAMS, "wsgi_burn.py")] + extra, port, cwd)
    workers = {int(m) for m in re.findall(r"spawned uWSGI worker \d+ \(pid: (\d+)", err)}
    check(len(workers) == 2 and workers <= set(cpu), "%s: workers %s not in the tree %s:\n%s"
          % (what, sorted(workers), sorted(cpu), err[-2000:]))
    profiles_match(ctx, cwd, cpu, tree, what, workers=workers)


def test_uwsgi_prefork(ctx):
    """uWSGI (--master --processes 2, python3 plugin: libpython loaded by dlopen after start):
    the master, which loads the app, and both forked workers are profiled; CPU matches."""
    uwsgi_serve(ctx, "uwsgi prefork", [])


def test_uwsgi_lazy_apps_threads(ctx):
    """uWSGI --lazy-apps --enable-threads: each worker loads the app itself, with Python
    threads enabled."""
    uwsgi_serve(ctx, "uwsgi lazy-apps threads", ["--lazy-apps", "--enable-threads"])


APACHE_CONF = """\
ServerRoot /etc/apache2
ServerName localhost
Listen 127.0.0.1:{port}
PidFile {dir}/httpd.pid
CoreDumpDirectory {dir}
DefaultRuntimeDir {dir}
ErrorLog {dir}/error.log
LogLevel info
User www-data
Group www-data
LoadModule mpm_{mpm}_module /usr/lib/apache2/modules/mod_mpm_{mpm}.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
LoadModule wsgi_module /usr/lib/apache2/modules/mod_wsgi.so
StartServers 2
ServerLimit 2
MaxRequestWorkers {workers}
<IfModule mpm_prefork_module>
  MinSpareServers 2
  MaxSpareServers 2
</IfModule>
<IfModule mpm_event_module>
  ThreadsPerChild {threads}
  MinSpareThreads {threads}
  MaxSpareThreads {workers}
</IfModule>
WSGIScriptAlias / {dir}/wsgi_burn.py
WSGISocketPrefix {dir}/wsgi
WSGIApplicationGroup %{{GLOBAL}}
{daemon}
<Directory {dir}>
  Require all granted
</Directory>
"""


def apache_run(ctx, what, mpm, daemon):
    apache = "/usr/sbin/apache2"
    check(os.path.exists(apache) and os.path.exists("/usr/lib/apache2/modules/mod_wsgi.so"),
          "needs Debian's apache2 and libapache2-mod-wsgi-py3")
    check(os.getuid() == 0, "apache2 needs root to switch to www-data")
    port, cwd = free_port(), ctx.workdir()
    # Apache's children and mod_wsgi's daemons run as www-data: they write their profiles here.
    for d in (ctx.tmp, cwd):
        os.chmod(d, 0o777 if d == cwd else 0o711)
    shutil.copy(os.path.join(PROGRAMS, "wsgi_burn.py"), cwd)
    threads = 1 if mpm == "prefork" else 2
    conf = os.path.join(cwd, "httpd.conf")
    with open(conf, "w") as f:
        f.write(APACHE_CONF.format(
            port=port, dir=cwd, mpm=mpm, workers=2 * threads, threads=threads,
            daemon="WSGIDaemonProcess burn processes=2 threads=1\nWSGIProcessGroup burn" if daemon else ""))
    cpu, tree, err = serve(ctx, [apache, "-f", conf, "-D", "FOREGROUND"], port, cwd)
    log = open(os.path.join(cwd, "error.log"), errors="replace").read()
    deaths = re.findall(r"child pid \d+ exit signal [^(]*\(\d+\)", log)
    check(not deaths, "%s: %s\n%s" % (what, deaths, log[-3000:]))
    profiles_match(ctx, cwd, cpu, tree, what + "\n" + log[-3000:])


def test_apache_embedded_prefork(ctx):
    """Apache (mpm prefork, 2 children) with mod_wsgi in embedded mode: the app runs in the
    children, which load libpython by dlopen (mod_wsgi.so links it)."""
    apache_run(ctx, "apache embedded prefork", "prefork", daemon=False)


def test_apache_daemon(ctx):
    """Apache (mpm prefork) with mod_wsgi in daemon mode: 2 daemon processes of 1 thread,
    forked from Apache's parent, run the app; Apache's children pass the requests on."""
    apache_run(ctx, "apache daemon", "prefork", daemon=True)


def test_apache_embedded_event(ctx):
    """Apache (mpm event, 2 children of 2 threads) with mod_wsgi in embedded mode: requests
    run on Apache's threads, which block every signal (APR), SIGPROF included. They are never
    signalled; the tick thread reads their CPU clocks and stacks (architecture.md, "Threads
    that block SIGPROF"), so each child's CPU is in its profile within 5%, as under prefork,
    every request is served, no child dies of a signal and Apache exits 0."""
    apache_run(ctx, "apache embedded event", "event", daemon=False)


def test_apache_daemon_event(ctx):
    """Apache (mpm event) with mod_wsgi in daemon mode: 2 daemon processes of 1 thread, forked
    from Apache's parent, run the app while Apache's threaded children pass the requests on;
    each process's CPU is in its profile within 5%, whichever of its threads block signals."""
    apache_run(ctx, "apache daemon event", "event", daemon=True)


def test_celery_prefork(ctx):
    """Celery 5.2 worker, prefork pool of 2 (Redis broker: Debian's redis-server on a port of
    its own), 160 tasks of 20 ms: the worker and both pool processes are profiled; each pool
    process's CPU matches."""
    redis = shutil.which("redis-server")
    check(redis and subprocess.run([ctx.python, "-c", "import celery, redis"]).returncode == 0,
          "needs Debian's redis-server and python3-celery")
    port, cwd = free_port(), ctx.workdir()
    broker = subprocess.Popen([redis, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", cwd], stdout=subprocess.DEVNULL)
    env = {"BURN_REDIS": "redis://127.0.0.1:%d/0" % port, "PYTHONPATH": PROGRAMS}
    done = os.path.join(cwd, "workers.txt")

    client_cpu = []

    def drive(worker):
        client = {k: v for k, v in os.environ.items() if not k.startswith("PYAGENT_")}
        client.pop("LD_PRELOAD", None)
        client.update(env)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run([ctx.python, os.path.join(PROGRAMS, "celery_burn.py"), str(CLIENTS * REQUESTS), done],
                           env=client, capture_output=True, text=True, timeout=240)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        client_cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        check(r.returncode == 0, "the client failed: %s" % r.stderr[-2000:])
    try:
        cpu, tree, err = serve(ctx, [ctx.python, "-m", "celery", "-A", "celery_burn", "worker", "--pool", "prefork",
                                     "--concurrency", "2", "--without-gossip", "--without-mingle",
                                     "--without-heartbeat", "--loglevel", "warning"], 0, cwd, env=env, drive=drive)
    finally:
        broker.terminate()
        broker.wait(timeout=60)
    reported = {int(pid): float(t) for pid, t in (line.split() for line in open(done) if line.strip())}
    check(len(reported) == 2 and set(reported) <= set(cpu), "pool processes %s, tree %s" % (sorted(reported), sorted(cpu)))
    # The client is the test's child too: its CPU is not the worker's.
    profiles_match(ctx, cwd, cpu, tree - sum(client_cpu), "celery prefork", workers=set(reported))


def pool_run(ctx, method, kind="executor"):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cwd = ctx.workdir()
    r = ctx.run(["pool_burn.py", method, kind], env=upload_env(ctx, cwd), cwd=cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    check(r.rc == 0, "%s: %s" % (method, r.err[-2000:]))
    lines = open(os.path.join(r.cwd, "pids.txt")).read().split("\n")
    main = int(lines[0])
    cpu = {main: 0.0}
    for line in lines[1:]:
        if line:
            pid, t = line.split()
            cpu[int(pid)] = float(t)
    tree = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # The forkserver and spawn's resource tracker are Python processes too, outside pids.txt.
    profs = r.profiles()
    for pid in profs:
        cpu.setdefault(pid, 0.0)
    # forkserver: the workers are the forkserver's children, and the forkserver outlives the
    # program (it leaves when the program's end closes its pipe; nobody waits for it), so the
    # tree's CPU is not in our rusage: each worker is checked against what it reported.
    if method == "forkserver":
        tree = None
    profiles_match(ctx, r.cwd, cpu, tree, "%s %s" % (kind, method), python_pids=set(cpu))


def test_process_pool_fork(ctx):
    """concurrent.futures.ProcessPoolExecutor (fork): each worker's CPU (process_time() it
    reports after its last task) matches its profile."""
    pool_run(ctx, "fork")


def test_process_pool_spawn(ctx):
    """ProcessPoolExecutor with spawn: fresh interpreters, each profiled from its start."""
    pool_run(ctx, "spawn")


def test_mp_pool_fork(ctx):
    """multiprocessing's `with Pool(2) as p: p.map(...)` (fork): leaving the block terminates
    the workers with SIGTERM; their samples reach their profiles, each worker's CPU matches."""
    pool_run(ctx, "fork", "pool")


def test_mp_pool_spawn(ctx):
    """`with Pool(2)` with spawn: fresh interpreters, terminated by SIGTERM at the end."""
    pool_run(ctx, "spawn", "pool")


def test_mp_pool_forkserver(ctx):
    """`with Pool(2)` with forkserver: workers forked by the forkserver process (a Python
    process of the tree with a profile of its own), terminated by SIGTERM at the end."""
    pool_run(ctx, "forkserver", "pool")


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("test_")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python")
    ap.add_argument("--lib")
    ap.add_argument("--collector", help="pyagent-collector: also check every process's uploads")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("case", nargs="?")
    a = ap.parse_args()
    if a.list:
        print("\n".join(CASES))
        return 0
    ctx = Context(a.python, os.path.abspath(a.lib), None)
    ctx.collector = None
    if a.collector:
        ctx.collector = Collector(a.collector, ctx.tmp, free_port())
        try:
            ctx.collector.start()
        except Failure as e:
            print("FAIL %s on %s: %s" % (a.case, a.python, e))
            return 1
    try:
        return run_case(CASES[a.case], ctx, "%s on %s" % (a.case, a.python))
    finally:
        if ctx.collector:
            ctx.collector.stop()


if __name__ == "__main__":
    sys.exit(main())
