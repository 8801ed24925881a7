"""Integration: the same bodies sent to the fake Grafana Pyroscope (tests/uploader/pyroscope.py,
Pyroscope's ingest rules as read in its source) and to a real pyagent-collector, started with
its defaults, must be answered alike, body for body and status for status (the same 2xx or
4xx), over all three protocols (Push, /ingest, OTLP profiles): valid profiles, invalid UTF-8,
duplicate, invalid and too many labels, too old and too new, empty, malformed protobuf,
unknown types, folded text in dialects other than flamegraph.pl's. The only allowed
differences are the deliberate ones docs/continuous.md lists in its Grafana table ("The same,
and what differs"); each is named below by its row there, must still be a difference (an
exception that no longer differs is a stale line in the docs), and must differ the way the row
says (the collector stores what Pyroscope refuses, or the other way round)."""
import os
import sys
import time
import unittest
import urllib.parse
import urllib.request
import uuid

from harness import Collector, CollectorTest, _field, collector_path, folded, gz, parse_folded, pprof
from test_protocols import PROTO, label, otlp_request, push_request, timed_pprof

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "uploader"))
from pyroscope import FakePyroscope  # noqa: E402

NOW = int(time.time())
OLD = NOW - 7200  # outside Pyroscope's window (reject_older_than, 1 h)
AHEAD = NOW + 1200  # outside it too (reject_newer_than, 10 min)
STACKS = {"thread:MainThread;app.main (app.py:3);app.work (app.py:9)": 30,
          "thread:MainThread;app.main (app.py:3)": 12}
OTLP = {"Content-Type": "application/x-protobuf"}
CPU = [("__name__", "process_cpu"), ("service_name", "diff")]

# Deliberate differences: body name -> (the first cell of its row in docs/continuous.md's
# Grafana table, whether our collector accepts it, whether Pyroscope does).
DIFFERENCES = {}


def push_raw(labels, raws):
    """A PushRequest whose label names and values are bytes as given (invalid UTF-8 too)."""
    body = b"".join(_field(1, _field(1, k) + _field(2, v)) for k, v in labels)
    body += b"".join(_field(2, _field(1, r) + _field(2, uuid.uuid4().hex.encode())) for r in raws)
    return _field(1, body)


def pprof_with_string(s):
    """A timed pprof whose frame names include s (bytes), as its own string."""
    return timed_pprof(STACKS) + _field(6, s)


def ingest(name, fmt, body, frm=NOW, until=None):
    q = {"name": name, "format": fmt, "spyName": "test", "from": str(frm), "until": str(until or frm + 10)}
    return ("/ingest?" + urllib.parse.urlencode(q), {"Content-Type": "application/octet-stream"}, body)


def push(series):
    return ("/push.v1.PusherService/Push", PROTO, push_request(series))


