"""Test harness for pyagent-collector: start a real collector on 127.0.0.1 with a port it
picks itself (--listen 127.0.0.1:0; the port is read from its first line of output), talk
HTTP to it, stop it. Standard library only, so it runs with Debian's /usr/bin/python3."""
import gzip
import html
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse

COLLECTOR = None


def collector_path():
    global COLLECTOR
    if COLLECTOR is None:
        if len(sys.argv) > 1 and os.path.exists(sys.argv[1]):
            COLLECTOR = os.path.abspath(sys.argv.pop(1))
        else:
            COLLECTOR = os.environ.get("PYAGENT_COLLECTOR", "pyagent-collector")
    return COLLECTOR


class Collector:
    """A running pyagent-collector. Use as a context manager or call stop()."""

    # The collector refuses profiles outside Pyroscope's ingestion window and folded text in
    # other dialects than flamegraph.pl's, as Pyroscope does; the tests of the store and the
    # reports upload hours-old profiles (retention, rollups, ranges) and pyagent's own folded
    # files (their header and timeline), so they run it with these options unless they ask for
    # Pyroscope's rules (pyroscope_rules=True: test_differential.py).
    STORE_ARGS = ["--reject-older-than", "0", "--reject-newer-than", "0", "--folded-dialects"]

    def __init__(self, *args, db=None, workdir=None, pyroscope_rules=False, env=None):
        self.env = dict(os.environ, **(env or {}))
        self.workdir = workdir or tempfile.mkdtemp(prefix="pa-coll-")
        self.db = db or os.path.join(self.workdir, "profiles.db")
        self.args = ([] if pyroscope_rules else self.STORE_ARGS) + list(args)
        self.start()

    def start(self):
        self.errlog = open(os.path.join(self.workdir, "stderr.log"), "ab")
        self.proc = subprocess.Popen(
            [collector_path(), "--listen", "127.0.0.1:0", "--db", self.db] + self.args,
            stdout=subprocess.PIPE, stderr=self.errlog, env=self.env)
        line = self.proc.stdout.readline().decode()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        if not m:
            self.proc.wait(5)
            raise RuntimeError("collector did not start: %r, stderr: %s" % (line, self.stderr()))
        self.port = int(m.group(1))

    def stderr(self):
        with open(os.path.join(self.workdir, "stderr.log"), "rb") as f:
            return f.read().decode(errors="replace")

    def request(self, method, path, body=None, headers=None, timeout=30, source=None):
        """One request on a fresh connection, from loopback address source if given."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout,
                                          source_address=(source, 0) if source else None)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.read(), dict(resp.getheaders())
        finally:
            conn.close()

    def raw(self, data, timeout=5):
        """Sends data on a fresh socket and reads until the server closes it or timeout
        seconds pass. (bytes received, whether the server closed the connection)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(data)
            out, deadline = b"", time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    b = s.recv(65536)
                except socket.timeout:
                    break
                except ConnectionResetError:
                    return out, True
                if not b:
                    return out, True
                out += b
            return out, False

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def ingest(self, name, body, fmt="folded", frm=None, until=None, headers=None, **params):
        q = {"name": name, "format": fmt, "spyName": "test"}
        if frm is not None:
            q["from"] = str(frm)
        if until is not None:
            q["until"] = str(until)
        q.update({k: str(v) for k, v in params.items()})
        if isinstance(body, str):
            body = body.encode()
        return self.request("POST", "/ingest?" + urllib.parse.urlencode(q), body=body,
                            headers=headers)

    def render(self, query, frm, until, fmt="folded"):
        q = urllib.parse.urlencode({"query": query, "from": str(frm), "until": str(until),
                                    "format": fmt})
        status, body, _ = self.get("/render?" + q)
        if status != 200:
            raise AssertionError("render %s: %d %s" % (query, status, body[:300]))
        return body

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                stacks = self.stacks()
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("collector did not stop within %ds; its threads:\n%s"
                                     % (timeout, stacks))
        self.proc.stdout.close()
        self.errlog.close()
        return self.proc.returncode

    def stacks(self):
        """Every thread's backtrace (gdb), to say where a collector hangs."""
        if not shutil.which("gdb"):
            return "(no gdb to show them)"
        r = subprocess.run(["gdb", "-batch", "-p", str(self.proc.pid), "-ex", "thread apply all bt"],
                           capture_output=True, text=True, timeout=60)
        return "\n".join(l for l in r.stdout.splitlines() if l.startswith(("Thread", "#")))

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.errlog.close()

    def cleanup(self):
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.stop()
        finally:
            if exc[0] is None:
                self.cleanup()


class CollectorTest(unittest.TestCase):
    """Test cases sharing one collector, started with ARGS, as self.c."""
    ARGS = ()
    PYROSCOPE_RULES = False

    @classmethod
    def setUpClass(cls):
        cls.c = Collector(*cls.ARGS, pyroscope_rules=cls.PYROSCOPE_RULES)

    @classmethod
    def tearDownClass(cls):
        cls.c.__exit__(None, None, None)


