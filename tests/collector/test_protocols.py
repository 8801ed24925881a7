"""Integration: Grafana Pyroscope's Push API, OpenTelemetry profiles (OTLP/HTTP) and
querier.v1.QuerierService against a real collector, with bodies built here by hand from the
field numbers (not by the code under test). What goes in by any protocol comes out of /render
and of the querier with the same totals; what Pyroscope refuses is refused with its answer
(Connect's invalid_argument, HTTP 400); both Connect codecs (binary, JSON) give the same."""
import base64
import html
import json
import os
import re
import struct
import sys
import time
import unittest
import urllib.parse
import uuid

from harness import CollectorTest, _field, collector_path, gz, parse_folded, pprof

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "uploader"))
from pyroscope import fields, varint  # noqa: E402

NOW = int(time.time())
PROTO = {"Content-Type": "application/proto"}
JSON = {"Content-Type": "application/json"}


def label(name, value):
    return _field(1, name.encode()) + _field(2, value.encode())


def push_request(series):
    """series: [([(name, value)], [raw profile bytes])]. Each sample gets an ID of its own, as
    clients send (the collector stores an ID once)."""
    out = b""
    for labels, raws in series:
        body = b"".join(_field(1, label(k, v)) for k, v in labels)
        body += b"".join(_field(2, _field(1, r) + _field(2, uuid.uuid4().hex.encode())) for r in raws)
        out += _field(1, body)
    return out