def bodies():
    """name -> (path with query, headers, body)."""
    good = gz(timed_pprof(STACKS))
    return {
        "push: valid": push([(CPU, [good])]),
        "push: valid, plain pprof": push([(CPU, [timed_pprof(STACKS)])]),
        "push: pprof without time_nanos": push([(CPU, [gz(pprof(STACKS))])]),
        "push: wall profile": push([([("__name__", "wall"), ("service_name", "diff")], [good])]),
        "push: user labels": push([(CPU + [("env", "prod"), ("my_tag", "x")], [good])]),
        "push: no series": ("/push.v1.PusherService/Push", PROTO, b""),
        "push: malformed protobuf": ("/push.v1.PusherService/Push", PROTO, b"\x0a\xff\xff\xff"),
        "push: not a pprof": push([(CPU, [b"\x1f\x8bgarbage"])]),
        "push: invalid UTF-8 label value": ("/push.v1.PusherService/Push", PROTO,
                                            push_raw([(b"__name__", b"process_cpu"), (b"service_name", b"diff"),
                                                      (b"env", b"pr\xffod")], [good])),
        "push: invalid UTF-8 label name": ("/push.v1.PusherService/Push", PROTO,
                                           push_raw([(b"__name__", b"process_cpu"), (b"service_name", b"diff"),
                                                     (b"e\xffnv", b"prod")], [good])),
        "push: invalid UTF-8 frame name": push([(CPU, [gz(pprof_with_string(b"work\xff"))])]),
        "push: duplicate label": push([(CPU + [("env", "a"), ("env", "b")], [good])]),
        "push: label name starting with a digit": push([(CPU + [("9lives", "x")], [good])]),
        "push: 31 labels": push([(CPU + [("l%02d" % i, "v") for i in range(29)], [good])]),
        "push: label value of 2049 bytes": push([(CPU + [("k", "v" * 2049)], [good])]),
        "push: no service_name": push([([("__name__", "process_cpu")], [good])]),
        "push: no __name__": push([([("service_name", "diff")], [good])]),
        "push: profile two hours old": push([(CPU, [gz(timed_pprof(STACKS, t=OLD))])]),
        "push: profile 20 minutes ahead": push([(CPU, [gz(timed_pprof(STACKS, t=AHEAD))])]),
        "push: profile 59 minutes old": push([(CPU, [gz(timed_pprof(STACKS, t=NOW - 3540))])]),
        "push: label value with a comma": push([(CPU + [("env", "a,b")], [good])]),
        "push: label value with a brace": push([(CPU + [("env", "a}b")], [good])]),
        "push: label value with = \" \\ and a newline": push([(CPU + [("env", 'a="b"\\c\nd')], [good])]),
        "push: label value with spaces at its ends": push([(CPU + [("env", " a ")], [good])]),
        "otlp: attribute value with a comma": ("/v1development/profiles", OTLP,
                                               otlp_request(STACKS, service="diff", attrs=[("host.name", "a,b")])),
        "push: text/plain": ("/push.v1.PusherService/Push", {"Content-Type": "text/plain"}, b"x"),
        "ingest: valid pprof": ingest("diff{env=prod}", "pprof", good),
        "ingest: valid folded": ingest("diff.cpu{env=prod}", "folded", folded(STACKS).encode()),
        "ingest: folded with a # header": ingest("diff.cpu", "folded",
                                                 b"# pyagent 1 rate=100\n" + folded(STACKS).encode()),
        "ingest: folded with invalid UTF-8": ingest("diff.cpu", "folded", b"a;b\xff 3\n"),
        "ingest: folded of an unknown type": ingest("diff.bogus", "folded", folded(STACKS).encode()),
        "ingest: folded gil": ingest("diff.gil", "folded", folded(STACKS).encode()),
        "ingest: folded wall": ingest("diff.wall", "folded", folded(STACKS).encode()),
        "ingest: folded without a type": ingest("diff", "folded", folded(STACKS).encode()),
        "ingest: pprof not a pprof": ingest("diff", "pprof", b"\x1f\x8bgarbage"),
        "ingest: pprof with invalid UTF-8": ingest("diff", "pprof", gz(pprof_with_string(b"work\xff"))),
        "ingest: label name starting with a digit": ingest("diff{9lives=x}", "pprof", good),
        "ingest: no service name": ingest("{env=prod}", "pprof", good),
        "ingest: pprof two hours old": ingest("diff", "pprof", gz(pprof(STACKS)), frm=OLD),
        "ingest: folded two hours old": ingest("diff.cpu", "folded", folded(STACKS).encode(), frm=OLD),
        "ingest: pprof 20 minutes ahead": ingest("diff", "pprof", gz(pprof(STACKS)), frm=AHEAD),
        "ingest: pprof whose own time is two hours old": ingest("diff", "pprof", gz(timed_pprof(STACKS, t=OLD))),
        "ingest: folded 20 minutes ahead": ingest("diff.cpu", "folded", folded(STACKS).encode(), frm=AHEAD),
        "otlp: valid": ("/v1development/profiles", OTLP, otlp_request(STACKS, service="diff")),
        "otlp: resource attributes": ("/v1development/profiles", OTLP,
                                      otlp_request(STACKS, service="diff", attrs=[("host.name", "web-1")])),
        "otlp: no dictionary": ("/v1development/profiles", OTLP, otlp_request(STACKS, dictionary=False)),
        "otlp: stack index out of range": ("/v1development/profiles", OTLP,
                                           otlp_request(STACKS, stack_index_shift=50)),
        "otlp: invalid UTF-8 string": ("/v1development/profiles", OTLP, otlp_invalid_utf8()),
            "otlp: profile 20 minutes ahead": ("/v1development/profiles", OTLP, otlp_request(STACKS, t=AHEAD)),
        "otlp: text/plain": ("/v1development/profiles", {"Content-Type": "text/plain"}, b"x"),
    }


def otlp_invalid_utf8():
    """A valid request but for one byte: a frame name's 'q' made 0xff in the string table."""
    body = otlp_request({"thread:Main;app.qork (app.py:3)": 3}, service="diff")
    assert body.count(b"app.qork") == 1
    return body.replace(b"app.qork", b"app.\xffork")


