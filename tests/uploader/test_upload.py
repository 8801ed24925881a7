"""Integration tests of continuous uploads: the agent against a real pyagent-collector and
against a misbehaving server (badserver.py). No sample may be lost or doubled; the program
must not notice; its exit is bounded. Every case runs in each protocol (PYAGENT_PROTOCOL:
push, ingest, otlp): spool, retry, ordering and the exit deadline are the same for all three.

Uploads name Python frames module.qualname (uploader/modname.h) where the local file has the
bare qualname: stacks are compared with the module part taken off (unqualified), and
module_names checks the names themselves.

    python3 test_upload.py --python PY --lib libpyagent.so --collector pyagent-collector \
        [--protocol push|ingest|otlp] CASE
    python3 test_upload.py --list      (PROTOCOL.CASE, one line per test)

A case marked @only(...) runs in those protocols only (a behaviour one protocol has)."""
import argparse
import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "agent"))  # harness
from badserver import BadServer  # noqa: E402
from pyroscope import FakePyroscope, Limits, decode_push, pprof_labelled_samples, request_stacks  # noqa: E402
from harness import PROGRAMS, Context, Failure, Profile, check  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


PROTOCOLS = ("push", "ingest", "otlp")


def only(*protocols):
    """Runs the case in these protocols only."""
    def mark(fn):
        fn.protocols = protocols
        return fn
    return mark


# Cases about the transport (connections, retries, the spool, the exit's deadline, TLS, our
# threads): send.c and the spool are one path for every protocol, so they run in Push (the
# default) and /ingest (the path Push replaced, issue 14: "the same spool, retry and ordering
# guarantees"); OTLP's bodies go the same way and are checked by every other case.
transport = only("push", "ingest")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Collector:
    def __init__(self, exe, workdir, port):
        self.exe, self.port = exe, port
        self.db = os.path.join(workdir, "profiles.db")
        self.log = os.path.join(workdir, "collector.log")
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([self.exe, "--listen", "127.0.0.1:%d" % self.port, "--db", self.db],
                                     stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        for _ in range(100):
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/api/apps" % self.port, timeout=1).read()
                return self
            except OSError:
                time.sleep(0.05)
        raise Failure("collector did not start: " + open(self.log).read()[-2000:])

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)

    def stacks(self, app):
        url = "http://127.0.0.1:%d/render?query=%s&from=0&until=now&format=folded" % (self.port, app)
        body = urllib.request.urlopen(url, timeout=30).read().decode()
        return folded_stacks(body)


def folded_stacks(text):
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        stack, _, c = line.rpartition(" ")
        out[stack] = out.get(stack, 0) + int(c)
    return out


def local_stacks(path):
    p = Profile(path)
    out = {}
    for frames, c in p.stacks:
        key = ";".join(frames)
        out[key] = out.get(key, 0) + c
    return out


FRAME_RE = re.compile(r"^(.*) \((.*)\)$")


def unqualified(got, want):
    """got with each module-qualified frame ("mod.sub.func (file:line)") named as in want
    ("func (file:line)"): the longest dotted prefix whose removal gives a frame of want goes."""
    frames = {f for k in want for f in k.split(";")}
    memo = {}

    def one(f):
        if f in frames:
            return f
        if f not in memo:
            memo[f] = f
            m = FRAME_RE.match(f)
            if m:
                parts = m.group(1).split(".")
                for i in range(1, len(parts)):
                    cand = "%s (%s)" % (".".join(parts[i:]), m.group(2))
                    if cand in frames:
                        memo[f] = cand
                        break
        return memo[f]
    out = {}
    for k, v in got.items():
        key = ";".join(one(f) for f in k.split(";"))
        out[key] = out.get(key, 0) + v
    return out


def same_stacks(got, want, what):
    got = unqualified(got, want)
    if got == want:
        return
    missing = {k: v - got.get(k, 0) for k, v in want.items() if got.get(k, 0) != v}
    extra = {k: v for k, v in got.items() if k not in want}
    raise Failure("%s: %d samples received, %d in the local file; differing stacks %d, extra %d; e.g. %r"
                  % (what, sum(got.values()), sum(want.values()), len(missing), len(extra),
                     list(missing.items())[:2] or list(extra.items())[:2]))


class UploadCtx(Context):
    def __init__(self, python, lib, launcher, collector, protocol):
        super().__init__(python, lib, launcher)
        self.collector_exe = collector
        self.protocol = protocol

    def agent(self, server, app, spool=None, fmt="pprof", extra=None):
        """The agent's environment. fmt is PYAGENT_UPLOAD_FORMAT, which only /ingest reads
        (push and otlp send pprof whatever it says)."""
        env = {"PYAGENT_SERVER": server, "PYAGENT_APP_NAME": app, "PYAGENT_UPLOAD_INTERVAL": "1",
               "PYAGENT_OUTPUT": "local.folded", "PYAGENT_UPLOAD_FORMAT": fmt,
               "PYAGENT_PROTOCOL": self.protocol,
               "PYAGENT_SPOOL_DIR": spool or os.path.join(self.tmp, "spool-" + app)}
        env.update(extra or {})
        return env

    def start(self, argv, env, cwd):
        argv = [self.python, os.path.join(PROGRAMS, argv[0])] + argv[1:]
        e = {k: v for k, v in os.environ.items() if not k.startswith("PYAGENT_")}
        e.update({"LD_PRELOAD": self.lib, "PYAGENT_RATE": "250"}, **env)
        return subprocess.Popen(argv, cwd=cwd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc, timeout=300):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def test_totals_at_the_collector(ctx):
    """The collector's merged profile of a run holds exactly the samples of the local file."""
    cwd = ctx.workdir()
    col = Collector(ctx.collector_exe, cwd, free_port()).start()
    try:
        p = ctx.start(["steady.py", "5"], ctx.agent("http://127.0.0.1:%d" % col.port, "totals"), cwd)
        rc, out, err = finish(p)
        check(rc == 0 and out == "steady done\n", "program failed: %s" % err)
        same_stacks(col.stacks("totals.cpu"), local_stacks(os.path.join(cwd, "local.folded")), "collector")
    finally:
        col.stop()