# Paths outside a source root "/app" (to NEW, which holds a link etc -> /etc), as pairs of one
# that exists on every Linux host and one that does not: with --source-root a heatmap must say
# the same about both, or anyone who can upload and read reports learns which files exist.
OUTSIDE_ROOT_PAIRS = [
    ("/app/../../../../../../etc/passwd", "/app/../../../../../../etc/nonexist-x"),
    ("../../../../../../../etc/passwd", "../../../../../../../etc/nonexist-x"),
    ("/app/etc/passwd", "/app/etc/nonexist-x"),
    ("/etc/passwd", "/etc/nonexist-x"),
]


def read_to_end(sock):
    """Everything the peer sends on sock until it closes its side; what came before a reset
    (a connection the collector cut) when it resets."""
    got = b""
    try:
        while True:
            b = sock.recv(65536)
            if not b:
                break
            got += b
    except ConnectionResetError:
        pass
    return got


def finish_request(sock, body):
    """Sends the rest of a request whose first line sock already sent (its headers, then
    body), and returns the answer: everything until the collector closes the connection, or
    what came before it cut the connection (b"" then, most likely)."""
    try:
        sock.sendall(("Host: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
                      % len(body)).encode() + body)
    except (ConnectionResetError, BrokenPipeError):
        pass
    return read_to_end(sock)


def make_source_root(workdir):
    """A source root under workdir holding a.py and a link out of it (etc -> /etc), as an
    operator might have; returns its path, for --source-root /app=PATH."""
    src = os.path.join(workdir, "src")
    os.mkdir(src)
    with open(os.path.join(src, "a.py"), "w") as f:
        f.write("x = 1\n")
    os.symlink("/etc", os.path.join(src, "etc"))
    return src


def heatmap_reasons(c, query, frm, until, **request):
    """{file name: why its heatmap page shows no source, or "read"} of the heatmap of query
    over [frm, until); request: more arguments for every request (source=...)."""
    status, body, headers = c.get("/heatmap?" + urllib.parse.urlencode(
        {"query": query, "from": frm, "until": until}), **request)
    if status != 302:
        raise AssertionError("heatmap %s: %d %s" % (query, status, body[:300]))
    base = headers["Location"].rsplit("/", 1)[0]
    index = c.get(headers["Location"], **request)[1].decode()
    why = {}
    for page, name in re.findall(r'href="(file-\d+\.html)"[^>]*>([^<]*)<', index):
        text = c.get(base + "/" + page, **request)[1].decode()
        m = re.search(r"([^>]*); showing the sampled lines only", text)
        why[html.unescape(name)] = m.group(1) if m else "read"
    return why


def _status_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no %s for %d" % (field, pid))


def peak_rss(pid):
    """The process's peak resident set since it started or since reset_peak_rss (VmHWM),
    bytes."""
    return _status_kib(pid, "VmHWM")


def reset_peak_rss(pid):
    """Resets the process's peak resident set to its present one (Linux 4.0+); returns that,
    bytes, so that a test can measure how far a phase of the process's life grew it."""
    with open("/proc/%d/clear_refs" % pid, "w") as f:
        f.write("5")
    return _status_kib(pid, "VmRSS")


def parse_folded(text):
    """{stack: count} of folded text, skipping '#' lines."""
    out = {}
    if isinstance(text, bytes):
        text = text.decode()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        stack, _, count = line.rpartition(" ")
        out[stack] = out.get(stack, 0) + int(count)
    return out


def folded(stacks):
    return "".join("%s %d\n" % (s, c) for s, c in stacks.items())


# A minimal protobuf writer for pprof (profile.proto field numbers), so tests can send pprof
# that was not produced by the code under test.
def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num, payload):
    if isinstance(payload, int):
        return _varint(num << 3) + _varint(payload)
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def pprof(stacks):
    """stacks: {'a;b;c': count} (root first) -> profile.proto bytes, one line per frame."""
    strings = [""]
    index = {"": 0}

    def s(x):
        if x not in index:
            index[x] = len(strings)
            strings.append(x)
        return index[x]

    funcs, body = {}, bytearray()
    body += _field(1, _field(1, s("samples")) + _field(2, s("count")))
    for stack, count in stacks.items():
        frames = stack.split(";")
        ids = []
        for fr in frames:
            if fr not in funcs:
                funcs[fr] = len(funcs) + 1
            ids.append(funcs[fr])
        locs = b"".join(_field(1, i) for i in reversed(ids))  # leaf first, unpacked
        body += _field(2, locs + _field(2, count))
    for fr, fid in funcs.items():
        body += _field(4, _field(1, fid) + _field(4, _field(1, fid)))
        body += _field(5, _field(1, fid) + _field(2, s(fr)))
    for x in strings:
        body += _field(6, x.encode())
    return bytes(body)


def gz(data):
    return gzip.compress(data if isinstance(data, bytes) else data.encode())
