"""Integration: hostile uploads. Each gets a 4xx with a one-line message, and the collector
keeps serving (checked after every case)."""
import gzip
import sys
import time
import unittest

from harness import Collector, gz, parse_folded

# Recent enough that the default 7-day retention never deletes test data under our feet.
T0 = int(time.time()) // 10 * 10 - 3600


class Hostile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Collector("--max-body", "1M", "--max-decompressed", "4M")

    @classmethod
    def tearDownClass(cls):
        cls.c.__exit__(None, None, None)

    def refused(self, status_wanted, resp, words=()):
        status, body, _ = resp
        self.assertEqual(status, status_wanted, body[:300])
        text = body.decode()
        self.assertTrue(text.endswith("\n") and text.count("\n") == 1, repr(text))
        for w in words:
            self.assertIn(w, text)
        # Still serving, and still answering correctly.
        self.assertEqual(self.c.get("/healthz")[0], 200)
        self.assertEqual(self.c.ingest("alive.cpu", "ok 1\n", frm=T0, until=T0 + 1)[0], 200)

    def test_garbage_bodies(self):
        for body in [b"\x00\x01\x02\x03garbage", b"no count here\n", b"a;b;c notanumber\n",
                     bytes(range(256)) * 10]:
            self.refused(422, self.c.ingest("g.cpu", body, frm=T0, until=T0 + 10))
        self.refused(422, self.c.ingest("g.cpu", b"\x0a\x05junk!\xff\xff", fmt="pprof",
                                        frm=T0, until=T0 + 10))

    def test_truncated_gzip(self):
        data = gz("thread:main;f (a.py:1) 5\n" * 200)
        for cut in (2, 10, len(data) // 2, len(data) - 4):
            self.refused(422, self.c.ingest("t.cpu", data[:cut], frm=T0, until=T0 + 10,
                                            headers={"Content-Encoding": "gzip"}), ["gzip"])
            self.refused(422, self.c.ingest("t.cpu", data[:cut], fmt="pprof", frm=T0,
                                            until=T0 + 10), ["gzip"])

    def test_gzip_bomb(self):
        bomb = gzip.compress(b"\0" * (64 << 20), 9)  # 64 MB of zeros in about 64 KB
        self.assertLess(len(bomb), 1 << 20)
        self.refused(413, self.c.ingest("b.cpu", bomb, frm=T0, until=T0 + 10,
                                        headers={"Content-Encoding": "gzip"}), ["limit"])
        self.refused(413, self.c.ingest("b.cpu", bomb, fmt="pprof", frm=T0, until=T0 + 10),
                     ["limit"])

    def test_body_too_large(self):
        self.refused(413, self.c.ingest("big.cpu", b"a 1\n" * (300 << 10), frm=T0,
                                        until=T0 + 10), ["limit"])

    def test_huge_lines_are_dropped_and_counted(self):
        body = "keep;me 3\n" + "x" * 70000 + " 5\n" + "also;kept 4\n"
        status, text, _ = self.c.ingest("huge.cpu", body, frm=T0, until=T0 + 10)
        self.assertEqual(status, 200, text)
        self.assertIn(b"dropped 1 line", text)
        got = parse_folded(self.c.render("huge.cpu", T0, T0 + 10))
        self.assertEqual(got, {"keep;me": 3, "also;kept": 4})

    def test_bad_names_and_labels(self):
        too_many = "many.cpu{" + ",".join("k%d=v" % i for i in range(31)) + "}"
        for name, word in [("", "missing"), ("has space.cpu", "application name"),
                           ("a.cpu{k=v", "'}'"), ("a.cpu{k}", "key=value"),
                           ("a.cpu{bad-key=v}", "label name"), ("a.cpu{k=v,k=w}", "twice"),
                           ("a.cpu{k=a\x01b}", "value"), (too_many, "30"),
                           ("x" * 300 + ".cpu", "longer")]:
            self.refused(400, self.c.ingest(name, "a 1\n", frm=T0, until=T0 + 10), [word])

    def test_bad_parameters(self):
        self.refused(400, self.c.ingest("p.cpu", "a 1\n", frm="yesterday", until=T0))
        self.refused(400, self.c.ingest("p.cpu", "a 1\n", frm=T0 + 10, until=T0))
        self.refused(400, self.c.ingest("p.cpu", "a 1\n", frm=T0, until=T0 + 1,
                                        sampleRate="-4"))
        self.refused(415, self.c.ingest("p.cpu", "a 1\n", fmt="jfr", frm=T0, until=T0 + 1))
        self.refused(415, self.c.ingest("p.cpu", "a 1\n", frm=T0, until=T0 + 1,
                                        headers={"Content-Encoding": "br"}))
        self.refused(422, self.c.ingest("p.cpu", "a 1\n", frm=T0, until=T0 + 1,
                                        headers={"Content-Type":
                                                 "multipart/form-data; boundary=zz"}))

    def test_wrong_method_path_and_queries(self):
        self.refused(405, self.c.get("/ingest"))
        self.refused(405, self.c.request("POST", "/render", body=b"x"))
        self.refused(404, self.c.get("/etc/passwd"))
        self.refused(400, self.c.get("/render?query=a%20b.cpu"))
        self.refused(400, self.c.get("/render?query=a.cpu%7Bk%3D~%22(%22%7D"))
        self.refused(400, self.c.get("/render?query=a.cpu&from=never"))
        self.refused(400, self.c.get("/heatmap?query=a.cpu&from=never"))
        self.refused(404, self.c.get("/heatmap/1/2/a.cpu/../../etc/passwd"))


class Auth(unittest.TestCase):
    def test_token_required_when_set(self):
        with Collector("--token", "s3cret") as c:
            status, body, headers = c.ingest("a.cpu", "a 1\n")
            self.assertEqual(status, 401, body)
            self.assertIn("WWW-Authenticate", headers)
            self.assertEqual(c.ingest("a.cpu", "a 1\n",
                                      headers={"Authorization": "Bearer wrong"})[0], 401)
            self.assertEqual(c.ingest("a.cpu", "a 1\n",
                                      headers={"Authorization": "Bearer s3cret"})[0], 200)
            # Basic with the token as password: Pyroscope clients and browsers.
            self.assertEqual(c.get("/api/apps",
                                   headers={"Authorization": "Basic dXNlcjpzM2NyZXQ="})[0], 200)
            self.assertEqual(c.get("/api/apps")[0], 401)
            self.assertEqual(c.get("/healthz")[0], 200)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
