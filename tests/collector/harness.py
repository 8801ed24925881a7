"""Test harness for pyagent-collector: start a real collector on 127.0.0.1 with a port it
picks itself (--listen 127.0.0.1:0; the port is read from its first line of output), talk
HTTP to it, stop it. Standard library only, so it runs with Debian's /usr/bin/python3."""
import gzip
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

    def __init__(self, *args, db=None, workdir=None):
        self.workdir = workdir or tempfile.mkdtemp(prefix="pa-coll-")
        self.db = db or os.path.join(self.workdir, "profiles.db")
        self.args = list(args)
        self.start()

    def start(self):
        self.errlog = open(os.path.join(self.workdir, "stderr.log"), "ab")
        self.proc = subprocess.Popen(
            [collector_path(), "--listen", "127.0.0.1:0", "--db", self.db] + self.args,
            stdout=subprocess.PIPE, stderr=self.errlog)
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
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("collector did not stop within %ds" % timeout)
        self.proc.stdout.close()
        self.errlog.close()
        return self.proc.returncode

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

    @classmethod
    def setUpClass(cls):
        cls.c = Collector(*cls.ARGS)

    @classmethod
    def tearDownClass(cls):
        cls.c.__exit__(None, None, None)


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
