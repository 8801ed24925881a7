"""OpenTelemetry's own generated classes (Debian sid's python3-opentelemetry-proto 1.45, with
sid's python3-protobuf, unpacked for sid's interpreters by scripts/pythons.sh --otel-proto;
the test fails on a package older than 1.45 or without profiles/v1development, and prints its
version)
parse every OTLP body the agent sends, in cpu and wall mode: every index inside its table,
service.name the application, each sample's thread.name the root frame's, and the samples,
read as OpenTelemetry defines them, equal to the local file's. Our collector accepts the same
bodies and holds the same total.

    python3 test_otel_classes.py --python PY --lib libpyagent.so --collector pyagent-collector"""
import argparse
import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "agent"))
from harness import PROGRAMS, Failure, check, free_port  # noqa: E402

# Runs under sid's interpreter with sid's packages: reads each body file named on the command
# line, prints one JSON line per body.
CHECKER = r"""
import json, sys
from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import ExportProfilesServiceRequest
for path in sys.argv[1:]:
    rq = ExportProfilesServiceRequest.FromString(open(path, "rb").read())
    d = rq.dictionary
    s = d.string_table
    assert s[0] == "", "string_table[0] must be empty"
    for t in (d.mapping_table, d.location_table, d.function_table, d.link_table,
              d.attribute_table, d.stack_table):
        assert len(t) >= 1, "index 0 of every table is its zero value"
    out = {"services": [], "samples": 0, "threads": [], "types": []}
    for rp in rq.resource_profiles:
        attrs = {a.key: a.value.string_value for a in rp.resource.attributes}
        out["services"].append(attrs.get("service.name"))
        for sp in rp.scope_profiles:
            for p in sp.profiles:
                st = (s[p.sample_type.type_strindex], s[p.sample_type.unit_strindex])
                pt = (s[p.period_type.type_strindex], s[p.period_type.unit_strindex])
                out["types"].append([st, pt, p.period])
                for sm in p.samples:
                    stack = d.stack_table[sm.stack_index]
                    assert stack.location_indices, "an empty stack"
                    names = []
                    for li in stack.location_indices:
                        loc = d.location_table[li]
                        assert loc.lines, "a location without lines"
                        for ln in loc.lines:
                            f = d.function_table[ln.function_index]
                            names.append(s[f.name_strindex])
                    value = sm.values[0]
                    out["samples"] += value // p.period if st[1] == "nanoseconds" else value
                    for ai in sm.attribute_indices:
                        a = d.attribute_table[ai]
                        if s[a.key_strindex] == "thread.name":
                            thread = s[a.value.string_value_strindex]
                            assert names[-1] == "thread:" + thread, (names[-1], thread)
                            out["threads"].append(thread)
    print(json.dumps(out))
"""


def sid_python():
    listing = os.path.join(ROOT, "build", "pythons.txt")
    if os.path.exists(listing):
        for line in open(listing):
            cols = line.rstrip("\n").split("\t")
            if len(cols) >= 2 and re.match(r"^sid-3\.\d+$", cols[0]):
                return cols[1]
    raise Failure("no sid interpreter in %s (scripts/pythons.sh --ensure provides them)" % listing)


# The classes the issue names: opentelemetry-proto 1.45 or later (the profiles signal moved to
# profiles/v1development in 1.x releases; an older package would test another schema).
VERSION_CHECK = r"""
import importlib.metadata
from opentelemetry.proto.profiles.v1development import profiles_pb2
print(importlib.metadata.version("opentelemetry-proto"), profiles_pb2.DESCRIPTOR.package)
"""
WANT_VERSION = (1, 45)


