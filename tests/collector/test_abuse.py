"""Integration: the collector under abuse and load, on loopback only (127.0.0.0/8: attackers
use their own 127.0.0.X source addresses, the checks come from 127.0.0.1). Every case is
bounded in time and count. Each asserts that /healthz and /ingest keep answering within their
deadline while it runs, and that every upload acknowledged with a 200 is stored; except
GlobalConnectionLimit, which shows the one attack they are not isolated from (a flood from
many addresses filling --max-connections) and that they answer once its connections are cut.
Deadlines here are behavioural bounds (seconds on a loaded 2-core machine), not speed
targets."""
import gzip
import os
import random
import resource
import socket
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

from harness import (OUTSIDE_ROOT_PAIRS, Collector, gz, heatmap_reasons, make_source_root,
                     parse_folded, peak_rss, reset_peak_rss)

T0 = int(time.time()) // 10 * 10 - 3600
# The heavy uploads lie in the last minute and the next few: the collector rolls a span up only
# PA_COLL_ROLLUP_GRACE (300 s) after it ends, so no rollup makes the heavy queries cheap while
# the tests run (with T0, an hour back, the compactor's first pass did, and the budget test
# got its answer in time: CI saw 200 where 503 was due).
HEAVY_T0 = int(time.time()) // 60 * 60 - 60
# The flood opens 2,000 sockets.
resource.setrlimit(resource.RLIMIT_NOFILE, (min(8192, resource.getrlimit(
    resource.RLIMIT_NOFILE)[1]),) * 2)
DEADLINE = 5.0  # seconds within which /healthz and /ingest must answer
MIB = 1 << 20