def test_querier_cpu_and_wall(ctx):
    """A profile uploaded in cpu and in wall mode appears in our collector's querier API
    (Grafana's querier.v1.QuerierService, JSON codec) under service APP with the types
    process_cpu and wall, each holding every sample of its local file."""
    cwd = ctx.workdir()
    col = Collector(ctx.collector_exe, cwd, free_port()).start()
    try:
        local = {}
        for mode in ("cpu", "wall"):
            d = ctx.workdir()
            env = ctx.agent("http://127.0.0.1:%d" % col.port, "queried", extra={"PYAGENT_MODE": mode})
            rc, out, err = finish(ctx.start(["steady.py", "2"], env, d))
            check(rc == 0, "program failed: %s" % err[-2000:])
            local[mode] = sum(local_stacks(os.path.join(d, "local.folded")).values())

        def call(method, body):
            rq = urllib.request.Request("http://127.0.0.1:%d/querier.v1.QuerierService/%s" % (col.port, method),
                                        data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            return json.loads(urllib.request.urlopen(rq, timeout=60).read())
        ids = {t["ID"] for t in call("ProfileTypes", {})["profileTypes"]}
        for want in ("process_cpu:cpu:nanoseconds:cpu:nanoseconds", "process_cpu:samples:count:cpu:nanoseconds",
                     "wall:wall:nanoseconds:wall:nanoseconds", "wall:samples:count:wall:nanoseconds"):
            check(want in ids, "no profile type %s: %s" % (want, sorted(ids)))
        check(call("LabelValues", {"name": "service_name"})["names"] == ["queried"], "services")
        for mode, name in (("cpu", "process_cpu"), ("wall", "wall")):
            fg = call("SelectMergeStacktraces", {"profileTypeID": "%s:samples:count:%s:nanoseconds" % (name, mode),
                                                 "labelSelector": '{service_name="queried"}', "start": "1",
                                                 "end": str(int(time.time() * 1000) + 60000)})["flamegraph"]
            check(int(fg["total"]) == local[mode], "%s: the querier holds %s samples, the local file %d"
                  % (mode, fg["total"], local[mode]))
    finally:
        col.stop()


def label_text_pairs(text):
    """The pairs of a label text (k=v,k2="v,2": bare, or quoted with \\ escapes)."""
    pairs, i = {}, 0
    while i < len(text):
        eq = text.index("=", i)
        key, i = text[i:eq], eq + 1
        if text[i:i + 1] == '"':
            value, i = "", i + 1
            while text[i] != '"':
                if text[i] == "\\":
                    i += 1
                value, i = value + text[i], i + 1
            i += 1
        else:
            end = text.find(",", i)
            end = len(text) if end < 0 else end
            value, i = text[i:end], end
        pairs[key] = value
        i += text[i:i + 1] == ","
    return pairs


def test_labels_at_the_collector(ctx):
    """pyagent.labels' label sets (nested, overridden, removed, a quoted value, a dotted name,
    decorators) reach the collector as series labels: a query naming a set's labels returns
    exactly the samples of the local file whose labels include them, and no labels frame is
    left in the stacks; the whole application still holds every sample."""
    check_labels_at_the_collector(ctx, "pprof")


def test_labels_in_folded_uploads(ctx):
    """The same with PYAGENT_UPLOAD_FORMAT=folded (/ingest only; the other protocols send
    pprof): each label set's samples are an upload of their own named with its labels ('.'
    in a name sent as '_', as for tags), the set whose value holds a comma without that label
    (an /ingest name cannot carry it)."""
    check_labels_at_the_collector(ctx, "folded")


def test_span_profiles_at_the_collector(ctx):
    """pyagent.SpanProcessor's labels (spans.py: sid's OpenTelemetry SDK, requests as root
    spans, one kind inside pyagent.labels(tenant="t1")) at the collector: a query by
    span_name (and by span_name and tenant) returns exactly the samples of the local file that
    carry it (the local file's label sets taken without span_id, which the collector leaves
    out of series: one per request would grow without bound; collector-api.md); the whole
    application still holds every sample."""
    pythons_sh = os.path.join(ROOT, "scripts", "pythons.sh")
    dist = subprocess.run([pythons_sh, "--otel"], capture_output=True, text=True)
    check(dist.returncode == 0, "no OpenTelemetry from sid: %s" % dist.stderr[-2000:])
    check_labels_at_the_collector(ctx, "pprof", ["spans.py", "truth.json", "1.0", "6"], min_sets=3,
                                  path=dist.stdout.strip())


@only("ingest")
def test_span_profiles_in_folded_uploads(ctx):
    """The same with PYAGENT_UPLOAD_FORMAT=folded (/ingest only), which sends an upload per
    label set: span_id is left out of them, so there is one per span name, not per request."""
    pythons_sh = os.path.join(ROOT, "scripts", "pythons.sh")
    dist = subprocess.run([pythons_sh, "--otel"], capture_output=True, text=True)
    check(dist.returncode == 0, "no OpenTelemetry from sid: %s" % dist.stderr[-2000:])
    check_labels_at_the_collector(ctx, "folded", ["spans.py", "truth.json", "1.0", "6"], min_sets=3,
                                  path=dist.stdout.strip())


def check_labels_at_the_collector(ctx, fmt, argv=("labels.py", "truth.json", "nesting", "1"), min_sets=6,
                                  path=None):
    folded = fmt == "folded" and ctx.protocol == "ingest"
    cwd = ctx.workdir()
    col = Collector(ctx.collector_exe, cwd, free_port()).start()
    try:
        env = ctx.agent("http://127.0.0.1:%d" % col.port, "labelled", fmt=fmt,
                        extra={"PYTHONPATH": os.pathsep.join(p for p in (path, os.path.dirname(ctx.lib)) if p)})
        rc, out, err = finish(ctx.start(list(argv), env, cwd))
        check(rc == 0, "%s failed: %s" % (argv[0], err[-2000:]))
        local = local_stacks(os.path.join(cwd, "local.folded"))
        sets = {}
        plain = {}
        for stack, c in local.items():
            frames = stack.split(";")
            labelled = len(frames) > 1 and frames[1].startswith("labels:")
            text = frames[1][len("labels:"):] if labelled else ""
            if text:  # span_id is no series label at the collector, nor in a folded upload
                text = ",".join(k + "=" + (v if re.fullmatch(r'[^,{}="\\]*', v) else
                                           '"%s"' % v.replace("\\", "\\\\").replace('"', '\\"'))
                                for k, v in sorted(label_text_pairs(text).items()) if k != "span_id")
            if folded and text:  # what an /ingest name can carry of them
                text = ",".join("%s=%s" % (k.replace(".", "_"), v) for k, v in sorted(label_text_pairs(text).items())
                                if not any(ch in v for ch in ',={}"'))
            sets.setdefault(text, 0)
            sets[text] += c
            rest = ";".join(frames[:1] + frames[2:]) if labelled else stack
            plain[rest] = plain.get(rest, 0) + c
        check(len([t for t in sets if t]) >= (min_sets - 1 if folded else min_sets),
              "label sets in the local file: %r" % sorted(sets))
        report = []
        for text in sorted(t for t in sets if t):
            want_pairs = label_text_pairs(text)
            want = sum(c for t, c in sets.items() if t and label_text_pairs(t).items() >= want_pairs.items())
            selector = ",".join('%s="%s"' % (k, v.replace("\\", "\\\\").replace('"', '\\"'))
                                for k, v in sorted(want_pairs.items()))
            got_stacks = col.stacks(urllib.parse.quote("labelled.cpu{%s}" % selector))
            got = sum(got_stacks.values())
            report.append("{%s}: %d of %d" % (selector, got, want))
            check(got == want, "query by label: " + "; ".join(report))
            check(not any("labels:" in st for st in got_stacks), "a labels frame in the collector's stacks")
        same_stacks(col.stacks("labelled.cpu"), plain, "collector, all series")
        print("; ".join(report))
    finally:
        col.stop()


def test_sigterm_uploads(ctx):
    """A process ended by SIGTERM (default action) uploads its samples first, within the exit
    deadline, and still dies of SIGTERM: the collector holds exactly the local file's stacks."""
    cwd = ctx.workdir()
    col = Collector(ctx.collector_exe, cwd, free_port()).start()
    try:
        env = ctx.agent("http://127.0.0.1:%d" % col.port, "doomed", extra={"PYAGENT_UPLOAD_INTERVAL": "60"})
        p = ctx.start(["deaths.py", "self", "SIGTERM"], env, cwd)
        rc, out, err = finish(p)
        check(rc == -15 and out == "", "rc %d, out %r, err %s" % (rc, out, err[-2000:]))
        local = local_stacks(os.path.join(cwd, "local.folded"))
        check(sum(local.values()) > 0, "no samples in the local file")
        same_stacks(col.stacks("doomed.cpu"), local, "collector")
    finally:
        col.stop()


@transport
def test_collector_down_at_start(ctx):
    cwd = ctx.workdir()
    col = Collector(ctx.collector_exe, cwd, free_port())
    p = ctx.start(["steady.py", "7"], ctx.agent("http://127.0.0.1:%d" % col.port, "late"), cwd)
    time.sleep(3)
    col.start()
    try:
        rc, out, err = finish(p)
        check(rc == 0, "program failed: %s" % err)
        same_stacks(col.stacks("late.cpu"), local_stacks(os.path.join(cwd, "local.folded")), "collector")
    finally:
        col.stop()


@transport
def test_collector_gone_30s_and_killed(ctx):
    """kill -9 of the collector mid-run, 30 s away, restarted on the same database."""
    cwd = ctx.workdir()
    col = Collector(ctx.collector_exe, cwd, free_port()).start()
    p = ctx.start(["steady.py", "42"], ctx.agent("http://127.0.0.1:%d" % col.port, "gone"), cwd)
    time.sleep(5)
    col.kill9()
    time.sleep(30)
    col.start()
    try:
        rc, out, err = finish(p)
        check(rc == 0 and out == "steady done\n", "program failed: %s" % err)
        same_stacks(col.stacks("gone.cpu"), local_stacks(os.path.join(cwd, "local.folded")), "collector")
    finally:
        col.stop()


def run_against(ctx, mode, seconds="5", fmt="folded", extra=None):
    srv = BadServer(mode)
    cwd = ctx.workdir()
    try:
        t0 = time.monotonic()
        p = ctx.start(["steady.py", seconds], ctx.agent(srv.url(), "bad", fmt=fmt, extra=extra), cwd)
        rc, out, err = finish(p)
        wall = time.monotonic() - t0
        return srv, cwd, rc, out, err, wall
    finally:
        srv.stop()


@transport
def test_flapping_server(ctx):
    """A server that answers at random 200, 503 or a reset: every sample is at the server or,
    when the exit's deadline came before a success, still in the spool for the next process
    (how many requests the exit gets in depends on the machine's load: not a loss)."""
    srv, cwd, rc, out, err, _ = run_against(ctx, "flap:7", seconds="8")
    check(rc == 0 and out == "steady done\n", "program failed: %s" % err)
    check(srv.requests > len(srv.accepted), "the server never failed a request")
    got = srv.stacks()
    spool = os.path.join(ctx.tmp, "spool-bad")
    for name in sorted(os.listdir(spool)):
        if name.endswith(".spool"):
            for k, v in spool_stacks(os.path.join(spool, name)).items():
                got[k] = got.get(k, 0) + v
    same_stacks(got, local_stacks(os.path.join(cwd, "local.folded")), "flapping server and the spool")


@transport
def test_server_answering_5xx_then_ok(ctx):
    srv, cwd, rc, out, err, _ = run_against(ctx, "fail5xx:3", seconds="6")
    check(rc == 0, err)
    same_stacks(srv.stacks(), local_stacks(os.path.join(cwd, "local.folded")), "after 503s")


@transport
def test_connection_resets(ctx):
    srv, cwd, rc, out, err, _ = run_against(ctx, "reset:3", seconds="6", extra={"PYAGENT_LOG": "debug"})
    check(rc == 0, err)
    try:
        same_stacks(srv.stacks(), local_stacks(os.path.join(cwd, "local.folded")), "after resets")
    except Failure as e:
        raise Failure("%s\nserver saw %d requests; agent said:\n%s" % (e, srv.requests, err[-3000:]))


@transport
def test_slow_server_bounds_exit(ctx):
    """A server that never answers in time: uploads time out, the exit waits at most
    PYAGENT_EXIT_TIMEOUT_MS, and what was not sent stays in the spool."""
    extra = {"PYAGENT_UPLOAD_TIMEOUT_MS": "500", "PYAGENT_EXIT_TIMEOUT_MS": "2000"}
    srv, cwd, rc, out, err, wall = run_against(ctx, "slow:60", seconds="3", extra=extra)
    check(rc == 0 and out == "steady done\n", "program failed: %s" % err)
    # The exit gave up on the server: it never waited for the 60 s answer. (How long the
    # exit takes is a benchmark figure; a loaded machine must not fail this test.)
    check(srv.slow_answered == 0, "the program waited for the slow server (%.1f s)" % wall)
    check(srv.requests > 0, "no upload was attempted")
    spool = os.path.join(ctx.tmp, "spool-bad")
    check(any(f.endswith(".spool") for f in os.listdir(spool)), "nothing kept in the spool")


@transport
def test_exit_during_an_answered_upload(ctx):
    """The program exits while the server holds its answer to an upload whose body it has
    read (and stored): the exit waits for that answer rather than abort the transfer and send
    the same profile again, so no sample is counted twice."""
    srv = BadServer("slowfirst:2")
    cwd = ctx.workdir()
    try:
        env = ctx.agent(srv.url(), "bad", fmt="folded", extra={"PYAGENT_EXIT_TIMEOUT_MS": "6000"})
        rc, out, err = finish(ctx.start(["steady.py", "1.5"], env, cwd))
        check(rc == 0 and out == "steady done\n", "program failed: %s" % err)
        # The held answer goes out 2 s after the first upload came, whether the program
        # waited for it or not; what the server stored is complete only then.
        until = time.monotonic() + 30
        while srv.slow_answered < 1 and srv.requests and time.monotonic() < until:
            time.sleep(0.1)
        check(srv.slow_answered == 1, "the first upload did not come while the program ran")
        same_stacks(srv.stacks(), local_stacks(os.path.join(cwd, "local.folded")), "exit during an upload")
    finally:
        srv.stop()


def test_rejected_uploads_are_kept(ctx):
    """A 4xx never deletes a profile: each rejected upload is kept in the spool's rejected/
    directory, the server's reason is logged once, and the count is reported."""
    srv, cwd, rc, out, err, _ = run_against(ctx, "reject413", seconds="3")
    check(rc == 0 and out == "steady done\n", "program failed: %s" % err)
    check(srv.requests >= 2, "only %d upload(s) tried" % srv.requests)
    rejected = os.path.join(ctx.tmp, "spool-bad", "rejected")
    kept = sorted(os.listdir(rejected)) if os.path.isdir(rejected) else []
    check(len(kept) == srv.requests, "%d uploads rejected, %d kept in %s: %r" % (srv.requests, len(kept), rejected, kept))
    total = 0
    for name in kept:
        total += sum(spool_stacks(os.path.join(rejected, name)).values())
    local = sum(local_stacks(os.path.join(cwd, "local.folded")).values())
    check(total == local, "rejected/ holds %d samples, the local file %d" % (total, local))
    check(err.count("rejected a profile (HTTP 413: go away)") == 1, "the reason is not logged once: %r" % err)
    check("%d profile(s) rejected" % srv.requests in err, "no count of rejected profiles: %r" % err)
    header_counts(cwd, rejected=srv.requests, rejected_dropped=0)
    # The header counts a profile refused at exit too, the last upload, sent after the file
    # was written (here the only one).
    srv, cwd, rc, out, err, _ = run_against(ctx, "reject413", seconds="1", extra={"PYAGENT_UPLOAD_INTERVAL": "60"})
    check(rc == 0 and srv.requests == 1, "exit's upload: rc %d, %d request(s): %s" % (rc, srv.requests, err[-2000:]))
    header_counts(cwd, rejected=1, rejected_dropped=0)


def header_counts(cwd, **want):
    """The local file's header holds these upload counters (docs/formats.md)."""
    meta = Profile(os.path.join(cwd, "local.folded")).meta
    got = {k: meta.get(k) for k in want}
    check(got == {k: str(v) for k, v in want.items()}, "header counters %r, expected %r" % (got, want))


def rejected_files(ctx, app):
    d = os.path.join(ctx.tmp, "spool-" + app, "rejected")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def test_rejected_bound_says_each_deletion(ctx):
    """rejected/ is bounded by PYAGENT_SPOOL_MAX_MB like the spool (a server that refuses
    everything must not fill the disk), but never silently: each refused profile the bound
    deletes is one line on stderr naming its file, and the local file's header counts them
    (rejected_dropped) beside the profiles refused (rejected)."""
    rejected = os.path.join(ctx.tmp, "spool-bad", "rejected")
    os.makedirs(rejected)
    old = ["%013d-%010d-%06d.spool" % (1000 + i, 1, i) for i in range(3)]
    for name in old:  # refused long ago, 600 KB each: 1.8 MB over a 1 MB bound
        with open(os.path.join(rejected, name), "w") as f:
            f.write("pyagent-spool 1 name=old&from=1&until=2&format=folded\n")
            f.write("x 1\n" * 150000)
    srv, cwd, rc, out, err, _ = run_against(ctx, "reject413", seconds="3", extra={"PYAGENT_SPOOL_MAX_MB": "1"})
    check(rc == 0 and out == "steady done\n", "program failed: %s" % err)
    left = sorted(os.listdir(rejected))
    size = sum(os.path.getsize(os.path.join(rejected, f)) for f in left)
    check(size <= 1 << 20, "rejected/ holds %d bytes over its 1 MB bound" % size)
    dropped = len(old) + srv.requests - len(left)
    check(dropped >= 2 and not set(old[:2]) & set(left), "the bound deleted %d file(s): %r" % (dropped, left))
    said = re.findall(r"deleted (\S+\.spool), a profile the server had refused", err)
    check(len(said) == dropped and len(set(said)) == dropped and not set(said) & set(left),
          "%d refused profile(s) deleted, %d said: %r" % (dropped, len(said), said))
    header_counts(cwd, rejected=srv.requests, rejected_dropped=dropped)


def spool_stacks(path):
    """{stack: count} of a spool file: "pyagent-spool 1 QUERY" (/ingest) or "pyagent-spool 2
    PATH TYPE" (Push, OTLP), then the body."""
    with open(path, "rb") as f:
        head, _, body = f.read().partition(b"\n")
    parts = head.decode().split(" ")
    check(head.startswith(b"pyagent-spool ") and len(parts) >= 3, "%s is not a spool file: %r" % (path, head[:80]))
    if parts[1] == "1":
        check(parts[2].startswith("name="), "%s: not an ingest query: %r" % (path, head[:80]))
        q = dict(urllib.parse.parse_qsl(parts[2]))
        return request_stacks("/ingest", q, body)
    check(parts[1] == "2" and parts[2] in ("/push.v1.PusherService/Push", "/v1development/profiles"),
          "%s: unknown target %r" % (path, head[:80]))
    return request_stacks(parts[2], {}, body)


def pyroscope_run(ctx, app, seconds="3", fmt="pprof", extra=None, program="steady.py", server=None):
    srv = server or FakePyroscope()
    cwd = ctx.workdir()
    try:
        env = ctx.agent(srv.url(), app, fmt=fmt, extra=extra)
        rc, out, err = finish(ctx.start([program, seconds], env, cwd))
        check(rc == 0, "program failed: %s" % err[-3000:])
        return srv, cwd, err
    finally:
        srv.stop()


def accepted_only(srv, err):
    check(not srv.rejected, "Pyroscope would refuse %d upload(s): %s\nagent said: %s"
          % (len(srv.rejected), srv.rejected[:2], err[-2000:]))
    check(srv.accepted, "nothing uploaded")


def test_pyroscope_cpu_and_wall_pprof(ctx):
    """pprof uploads in cpu and wall mode land in Pyroscope under service APP (not APP.cpu)
    with __name__ process_cpu and wall, holding every sample of the local file."""
    for mode, metric in (("cpu", "process_cpu"), ("wall", "wall")):
        srv, cwd, err = pyroscope_run(ctx, "pyro", extra={"PYAGENT_MODE": mode})
        accepted_only(srv, err)
        for rec in srv.accepted:
            check(rec["service"] == "pyro", "%s mode: filed under service %r" % (mode, rec["service"]))
            check(set(rec["names"].values()) == {metric},
                  "%s mode: filed as %s (sample types %s)" % (mode, rec["names"], rec["types"]))
        got = sum(r["samples"] for r in srv.accepted)
        want = sum(local_stacks(os.path.join(cwd, "local.folded")).values())
        check(got == want, "%s mode: Pyroscope got %d samples, the local file holds %d" % (mode, got, want))


def test_pyroscope_folded(ctx):
    """Folded uploads carry no header line (Pyroscope's parser refuses it) and land under
    service APP with __name__ process_cpu / wall, stack for stack as the local file."""
    for mode, metric in (("cpu", "process_cpu"), ("wall", "wall")):
        srv, cwd, err = pyroscope_run(ctx, "pyro", fmt="folded", extra={"PYAGENT_MODE": mode})
        accepted_only(srv, err)
        for rec in srv.accepted:
            check(rec["service"] == "pyro" and rec["name"] == metric, "%s mode: filed as %s / %s" % (mode, rec["service"], rec["name"]))
        got = {}
        for rec in srv.accepted:
            for k, v in rec["stacks"].items():
                got[k] = got.get(k, 0) + v
        same_stacks(got, local_stacks(os.path.join(cwd, "local.folded")), "%s mode at Pyroscope" % mode)


HOSTILE_TAGS = ",".join(["service_name=shop", "pid=7", "env=a", "env=b", "9lives=x", "my.tag=dotted",
                         "__secret=x", "pyroscope_spy=x", "bad=\udcff\udcfeok", "long=" + "v" * 3000]
                        + ["t%02d=%d" % (i, i) for i in range(40)])


def test_pyroscope_hostile_tags(ctx):
    """Tags that break Pyroscope's label rules (a user tag named like one the agent adds, a
    repeated name, a name starting with a digit or holding '.', reserved names, invalid UTF-8,
    a value over 2048 bytes, 50 tags) are made to conform, each said on stderr; user tags win
    over the agent's; Pyroscope and our collector accept every upload."""
    for fmt in ("pprof", "folded"):
        srv, cwd, err = pyroscope_run(ctx, "hostile", fmt=fmt, seconds="2", extra={"PYAGENT_TAGS": HOSTILE_TAGS})
        accepted_only(srv, err)
        for rec in srv.accepted:
            ls = rec["labels"]
            check(rec["service"] == "shop", "%s: user's service_name lost: %r" % (fmt, rec["service"]))
            check(ls.get("pid") == "7", "%s: the user's pid tag did not win: %r" % (fmt, ls.get("pid")))
            check(ls.get("env") == "a", "%s: repeated tag: %r" % (fmt, ls.get("env")))
            check(ls.get("my_tag") == "dotted", "%s: my.tag: %r" % (fmt, ls))
            check(ls.get("bad") == "\ufffd\ufffdok", "%s: invalid UTF-8 not replaced: %r" % (fmt, ls.get("bad")))
            check(len(ls.get("long", "").encode()) == 2048, "%s: long value: %d bytes" % (fmt, len(ls.get("long", "").encode())))
            if ctx.protocol != "otlp":  # OTLP has no pyroscope_spy (Pyroscope adds __otel__)
                check(ls.get("pyroscope_spy") == "pyagent", "%s: pyroscope_spy %r" % (fmt, ls.get("pyroscope_spy")))
            check(len(ls) <= 30, "%s: %d labels" % (fmt, len(ls)))
    for what in ('"pid"', '"env=b"', '"9lives=x"', '"my.tag"', '"__secret=x"', '"pyroscope_spy=x"', '"bad"',
                 '"long"', '"t39=39"'):
        check(what in err, "no warning naming %s: %s" % (what, err[-3000:]))
    check(err.count('"pid"') == 1, "the pid clash is not reported once: %s" % err[-3000:])
    # Our collector takes the same uploads.
    cwd = ctx.workdir()
    col = Collector(ctx.collector_exe, cwd, free_port()).start()
    try:
        spool = os.path.join(ctx.tmp, "spool-hostile-col")
        env = ctx.agent("http://127.0.0.1:%d" % col.port, "hostile", spool=spool, extra={"PYAGENT_TAGS": HOSTILE_TAGS})
        rc, out, err = finish(ctx.start(["steady.py", "2"], env, cwd))
        check(rc == 0, err)
        check("rejected" not in err and not os.path.exists(os.path.join(spool, "rejected")),
              "the collector refused an upload: %s" % err[-2000:])
        # Push and OTLP name the service by the service_name tag, as Pyroscope does; our
        # /ingest keeps the name's application and service_name as a label.
        app = "hostile.cpu" if ctx.protocol == "ingest" else "shop.cpu"
        same_stacks(col.stacks(app), local_stacks(os.path.join(cwd, "local.folded")), "collector")
    finally:
        col.stop()


def test_pyroscope_hostile_frame_names(ctx):
    """Frame names cut in the middle of a UTF-8 character (a long thread name, a 1600-byte
    qualname) and names with separators: every upload is valid UTF-8 (invalid bytes become
    U+FFFD, visibly) and Pyroscope accepts it, with every sample; so does the local file."""
    for fmt in ("pprof", "folded"):
        srv, cwd, err = pyroscope_run(ctx, "names", fmt=fmt, seconds="2", program="hostile_names.py")
        accepted_only(srv, err)
        raw = open(os.path.join(cwd, "local.folded"), "rb").read()
        check(valid_utf8(raw), "%s: the local file is not valid UTF-8" % fmt)
        got = sum(r["samples"] for r in srv.accepted)
        local = local_stacks(os.path.join(cwd, "local.folded"))
        check(got == sum(local.values()), "%s: Pyroscope got %d samples, the local file %d" % (fmt, got, sum(local.values())))
        check(any("\ufffd" in k for k in local), "%s: no cut name in the profile (the test shows nothing)" % fmt)


def split_run(ctx, app, limit, extra, seconds, program, limits=None):
    """One profile (a 60 s interval, sent at exit) that Pyroscope with these limits takes
    only in parts: every part accepted, the parts holding the local file's stacks exactly."""
    extra = dict(extra, PYAGENT_UPLOAD_INTERVAL="60", PYAGENT_EXIT_TIMEOUT_MS="20000", PYAGENT_LOG="info")
    srv, cwd, err = pyroscope_run(ctx, app, seconds=seconds, extra=extra, program=program,
                                  server=FakePyroscope(limits=limits or Limits()))
    accepted_only(srv, err)
    local = local_stacks(os.path.join(cwd, "local.folded"))
    got = {}
    for rec in srv.accepted:
        for k, v in rec["stacks"].items():
            got[k] = got.get(k, 0) + v
    same_stacks(got, local, "the parts at Pyroscope")
    check(len(srv.accepted) >= 2, "%s: sent as %d profile(s)" % (limit, len(srv.accepted)))
    check("sent in parts" in err, "the split is not said: %s" % err[-2000:])
    return srv, cwd, local


def test_pyroscope_profile_over_its_limits_is_split(ctx):
    """A profile of more unique stacks than Pyroscope takes in one is sent in parts that it
    accepts, holding every sample. A tenant limit of 300 stacks (PYAGENT_MAX_PROFILE_STACKS=300
    and a fake Pyroscope refusing more) is passed at any timer's rate; Pyroscope's default,
    16,000, only at 10 kHz, so that run needs perf events (elsewhere at most ~250 samples per
    CPU-second: 16,000 stacks would take a minute of CPU)."""
    srv, cwd, local = split_run(ctx, "many", "300 stacks", {"PYAGENT_MAX_PROFILE_STACKS": "300"}, "3",
                                "many_stacks.py", Limits(max_samples=300))
    check(len(local) > 300, "only %d unique stacks: the split is not exercised" % len(local))
    check(all(len(r["stacks"]) <= 300 for r in srv.accepted), "parts of %s stacks" % [len(r["stacks"]) for r in srv.accepted])
    if Profile(os.path.join(cwd, "local.folded")).meta.get("timer") != "perf-task-clock":
        print("no perf events here: Pyroscope's default limit of 16,000 stacks is not reached")
        return
    srv, cwd, local = split_run(ctx, "many", "16000 stacks", {"PYAGENT_RATE": "10000"}, "6", "many_stacks.py")
    check(len(local) > 16000, "only %d unique stacks at 10 kHz: the split is not exercised" % len(local))
    check(all(len(r["stacks"]) <= 16000 for r in srv.accepted), "parts of %s stacks" % [len(r["stacks"]) for r in srv.accepted])


def test_pyroscope_profile_over_4mib_is_split(ctx):
    """A profile bigger than Pyroscope's 4 MiB (uncompressed) with few stacks: 24 call chains of
    400 distinct functions, each with a long name in a file of its own, about 1 KiB of strings
    per frame. It is sent in parts of at most 4 MiB each (the fake Pyroscope refuses more),
    holding every sample; whatever the timer, a few samples per chain are enough."""
    srv, cwd, local = split_run(ctx, "big", "4 MiB", {}, "3.6", "long_frames.py")
    frames = {f for k in local for f in k.split(";")}
    size = sum(len(f.encode()) for f in frames)
    check(size > 4 << 20, "the profile's frames hold %d bytes, under 4 MiB: the split is not exercised" % size)
    check(all(r["bytes"] <= 4 << 20 for r in srv.accepted), "parts of %s bytes" % [r["bytes"] for r in srv.accepted])


# json.dumps of 3,000 numbers, 400 times: about 80 ms of CPU, some 20 samples at 250 Hz (with
# 200 numbers it was 5 ms, 1.4 samples expected: CI once got none).
MODULES = r"""
import json
from pkg.sub import mod
def main_work():
    n = 0
    while n < 400:
        mod.work(); json.dumps({"k": list(range(3000))}); n += 1
main_work()
"""

PKG_MOD = "def work():\n    return sum(i * i for i in range(20000))\n"


def test_module_names(ctx):
    """Uploads name Python frames module.qualname (pkg/sub/mod.py's work is pkg.sub.mod.work,
    json's encoder json.encoder.JSONEncoder.encode, the script's main by its file name), with the
    file and line kept apart (pprof's Function.filename and Line.line, OTLP's alike): Pyroscope
    reads "pkg.sub.mod.work" with file .../pkg/sub/mod.py and line 2; the local file keeps the
    bare qualname. The package is found through PYTHONPATH, a sys.path entry the agent can
    know (one a program adds at run time it cannot: docs/continuous.md)."""
    cwd = ctx.workdir()
    lib = os.path.join(cwd, "lib")
    os.makedirs(os.path.join(lib, "pkg", "sub"))
    for d in ("pkg", os.path.join("pkg", "sub")):
        open(os.path.join(lib, d, "__init__.py"), "w").close()
    with open(os.path.join(lib, "pkg", "sub", "mod.py"), "w") as f:
        f.write(PKG_MOD)
    script = os.path.join(cwd, "modmain.py")
    with open(script, "w") as f:
        f.write(MODULES)
    srv = FakePyroscope()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYAGENT_")}
        env.update(ctx.agent(srv.url(), "mods"), LD_PRELOAD=ctx.lib, PYAGENT_RATE="250", PYTHONPATH=lib)
        r = subprocess.run([ctx.python, script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        check(r.returncode == 0, "program failed: %s" % r.stderr[-2000:])
    finally:
        srv.stop()
    accepted_only(srv, r.stderr)
    frames = {f for rec in srv.accepted for k in rec["stacks"] for f in k.split(";")}
    mod_py = os.path.realpath(os.path.join(lib, "pkg", "sub", "mod.py"))
    check(any(re.match(r"^pkg\.sub\.mod\.work \(%s:2\)$" % re.escape(mod_py), f) for f in frames),
          "no pkg.sub.mod.work (%s:2) frame: %s" % (mod_py, sorted(frames)[:20]))
    check(any(re.match(r"^modmain\.main_work \(.*modmain\.py:\d+\)$", f) for f in frames),
          "the script's function is not modmain.main_work: %s" % sorted(frames)[:20])
    check(any(re.match(r"^json(\.encoder)?\.[A-Za-z_.<>]+ \(.*/json/(encoder|__init__)\.py:\d+\)$", f) for f in frames),
          "no module-qualified json frame: %s" % sorted(f for f in frames if "json" in f)[:10])
    local = local_stacks(os.path.join(cwd, "local.folded"))
    check(any(re.match(r"^work \(", f) for k in local for f in k.split(";")), "the local file lost the bare qualname")
    got = {}
    for rec in srv.accepted:
        for k, v in rec["stacks"].items():
            got[k] = got.get(k, 0) + v
    same_stacks(got, local, "module-qualified uploads")


def valid_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@transport
def test_spool_resent_at_next_start(ctx):
    """Server down for a whole run: the next run sends what the first left in the spool."""
    spool = os.path.join(ctx.tmp, "spool-shared")
    dead = "http://127.0.0.1:%d" % free_port()
    cwd1 = ctx.workdir()
    p = ctx.start(["steady.py", "3"], ctx.agent(dead, "resend", spool=spool, fmt="folded",
                                               extra={"PYAGENT_EXIT_TIMEOUT_MS": "500"}), cwd1)
    rc, out, err = finish(p)
    check(rc == 0, err)
    check(any(f.endswith(".spool") for f in os.listdir(spool)), "the first run spooled nothing")
    srv = BadServer("ok")
    try:
        cwd2 = ctx.workdir()
        p = ctx.start(["steady.py", "3"], ctx.agent(srv.url(), "resend", spool=spool, fmt="folded"), cwd2)
        rc, out, err = finish(p)
        check(rc == 0, err)
        want = local_stacks(os.path.join(cwd1, "local.folded"))
        for k, v in local_stacks(os.path.join(cwd2, "local.folded")).items():
            want[k] = want.get(k, 0) + v
        same_stacks(srv.stacks(), want, "both runs")
        check(not any(f.endswith(".spool") for f in os.listdir(spool)), "the spool was not emptied")
    finally:
        srv.stop()


def dead_run(ctx, app, seconds):
    """A run whose server is away: returns (its work directory, the spool's files, sorted)."""
    spool = os.path.join(ctx.tmp, "spool-" + app)
    dead = "http://127.0.0.1:%d" % free_port()
    cwd = ctx.workdir()
    env = ctx.agent(dead, app, spool=spool, extra={"PYAGENT_EXIT_TIMEOUT_MS": "500"})
    rc, out, err = finish(ctx.start(["steady.py", seconds], env, cwd))
    check(rc == 0, err)
    names = sorted(f for f in os.listdir(spool) if f.endswith(".spool"))
    check(len(names) >= 2, "the run left %d profile(s) in the spool" % len(names))
    return cwd, names


def next_run(ctx, app, srv):
    """The run after dead_run, sharing its spool, against srv (stopped after): (work directory,
    stderr)."""
    try:
        cwd = ctx.workdir()
        env = ctx.agent(srv.url(), app, extra={"PYAGENT_EXIT_TIMEOUT_MS": "10000"})
        rc, out, err = finish(ctx.start(["steady.py", "1"], env, cwd))
        check(rc == 0, err)
    finally:
        srv.stop()
    return cwd, err


def test_spool_sent_oldest_first(ctx):
    """Profiles a run left in the spool (its server away) are sent by the next run oldest
    first, before the new run's own: the server receives the spool files' bodies, byte for
    byte, in the order of their names (which sort by time)."""
    cwd1, names = dead_run(ctx, "order", "4")
    spool = os.path.join(ctx.tmp, "spool-order")
    bodies = []
    for name in names:
        with open(os.path.join(spool, name), "rb") as f:
            bodies.append(f.read().partition(b"\n")[2])
    srv = BadServer("ok")
    next_run(ctx, "order", srv)
    got = [body for _, body, _, _ in srv.accepted]
    check(len(got) > len(bodies), "%d requests for %d spooled profiles and the run's own" % (len(got), len(bodies)))
    order = [bodies.index(b) if b in bodies else "new" for b in got]
    check(order[:len(bodies)] == list(range(len(bodies))),
          "requests in the order %s (spool files 0..%d, oldest first, then the run's own)" % (order, len(bodies) - 1))


def upload_ids(path, query, body):
    """The ids an upload names itself by, one per profile: /ingest's pyagentUploadId, a Push
    RawSample's ID, an OTLP Profile's profile_id (as protoc prints it)."""
    if path == "/ingest":
        return [query.get("pyagentUploadId")]
    if path == "/push.v1.PusherService/Push":
        text = protoc_decode("push.v1.PushRequest", "push/v1/push.proto", body)
        return re.findall(r'^\s*ID: "(.*)"$', text, re.M)
    text = protoc_decode("opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest",
                         "opentelemetry/proto/collector/profiles/v1development/profiles_service.proto", body)
    ids = re.findall(r'^\s*profile_id: "(.*)"$', text, re.M)
    return ids + [None] * (len(re.findall(r"^\s*profiles \{", text, re.M)) - len(ids))


def test_resends_carry_the_spooled_id(ctx):
    """Every upload names itself with an id of its own, chosen when it is spooled and kept in
    the spool file, so that the upload sent again (after a lost answer: here, a run whose
    server was away) carries the same id, and our collector stores it once
    (docs/continuous.md, "Delivery")."""
    cwd1, names = dead_run(ctx, "ids", "3")
    spool = os.path.join(ctx.tmp, "spool-ids")
    spooled = []
    for name in names:
        with open(os.path.join(spool, name), "rb") as f:
            head, _, body = f.read().partition(b"\n")
        fields = head.decode().split(" ")
        if fields[1] == "1":
            spooled += upload_ids("/ingest", dict(urllib.parse.parse_qsl(fields[2])), body)
        else:
            spooled += upload_ids(fields[2], {}, body)
    check(spooled and all(spooled), "spooled uploads without an id: %s" % spooled)
    srv = BadServer("ok")
    next_run(ctx, "ids", srv)
    sent = [i for q, body, _, path in srv.accepted for i in upload_ids(path, q, body)]
    check(all(sent), "uploads sent without an id: %s" % sent)
    check(len(set(sent)) == len(sent), "two uploads share an id: %s" % sent)
    check(set(spooled) <= set(sent), "the spooled ids %s were not all resent: %s" % (spooled, sent))


def test_spool_older_than_pyroscopes_window_is_rejected(ctx):
    """Profiles spooled while the server was away, sent when it is back more than an hour
    later (the fake Pyroscope's clock runs 2 h ahead), are outside Pyroscope's ingestion window
    (reject_older_than, 1 h): each one is kept in rejected/, none deleted, the reason is on
    stderr, and the local file's header counts them."""
    cwd1, names = dead_run(ctx, "stale", "3")
    srv = FakePyroscope(limits=Limits(clock_offset_s=7200))
    cwd2, err = next_run(ctx, "stale", srv)
    check(not srv.accepted and srv.rejected, "accepted %d, refused %d" % (len(srv.accepted), len(srv.rejected)))
    check(all("outside of ingestion window" in m for _, m in srv.rejected), "refused for %r" % srv.rejected[:2])
    kept = rejected_files(ctx, "stale")
    check(set(names) <= set(kept) and len(kept) == len(srv.rejected),
          "spooled %r, refused %d, kept in rejected/ %r" % (names, len(srv.rejected), kept))
    check(re.search(r"rejected a profile \(HTTP 4\d\d: .*outside of ingestion window", err),
          "the reason is not on stderr: %s" % err[-2000:])
    total = sum(sum(spool_stacks(os.path.join(ctx.tmp, "spool-stale", "rejected", n)).values()) for n in kept)
    want = sum(sum(local_stacks(os.path.join(d, "local.folded")).values()) for d in (cwd1, cwd2))
    check(total == want, "rejected/ holds %d samples, the two runs %d" % (total, want))
    header_counts(cwd2, rejected=len(srv.rejected))


def test_profiles_carry_their_time(ctx):
    """Every profile names its own time (pprof's time_nanos, OTLP's time_unix_nano, /ingest's
    from), inside the run: Pyroscope stamps a profile without one with the time it arrives,
    which files a profile resent from the spool at the wrong time, and checks it against its
    window, which is how an old spool file is refused rather than misfiled."""
    t0 = time.time()
    srv, cwd, err = pyroscope_run(ctx, "timed", seconds="2")
    t1 = time.time()
    accepted_only(srv, err)
    times = [r["time_nanos"] / 1e9 for r in srv.accepted]
    check(all(int(t0) - 1 <= t <= t1 for t in times), "profile times %r outside the run [%.0f, %.0f]" % (times, t0, t1))


@only("otlp")
def test_otlp_partial_success_is_a_refusal(ctx):
    """An OTLP server that answers 200 with a partial_success of rejected profiles has refused
    them for good: each upload is kept in rejected/ (not deleted as sent), the server's
    message is on stderr once, and the count is in the local file's header."""
    srv = FakePyroscope(otlp_partial=1)
    srv_, cwd, err = pyroscope_run(ctx, "partial", seconds="3", server=srv)
    check(not srv.rejected and not srv.accepted and srv.partial >= 2, "partial successes %d" % srv.partial)
    kept = rejected_files(ctx, "partial")
    check(len(kept) == srv.partial, "%d partial successes, %d kept in rejected/" % (srv.partial, len(kept)))
    total = sum(sum(spool_stacks(os.path.join(ctx.tmp, "spool-partial", "rejected", n)).values()) for n in kept)
    local = sum(local_stacks(os.path.join(cwd, "local.folded")).values())
    check(total == local, "rejected/ holds %d samples, the local file %d" % (total, local))
    check(err.count("OTLP partial success, 1 rejected: tenant over its series limit") == 1,
          "the reason is not said once: %s" % err[-2000:])
    header_counts(cwd, rejected=srv.partial, rejected_dropped=0)


@only("push")
def test_protocol_unset_or_unknown(ctx):
    """Without PYAGENT_PROTOCOL (and PYAGENT_UPLOAD_FORMAT) the agent sends Pyroscope's Push
    (POST /push.v1.PusherService/Push); without it but with PYAGENT_UPLOAD_FORMAT=folded,
    folded text to /ingest (the variable's old meaning). An unknown value is one line on
    stderr naming the variable, the value and the protocol used instead, push."""
    cases = (({}, "/push.v1.PusherService/Push", None),
             ({"PYAGENT_UPLOAD_FORMAT": "folded"}, "/ingest", None),
             ({"PYAGENT_PROTOCOL": "grpc"}, "/push.v1.PusherService/Push",
              'PYAGENT_PROTOCOL="grpc" is not push, ingest or otlp; using push'))
    for extra, path, said in cases:
        srv = BadServer("ok")
        cwd = ctx.workdir()
        try:
            env = ctx.agent(srv.url(), "proto")
            del env["PYAGENT_PROTOCOL"], env["PYAGENT_UPLOAD_FORMAT"]
            env.update(extra)
            rc, out, err = finish(ctx.start(["steady.py", "1"], env, cwd))
            check(rc == 0, "%s: program failed: %s" % (extra, err[-2000:]))
        finally:
            srv.stop()
        paths = sorted({a[3] for a in srv.accepted})
        check(paths == [path], "%s: uploads to %s, expected %s" % (extra, paths, path))
        if path == "/ingest":
            check(all(a[0].get("format") == "folded" for a in srv.accepted), "%s: not folded" % extra)
        lines = [ln for ln in err.splitlines() if "PYAGENT_PROTOCOL" in ln]
        check(lines == [] if said is None else len(lines) == 1 and said in lines[0],
              "%s: stderr says %r" % (extra, lines))
        same_stacks(srv.stacks(), local_stacks(os.path.join(cwd, "local.folded")), "%s" % extra)


@transport
def test_spool_is_bounded(ctx):
    spool = os.path.join(ctx.tmp, "spool-bounded")
    os.makedirs(spool)
    for i in range(3):  # old leftovers, 600 KB each
        with open(os.path.join(spool, "%013d-%010d-%06d.spool" % (1000 + i, 1, i)), "w") as f:
            f.write("pyagent-spool 1 name=old.cpu&from=1&until=2&format=folded\n")
            f.write(("x 1\n") * 150000)
    dead = "http://127.0.0.1:%d" % free_port()
    cwd = ctx.workdir()
    p = ctx.start(["steady.py", "2"], ctx.agent(dead, "bounded", spool=spool, fmt="folded",
                                               extra={"PYAGENT_SPOOL_MAX_MB": "1", "PYAGENT_EXIT_TIMEOUT_MS": "300"}), cwd)
    rc, out, err = finish(p)
    check(rc == 0, err)
    left = sorted(os.listdir(spool))
    size = sum(os.path.getsize(os.path.join(spool, f)) for f in left)
    check(size <= 1 << 20, "spool holds %d bytes over its 1 MB bound: %r" % (size, left))
    check(not any(f.startswith("0000000001000") for f in left), "the oldest file was kept: %r" % left)
    check("oldest profile(s)" in err, "no warning about dropped profiles: %r" % err)


PROTO = os.path.join(ROOT, "proto")


def protoc_decode(message, proto, data):
    dec = subprocess.run(["protoc", "--decode=" + message, "-I", PROTO, os.path.join(PROTO, proto)],
                         input=data, capture_output=True)
    check(dec.returncode == 0, "protoc cannot decode our %s: %s" % (message, dec.stderr.decode()))
    return dec.stdout.decode()


def pprof_total(raw):
    """The sample count of a gzip'd pprof, read by protoc against proto/google/v1/profile.proto."""
    check(raw[:2] == b"\x1f\x8b", "pprof upload is not gzip-compressed")
    text = protoc_decode("google.v1.Profile", "google/v1/profile.proto", gzip.decompress(raw))
    check(re.search(r'^string_table: ""$', text, re.M), "the string table does not start with \"\"")
    types = len(re.findall(r"^sample_type \{", text, re.M))
    check(types >= 1, "no sample_type")
    values = [int(v) for v in re.findall(r"^\s*value: (-?\d+)", text, re.M)]
    return sum(values[0::types])  # the first sample type is the count


def test_pprof_decodes_with_protoc(ctx):
    """Our uploads decode with protoc against our .proto files (written from pprof's,
    Pyroscope's and OpenTelemetry's field numbers), and their sample counts add up to the
    local file's: pprof bodies (/ingest), PushRequests and their pprof profiles, OTLP
    ExportProfilesServiceRequests (cpu mode: each value is a count)."""
    bodies, local_total, _ = capture_raw_bodies(ctx)
    total = 0
    for path, body in bodies:
        if path == "/ingest":
            total += pprof_total(body)
        elif path == "/push.v1.PusherService/Push":
            text = protoc_decode("push.v1.PushRequest", "push/v1/push.proto", body)
            check('name: "__name__"' in text and 'value: "process_cpu"' in text, "no __name__ process_cpu")
            check('name: "service_name"' in text and 'value: "raw"' in text, "no service_name raw")
            for _, raws in decode_push(body):
                total += sum(pprof_total(r) for r in raws)
        else:
            check(path == "/v1development/profiles", "upload to %s" % path)
            text = protoc_decode("opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest",
                                 "opentelemetry/proto/collector/profiles/v1development/profiles_service.proto", body)
            check('key: "service.name"' in text and 'string_value: "raw"' in text, "no service.name raw")
            total += sum(int(v) for v in re.findall(r"^\s*values: (-?\d+)", text, re.M))
    check(total == local_total, "uploads hold %d samples, the local file %d" % (total, local_total))


def capture_raw_bodies(ctx, argv=("steady.py", "2"), extra=None):
    """Runs a short program against a server that keeps the raw request bodies: the bodies,
    the local file's sample count and the program's directory."""
    import http.server
    bodies = []

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            bodies.append((urllib.parse.urlparse(self.path).path, self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        cwd = ctx.workdir()
        p = ctx.start(list(argv), ctx.agent("http://127.0.0.1:%d" % httpd.server_address[1], "raw", extra=extra), cwd)
        rc, _, err = finish(p)
        check(rc == 0, err)
    finally:
        httpd.shutdown()
        httpd.server_close()
    check(bodies, "no upload captured")
    return bodies, sum(local_stacks(os.path.join(cwd, "local.folded")).values()), cwd


@only("push", "ingest")
def test_span_ids_in_pprof_uploads(ctx):
    """What Grafana Pyroscope's span profiles read: the pprof the agent uploads (Push, and
    /ingest's pprof) carries each sample's span_id and span_name as string sample labels, the
    samples of each span id adding up to the local file's (spans.py, sid's OpenTelemetry)."""
    pythons_sh = os.path.join(ROOT, "scripts", "pythons.sh")
    dist = subprocess.run([pythons_sh, "--otel"], capture_output=True, text=True)
    check(dist.returncode == 0, "no OpenTelemetry from sid: %s" % dist.stderr[-2000:])
    bodies, _, cwd = capture_raw_bodies(ctx, ["spans.py", "truth.json", "1.0", "6"],
                                   {"PYTHONPATH": os.pathsep.join((dist.stdout.strip(), os.path.dirname(ctx.lib)))})
    raws = []
    for path, body in bodies:
        if path == "/push.v1.PusherService/Push":
            raws += [r for _, rs in decode_push(body) for r in rs]
        elif path == "/ingest":
            raws.append(body)
    sent = {}
    for raw in raws:
        for frames, c in pprof_labelled_samples(gzip.decompress(raw)):
            labels = next((f[len("labels:"):] for f in frames[:2] if f.startswith("labels:")), "")
            pairs = label_text_pairs(labels) if labels else {}
            key = (pairs.get("span_id"), pairs.get("span_name"))
            sent[key] = sent.get(key, 0) + c
    local = {}
    for stack, c in local_stacks(os.path.join(cwd, "local.folded")).items():
        frames = stack.split(";")
        pairs = label_text_pairs(frames[1][len("labels:"):]) if len(frames) > 1 and frames[1].startswith("labels:") else {}
        key = (pairs.get("span_id"), pairs.get("span_name"))
        local[key] = local.get(key, 0) + c
    spans = [k for k in local if k[0]]
    check(len(spans) >= 12 and all(re.fullmatch("[0-9a-f]{16}", k[0]) and k[1] for k in spans),
          "span ids in the local file: %r" % sorted(local, key=str)[:5])
    check(sent == local, "samples per (span_id, span_name): uploaded %r, local %r"
          % (sorted(sent.items(), key=str)[:5], sorted(local.items(), key=str)[:5]))
    print("%d span ids, %d samples in spans, uploaded with their span_id and span_name"
          % (len(spans), sum(local[k] for k in spans)))


def test_labels_auth_and_tenant(ctx):
    extra = {"PYAGENT_TAGS": "env=prod,region=eu-1,bad key=1", "PYAGENT_AUTH_TOKEN": "s3cret",
             "PYAGENT_TENANT_ID": "team-a"}
    srv, cwd, rc, out, err, _ = run_against(ctx, "ok", seconds="2", extra=extra)
    check(rc == 0, err)
    check(srv.accepted, "nothing uploaded")
    q, _, headers, path = srv.accepted[0]
    labels = srv.labels(0)
    check(labels.get("service_name") == "bad", "service %r" % labels)
    check(labels.get("env") == "prod" and labels.get("region") == "eu-1", "labels %r" % labels)
    check("hostname" in labels and labels.get("pid", "").isdigit(), "hostname/pid labels missing: %r" % labels)
    check(not any(" " in k for k in labels), "an invalid label was sent")
    check("\"bad key=1\"" in err, "no warning for the invalid label: %r" % err)
    check(headers.get("Authorization") == "Bearer s3cret", "auth header: %r" % headers)
    check(headers.get("X-Scope-OrgID") == "team-a", "tenant header: %r" % headers)
    if path == "/ingest":
        check(re.match(r"^bad\.cpu\{", q["name"]), "name %r" % q["name"])
        check(int(q["from"]) < int(q["until"]) and q["sampleRate"] == "250", "query %r" % q)
    elif path == "/push.v1.PusherService/Push":
        check(headers.get("Content-Type") == "application/proto" and headers.get("Connect-Protocol-Version") == "1",
              "not a Connect unary call: %r" % headers)
    else:
        check(headers.get("Content-Type") == "application/x-protobuf", "OTLP content type: %r" % headers)


@transport
def test_tls_verified_by_default(ctx):
    """HTTPS with a certificate the system does not trust: refused (kept in the spool) by
    default, accepted with PYAGENT_CA_FILE pointing at it."""
    d = ctx.workdir()
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    gen = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                          "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                          "-keyout", key, "-out", cert], capture_output=True)
    check(gen.returncode == 0, "openssl: %s" % gen.stderr.decode())
    srv = BadServer("ok", tls=(cert, key))
    try:
        cwd = ctx.workdir()
        spool = os.path.join(ctx.tmp, "spool-tls")
        env = ctx.agent(srv.url(), "tls", spool=spool, fmt="folded", extra={"PYAGENT_EXIT_TIMEOUT_MS": "1000"})
        rc, _, err = finish(ctx.start(["steady.py", "2"], env, cwd))
        check(rc == 0, err)
        check(not srv.accepted, "an untrusted certificate was accepted")
        check(any(f.endswith(".spool") for f in os.listdir(spool)), "refused profiles were not kept")
        env["PYAGENT_CA_FILE"] = cert
        cwd2 = ctx.workdir()
        rc, _, err = finish(ctx.start(["steady.py", "2"], env, cwd2))
        check(rc == 0, err)
        want = local_stacks(os.path.join(cwd, "local.folded"))
        for k, v in local_stacks(os.path.join(cwd2, "local.folded")).items():
            want[k] = want.get(k, 0) + v
        same_stacks(srv.stacks(), want, "with the CA file")
    finally:
        srv.stop()


def test_forked_children_upload_their_own(ctx):
    srv = BadServer("ok")
    cwd = ctx.workdir()
    try:
        env = ctx.agent(srv.url(), "procs", fmt="folded")
        env["PYAGENT_OUTPUT"] = "pyagent.%p.folded"
        p = ctx.start(["processes.py", "pids.txt"], env, cwd)
        rc, out, err = finish(p)
        check(rc == 7, "processes.py exit %d: %s" % (rc, err))
        pids = {int(x) for x in open(os.path.join(cwd, "pids.txt")).read().split()}
        # Every Python process that took a sample uploads it (a child that ran for 20 ms may
        # have none, and then has nothing to send).
        sampled = set()
        for name in os.listdir(cwd):
            m = re.match(r"^pyagent\.(\d+)\.folded$", name)
            if m and int(Profile(os.path.join(cwd, name)).meta.get("samples", 0)) > 0:
                sampled.add(int(m.group(1)))
        check(sampled <= pids and len(sampled) >= len(pids) - 20, "sampled %s of %s" % (sorted(sampled), sorted(pids)))
        sent = {int(srv.labels(i)["pid"]) for i in range(len(srv.accepted))}
        check(sent == sampled, "uploads from pids %s, sampled Python processes %s" % (sorted(sent), sorted(sampled)))
    finally:
        srv.stop()


THREADS = r"""
import threading, time
def count():
    with open("/proc/self/status") as f:
        return int(next(l.split()[1] for l in f if l.startswith("Threads:")))
def busy(s):
    t = time.monotonic()
    while time.monotonic() - t < s:
        sum(range(1000))
busy(0.5)
print(count())
done = threading.Event()
w = threading.Thread(target=done.wait)
w.start()
busy(0.5)
print(count())
done.set()
w.join()
"""


@transport
def test_agent_threads_bound(ctx):
    """Without a server a single-threaded program has no thread of ours; uploading takes one,
    the upload thread; the namer joins only once the program has a second thread."""
    cwd = ctx.workdir()
    e = {k: v for k, v in os.environ.items() if not k.startswith("PYAGENT_")}
    e.update(LD_PRELOAD=ctx.lib, PYAGENT_OUTPUT=os.path.join(cwd, "local.%p.folded"))
    # The program's threads (1, then 2) plus ours: the agent thread starts with the program's
    # second thread (with the namer), or at once when uploading.
    for server, single, threaded in ((None, 1, 4), ("http://127.0.0.1:%d" % free_port(), 2, 4)):
        env = dict(e)
        if server:
            env.update(PYAGENT_SERVER=server, PYAGENT_SPOOL_DIR=os.path.join(cwd, "spool"))
        r = subprocess.run([ctx.python, "-c", THREADS], cwd=cwd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        check(r.returncode == 0, "program failed: %s" % r.stderr)
        got = [int(x) for x in r.stdout.split()]
        check(got == [single, threaded], "server %s: threads seen %s, expected %s" % (server, got, [single, threaded]))


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("test_")}


def listing():
    """PROTOCOL.CASE for every case in every protocol it runs in."""
    return ["%s.%s" % (p, case) for p in PROTOCOLS for case, fn in CASES.items()
            if p in getattr(fn, "protocols", PROTOCOLS)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python")
    ap.add_argument("--lib")
    ap.add_argument("--launcher", default="")
    ap.add_argument("--collector")
    ap.add_argument("--protocol", default="push", choices=PROTOCOLS)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("case", nargs="?")
    a = ap.parse_args()
    if a.list:
        print("\n".join(listing()))
        return 0
    if a.protocol not in getattr(CASES[a.case], "protocols", PROTOCOLS):
        print("FAIL %s: runs in %s only, not %s" % (a.case, "/".join(CASES[a.case].protocols), a.protocol))
        return 1
    ctx = UploadCtx(a.python, os.path.abspath(a.lib), a.launcher, os.path.abspath(a.collector), a.protocol)
    t0 = time.time()
    try:
        CASES[a.case](ctx)
    except Failure as e:
        print("FAIL %s (%s): %s" % (a.case, a.protocol, e))
        return 1
    except Exception:
        traceback.print_exc()
        print("FAIL %s: unexpected error" % a.case)
        return 1
    finally:
        shutil.rmtree(ctx.tmp, ignore_errors=True)
    print("PASS %s (%s, %.1fs)" % (a.case, a.protocol, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