def otel_proto_version(sid, dist):
    """The version of the opentelemetry-proto package sid's interpreter imports from dist;
    fails unless it is WANT_VERSION or later and holds profiles/v1development."""
    env = dict(os.environ, PYTHONPATH=dist, PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python")
    env.pop("LD_PRELOAD", None)
    r = subprocess.run([sid, "-c", VERSION_CHECK], capture_output=True, text=True, env=env, timeout=120)
    check(r.returncode == 0, "sid's opentelemetry-proto has no profiles/v1development: %s" % r.stderr[-2000:])
    version, package = r.stdout.split()
    check(package == "opentelemetry.proto.profiles.v1development", "profiles package %r" % package)
    got = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    check(got >= WANT_VERSION, "opentelemetry-proto %s is older than %d.%d, the version the issue names"
          % (version, *WANT_VERSION))
    return version


def capture(args, mode, workdir):
    """Runs steady.py under the agent (PYAGENT_PROTOCOL=otlp) against a server that keeps the
    bodies; returns (bodies, local file total)."""
    bodies = []

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            bodies.append((self.path, self.headers.get("Content-Type"),
                           self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYAGENT_")}
        env.update(LD_PRELOAD=args.lib, PYAGENT_RATE="250", PYAGENT_MODE=mode, PYAGENT_PROTOCOL="otlp",
                   PYAGENT_SERVER="http://127.0.0.1:%d" % httpd.server_address[1], PYAGENT_APP_NAME="oteltest",
                   PYAGENT_UPLOAD_INTERVAL="1", PYAGENT_OUTPUT="local.folded",
                   PYAGENT_SPOOL_DIR=os.path.join(workdir, "spool-" + mode))
        r = subprocess.run([args.python, os.path.join(PROGRAMS, "steady.py"), "3"], cwd=workdir, env=env,
                           capture_output=True, text=True, timeout=300)
        check(r.returncode == 0, "program failed: %s" % r.stderr[-2000:])
    finally:
        httpd.shutdown()
        httpd.server_close()
    total = 0
    for line in open(os.path.join(workdir, "local.folded")):
        if line.strip() and not line.startswith("#"):
            total += int(line.rsplit(" ", 1)[1])
    return bodies, total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--collector", required=True)
    args = ap.parse_args()
    args.lib, args.collector = os.path.abspath(args.lib), os.path.abspath(args.collector)
    work = tempfile.mkdtemp(prefix="pa-otel-")
    try:
        sid = sid_python()
        dist = subprocess.run([os.path.join(ROOT, "scripts", "pythons.sh"), "--otel-proto"], capture_output=True,
                              text=True, check=True).stdout.strip()
        print("OpenTelemetry's classes: opentelemetry-proto %s" % otel_proto_version(sid, dist))
        for mode in ("cpu", "wall"):
            d = os.path.join(work, mode)
            os.makedirs(d)
            bodies, local = capture(args, mode, d)
            check(bodies, "%s: nothing uploaded" % mode)
            files = []
            for i, (path, ctype, body) in enumerate(bodies):
                check(path == "/v1development/profiles" and ctype == "application/x-protobuf",
                      "%s: upload to %s as %s" % (mode, path, ctype))
                files.append(os.path.join(d, "body-%d.pb" % i))
                with open(files[-1], "wb") as f:
                    f.write(body)
            env = dict(os.environ, PYTHONPATH=dist, PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python")
            env.pop("LD_PRELOAD", None)
            r = subprocess.run([sid, "-c", CHECKER] + files, capture_output=True, text=True, env=env, timeout=300)
            check(r.returncode == 0, "%s: OpenTelemetry's classes refuse a body: %s" % (mode, r.stderr[-3000:]))
            parsed = [json.loads(x) for x in r.stdout.splitlines()]
            got = sum(p["samples"] for p in parsed)
            check(got == local, "%s: OpenTelemetry reads %d samples, the local file has %d" % (mode, got, local))
            check(all(p["services"] == ["oteltest"] for p in parsed), "%s: services %r" % (mode, parsed))
            check(any("MainThread" in p["threads"] for p in parsed), "%s: no thread.name MainThread" % mode)
            want_type = {"cpu": [["samples", "count"], ["cpu", "nanoseconds"]],
                         "wall": [["wall", "nanoseconds"], ["wall", "nanoseconds"]]}[mode]
            check(all(t[:2] == want_type for p in parsed for t in p["types"]), "%s: types %r" % (mode, parsed))
            # Our collector accepts the very same bodies.
            port = free_port()
            col = subprocess.Popen([args.collector, "--listen", "127.0.0.1:%d" % port, "--db",
                                    os.path.join(d, "p.db")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                col.stdout.readline()
                for _, ctype, body in bodies:
                    rq = urllib.request.Request("http://127.0.0.1:%d/v1development/profiles" % port, data=body,
                                                headers={"Content-Type": ctype})
                    check(urllib.request.urlopen(rq, timeout=30).status == 200, "the collector refused a body")
                app = "oteltest.%s" % mode
                text = urllib.request.urlopen("http://127.0.0.1:%d/render?query=%s&from=0&until=now&format=folded"
                                              % (port, app), timeout=30).read().decode()
                held = sum(int(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                           if line and not line.startswith("#"))
                check(held == local, "%s: the collector holds %d samples, the local file %d" % (mode, held, local))
            finally:
                col.terminate()
                col.wait(20)
            print("%s: %d bodies, %d samples read by OpenTelemetry's classes and held by the collector"
                  % (mode, len(bodies), got))
    except Failure as e:
        print("FAIL otel_classes: %s" % e)
        return 1
    finally:
        subprocess.run(["rm", "-rf", work])
    print("PASS otel_classes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
