"""Integration: strict HTTP framing (RFC 9112 §6). A request whose body length two parsers
could read differently (the basis of request smuggling behind a proxy) gets a 400 and the
connection is closed, so nothing after it on that connection is read as a request."""
import sys
import time
import unittest

from harness import CollectorTest, parse_folded

T0 = int(time.time()) // 10 * 10 - 3600
POST = ("POST /ingest?name=%%s&from=%d&until=%d HTTP/1.1\r\nHost: x\r\n" % (T0, T0 + 10))


def smuggled(tag):
    """A request that, if read, stores an upload in series "smuggled_TAG"."""
    return (POST % ("smuggled_%s.cpu" % tag) + "Content-Length: 4\r\n\r\nz 1\n").encode()



class StrictFraming(CollectorTest):
    def head(self, name, lines):
        return (POST % name + "".join(l + "\r\n" for l in lines) + "\r\n").encode()

    def rejected(self, request, why, tag):
        out, closed = self.c.raw(request + b"a 1\n" + smuggled(tag))
        self.assertTrue(out.startswith(b"HTTP/1.1 400 "), (why, out[:200]))
        self.assertEqual(out.count(b"HTTP/1.1 "), 1, (why, out))
        self.assertTrue(closed, why)
        self.assertIn(b"Connection: close", out, why)
        # Nothing after the rejected request was read as a request.
        status, body, _ = self.c.get("/api/apps")
        self.assertEqual(status, 200)
        self.assertNotIn(b"smuggled_%s." % tag.encode(), body, why)
        self.assertNotIn(b"framing_%s." % tag.encode(), body, why)
        return out

    def test_ambiguous_framings_are_400_and_close(self):
        cases = [
            (["Content-Length: 4", "Content-Length: 40"], "conflicting Content-Length"),
            (["Content-Length: 4", "Content-Length: 4"], "duplicate Content-Length"),
            (["Content-Length: 4", "Transfer-Encoding: chunked"], "CL with TE"),
            (["Transfer-Encoding: chunked", "Content-Length: 4"], "TE with CL"),
            (["Transfer-Encoding: gzip, chunked"], "TE other than chunked"),
            (["Transfer-Encoding: xchunked"], "unknown TE"),
            (["Transfer-Encoding: chunked", "Transfer-Encoding: chunked"], "TE twice"),
            (["X-A: b\rContent-Length: 40", "Content-Length: 4"], "bare CR in a value"),
            (["Content-Length : 4"], "space before the colon"),
            (["X-A: a\x1b[31mb", "Content-Length: 4"], "control character in a value"),
        ]
        for i, (lines, why) in enumerate(cases):
            with self.subTest(why):
                self.rejected(self.head("framing_f%d.cpu" % i, lines), why, "f%d" % i)

    def test_invalid_chunk_sizes_are_refused_and_close(self):
        for i, size in enumerate((b"zz", b"-4", b"0x4", b"ffffffffffffffffff")):
            with self.subTest(size):
                req = self.head("framing.cpu", ["Transfer-Encoding: chunked"])
                out, closed = self.c.raw(req + size + b"\r\na 1\n\r\n0\r\n\r\n" +
                                         smuggled("c%d" % i))
                self.assertRegex(out[:20], rb"HTTP/1.1 4(00|13) ", out[:200])
                self.assertEqual(out.count(b"HTTP/1.1 "), 1, out)
                self.assertTrue(closed)
                self.assertNotIn(b"smuggled_c%d." % i, self.c.get("/api/apps")[1])

    def test_well_formed_framings_still_work(self):
        out, _ = self.c.raw(self.head("plain.cpu", ["Content-Length: 4"]) + b"a 1\n", timeout=1)
        self.assertTrue(out.startswith(b"HTTP/1.1 200 "), out[:200])
        req = self.head("chunked.cpu", ["Transfer-Encoding: Chunked"])
        out, _ = self.c.raw(req + b"4\r\nb 2\n\r\n0\r\n\r\n", timeout=1)
        self.assertTrue(out.startswith(b"HTTP/1.1 200 "), out[:200])
        self.assertEqual(parse_folded(self.c.render("plain.cpu", T0, T0 + 10)), {"a": 1})
        self.assertEqual(parse_folded(self.c.render("chunked.cpu", T0, T0 + 10)), {"b": 2})


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
