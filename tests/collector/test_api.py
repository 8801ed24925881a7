"""Integration: the ingest API as Grafana Pyroscope defines it, and the query endpoints,
against a real collector. The core property: what goes in is exactly what /render returns."""
import json
import marshal
import random
import re
import sys
import time
import unittest
import urllib.parse
import zlib

from harness import Collector, folded, gz, parse_folded, pprof

# Recent enough that the default 7-day retention never deletes test data under our feet.
T0 = int(time.time()) // 10 * 10 - 3600


class Api(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Collector()

    @classmethod
    def tearDownClass(cls):
        cls.c.__exit__(None, None, None)

    def ok(self, resp):
        status, body, _ = resp
        self.assertEqual(status, 200, body)
        return body

    def test_totals_what_goes_in_comes_out(self):
        rnd = random.Random(5)
        expect_all, expect_web = {}, {}
        for i in range(40):
            host = "web-%d" % (i % 4) if i % 2 else "db-%d" % (i % 3)
            stacks = {}
            for _ in range(rnd.randint(1, 30)):
                depth = rnd.randint(1, 8)
                st = ";".join(["thread:MainThread"] +
                              ["f%d (app.py:%d)" % (rnd.randint(0, 9), rnd.randint(1, 99))
                               for _ in range(depth)])
                stacks[st] = stacks.get(st, 0) + rnd.randint(1, 1000)
            frm = T0 + 10 * i
            self.ok(self.c.ingest("totals.cpu{host=%s,pid=%d}" % (host, i), folded(stacks),
                                  frm=frm, until=frm + 10))
            for s, n in stacks.items():
                expect_all[s] = expect_all.get(s, 0) + n
                if host.startswith("web"):
                    expect_web[s] = expect_web.get(s, 0) + n
        got = parse_folded(self.c.render("totals.cpu", T0, T0 + 400))
        self.assertEqual(got, expect_all)
        got = parse_folded(self.c.render('totals.cpu{host=~"web-.*"}', T0, T0 + 400))
        self.assertEqual(got, expect_web)
        # Back-to-back ranges partition the uploads.
        a = parse_folded(self.c.render("totals.cpu", T0, T0 + 200))
        b = parse_folded(self.c.render("totals.cpu", T0 + 200, T0 + 400))
        self.assertEqual(sum(a.values()) + sum(b.values()), sum(expect_all.values()))

    def test_timestamps_by_digit_count(self):
        for frm, until in [(T0, T0 + 10), (T0 * 1000, (T0 + 10) * 1000),
                           (T0 * 10**6, (T0 + 10) * 10**6), (T0 * 10**9, (T0 + 10) * 10**9)]:
            self.ok(self.c.ingest("digits.cpu", "a;b 1\n", frm=frm, until=until))
        got = parse_folded(self.c.render("digits.cpu", T0, T0 + 10))
        self.assertEqual(got, {"a;b": 4})

    def test_folded_with_content_encoding_gzip(self):
        self.ok(self.c.ingest("gz.cpu", gz("x;y 7\n"), frm=T0, until=T0 + 10,
                              headers={"Content-Encoding": "gzip"}))
        self.assertEqual(parse_folded(self.c.render("gz.cpu", T0, T0 + 10)), {"x;y": 7})
        # Without the header a gzip'd folded body is refused, as by Pyroscope.
        status, body, _ = self.c.ingest("gz.cpu", gz("x;y 7\n"), frm=T0, until=T0 + 10)
        self.assertEqual(status, 422)
        self.assertIn(b"Content-Encoding", body)

    def test_pprof_plain_gzip_and_multipart(self):
        stacks = {"main;work;inner": 11, "main;idle": 3}
        prof = pprof(stacks)
        self.ok(self.c.ingest("pp.cpu{v=plain}", prof, fmt="pprof", frm=T0, until=T0 + 10))
        self.ok(self.c.ingest("pp.cpu{v=gzip}", gz(prof), fmt="pprof", frm=T0, until=T0 + 10))
        boundary = "----pyagent-test-boundary"
        mp = (("--%s\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"profile\""
               "\r\nContent-Type: application/octet-stream\r\n\r\n" % boundary).encode()
              + gz(prof) + ("\r\n--%s--\r\n" % boundary).encode())
        self.ok(self.c.ingest("pp.cpu{v=multipart}", mp, fmt="pprof", frm=T0, until=T0 + 10,
                              headers={"Content-Type":
                                       "multipart/form-data; boundary=%s" % boundary}))
        for v in ("plain", "gzip", "multipart"):
            got = parse_folded(self.c.render("pp.cpu{v=%s}" % v, T0, T0 + 10))
            self.assertEqual(sum(got.values()), 14, v)
            self.assertEqual(sorted(got.values()), [3, 11], v)

    def test_apps_lists_series_and_coverage(self):
        self.ok(self.c.ingest("apps.cpu{b=2,a=1}", "s 1\n", frm=T0, until=T0 + 10))
        self.ok(self.c.ingest("apps.cpu{a=1,b=2}", "s 2\n", frm=T0 + 50, until=T0 + 60))
        self.ok(self.c.ingest("apps.cpu{a=9}", "s 3\n", frm=T0 + 20, until=T0 + 30))
        apps = json.loads(self.ok(self.c.get("/api/apps")))["apps"]
        app = [a for a in apps if a["name"] == "apps.cpu"][0]
        self.assertEqual((app["from"], app["until"], app["samples"], app["uploads"]),
                         (T0, T0 + 60, 6, 3))
        self.assertEqual(sorted((s["labels"] for s in app["series"]), key=str),
                         sorted([{"a": "1", "b": "2"}, {"a": "9"}], key=str))

    def test_reports(self):
        self.ok(self.c.ingest("rep.cpu{k=v}", "thread:main;f (a.py:1) 5\n", frm=T0,
                              until=T0 + 10))
        q = urllib.parse.quote("rep.cpu{k=v}")
        html = self.ok(self.c.get("/render?query=%s&from=%d&until=%d&format=html" %
                                  (q, T0, T0 + 10)))
        self.assertIn(b"<html", html.lower())
        data = json.loads(self.ok(self.c.get("/render?query=%s&from=%d&until=%d&format=json" %
                                             (q, T0, T0 + 10))))
        self.assertEqual(data["total"], 5)
        diff = self.ok(self.c.get("/diff?query=%s&leftFrom=%d&leftUntil=%d&rightFrom=%d"
                                  "&rightUntil=%d" % (q, T0 - 10, T0, T0, T0 + 10)))
        self.assertIn(b"<html", diff.lower())
        status, _, headers = self.c.get("/heatmap?query=%s&from=%d&until=%d" %
                                        (q, T0, T0 + 10))
        self.assertEqual(status, 302)
        self.assertTrue(headers["Location"].startswith("/heatmap/%d/%d/" % (T0, T0 + 10)))
        status, _, _ = self.c.get("/render?query=%s&from=%d&until=%d&format=bogus" %
                                  (q, T0, T0 + 10))
        self.assertEqual(status, 400)

    def test_render_cpython_formats_and_no_source_read(self):
        self.ok(self.c.ingest("cp.cpu", "thread:main;f (/etc/passwd:1);g (a.py:2) 5\n", frm=T0,
                              until=T0 + 10))
        base = "/render?query=cp.cpu&from=%d&until=%d&format=" % (T0, T0 + 10)
        stats = marshal.loads(self.ok(self.c.get(base + "pstats")))
        self.assertEqual(stats[("a.py", 2, "g")][:2], (5, 5))
        self.assertEqual(stats[("a.py", 2, "g")][4], {("/etc/passwd", 1, "f"): 5})
        recs = [json.loads(l) for l in self.ok(self.c.get(base + "jsonl")).splitlines()]
        self.assertEqual((recs[0]["type"], recs[-1]["type"], recs[-1]["samples_total"]),
                         ("meta", "end", 5))
        html = self.ok(self.c.get(base + "html")).decode()
        self.assertIn('id="source-data">{}<', html, "a query never reads the files it names")

    def test_render_capture_is_the_binary_capture_to_download(self):
        self.ok(self.c.ingest("cap.cpu", "thread:main;f (a.py:1);g (a.py:2) 5\n", frm=T0,
                              until=T0 + 10))
        status, body, headers = self.c.get("/render?query=cap.cpu&from=%d&until=%d&format=capture"
                                           % (T0, T0 + 10))
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["Content-Type"], "application/octet-stream")
        self.assertIn('filename="profile.pyacap"', headers["Content-Disposition"])
        # The header (docs/formats.md, "Binary capture"): magic, version 1, zlib, body length.
        self.assertEqual(body[:11], b"\x89PYACAP\n\x01\x00\x01")
        length, shift, i = 0, 0, 11
        while True:
            length |= (body[i] & 0x7F) << shift
            shift += 7
            i += 1
            if body[i - 1] < 0x80:
                break
        raw = zlib.decompress(body[i:])
        self.assertEqual(len(raw), length)
        for name in (b"a.py", b"thread:main", b"f", b"g"):
            self.assertIn(name, raw)

    def test_heatmap_pages_never_read_files_uploads_name(self):
        self.ok(self.c.ingest("hm.cpu", "thread:main;peek (/etc/passwd:1) 9\n"
                              "thread:main;f (app.py:3) 2\n", frm=T0, until=T0 + 10))
        status, _, headers = self.c.get("/heatmap?query=hm.cpu&from=%d&until=%d" %
                                        (T0, T0 + 10))
        self.assertEqual(status, 302)
        index = self.ok(self.c.get(headers["Location"])).decode()
        pages = set(re.findall(r'href="(file-\d+\.html)', index))
        self.assertTrue(pages, index[:500])
        base = headers["Location"].rsplit("/", 1)[0]
        for page in pages:
            text = self.ok(self.c.get(base + "/" + page)).decode()
            self.assertNotIn("root:x:0:0", text)
        self.assertEqual(self.c.get(base + "/..%2F..%2Fetc%2Fpasswd")[0], 404)

    def test_index_escapes_what_uploads_say(self):
        self.ok(self.c.ingest("esc.cpu{x=<script>alert(1)</script>}", "a 1\n", frm=T0,
                              until=T0 + 10))
        page = self.ok(self.c.get("/")).decode()
        self.assertIn("esc.cpu", page)
        page = self.ok(self.c.get("/?app=esc.cpu&from=%d&until=%d" % (T0, T0 + 60))).decode()
        # The page has a script of its own now (the timeline); the upload's must not be one.
        self.assertNotIn("<script>alert", page)
        self.assertEqual(page.count("<script>"), 1, "only the page's own timeline script")
        self.assertIn("&lt;script&gt;", page)

    def test_relative_times(self):
        now = int(time.time())
        self.ok(self.c.ingest("rel.cpu", "r 4\n", frm=now - 5, until=now))
        status, body, _ = self.c.get("/render?query=rel.cpu&from=now-1m&until=now&format=folded")
        self.assertEqual(status, 200)
        self.assertEqual(parse_folded(body), {"r": 4})


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
