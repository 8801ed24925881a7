"""Integration: an upload the collector has stored is never stored again. A client that lost
the answer resends the same upload; with the same id (a Push RawSample's ID, /ingest's
pyagentUploadId, an OTLP profile_id) the collector answers 200 and stores nothing, so what the
agent counted is what the collector holds. Uploads without an id, or with different ids, are
all stored; the ids are pruned by retention like the uploads."""
import http.client
import sqlite3
import sys
import time
import unittest
import uuid

from harness import Collector, CollectorTest, _field, folded, gz, parse_folded
from test_protocols import PROTO, label, otlp_request, render, timed_pprof

NOW = int(time.time())
STACKS = {"thread:MainThread;app.main (app.py:3);app.work (app.py:9)": 30,
          "thread:MainThread;app.main (app.py:3)": 12}
OTLP = {"Content-Type": "application/x-protobuf"}


def push_body(service, samples):
    """A PushRequest of one process_cpu series; samples: [(raw profile, ID or None)]."""
    body = _field(1, label("__name__", "process_cpu")) + _field(1, label("service_name", service))
    for raw, sid in samples:
        body += _field(2, _field(1, raw) + (_field(2, sid.encode()) if sid else b""))
    return _field(1, body)


def otlp_body(service, profile_id):
    """otlp_request's body with field 7 (profile_id) in its one Profile."""
    return otlp_request(STACKS, service=service, profile_id=profile_id)


def times(stacks, n):
    return {k: v * n for k, v in stacks.items()}


class SameIdStoredOnce(CollectorTest):
    def push(self, body):
        return self.c.request("POST", "/push.v1.PusherService/Push", body, PROTO)[0]

    def test_push_same_id_twice_is_stored_once(self):
        body = push_body("once", [(gz(timed_pprof(STACKS)), str(uuid.uuid4()))])
        self.assertEqual(self.push(body), 200)
        self.assertEqual(self.push(body), 200)
        self.assertEqual(render(self.c, "once.cpu"), STACKS)

    def test_push_duplicate_within_one_request_is_stored_once(self):
        sid = str(uuid.uuid4())
        raw = gz(timed_pprof(STACKS))
        self.assertEqual(self.push(push_body("dupinreq", [(raw, sid), (raw, sid)])), 200)
        self.assertEqual(render(self.c, "dupinreq.cpu"), STACKS)

    def test_push_different_ids_or_none_are_all_stored(self):
        raw = gz(timed_pprof(STACKS))
        self.assertEqual(self.push(push_body("many", [(raw, str(uuid.uuid4())),
                                                      (raw, str(uuid.uuid4()))])), 200)
        self.assertEqual(self.push(push_body("many", [(raw, None)])), 200)
        self.assertEqual(self.push(push_body("many", [(raw, None)])), 200)
        self.assertEqual(render(self.c, "many.cpu"), times(STACKS, 4))

    def test_push_same_id_other_content_keeps_the_first(self):
        sid = str(uuid.uuid4())
        other = {"thread:MainThread;other": 5}
        self.assertEqual(self.push(push_body("first", [(gz(timed_pprof(STACKS)), sid)])), 200)
        self.assertEqual(self.push(push_body("first", [(gz(timed_pprof(other)), sid)])), 200)
        self.assertEqual(render(self.c, "first.cpu"), STACKS)

    def test_ingest_same_id_twice_is_stored_once(self):
        body = folded({"a;b": 3, "a;c": 4})
        uid = str(uuid.uuid4())
        for _ in range(2):
            self.assertEqual(self.c.ingest("ing.cpu", body, frm=NOW, until=NOW + 10,
                                           pyagentUploadId=uid)[0], 200)
        self.assertEqual(parse_folded(self.c.render("ing.cpu", NOW - 60, NOW + 60)),
                         {"a;b": 3, "a;c": 4})

    def test_one_id_for_every_upload_loses_nothing(self):
        """A client that gives every upload the same id: the key holds the series and the time
        range too, so uploads of other intervals or series are all stored."""
        body = folded({"a;b": 3})
        for i in range(3):
            self.assertEqual(self.c.ingest("constid.cpu", body, frm=NOW + 10 * i,
                                           until=NOW + 10 * i + 10, pyagentUploadId="same")[0], 200)
        self.assertEqual(self.c.ingest("constid.cpu{pod=b}", body, frm=NOW, until=NOW + 10,
                                       pyagentUploadId="same")[0], 200)
        self.assertEqual(parse_folded(self.c.render("constid.cpu", NOW - 60, NOW + 60)),
                         {"a;b": 12})

    def test_ingest_different_ids_or_none_are_all_stored(self):
        body = folded({"a;b": 3})
        for uid in (str(uuid.uuid4()), str(uuid.uuid4()), None, None):
            params = {"pyagentUploadId": uid} if uid else {}
            self.assertEqual(self.c.ingest("ingmany.cpu", body, frm=NOW, until=NOW + 10,
                                           **params)[0], 200)
        self.assertEqual(parse_folded(self.c.render("ingmany.cpu", NOW - 60, NOW + 60)),
                         {"a;b": 12})

    def post_otlp(self, body):
        return self.c.request("POST", "/v1development/profiles", body, OTLP)[0]

    def test_otlp_same_profile_id_twice_is_stored_once(self):
        body = otlp_body("otlponce", uuid.uuid4().bytes)
        self.assertEqual(self.post_otlp(body), 200)
        self.assertEqual(self.post_otlp(body), 200)
        self.assertEqual(render(self.c, "otlponce.cpu"), STACKS)

    def test_otlp_different_or_no_profile_id_are_all_stored(self):
        for pid in (uuid.uuid4().bytes, uuid.uuid4().bytes, None, bytes(16), None):
            self.assertEqual(self.post_otlp(otlp_body("otlpmany", pid)), 200)
        self.assertEqual(render(self.c, "otlpmany.cpu"), times(STACKS, 5))