def attacker(n):
    """A loopback source address of its own for attacker n (127.0.0.2 ...)."""
    return "127.0.%d.%d" % (n // 250, 2 + n % 250)


class Prober:
    """Checks from 127.0.0.1, every `every` seconds while an attack runs, that /healthz and
    /ingest answer within DEADLINE; remembers what was acknowledged so that the test can check
    that all of it is stored."""

    def __init__(self, c, name, every=0.25):
        self.c, self.name, self.every = c, name, every
        self.acked, self.failures, self.latencies = [], [], []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.n = 0

    def probe(self):
        t = time.monotonic()
        try:
            status, body, _ = self.c.request("GET", "/healthz", timeout=DEADLINE)
            if status != 200:
                self.failures.append("healthz %d %r" % (status, body[:100]))
            frm = T0 + self.n
            q = urllib.parse.urlencode({"name": "probe_%s.cpu" % self.name, "from": frm,
                                        "until": frm + 1, "format": "folded"})
            status, body, _ = self.c.request("POST", "/ingest?" + q,
                                      body=b"probe;n%d 1\n" % self.n, timeout=DEADLINE)
            if status == 200:
                self.acked.append(self.n)
            else:
                self.failures.append("ingest %d %r" % (status, body[:100]))
        except OSError as e:  # socket.timeout included
            self.failures.append("no answer within %.0f s: %r" % (DEADLINE, e))
        self.latencies.append(time.monotonic() - t)
        self.n += 1

    def run(self):
        while not self.stop.is_set():
            self.probe()
            self.stop.wait(self.every)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def check(self, test):
        test.assertGreater(self.n, 0)
        test.assertEqual(self.failures, [], "while under attack")
        got = parse_folded(test.c.render("probe_%s.cpu" % self.name, T0, T0 + self.n + 10))
        test.assertEqual(got, {"probe;n%d" % i: 1 for i in self.acked}, "acknowledged but lost")
        print("  %s: %d probes, slowest %.2f s" % (self.name, self.n, max(self.latencies)),
              file=sys.stderr)


def open_connections(port, sources, per_source, first):
    """Opens per_source connections to the collector from each source address and sends
    `first` on each; returns the sockets, non-blocking (None for one that failed)."""
    socks = []
    for src in sources:
        for _ in range(per_source):
            s = socket.socket()
            s.bind((src, 0))
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", port))
                s.sendall(first)
            except OSError:
                s.close()
                socks.append(None)
                continue
            s.setblocking(False)
            socks.append(s)
    return socks


def closed_by_server(s):
    """Has the server closed s? Reads nothing (the socket stays as it is)."""
    try:
        return s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def watch(socks, then, every, seconds, tick=None):
    """Sends `then` on each socket every `every` seconds for at most `seconds`, calling tick()
    each round if given, then closes them all. Returns, per socket, how long the server let it
    live (None: still open at the end)."""
    start = time.monotonic()
    lived = [0.0 if s is None else None for s in socks]
    while time.monotonic() - start < seconds and any(x is None for x in lived):
        for i, s in enumerate(socks):
            if lived[i] is not None:
                continue
            if closed_by_server(s):
                lived[i] = time.monotonic() - start
                continue
            try:
                s.recv(65536)  # whatever the server answered: not what is measured
            except OSError:
                pass
            try:
                s.send(then)
            except OSError:
                lived[i] = time.monotonic() - start
        if tick:
            tick()
        time.sleep(every)
    for s in socks:
        if s is not None:
            s.close()
    return lived


def heavy_profile(seed, stacks=2000):
    r = random.Random(seed)
    frames = ["mod%d.func%d (app/mod%d.py:%d)" % (i % 50, i, i % 50, i) for i in range(3000)]
    return gz("".join("thread:main;%s %d\n" % (";".join(r.choice(frames)
                                                        for _ in range(r.randint(5, 25))),
                                               r.randint(1, 50))
                      for _ in range(stacks)))


class Abuse(unittest.TestCase):
    HEADER_TIMEOUT, BODY_TIMEOUT, PER_CLIENT = 3, 5, 32
    # Four HTTP threads (the default) each allowed 32 MiB of gunzip output: without the shared
    # budget, bombs decoded at once could take 128 MiB.
    THREADS, GUNZIP_EACH, GUNZIP_TOTAL = 4, 32 * MIB, 32 * MIB

    @classmethod
    def setUpClass(cls):
        workdir = tempfile.mkdtemp(prefix="pa-coll-")
        cls.c = Collector("--threads", str(cls.THREADS), "--query-threads", "1",
                          "--max-queries", "4",
                          "--max-queries-per-client", "2", "--query-timeout", "1s",
                          "--max-connections-per-client", str(cls.PER_CLIENT),
                          "--header-timeout", "%ds" % cls.HEADER_TIMEOUT,
                          "--body-timeout", "%ds" % cls.BODY_TIMEOUT,
                          "--max-decompressed", str(cls.GUNZIP_EACH),
                          "--max-decompressed-total", str(cls.GUNZIP_TOTAL),
                          "--source-root", "/app=" + make_source_root(workdir), workdir=workdir)
        cls.heavy_loaded = False

    @classmethod
    def tearDownClass(cls):
        cls.c.__exit__(None, None, None)

    HEAVY = 320  # uploads of 2,000 stacks: merging them all takes seconds

    def load_heavy(self):
        if Abuse.heavy_loaded:
            return
        bodies = [heavy_profile(i) for i in range(8)]

        def load(i):
            return self.c.ingest("heavy.cpu{pod=p%d}" % (i % 10), bodies[i % 8],
                                 frm=HEAVY_T0 + i, until=HEAVY_T0 + i + 10,
                                 headers={"Content-Encoding": "gzip"})[0]
        with ThreadPoolExecutor(2) as pool:
            self.assertEqual(set(pool.map(load, range(self.HEAVY))), {200})
        Abuse.heavy_loaded = True

    def test_query_time_budget_stops_work(self):
        self.load_heavy()
        status, body, headers = self.c.get(
            "/render?query=heavy.cpu&from=%d&until=%d&format=folded"
            % (HEAVY_T0, HEAVY_T0 + self.HEAVY + 10))
        self.assertEqual(status, 503, body[:200])
        self.assertIn(b"time budget", body)
        self.assertEqual(headers.get("Retry-After"), "1")
        # A range the budget covers is answered.
        status, body, _ = self.c.get("/render?query=heavy.cpu%%7Bpod%%3Dp0%%7D&from=%d&until=%d"
                                     "&format=folded" % (HEAVY_T0, HEAVY_T0 + 1))
        self.assertEqual(status, 200, body[:200])

    def test_heavy_queries_do_not_starve_ingest(self):
        self.load_heavy()
        path = ("/render?query=heavy.cpu&from=%d&until=%d&format=folded"
                % (HEAVY_T0, HEAVY_T0 + 400))
        answers = []

        def query(n):
            try:
                status, body, headers = self.c.request("GET", path, source=attacker(n % 6),
                                                timeout=120)
                answers.append((status, headers.get("Retry-After"), body[:200]))
            except OSError as e:
                answers.append((None, None, repr(e)))
        with Prober(self.c, "starve") as probe:
            with ThreadPoolExecutor(12) as pool:
                list(pool.map(query, range(12)))
        probe.check(self)
        statuses = [a[0] for a in answers]
        print("  12 heavy queries: %s" % sorted(map(str, statuses)), file=sys.stderr)
        self.assertTrue(set(statuses) <= {200, 503}, answers)
        # 12 at once against a limit of 4 (2 per address): some are turned away at once, the
        # others stopped by the time budget.
        self.assertIn(503, statuses)
        for status, retry_after, _ in answers:
            if status == 503:
                self.assertEqual(retry_after, "1")

    def hold(self, sources, per_source, first, then, every, seconds):
        """Opens per_source connections from each source address, sends `first` on each, then
        `then` every `every` seconds for at most `seconds`. Returns, per connection, how long
        the server let it live (None: still open at the end)."""
        return watch(open_connections(self.c.port, sources, per_source, first), then, every,
                     seconds)

    def test_slowloris_headers_are_cut_at_the_header_deadline(self):
        with Prober(self.c, "slowloris") as probe:
            lived = self.hold([attacker(10 + i) for i in range(4)], 20,
                              b"GET /healthz HTTP/1.1\r\nHost: x\r\n", b"X-a: b\r\n",
                              0.5, self.HEADER_TIMEOUT + 8)
        probe.check(self)
        self.assertNotIn(None, lived, "a trickling client outlived the header deadline")
        self.assertLess(max(lived), self.HEADER_TIMEOUT + 5)
        print("  slowloris: %d connections cut after at most %.1f s" % (len(lived), max(lived)),
              file=sys.stderr)

    def test_trickled_body_is_cut_at_the_body_deadline(self):
        head = ("POST /ingest?name=trickle.cpu&from=%d&until=%d HTTP/1.1\r\nHost: x\r\n"
                "Content-Length: 100000\r\n\r\n" % (T0, T0 + 10)).encode()
        with Prober(self.c, "trickle") as probe:
            lived = self.hold([attacker(20)], 10, head + b"a 1\n", b"b;c 1\n", 0.5,
                              self.BODY_TIMEOUT + 8)
        probe.check(self)
        self.assertNotIn(None, lived, "a trickling body outlived the body deadline")
        self.assertLess(max(lived), self.BODY_TIMEOUT + 5)
        self.assertNotIn(b'"trickle.cpu"', self.c.get("/api/apps")[1])

    def test_connection_flood_is_limited_per_address(self):
        # 2,000 connections from 8 addresses: each address gets PER_CLIENT, the rest are closed
        # at once; those kept are cut at the header deadline.
        with Prober(self.c, "flood") as probe:
            lived = self.hold([attacker(30 + i) for i in range(8)], 250, b"GET / HTTP/1.1\r\n",
                              b"", 0.5, self.HEADER_TIMEOUT + 8)
        probe.check(self)
        kept = sum(1 for x in lived if x is None or x > 1.0)
        self.assertLessEqual(kept, 8 * self.PER_CLIENT)
        self.assertNotIn(None, lived)
        print("  flood: %d sockets, %d kept past 1 s, all closed after %.1f s"
              % (len(lived), kept, max(lived)), file=sys.stderr)

    def test_smuggling_framings_during_ingest(self):
        post = ("POST /ingest?name=smuggle.cpu&from=%d&until=%d HTTP/1.1\r\nHost: x\r\n"
                % (T0, T0 + 10))
        hidden = post.replace("smuggle", "hidden") + "Content-Length: 4\r\n\r\nz 1\n"
        framings = ["Content-Length: 4\r\nContent-Length: 60\r\n",
                    "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
                    "Transfer-Encoding: chunked, identity\r\n",
                    "X-A: 1\rContent-Length: 4\r\n"]
        with Prober(self.c, "smuggle") as probe:
            for n in range(40):
                s = socket.create_connection(("127.0.0.1", self.c.port), timeout=5,
                                             source_address=(attacker(40 + n % 4), 0))
                s.sendall((post + framings[n % 4] + "\r\na 1\n" + hidden).encode())
                out = b""
                while True:
                    b = s.recv(65536)
                    if not b:
                        break
                    out += b
                s.close()
                self.assertTrue(out.startswith(b"HTTP/1.1 400 "), out[:100])
                self.assertEqual(out.count(b"HTTP/1.1"), 1)
        probe.check(self)
        apps = self.c.get("/api/apps")[1]
        self.assertNotIn(b'"smuggle.cpu"', apps)
        self.assertNotIn(b'"hidden.cpu"', apps)

    def test_bombs_in_parallel(self):
        bomb = gzip.compress(b"\0" * (64 * MIB), 9)

        def send(n):
            return self.c.request("POST", "/ingest?name=bomb.cpu&from=%d&until=%d"
                                  % (T0, T0 + 10), body=bomb,
                                  headers={"Content-Encoding": "gzip"},
                                  source=attacker(50 + n % 4))
        base = reset_peak_rss(self.c.proc.pid)
        with Prober(self.c, "bombs") as probe:
            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(send, range(24)))
        grown = peak_rss(self.c.proc.pid) - base
        probe.check(self)
        for status, body, headers in answers:
            self.assertIn(status, (413, 503), body)
            if status == 503:
                self.assertEqual(headers.get("Retry-After"), "1")
        self.assertNotIn(b'"bomb.cpu"', self.c.get("/api/apps")[1])
        print("  bombs: %s, peak RSS grew by %.0f MiB" % (
            sorted(a[0] for a in answers), grown / MIB), file=sys.stderr)
        # The shared budget plus request buffers and allocator slack, well under what the
        # threads could take without it (THREADS * GUNZIP_EACH).
        self.assertLess(grown, self.GUNZIP_TOTAL + 24 * MIB)
        self.assertLess(self.GUNZIP_TOTAL + 24 * MIB, self.THREADS * self.GUNZIP_EACH)

    def test_log_injection(self):
        before = self.c.stderr()
        with Prober(self.c, "inject") as probe:
            # (A value may hold control characters, as in Pyroscope: stored, never logged.)
            for name in ["a.cpu{x\ny=1}", "a.cpu{k\x1b]0;pwned\x07=v}", "\r\n\x00.cpu"]:
                status, body, _ = self.c.request(
                    "POST", "/ingest?" + urllib.parse.urlencode({"name": name}), body=b"a 1\n",
                    source=attacker(60))
                self.assertEqual(status, 400)
                self.assertRegex(body.decode("ascii"), r"^[\x20-\x7e]+\n$")
        probe.check(self)
        log = self.c.stderr()[len(before):]
        self.assertEqual(log.count("rejected"), 3, log)
        for line in log.splitlines():
            self.assertRegex(line, r"^[\x20-\x7e]*$")

    def test_traversal_probes(self):
        # Frames naming files outside the source root, as an uploader probing the host would.
        files = ["/app/a.py"] + [f for pair in OUTSIDE_ROOT_PAIRS for f in pair]
        body = "".join("thread:main;f%d (%s:1) 5\n" % (i, f) for i, f in enumerate(files))
        with Prober(self.c, "traversal") as probe:
            status, answer, _ = self.c.ingest("probe_files.cpu", body, frm=T0, until=T0 + 10)
            self.assertEqual(status, 200, answer)
            why = heatmap_reasons(self.c, "probe_files.cpu", T0, T0 + 10, source=attacker(70))
            for path in ["/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd",
                         "/heatmap/1/2/a.cpu/../../../etc/passwd",
                         "/heatmap/1/2/a.cpu/..%2f..%2f..%2fetc%2fpasswd",
                         "/heatmap/1/2/..%2f..%2fetc/index.html", "/heatmap/%00/x",
                         "/render?query=..%2f..%2fetc%2fpasswd", "/ingest/../render"]:
                status, body, _ = self.c.request("GET", path, source=attacker(70))
                # A selector or heatmap path naming ".." is a report of nothing: still no file.
                ok = (200, 400, 404) if path.startswith(("/heatmap/", "/render")) else (
                    400, 404, 405)
                self.assertIn(status, ok, (path, body[:200]))
                self.assertNotIn(b"root:", body)
        probe.check(self)
        # The file under the root is read; of each pair outside it, the one that exists and
        # the one that does not get the same words, so the pages are no oracle.
        self.assertEqual(why.get("/app/a.py"), "read", why)
        for exists, missing in OUTSIDE_ROOT_PAIRS:
            self.assertIn(exists, why)
            self.assertNotEqual(why[exists], "read")
            self.assertEqual(why[exists], why[missing], (exists, why))