def timed_pprof(stacks, t=NOW, rate=100):
    """pprof with time_nanos (9) and period (12)."""
    return pprof(stacks) + _field(9, t * 1000000000) + _field(12, 1000000000 // rate)


def fixed64(num, v):
    return bytes([num << 3 | 1]) + struct.pack("<Q", v)


def otlp_request(stacks, service="svc", attrs=(), sample_type=("samples", "count"),
                 period_type=("cpu", "nanoseconds"), period=10000000, scale=1, t=NOW, dictionary=True,
                 stack_index_shift=0, profile_id=None):
    """ExportProfilesServiceRequest of {root-first stack: count}: one function and location per
    frame, one stack per sample; values are count * scale; profile_id (bytes) if given."""
    strings = [""]

    def s(x):
        if x not in strings:
            strings.append(x)
        return strings.index(x)
    frames, stack_msgs, samples = [], [], b""
    for i, (stack, count) in enumerate(stacks.items()):
        idx = []
        for fr in reversed(stack.split(";")):  # leaf first
            if fr not in frames:
                frames.append(fr)
            idx.append(frames.index(fr) + 1)
        stack_msgs.append(_field(1, _varint_packed(idx)))
        samples += _field(2, _field(1, i + 1 + stack_index_shift) + _field(4, _varint_packed([count * scale])))
    d = _field(1, b"")  # mapping 0
    d += _field(2, b"")  # location 0
    d += _field(3, b"")  # function 0
    for i, fr in enumerate(frames):
        name, _, rest = fr.partition(" (")
        fn = _field(1, s(name))
        line = 0
        if rest:
            f, _, ln = rest.rstrip(")").rpartition(":")
            fn += _field(3, s(f))
            line = int(ln)
        d += _field(3, fn)
        d += _field(2, _field(3, _field(1, i + 1) + (_field(2, line) if line else b"")))
    d += _field(7, b"")  # stack 0
    d += b"".join(_field(7, m) for m in stack_msgs)
    prof = _field(1, _field(1, s(sample_type[0])) + _field(2, s(sample_type[1])))
    prof += samples + fixed64(3, t * 1000000000) + _field(4, 10 * 1000000000)
    prof += _field(5, _field(1, s(period_type[0])) + _field(2, s(period_type[1]))) + _field(6, period)
    if profile_id is not None:
        prof += _field(7, profile_id)
    for x in strings:
        d += _field(5, x.encode())
    res_attrs = b"".join(_field(1, _field(1, k.encode()) + _field(2, _field(1, v.encode())))
                         for k, v in [("service.name", service)] + list(attrs))
    rp = _field(1, res_attrs) + _field(2, _field(1, _field(1, b"test")) + _field(2, prof))
    return _field(1, rp) + (_field(2, d) if dictionary else b"")


def _varint_packed(values):
    out = bytearray()
    for n in values:
        while True:
            b = n & 0x7F
            n >>= 7
            out.append(b | (0x80 if n else 0))
            if not n:
                break
    return bytes(out)


def render(c, app):
    status, body, _ = c.request("GET", "/render?query=%s&from=0&until=now&format=folded" % app)
    assert status == 200, body
    return parse_folded(body)


def flame_total(fg):
    """The total of a JSON FlameGraph and the sum of the self values of its nodes."""
    selfs = 0
    for level in fg.get("levels", []):
        vals = [int(v) for v in level.get("values", [])]
        selfs += sum(vals[2::4])
    return int(fg.get("total", 0)), selfs


def decode_tree(b):
    """Pyroscope's tree bytes (pkg/model's MarshalTruncate), read from the format's definition:
    nodes in depth-first pre-order, each its name's length (uvarint), the name, its self value
    (uvarint) and its number of children (uvarint); the first node is a virtual root with an
    empty name. Returns {root-first stack of names: self} and the sum of all selfs."""
    stacks, i = {}, 0
    todo = [()]  # the path of the parent of each node still to read, popped last first
    while todo:
        parent = todo.pop()
        n, i = varint(b, i)
        name = b[i:i + n].decode()
        i += n
        self_, i = varint(b, i)
        kids, i = varint(b, i)
        path = parent + (name,) if parent or name else ()
        if self_:
            stacks[";".join(path)] = stacks.get(";".join(path), 0) + self_
        todo += [path] * kids
    assert i == len(b), "trailing bytes"
    return stacks


class Push(CollectorTest):
    STACKS = {"thread:MainThread;app.main (app.py:3);app.work (app.py:9)": 30,
              "thread:MainThread;app.main (app.py:3)": 12}

    def push(self, series, headers=PROTO, body=None):
        return self.c.request("POST", "/push.v1.PusherService/Push", body or push_request(series),
                              headers)

    def test_push_binary_is_stored_under_service_and_type(self):
        labels = [("__name__", "process_cpu"), ("service_name", "pushed"), ("env", "prod"),
                  ("pyroscope_spy", "test")]
        status, body, hdr = self.push([(labels, [gz(timed_pprof(self.STACKS)), timed_pprof(self.STACKS)])])
        self.assertEqual(status, 200, body)
        self.assertEqual(hdr.get("Content-Type"), "application/proto")
        got = render(self.c, "pushed.cpu%7Benv%3D%22prod%22%7D")
        self.assertEqual(got, {k: 2 * v for k, v in self.STACKS.items()})

    def test_push_json_codec(self):
        raw = base64.b64encode(timed_pprof(self.STACKS)).decode()
        body = json.dumps({"series": [{"labels": [{"name": "__name__", "value": "wall"},
                                                  {"name": "service_name", "value": "pushjson"}],
                                       "samples": [{"rawProfile": raw, "ID": "x"}]}]})
        status, out, hdr = self.push(None, JSON, body.encode())
        self.assertEqual(status, 200, out)
        self.assertEqual(json.loads(out), {})
        self.assertEqual(render(self.c, "pushjson.wall"), self.STACKS)

    def test_pyroscope_refusals(self):
        good = gz(timed_pprof(self.STACKS))
        cases = {
            "no service_name": [([("__name__", "process_cpu")], [good])],
            "duplicate label": [([("__name__", "process_cpu"), ("service_name", "a"), ("env", "a"),
                                  ("env", "b")], [good])],
            "label name": [([("__name__", "process_cpu"), ("service_name", "a"), ("9x", "a")], [good])],
            "31 labels": [([("__name__", "process_cpu"), ("service_name", "a")] +
                           [("l%d" % i, "v") for i in range(29)], [good])],
            "value too long": [([("__name__", "process_cpu"), ("service_name", "a"), ("k", "v" * 2049)], [good])],
            "not a pprof": [([("__name__", "process_cpu"), ("service_name", "a")], [b"\x1f\x8bgarbage"])],
        }
        for what, series in cases.items():
            status, body, hdr = self.push(series)
            self.assertEqual(status, 400, "%s: %s" % (what, body))
            err = json.loads(body)
            self.assertEqual(err["code"], "invalid_argument", what)
            self.assertTrue(err["message"], what)
        # Invalid UTF-8 in a label, a malformed message, a codec Connect does not know.
        bad = push_request([([("__name__", "process_cpu"), ("service_name", "a")], [good])])
        bad = bad.replace(b"service_name", b"service_n\xffme")
        self.assertEqual(self.push(None, PROTO, bad)[0], 400)
        self.assertEqual(self.push(None, PROTO, b"\x0a\xff\xff\xff")[0], 400)
        self.assertEqual(self.push(None, {"Content-Type": "text/plain"}, b"x")[0], 415)
        # Nothing of a refused request was stored.
        status, body, _ = self.c.request("GET", "/api/apps")
        self.assertNotIn(b'"a.cpu"', body)

    def test_all_or_nothing(self):
        """A request whose second series is refused stores nothing of the first."""
        good = gz(timed_pprof(self.STACKS))
        series = [([("__name__", "process_cpu"), ("service_name", "half")], [good]),
                  ([("__name__", "process_cpu")], [good])]
        self.assertEqual(self.push(series)[0], 400)
        status, body, _ = self.c.request("GET", "/api/apps")
        self.assertNotIn(b'"half.cpu"', body)


class Otlp(CollectorTest):
    STACKS = {"thread:MainThread;app.main (app.py:3);app.work (app.py:9)": 7,
              "thread:MainThread;0xdead (app.py:1)": 2}

    def post(self, body, ct="application/x-protobuf", headers=None):
        h = {"Content-Type": ct}
        h.update(headers or {})
        return self.c.request("POST", "/v1development/profiles", body, h)

    def test_cpu_counts_and_attributes(self):
        body = otlp_request(self.STACKS, service="ebpf", attrs=[("host.name", "web-1")])
        status, out, hdr = self.post(body)
        self.assertEqual(status, 200, out)
        self.assertEqual(hdr.get("Content-Type"), "application/x-protobuf")
        self.assertEqual(render(self.c, "ebpf.cpu%7Bhost_name%3D%22web-1%22%7D"), self.STACKS)

    def test_wall_time_in_nanoseconds_becomes_counts(self):
        body = otlp_request(self.STACKS, service="walls", sample_type=("wall", "nanoseconds"),
                            period_type=("wall", "nanoseconds"), scale=10000000)
        self.assertEqual(self.post(body)[0], 200)
        self.assertEqual(render(self.c, "walls.wall"), self.STACKS)

    def test_gzip_body(self):
        body = gz(otlp_request(self.STACKS, service="zipped"))
        self.assertEqual(self.post(body, headers={"Content-Encoding": "gzip"})[0], 200)
        self.assertEqual(render(self.c, "zipped.cpu"), self.STACKS)

    def test_refusals(self):
        self.assertEqual(self.post(otlp_request(self.STACKS, dictionary=False))[0], 400)
        self.assertEqual(self.post(otlp_request(self.STACKS, stack_index_shift=50))[0], 400)
        self.assertEqual(self.post(b"\x0a\xff\xff")[0], 400)
        self.assertEqual(self.post(otlp_request(self.STACKS), ct="text/plain")[0], 415)
        self.assertEqual(self.post(gz(b"x"), headers={"Content-Encoding": "br"})[0], 415)


class Querier(CollectorTest):
    STACKS = {"thread:MainThread;app.main (app.py:3);app.work (app.py:9)": 30,
              "thread:MainThread;app.main (app.py:3);app.work (app.py:10)": 5,
              "thread:MainThread;app.main (app.py:3)": 12}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for env, stacks in (("prod", cls.STACKS), ("dev", {"thread:MainThread;dev.f (d.py:1)": 4})):
            labels = [("__name__", "process_cpu"), ("service_name", "shop"), ("env", env)]
            status, body, _ = cls.c.request("POST", "/push.v1.PusherService/Push",
                                            push_request([(labels, [timed_pprof(stacks, rate=100)])]), PROTO)
            assert status == 200, body

    def call(self, method, req, codec="json"):
        if codec == "json":
            status, body, hdr = self.c.request("POST", "/querier.v1.QuerierService/" + method,
                                               json.dumps(req).encode(), JSON)
            return status, json.loads(body) if body else None
        status, body, hdr = self.c.request("POST", "/querier.v1.QuerierService/" + method, req, PROTO)
        return status, body

    def test_profile_types_and_labels(self):
        status, out = self.call("ProfileTypes", {})
        self.assertEqual(status, 200)
        ids = {t["ID"] for t in out["profileTypes"]}
        self.assertIn("process_cpu:cpu:nanoseconds:cpu:nanoseconds", ids)
        self.assertIn("process_cpu:samples:count:cpu:nanoseconds", ids)
        status, out = self.call("LabelNames", {"matchers": ['{service_name="shop"}']})
        self.assertEqual(status, 200)
        self.assertTrue({"service_name", "env", "__name__"} <= set(out["names"]), out)
        status, out = self.call("LabelValues", {"name": "env", "matchers": ['{service_name="shop"}']})
        self.assertEqual(out["names"], ["dev", "prod"])
        status, out = self.call("Series", {"matchers": ['{service_name="shop", env="prod"}'],
                                           "labelNames": ["service_name", "env"]})
        self.assertEqual(out["labelsSet"], [{"labels": [{"name": "service_name", "value": "shop"},
                                                        {"name": "env", "value": "prod"}]}])

    def test_merge_stacktraces_totals(self):
        req = {"profileTypeID": "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
               "labelSelector": '{service_name="shop",env="prod"}', "start": str((NOW - 60) * 1000),
               "end": str((NOW + 60) * 1000)}
        status, out = self.call("SelectMergeStacktraces", req)
        self.assertEqual(status, 200, out)
        total, selfs = flame_total(out["flamegraph"])
        # 47 samples at 100 Hz: 10 ms each.
        self.assertEqual(total, 47 * 10000000)
        self.assertEqual(selfs, total)
        # Lines of one function are one node, named by function as Pyroscope's.
        self.assertIn("app.work", out["flamegraph"]["names"])
        req["profileTypeID"] = "process_cpu:samples:count:cpu:nanoseconds"
        status, out = self.call("SelectMergeStacktraces", req)
        self.assertEqual(flame_total(out["flamegraph"])[0], 47)
        # A regex matcher across both label sets.
        req["labelSelector"] = '{service_name=~"sh.*"}'
        status, out = self.call("SelectMergeStacktraces", req)
        self.assertEqual(flame_total(out["flamegraph"])[0], 51)

    def test_merge_stacktraces_tree_format(self):
        """PROFILE_FORMAT_TREE (6 = 2) answers Pyroscope's tree bytes in field 2, with the
        flame graph's nodes and totals."""
        sel = '{service_name="shop",env="prod"}'
        typ = "process_cpu:samples:count:cpu:nanoseconds"
        base = _field(1, typ.encode()) + _field(2, sel.encode()) + _field(3, (NOW - 60) * 1000)
        status, body = self.call("SelectMergeStacktraces", base + _field(6, 2), codec="proto")
        self.assertEqual(status, 200, body)
        resp = dict((f, bytes(v)) for f, w, v in fields(body))
        self.assertNotIn(1, resp)  # the tree alone, as Pyroscope answers
        tree = decode_tree(resp[2])
        self.assertEqual(tree, {"thread:MainThread;app.main;app.work": 35, "thread:MainThread;app.main": 12})
        status, body = self.call("SelectMergeStacktraces", base, codec="proto")
        fg = dict((f, v) for f, w, v in fields(body))[1]
        self.assertEqual(sum(tree.values()), dict((f, v) for f, w, v in fields(fg) if w == 0)[3])
        # The JSON codec carries the same bytes in base64.
        req = {"profileTypeID": typ, "labelSelector": sel, "start": str((NOW - 60) * 1000),
               "format": "PROFILE_FORMAT_TREE"}
        status, out = self.call("SelectMergeStacktraces", req)
        self.assertEqual(status, 200, out)
        self.assertEqual(base64.b64decode(out["tree"]), resp[2])
        # max_nodes folds the smallest into "other", the total kept.
        status, body = self.call("SelectMergeStacktraces", base + _field(5, 3) + _field(6, 2), codec="proto")
        small = decode_tree(dict((f, bytes(v)) for f, w, v in fields(body))[2])
        self.assertEqual(sum(small.values()), 47)
        self.assertIn("thread:MainThread;app.main;other", small)
        # Nothing selected: no bytes (Pyroscope's empty tree).
        status, body = self.call("SelectMergeStacktraces", _field(1, typ.encode()) +
                                 _field(2, b'{service_name="none"}') + _field(6, 2), codec="proto")
        self.assertEqual(status, 200)
        self.assertEqual(dict((f, bytes(v)) for f, w, v in fields(body)).get(2, b""), b"")

    def test_binary_codec_equals_json(self):
        sel = '{service_name="shop",env="prod"}'
        typ = "process_cpu:samples:count:cpu:nanoseconds"
        binreq = _field(1, typ.encode()) + _field(2, sel.encode()) + _field(3, (NOW - 60) * 1000)
        status, body = self.call("SelectMergeStacktraces", binreq, codec="proto")
        self.assertEqual(status, 200)
        fg = dict((f, v) for f, w, v in fields(body))[1]
        total = dict((f, v) for f, w, v in fields(fg) if w == 0)[3]
        self.assertEqual(total, 47)
        status, body = self.call("SelectMergeProfile", binreq, codec="proto")
        self.assertEqual(status, 200)
        strings = [bytes(v) for f, w, v in fields(body) if f == 6]
        self.assertEqual(strings[0], b"")
        self.assertIn(b"app.work", strings)

    def test_select_series_and_diff(self):
        req = {"profileTypeID": "process_cpu:samples:count:cpu:nanoseconds",
               "labelSelector": '{service_name="shop"}', "start": str((NOW - 60) * 1000),
               "end": str((NOW + 60) * 1000), "step": 10, "groupBy": ["env"]}
        status, out = self.call("SelectSeries", req)
        self.assertEqual(status, 200, out)
        sums = {s["labels"][0]["value"]: sum(p["value"] for p in s["points"]) for s in out["series"]}
        self.assertEqual(sums, {"prod": 47, "dev": 4})
        left = {"profileTypeID": req["profileTypeID"], "labelSelector": '{service_name="shop",env="prod"}',
                "start": req["start"], "end": req["end"]}
        right = dict(left, labelSelector='{service_name="shop",env="dev"}')
        status, out = self.call("Diff", {"left": left, "right": right})
        self.assertEqual(status, 200, out)
        fg = out["flamegraph"]
        self.assertEqual((int(fg["leftTicks"]), int(fg["rightTicks"])), (47, 4))
        self.assertTrue(all(len(lv["values"]) % 7 == 0 for lv in fg["levels"]))

    def test_errors_are_connect_errors(self):
        status, out = self.call("NoSuchMethod", {})
        self.assertEqual((status, out["code"]), (404, "not_found"))
        status, out = self.call("SelectMergeStacktraces", {"labelSelector": "{env=~\"(\"}"})
        self.assertEqual((status, out["code"]), (400, "invalid_argument"))
        status, body, _ = self.c.request("POST", "/querier.v1.QuerierService/ProfileTypes", b"{", JSON)
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(body)["code"], "invalid_argument")
        status, _, _ = self.c.request("GET", "/querier.v1.QuerierService/ProfileTypes")
        self.assertEqual(status, 405)


