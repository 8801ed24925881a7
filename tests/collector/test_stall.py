"""Integration: a collector that does not get to a connection for more than a minute (its only
HTTP thread in a long gunzip, or the whole process stopped or starved on a loaded machine)
still answers the request that connection sent meanwhile, and still cuts a client that sends
nothing, at its own deadline (the stall not counted in it). CI saw the first fail: a request's first line sent during a
70 s gunzip, its connection closed with no answer when the thread came back to it, because
libmicrohttpd's own idle timeout (60 s then) counted the time the collector was busy as the
client's idleness (docs/collector-api.md, "How the deadlines work").

The stall is made with SIGSTOP and SIGCONT: the collector, all of it, gets to nothing for
STALL seconds, as a starved process does."""
import os
import signal
import socket
import sys
import time
import unittest

from harness import Collector, finish_request, read_to_end

T0 = int(time.time()) // 10 * 10 - 3600
STALL = 62  # seconds: past libmicrohttpd's 60 s idle timeout, which the collector used
HEADER = 3  # --header-timeout, seconds


class StalledCollector(unittest.TestCase):
    def test_requests_sent_during_a_long_stall_are_answered(self):
        with Collector("--threads", "1", "--header-timeout", "%ds" % HEADER,
                       "--body-timeout", "%ds" % HEADER) as c:
            body = b"stalled;sent 1\n"
            # One connection sends a whole request during the stall, one only its first line
            # (the rest comes 1 s after the stall, within its header deadline, the stall not
            # counted), one nothing at all.
            whole = socket.create_connection(("127.0.0.1", c.port), timeout=300)
            half = socket.create_connection(("127.0.0.1", c.port), timeout=300)
            silent = socket.create_connection(("127.0.0.1", c.port), timeout=300)
            time.sleep(0.5)  # accepted, each with its header deadline running
            os.kill(c.proc.pid, signal.SIGSTOP)
            try:
                whole.sendall(("POST /ingest?name=whole.cpu&format=folded&from=%d&until=%d HTTP/1.1\r\n"
                               "Host: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
                               % (T0, T0 + 10, len(body))).encode() + body)
                half.sendall(("POST /ingest?name=half.cpu&format=folded&from=%d&until=%d HTTP/1.1\r\n"
                              % (T0, T0 + 10)).encode())
                time.sleep(STALL)
            finally:
                os.kill(c.proc.pid, signal.SIGCONT)
            t = time.monotonic()
            time.sleep(1.0)
            answers = {"half": finish_request(half, body), "whole": read_to_end(whole)}
            # The silent one: cut at its header deadline, the stall not counted (what was left
            # of it when the collector stopped, about HEADER - 0.5 s, runs after the stall).
            silent.settimeout(HEADER + 5)
            try:
                cut = silent.recv(1) == b""
            except (ConnectionResetError, socket.timeout):
                cut = True
            cut_s = time.monotonic() - t
            for s in (whole, half, silent):
                s.close()
            print("  after a %d s stall: whole %r, half %r; the silent one %s after %.1f s"
                  % (STALL, answers["whole"][:40], answers["half"][:40],
                     "cut" if cut else "still open", cut_s), file=sys.stderr)
            for name, a in answers.items():
                self.assertTrue(a.startswith(b"HTTP/1.1 200 "), "%s: %r" % (name, a[:200]))
            apps = c.get("/api/apps")[1]
            self.assertIn(b'"whole.cpu"', apps)
            self.assertIn(b'"half.cpu"', apps)
            self.assertTrue(cut, "a connection that sent nothing was kept past its deadline")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[2:], verbosity=2)  # argv[1]: the collector
