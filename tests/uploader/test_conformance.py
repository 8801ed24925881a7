"""Conformance: the agent fed hostile names (invalid UTF-8, ';', '{}', ',', newlines, a 100 KB
name, a 10,000-frame recursion, a thread named with separators, 40 user tags and a tag named
service_name) sends only uploads that Grafana Pyroscope's rules accept, in the protocol given:
tests/uploader/pyroscope.py applies them (labels, UTF-8 of every string, sizes, sample
counts, time window) and refuses nothing; every sample of the local file arrives; the stacks
are cut at 512 frames with <truncated>; the service is the service_name tag. Our collector
takes the same uploads.

    python3 test_conformance.py --python PY --lib libpyagent.so --collector pyagent-collector
        --protocol push|ingest|otlp"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "agent"))
from harness import Failure, check, free_port  # noqa: E402
from pyroscope import FakePyroscope  # noqa: E402

TAGS = ",".join(["service_name=shop", "env=ci"] + ["t%02d=v%d" % (i, i) for i in range(40)])


def run(args, server, workdir, fmt="pprof"):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYAGENT_", "PYROSCOPE_"))}
    env.update(LD_PRELOAD=args.lib, PYAGENT_RATE="250", PYAGENT_PROTOCOL=args.protocol, PYAGENT_SERVER=server,
               PYAGENT_APP_NAME="conformance", PYAGENT_TAGS=TAGS, PYAGENT_UPLOAD_INTERVAL="1",
               PYAGENT_UPLOAD_FORMAT=fmt, PYAGENT_OUTPUT="local.folded",
               PYAGENT_SPOOL_DIR=os.path.join(workdir, "spool"))
    r = subprocess.run([args.python, os.path.join(HERE, "programs", "conformance.py"), "4"], cwd=workdir,
                       env=env, capture_output=True, text=True, timeout=300)
    check(r.returncode == 0 and r.stdout == "conformance done\n", "program failed: %s" % r.stderr[-3000:])
    local = {}
    with open(os.path.join(workdir, "local.folded"), encoding="utf-8") as f:  # valid UTF-8, or this raises
        for line in f:
            if line.strip() and not line.startswith("#"):
                stack, _, count = line.rstrip("\n").rpartition(" ")
                local[stack] = local.get(stack, 0) + int(count)
    return r, local


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--collector", required=True)
    ap.add_argument("--protocol", default="push", choices=("push", "ingest", "otlp"))
    args = ap.parse_args()
    args.lib, args.collector = os.path.abspath(args.lib), os.path.abspath(args.collector)
    work = tempfile.mkdtemp(prefix="pa-conformance-")
    t0 = time.time()
    try:
        for fmt in (("pprof", "folded") if args.protocol == "ingest" else ("pprof",)):
            d = tempfile.mkdtemp(dir=work)
            srv = FakePyroscope()
            try:
                r, local = run(args, srv.url(), d, fmt)
            finally:
                srv.stop()
            what = "%s/%s" % (args.protocol, fmt)
            check(not srv.rejected, "%s: Pyroscope would refuse %d upload(s): %s" % (what, len(srv.rejected),
                                                                                   srv.rejected[:2]))
            check(srv.accepted, "%s: nothing uploaded" % what)
            got = sum(rec["samples"] for rec in srv.accepted)
            want = sum(local.values())
            check(got == want, "%s: Pyroscope got %d samples, the local file %d" % (what, got, want))
            for rec in srv.accepted:
                check(rec["service"] == "shop", "%s: service %r" % (what, rec["service"]))
                check(len(rec["labels"]) <= 30, "%s: %d labels" % (what, len(rec["labels"])))
                check(rec["labels"].get("env") == "ci", "%s: labels %r" % (what, rec["labels"]))
            frames = {f for rec in srv.accepted for k in rec["stacks"] for f in k.split(";")}
            depth = max(len(k.split(";")) for rec in srv.accepted for k in rec["stacks"])
            check("<truncated>" in frames and depth <= 514, "%s: the recursion is not cut (depth %d)" % (what, depth))
            check(any("\ufffd" in f for f in frames), "%s: no name cut mid-character shows U+FFFD" % what)
            check(any(f.startswith(("bad?name", "bad\ufffdname")) or ".bad?name" in f or ".bad\ufffdname" in f
                      for f in frames), "%s: the surrogate's name is gone" % what)
            # The agent keeps the first bytes of a long name (its code cache's bound), not all 100 KB.
            check(any("n" * 150 in f for f in frames), "%s: the long name is gone" % what)
            check(any("thr" in f and "ead" in f for f in frames), "%s: the thread is gone" % what)
            check("t39" in r.stderr, "%s: the dropped 40th tag is not said: %s" % (what, r.stderr[-2000:]))
            print("%s: %d uploads, %d samples, all accepted by Pyroscope's rules" % (what, len(srv.accepted), got))
        # Our collector takes the same uploads.
        d = tempfile.mkdtemp(dir=work)
        port = free_port()
        col = subprocess.Popen([args.collector, "--listen", "127.0.0.1:%d" % port, "--db", os.path.join(d, "p.db")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            col.stdout.readline()
            r, local = run(args, "http://127.0.0.1:%d" % port, d)
            check(not os.path.exists(os.path.join(d, "spool", "rejected")), "the collector refused an upload: %s"
                  % r.stderr[-2000:])
            app = "conformance.cpu" if args.protocol == "ingest" else "shop.cpu"
            text = urllib.request.urlopen("http://127.0.0.1:%d/render?query=%s&from=0&until=now&format=folded"
                                          % (port, app), timeout=60).read().decode()
            held = sum(int(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line and not line.startswith("#"))
            check(held == sum(local.values()), "the collector holds %d samples, the local file %d"
                  % (held, sum(local.values())))
        finally:
            col.terminate()
            col.wait(20)
    except Failure as e:
        print("FAIL conformance (%s): %s" % (args.protocol, e))
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("PASS conformance (%s, %.1fs)" % (args.protocol, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
