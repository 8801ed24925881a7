"""Integration: durability and shutdown. kill -9 during ingest loses nothing that was
acknowledged; SIGTERM lets uploads in flight finish and exits 0; retention deletes old rows."""
import http.client
import json
import os
import signal
import sys
import threading
import time
import unittest

from harness import Collector, parse_folded

# Recent enough that the default 7-day retention never deletes test data under our feet.
T0 = int(time.time()) // 10 * 10 - 3600


def sender(c, worker, acked, stop, lock):
    """Sends uploads whose single stack names the upload; records the acknowledged ones."""
    i = 0
    while not stop.is_set():
        stack = "w%d;upload%d" % (worker, i)
        try:
            status, _, _ = c.ingest("dur.cpu{w=%d}" % worker, "%s %d\n" % (stack, i + 1),
                                    frm=T0 + i, until=T0 + i + 1, timeout=10)
        except (OSError, http.client.HTTPException):
            return  # the collector is gone: this upload was never acknowledged
        if status == 200:
            with lock:
                acked[stack] = i + 1
        i += 1


class Durability(unittest.TestCase):
    def run_senders_then(self, c, action, n=8, seconds=1.5):
        acked, stop, lock = {}, threading.Event(), threading.Lock()
        threads = [threading.Thread(target=sender, args=(c, w, acked, stop, lock))
                   for w in range(n)]
        for t in threads:
            t.start()
        time.sleep(seconds)
        action()
        stop.set()
        for t in threads:
            t.join(30)
        with lock:
            return dict(acked)

    def test_kill9_during_ingest_loses_nothing_acknowledged(self):
        for sync in ("full", "normal"):
            c = Collector("--sync", sync)
            acked = self.run_senders_then(c, c.kill9)
            self.assertGreater(len(acked), 20, "too few uploads to mean anything")
            print("%s: %d uploads acknowledged before kill -9" % (sync, len(acked)),
                  file=sys.stderr)
            c2 = Collector("--sync", sync, db=c.db, workdir=c.workdir)
            got = parse_folded(c2.render("dur.cpu", T0, T0 + 10**6))
            missing = {s: n for s, n in acked.items() if got.get(s) != n}
            self.assertEqual(missing, {}, "acknowledged uploads lost after kill -9 (%s)" % sync)
            # Anything beyond the acknowledged set was committed but not yet answered.
            self.assertTrue(set(acked) <= set(got))
            c2.__exit__(None, None, None)

    def test_sigterm_finishes_in_flight_and_exits_0(self):
        c = Collector()
        rc = []
        acked = self.run_senders_then(c, lambda: rc.append(c.stop(signal.SIGTERM)))
        self.assertEqual(rc, [0])
        self.assertIn("stopped", c.stderr())
        # A clean close checkpoints the WAL away.
        self.assertFalse(os.path.exists(c.db + "-wal") and os.path.getsize(c.db + "-wal") > 0)
        c2 = Collector(db=c.db, workdir=c.workdir)
        got = parse_folded(c2.render("dur.cpu", T0, T0 + 10**6))
        self.assertEqual({s: got.get(s) for s in acked}, acked)
        c2.__exit__(None, None, None)


class Retention(unittest.TestCase):
    def test_old_uploads_are_deleted(self):
        now = int(time.time())
        with Collector("--retention", "1h", "--retention-interval", "1s") as c:
            for i in range(20):
                self.assertEqual(c.ingest("ret.cpu{age=old}", "old %d\n" % (i + 1),
                                          frm=now - 7200 + i, until=now - 7190 + i)[0], 200)
            self.assertEqual(c.ingest("ret.cpu{age=new}", "new 5\n", frm=now - 20,
                                      until=now - 10)[0], 200)
            deadline = time.time() + 10
            while time.time() < deadline:
                got = parse_folded(c.render("ret.cpu", now - 86400, now + 60))
                if "old" not in got:
                    break
                time.sleep(0.2)
            self.assertEqual(got, {"new": 5})
            apps = json.loads(c.get("/api/apps")[1])["apps"]
            series = [s["labels"] for a in apps if a["name"] == "ret.cpu" for s in a["series"]]
            self.assertEqual(series, [{"age": "new"}])


class CommandLine(unittest.TestCase):
    def run_cli(self, *args):
        import subprocess
        import tempfile
        from harness import collector_path
        # In a directory of its own: a database named on the command line is created there.
        with tempfile.TemporaryDirectory(prefix="pa-coll-cli-") as cwd:
            return subprocess.run([collector_path()] + list(args), capture_output=True,
                                  timeout=20, cwd=cwd)

    def test_bad_arguments_exit_2_with_a_message(self):
        for args, word in [((), b"--db"), (("--db", "x.db", "--retention", "7 days"),
                                           b"--retention"),
                           (("--db", "x.db", "--threads", "0"), b"--threads"),
                           (("--db", "x.db", "--max-body", "lots"), b"--max-body"),
                           (("--db", "x.db", "--listen", "nohostport"), b"--listen"),
                           (("--db", "x.db", "--bogus"), b"--bogus"),
                           (("--db", "x.db", "--sync", "sometimes"), b"--sync")]:
            r = self.run_cli(*args)
            self.assertNotEqual(r.returncode, 0, args)
            self.assertIn(word, r.stderr, args)

    def test_version_names_version_and_commit(self):
        # The form of `pyagent --version`, exit status 0, no database needed.
        r = self.run_cli("--version")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout.decode().strip(),
                         r"^pyagent-collector \d+\.\d+\.\d+ \(([0-9a-f]{7,}|unknown)\)$")

    def test_help_and_unusable_db(self):
        r = self.run_cli("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn(b"--retention", r.stdout)
        r = self.run_cli("--db", "/nonexistent-dir/x.db", "--listen", "127.0.0.1:0")
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"nonexistent-dir", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