def ids(db):
    con = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    try:
        return dict(con.execute("SELECT id, received FROM upload_ids").fetchall())
    finally:
        con.close()


class IdsAreBounded(unittest.TestCase):
    def test_retention_prunes_ids_received_before_its_cutoff(self):
        args = ("--retention", "1h", "--retention-interval", "1s")
        c = Collector(*args)
        fresh = str(uuid.uuid4())
        self.assertEqual(c.ingest("ids.cpu", "a;b 2\n", frm=NOW, until=NOW + 10,
                                  pyagentUploadId=fresh)[0], 200)
        c.stop()
        con = sqlite3.connect(c.db)
        con.execute("INSERT INTO upload_ids VALUES ('stale', ?)", (NOW - 7200,))
        con.commit()
        con.close()
        c2 = Collector(*args, db=c.db, workdir=c.workdir)
        try:
            deadline = time.time() + 20
            while "stale" in ids(c.db) and time.time() < deadline:
                time.sleep(0.2)
            # The key: the id, then the series (app, labels) and the time range.
            self.assertEqual({k.split("\n")[0] for k in ids(c.db)}, {fresh})
            # The id that stays still turns its resend away.
            self.assertEqual(c2.ingest("ids.cpu", "a;b 2\n", frm=NOW, until=NOW + 10,
                                       pyagentUploadId=fresh)[0], 200)
            self.assertEqual(parse_folded(c2.render("ids.cpu", NOW - 60, NOW + 60)), {"a;b": 2})
        finally:
            c2.__exit__(None, None, None)

    def test_an_old_database_gains_the_table(self):
        c = Collector()
        c.stop()
        con = sqlite3.connect(c.db)
        con.execute("DROP TABLE upload_ids")
        con.commit()
        con.close()
        with Collector(db=c.db, workdir=c.workdir) as c2:
            uid = str(uuid.uuid4())
            for _ in range(2):
                self.assertEqual(c2.ingest("upg.cpu", "a 1\n", frm=NOW, until=NOW + 10,
                                           pyagentUploadId=uid)[0], 200)
            self.assertEqual(parse_folded(c2.render("upg.cpu", NOW - 60, NOW + 60)), {"a": 1})


class CrashBetweenCommitAndAnswer(unittest.TestCase):
    """The race that made agent.upload.*.collector_gone_30s_and_killed flaky, made certain:
    the collector commits an upload and dies (SIGKILL, by its fault-injection hook) before
    answering; the client resends the same request to the restarted collector."""

    def crash_then_resend(self, send, query):
        c = Collector(env={"PYAGENT_COLLECTOR_FAULT_KILL_AFTER_COMMITS": "1"})
        with self.assertRaises((OSError, http.client.HTTPException)):  # no answer: resend
            send(c)
        c.kill9()
        c2 = Collector(db=c.db, workdir=c.workdir)
        try:
            self.assertEqual(send(c2), 200)
            return parse_folded(c2.render(query, NOW - 60, NOW + 60))
        finally:
            c2.__exit__(None, None, None)

    def test_push(self):
        body = push_body("crashpush", [(gz(timed_pprof(STACKS)), str(uuid.uuid4()))])
        got = self.crash_then_resend(
            lambda c: c.request("POST", "/push.v1.PusherService/Push", body, PROTO, timeout=10)[0],
            "crashpush.cpu")
        self.assertEqual(got, STACKS)

    def test_ingest(self):
        uid = str(uuid.uuid4())
        got = self.crash_then_resend(
            lambda c: c.ingest("crashing.cpu", "a;b 7\n", frm=NOW, until=NOW + 10,
                               pyagentUploadId=uid)[0],
            "crashing.cpu")
        self.assertEqual(got, {"a;b": 7})

    def test_otlp(self):
        body = otlp_body("crashotlp", uuid.uuid4().bytes)
        got = self.crash_then_resend(
            lambda c: c.request("POST", "/v1development/profiles", body, OTLP, timeout=10)[0],
            "crashotlp.cpu")
        self.assertEqual(got, STACKS)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
