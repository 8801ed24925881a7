"""Query benchmark: an hour of 10-second profiles from 20 applications (7,200 uploads of 200
stacks each, drawn from 1,000 per application), then the time of /render over the hour for one application in each
format, several runs, medians. Standard library only.

usage: query_bench.py BASE_URL [RUNS]"""
import http.client
import random
import statistics
import sys
import time
import urllib.parse

base = urllib.parse.urlparse(sys.argv[1])
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
conn = http.client.HTTPConnection(base.hostname, base.port, timeout=600)


def call(method, path, body=None):
    conn.request(method, path, body=body)
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise SystemExit("%s %s: %d %s" % (method, path, r.status, data[:200]))
    return data


STACKS = {}


def profile(rnd, app):
    """A program has a stable set of stacks (here 1,000 per app, depth 10-30); each
    10-second profile holds 200 of them."""
    if app not in STACKS:
        STACKS[app] = []
        for i in range(1000):
            depth = 10 + rnd.randint(0, 20)
            STACKS[app].append(";".join(["thread:MainThread"] + [
                "fn%d_%d (/srv/%s/m%d.py:%d)" % (d, rnd.randint(0, 5), app, d % 7,
                                                rnd.randint(1, 300)) for d in range(depth)]))
    lines = ["%s %d" % (s, rnd.randint(1, 40)) for s in rnd.sample(STACKS[app], 200)]
    return ("\n".join(lines) + "\n").encode()


now = int(time.time()) // 10 * 10
t0 = now - 3600
rnd = random.Random(1)
start = time.time()
for app in range(20):
    for k in range(360):
        frm = t0 + 10 * k
        call("POST", "/ingest?name=qbench%d.cpu%%7Bhost%%3Dh%d%%7D&from=%d&until=%d&format=folded"
             % (app, app % 3, frm, frm + 10), profile(rnd, "app%d" % app))
print("loaded 7200 uploads in %.1f s" % (time.time() - start))

for fmt in ("folded", "json", "html"):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        data = call("GET", "/render?query=qbench7.cpu&from=%d&until=%d&format=%s" % (t0, now, fmt))
        times.append(time.perf_counter() - t)
    print("RESULT query format=%s uploads=360 median_ms=%.1f min_ms=%.1f max_ms=%.1f bytes=%d" % (
        fmt, statistics.median(times) * 1000, min(times) * 1000, max(times) * 1000, len(data)))