def quoted(v):
    """A selector's double-quoted value: \\ \" \n \r \t escaped."""
    return '"%s"' % v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") \
        .replace("\r", "\\r").replace("\t", "\\t")


class AnyLabelValue(CollectorTest):
    """A label value holds anything Pyroscope stores (, { } = " \\, newlines, spaces at either
    end) and comes back exactly from every answer: the querier's LabelValues, Series,
    SelectMergeStacktraces and SelectSeries, /render, /api/apps and the index's links."""
    V = ' a,b {c} = "d" \\e\nf\tg '
    STACKS = {"thread:MainThread;app.main (app.py:3)": 42}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        labels = [("__name__", "process_cpu"), ("service_name", "quoted"), ("env", cls.V), ("plain", "p")]
        status, body, _ = cls.c.request("POST", "/push.v1.PusherService/Push",
                                        push_request([(labels, [timed_pprof(cls.STACKS)])]), PROTO)
        assert status == 200, body

    def call(self, method, req):
        status, body, _ = self.c.request("POST", "/querier.v1.QuerierService/" + method,
                                         json.dumps(req).encode(), JSON)
        self.assertEqual(status, 200, body)
        return json.loads(body)

    def test_querier(self):
        out = self.call("LabelValues", {"name": "env", "matchers": ['{service_name="quoted"}']})
        self.assertEqual(out["names"], [self.V])
        out = self.call("Series", {"matchers": ['{service_name="quoted"}'], "labelNames": ["env", "plain"]})
        self.assertEqual(out["labelsSet"], [{"labels": [{"name": "env", "value": self.V},
                                                        {"name": "plain", "value": "p"}]}])
        req = {"profileTypeID": "process_cpu:samples:count:cpu:nanoseconds",
               "labelSelector": '{service_name="quoted",env=%s}' % quoted(self.V),
               "start": str((NOW - 60) * 1000), "end": str((NOW + 60) * 1000)}
        self.assertEqual(flame_total(self.call("SelectMergeStacktraces", req)["flamegraph"])[0], 42)
        req["labelSelector"] = '{service_name="quoted",env=~".*\\\\e\nf.*"}'
        self.assertEqual(flame_total(self.call("SelectMergeStacktraces", req)["flamegraph"])[0], 42)
        req["labelSelector"] = '{service_name="quoted",env=" a,b"}'
        self.assertEqual(self.call("SelectMergeStacktraces", req)["flamegraph"].get("total", "0"), "0")
        req["labelSelector"] = '{service_name="quoted"}'
        out = self.call("SelectSeries", dict(req, step=60, groupBy=["env"]))
        self.assertEqual([s["labels"] for s in out["series"]], [[{"name": "env", "value": self.V}]])

    def test_render_and_pages(self):
        sel = "quoted.cpu{env=%s}" % quoted(self.V)
        status, body, _ = self.c.get("/render?" + urllib.parse.urlencode(
            {"query": sel, "from": NOW - 60, "until": NOW + 60, "format": "folded"}))
        self.assertEqual(status, 200, body)
        self.assertEqual(sum(parse_folded(body).values()), 42)
        apps = json.loads(self.c.get("/api/apps")[1])["apps"]
        envs = [s["labels"].get("env") for a in apps if a["name"] == "quoted.cpu" for s in a["series"]]
        self.assertEqual(envs, [self.V])
        page = self.c.get("/?app=quoted.cpu&from=%d&until=%d" % (NOW - 60, NOW + 60))[1].decode()
        self.assertNotIn('"d"', page)  # the value's quotes are escaped in the page
        links = [html.unescape(h) for h in re.findall(r'href="(/render\?[^"]*format=folded[^"]*)"', page)]
        self.assertTrue(links, page)
        for link in links:
            status, body, _ = self.c.get(link)
            self.assertEqual(status, 200, link)
            self.assertEqual(sum(parse_folded(body).values()), 42, link)


if __name__ == "__main__":
    collector_path()
    unittest.main(argv=sys.argv[:1], verbosity=2)