def grafana_rows():
    """The first cells of the rows of docs/continuous.md's table "The same, and what differs"."""
    with open(os.path.join(ROOT, "docs", "continuous.md"), encoding="utf-8") as f:
        text = f.read()
    table = text.split("**The same, and what differs.**", 1)[1].split("\n\n", 2)[1]
    return {line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ")}


def send(url, path, headers, body):
    rq = urllib.request.Request(url + path, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(rq, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


class Differential(CollectorTest):
    PYROSCOPE_RULES = True  # the collector's defaults

    def test_same_answers_as_pyroscope(self):
        rows = grafana_rows()
        for name, (row, _, _) in DIFFERENCES.items():
            self.assertIn(row, rows, "%s: no row %r in docs/continuous.md's Grafana table" % (name, row))
        fake = FakePyroscope()
        try:
            answers = {}
            for name, (path, headers, body) in bodies().items():
                answers[name] = (send("http://127.0.0.1:%d" % self.c.port, path, headers, body),
                                 send(fake.url(), path, headers, body))
        finally:
            fake.stop()
        bad = []
        for name, (ours, theirs) in answers.items():
            self.assertTrue(ours < 500 and theirs < 500, "%s: a 5xx (ours %d, Pyroscope %d)" % (name, ours, theirs))
            accepted = (200 <= ours < 300, 200 <= theirs < 300)
            print("%-45s collector %d  Pyroscope %d" % (name, ours, theirs))
            if name in DIFFERENCES:
                row, we, they = DIFFERENCES[name]
                if accepted != (we, they):
                    bad.append("%s: documented as a difference (%r: collector %s, Pyroscope %s), got %s/%s"
                               % (name, row, we, they, ours, theirs))
            elif ours != theirs:
                bad.append("%s: the collector answers %d, Pyroscope %d" % (name, ours, theirs))
        # Both kinds of answer occur: a comparison of all-accepted or all-refused shows nothing.
        self.assertTrue(any(a[1] < 300 for a in answers.values()) and any(a[1] >= 400 for a in answers.values()))
        self.assertEqual(bad, [], "\n".join(bad))


class Options(unittest.TestCase):
    """The window and the folded rules are Pyroscope's defaults, each an option."""

    def answer(self, c, path, headers, body):
        status, text, _ = c.request("POST", path, body, headers)
        return status, text.decode("utf-8", "replace")

    def test_reject_older_than(self):
        old_folded = ingest("opt.cpu", "folded", folded(STACKS).encode(), frm=NOW - 3 * 3600)
        with Collector(pyroscope_rules=True) as c:
            status, text = self.answer(c, *old_folded)
            self.assertEqual(status, 400, text)
            self.assertIn("is outside of ingestion window (profile timestamp: ", text)
            self.assertIn("the ingestion window starts at ", text)
            status, text = self.answer(c, *push([(CPU, [gz(timed_pprof(STACKS, t=NOW - 3 * 3600))])]))
            self.assertEqual(status, 400, text)
            self.assertIn('"code":"invalid_argument"', text.replace(" ", ""))
        with Collector("--reject-older-than", "4h", pyroscope_rules=True) as c:
            self.assertEqual(self.answer(c, *old_folded)[0], 200)
            status, text = self.answer(c, *ingest("opt.cpu", "folded", b"a;b 1\n", frm=NOW - 5 * 3600))
            self.assertEqual(status, 400, text)
        with Collector("--reject-older-than", "0", pyroscope_rules=True) as c:
            self.assertEqual(self.answer(c, *ingest("opt.cpu", "folded", b"a;b 1\n", frm=NOW - 30 * 86400))[0], 200)
            # the future has its own bound
            self.assertEqual(self.answer(c, *ingest("opt.cpu", "folded", b"a;b 1\n", frm=NOW + 3600))[0], 400)
        with Collector("--reject-newer-than", "0", pyroscope_rules=True) as c:
            self.assertEqual(self.answer(c, *ingest("opt.cpu", "folded", b"a;b 1\n", frm=NOW + 3600))[0], 200)

    def test_folded_dialects(self):
        header = ingest("opt.cpu", "folded", b"# pyagent 1 rate=100\n" + folded(STACKS).encode())
        gil = ingest("opt.gil", "folded", folded(STACKS).encode())
        itimer = ingest("opt.itimer", "folded", folded(STACKS).encode())
        with Collector(pyroscope_rules=True) as c:
            status, text = self.answer(c, *header)
            self.assertEqual(status, 422, text)
            self.assertIn('strconv.Atoi: parsing "rate=100": invalid syntax', text)
            self.assertIn("--folded-dialects", text)
            status, text = self.answer(c, *gil)
            self.assertEqual(status, 400, text)
            self.assertIn("unknown profile type: gil", text)
            # itimer is Pyroscope's process_cpu: our cpu series
            self.assertEqual(self.answer(c, *itimer)[0], 200)
            self.assertEqual(sum(parse_folded(c.render("opt.cpu", NOW - 60, NOW + 60)).values()), 42)
        with Collector("--folded-dialects", pyroscope_rules=True) as c:
            self.assertEqual(self.answer(c, *header)[0], 200)
            self.assertEqual(self.answer(c, *gil)[0], 200)
            self.assertEqual(sum(parse_folded(c.render("opt.gil", NOW - 60, NOW + 60)).values()), 42)


if __name__ == "__main__":
    collector_path()
    unittest.main(argv=sys.argv[:1], verbosity=2)