def server_sockets(pid):
    """How many sockets the process holds open (its listening socket, accepted connections)."""
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            n += os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("socket:")
        except OSError:  # closed meanwhile
            pass
    return n


class GlobalConnectionLimit(unittest.TestCase):
    """--max-connections against a flood from many addresses, each within its per-address
    limit: what the limit does with libmicrohttpd 0.9.75 (it stops accepting while at the
    limit; the connections past it wait in the kernel's listen queue), and that the header
    deadline is what frees the collector. Not isolation: while the flood holds every slot,
    /healthz and /ingest wait too (docs/collector-api.md, "What is not limited")."""
    MAX, PER_CLIENT, HEADER_TIMEOUT = 48, 8, 3
    ADDRESSES, PER_ADDRESS = 24, 4  # 96 connections, 2x the limit; 4 per address, under 8

    def test_flood_from_many_addresses_holds_at_most_max_connections_until_the_deadline(self):
        with Collector("--max-connections", str(self.MAX),
                       "--max-connections-per-client", str(self.PER_CLIENT),
                       "--header-timeout", "%ds" % self.HEADER_TIMEOUT) as c:
            base = server_sockets(c.proc.pid)
            held = []

            def tick():
                held.append(server_sockets(c.proc.pid) - base)
            socks = open_connections(c.port, [attacker(100 + i) for i in range(self.ADDRESSES)],
                                     self.PER_ADDRESS, b"GET / HTTP/1.1\r\n")
            self.assertNotIn(None, socks)
            # Wait until the collector holds all it may.
            deadline = time.monotonic() + self.HEADER_TIMEOUT
            while server_sockets(c.proc.pid) - base < self.MAX and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertEqual(server_sockets(c.proc.pid) - base, self.MAX,
                             "the flood did not fill --max-connections")
            # A health probe and an upload from an address of their own, sent while every slot
            # is held: they are answered, but only once the flood's connections are cut.
            answers = {}

            def request(kind):
                try:
                    if kind == "healthz":
                        status, _, _ = c.request("GET", "/healthz", timeout=60)
                    else:
                        status, _, _ = c.ingest("queued.cpu", "queued 1\n", frm=T0,
                                                until=T0 + 1)
                    answers[kind] = (status, sum(map(closed_by_server, socks)))
                except OSError as e:
                    answers[kind] = (repr(e), None)
            clients = [threading.Thread(target=request, args=(k,)) for k in ("healthz", "ingest")]
            for t in clients:
                t.start()
            lived = watch(socks, b"", 0.1, 4 * self.HEADER_TIMEOUT + 10, tick)
            for t in clients:
                t.join(60)
            print("  global flood: %d sockets, at most %d held, all closed after %.1f s; "
                  "answers %s" % (len(socks), max(held), max(lived), answers), file=sys.stderr)
            self.assertLessEqual(max(held), self.MAX)
            self.assertNotIn(None, lived, "a flood connection outlived the header deadline")
            for kind in ("healthz", "ingest"):
                status, cut = answers[kind]
                self.assertEqual(status, 200, (kind, answers))
                # Loopback delivers the flood connection's FIN before the slot it frees can
                # take the request: at least one was cut before the answer came.
                self.assertGreater(cut, 0, (kind, "answered while the flood held every slot"))
            # After the flood: health and ingest answer at once, and nothing acknowledged is lost.
            self.assertEqual(c.get("/healthz", timeout=DEADLINE)[0], 200)
            self.assertEqual(c.ingest("queued.cpu", "after 1\n", frm=T0 + 1, until=T0 + 2)[0],
                             200)
            self.assertEqual(parse_folded(c.render("queued.cpu", T0, T0 + 10)),
                             {"queued": 1, "after": 1})


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
