"""A fake Grafana Pyroscope: POST /ingest with the rules Pyroscope applies, as read in its source
(grafana/pyroscope: pkg/ingester/pyroscope/ingest_handler.go and ingest_adapter.go,
pkg/og/convert/pprof/profile.go, pkg/og/convert/parser.go, api/model/labelset,
pkg/validation/validate.go and limits.go). Answers carry the status codes Pyroscope gives:

- the name is parsed as Pyroscope's labelset does: everything before '{' is the service name
  (characters [A-Za-z0-9_.-/]), label names [A-Za-z0-9_.]; a break is 400;
- pprof (format=pprof): __name__ from the sample types ("wall" if one is named wall, else
  process_cpu for the first one containing "cpu", ...), service_name from the name; labels and
  profile validated (at most 30 labels counting __name__, __delta__, pyroscope_spy and
  service_name; names up to 1024 bytes, [A-Za-z_][A-Za-z0-9_]* after '.' becomes '_'; values
  up to 2048 bytes of valid UTF-8; no duplicate names; the profile within 4 MiB, 16000
  samples, its time inside [now-1h, now+10m], every string valid UTF-8): a break is 422;
- folded (any other format): lines "stack count", the count after the last space parsed as an
  integer (a line that is not, such as a "#" header, is 422); the profile type is the service
  name's suffix after its last '.' (cpu, wall, ...; an unknown one is 400), the rest is the
  service; label rules as above, and invalid UTF-8 in a stack, are 400.

Accepted profiles are kept in .accepted as dicts: service, name (__name__), types (sample
types), labels, samples (the sum of the first value), stacks ({"f1;f2": count})."""
import gzip
import http.server
import json
import re
import threading
import time
import urllib.parse

MAX_LABEL_NAME = 1024
MAX_LABEL_VALUE = 2048
MAX_LABELS = 30
MAX_PROFILE_BYTES = 4 << 20
MAX_SAMPLES = 16000
REJECT_OLDER_S = 3600
REJECT_NEWER_S = 600

SERVICE_CHARS = re.compile(r"^[A-Za-z0-9_./-]+$")
LABEL_CHARS = re.compile(r"^[A-Za-z0-9_.]+$")

FOLDED_TYPES = {"cpu": "process_cpu", "itimer": "process_cpu", "wall": "wall"}


class Reject(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def valid_utf8(b):
    try:
        b.decode("utf-8")  # Python rejects surrogates and overlong forms, as Go does
        return True
    except UnicodeDecodeError:
        return False


def parse_name(name_bytes):
    """labelset.Parse: returns (service, {label: value}). Go ranges over runes, so invalid
    bytes in the name read as U+FFFD."""
    name = name_bytes.decode("utf-8", "replace")
    service, brace, rest = name.partition("{")
    service = service.strip()
    if not service:
        raise Reject(400, "name: service name is required")
    for ch in service:
        if not SERVICE_CHARS.match(ch):
            raise Reject(400, "name: invalid service name: %s: character is not allowed: %r" % (service, ch))
    labels = {}
    if brace:
        body = rest.split("}", 1)[0]
        for part in body.split(","):
            if "=" not in part:
                continue
            k, _, v = part.partition("=")
            k = k.strip()
            if k != "__name__":
                if not k:
                    raise Reject(400, "name: label name is required")
                for ch in k:
                    if not LABEL_CHARS.match(ch):
                        raise Reject(400, "name: invalid label name: %s: character is not allowed: %r" % (k, ch))
            labels[k] = v.strip()  # a map: a repeated name overwrites
    return service, labels


def sanitize_label_name(n):
    """SanitizeLegacyLabelName: [a-zA-Z_][a-zA-Z0-9_]*, '.' anywhere becomes '_'."""
    if not n:
        return None
    for i, c in enumerate(n):
        ok = ("a" <= c <= "z") or ("A" <= c <= "Z") or c == "_" or (c.isdigit() and c.isascii() and i > 0)
        if not ok and c != ".":
            return None
    return n.replace(".", "_")


def validate_labels(pairs, status):
    """ValidateLabels on [(name, value)]; returns the sanitized list."""
    pairs = sorted(pairs)
    shown = "{" + ", ".join('%s="%s"' % (k, v) for k, v in pairs) + "}"
    if not pairs:
        raise Reject(status, "error at least one label pair is required per profile")
    if len(pairs) > MAX_LABELS:
        raise Reject(status, "profile series '%s' has %d label names; limit %d" % (shown, len(pairs), MAX_LABELS))
    if not dict(pairs).get("service_name"):
        raise Reject(status, "invalid labels '%s' with error: service name is not provided" % shown)
    out = {}
    for k, v in pairs:
        if len(k.encode()) > MAX_LABEL_NAME:
            raise Reject(status, "profile with labels '%s' has label name too long: '%s'" % (shown, k))
        if len(v.encode("utf-8", "surrogateescape")) > MAX_LABEL_VALUE:
            raise Reject(status, "profile with labels '%s' has label value too long: '%s'" % (shown, v))
        s = sanitize_label_name(k)
        if s is None:
            raise Reject(status, "invalid labels '%s' with error: invalid label name '%s'" % (shown, k))
        if not valid_utf8(v.encode("utf-8", "surrogateescape")):
            raise Reject(status, "invalid labels '%s' with error: invalid label value '%s'" % (shown, v))
        if s in out:
            raise Reject(status, "profile with labels '%s' has duplicate label name: '%s'" % (shown, s))
        out[s] = v
    return out


# ---- protobuf, as much as profile.proto needs ----------------------------------------------

def varint(b, i):
    v = shift = 0
    while True:
        if i >= len(b):
            raise Reject(422, "malformed pprof: truncated varint")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if not c & 0x80:
            return v, i
        shift += 7


def fields(b):
    i = 0
    while i < len(b):
        tag, i = varint(b, i)
        f, w = tag >> 3, tag & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 2:
            n, i = varint(b, i)
            if i + n > len(b):
                raise Reject(422, "malformed pprof: truncated field")
            v, i = b[i:i + n], i + n
        elif w == 1:
            v, i = b[i:i + 8], i + 8
        elif w == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise Reject(422, "malformed pprof: wire type %d" % w)
        yield f, w, v


def packed(w, v):
    if w == 0:
        return [v]
    out, i = [], 0
    while i < len(v):
        x, i = varint(v, i)
        out.append(x)
    return out


def decode_pprof(raw):
    p = {"sample_type": [], "sample": [], "location": {}, "function": {}, "strings": [],
         "time_nanos": 0, "period_type": None, "period": 0}
    for f, w, v in fields(raw):
        if f == 1 and w == 2:
            vt = dict((ff, vv) for ff, _, vv in fields(v))
            p["sample_type"].append((vt.get(1, 0), vt.get(2, 0)))
        elif f == 2 and w == 2:
            locs, vals = [], []
            for ff, ww, vv in fields(v):
                if ff == 1:
                    locs += packed(ww, vv)
                elif ff == 2:
                    vals += packed(ww, vv)
            p["sample"].append((locs, vals))
        elif f == 4 and w == 2:
            lid, lines = 0, []
            for ff, ww, vv in fields(v):
                if ff == 1:
                    lid = vv
                elif ff == 4:
                    ln = dict((a, c) for a, _, c in fields(vv))
                    lines.append((ln.get(1, 0), ln.get(2, 0)))
            p["location"][lid] = lines
        elif f == 5 and w == 2:
            fn = dict((a, c) for a, _, c in fields(v))
            p["function"][fn.get(1, 0)] = (fn.get(2, 0), fn.get(4, 0))
        elif f == 6 and w == 2:
            p["strings"].append(bytes(v))
        elif f == 9 and w == 0:
            p["time_nanos"] = v
        elif f == 11 and w == 2:
            vt = dict((ff, vv) for ff, _, vv in fields(v))
            p["period_type"] = (vt.get(1, 0), vt.get(2, 0))
        elif f == 12 and w == 0:
            p["period"] = v
    return p


class FakePyroscope:
    def __init__(self):
        self.accepted = []
        self.rejected = []  # (status, message)
        self.requests = 0
        self.lock = threading.Lock()
        parent = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                url = urllib.parse.urlparse(self.path)
                with parent.lock:
                    parent.requests += 1
                try:
                    if url.path != "/ingest":
                        raise Reject(404, "404 page not found")
                    q = dict(urllib.parse.parse_qsl(url.query, encoding="latin-1"))
                    rec = parent.ingest({k: v.encode("latin-1") for k, v in q.items()}, body)
                    with parent.lock:
                        parent.accepted.append(rec)
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except Reject as e:
                    with parent.lock:
                        parent.rejected.append((e.status, str(e)))
                    code = {400: "invalid_argument", 404: "unimplemented"}.get(e.status, "unknown")
                    msg = json.dumps({"code": code, "message": str(e)}).encode() + b"\n"
                    self.send_response(e.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---- the rules ----

    def ingest(self, q, body):
        service, labels = parse_name(q.get("name", b""))
        spy = q.get("spyName", b"unknown").decode("utf-8", "replace")
        if q.get("format") == b"pprof":
            return self.ingest_pprof(service, labels, spy, q, body)
        return self.ingest_folded(service, labels, spy, body)

    def series_labels(self, metric, spy, service, labels, status, folded):
        pairs = [("__name__", metric), ("__delta__", "false"), ("pyroscope_spy", spy)]
        user = [(k, v) for k, v in labels.items() if not k.startswith("__")]
        if "service_name" not in labels:
            pairs.append(("service_name", service))
        elif folded and "app_name" not in labels:
            pairs.append(("app_name", service))
        return validate_labels(pairs + user, status)

    def ingest_pprof(self, service, labels, spy, q, body):
        raw = body
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        if len(raw) > MAX_PROFILE_BYTES:
            raise Reject(422, "uncompressed profile payload size exceeds limit of 4.2 MB")
        p = decode_pprof(raw)
        st = p["strings"]
        if not st or st[0] != b"":
            raise Reject(422, "string 0 should be empty string")
        types = [st[t].decode("utf-8", "replace") for t, _ in p["sample_type"]]
        if not types:
            raise Reject(422, "empty profile")
        metric = None
        if "wall" in types:
            metric = "wall"
        for t in types:
            if metric:
                break
            if "cpu" in t:
                metric = "process_cpu"
            elif "alloc_" in t or "inuse_" in t or t in ("space", "objects"):
                metric = "memory"
        metric = metric or types[-1]
        ls = self.series_labels(metric, spy, service, labels, 422, False)
        now = time.time()
        t = p["time_nanos"] / 1e9 if p["time_nanos"] else float(q.get("from", b"0") or 0)
        if p["time_nanos"] and time.gmtime(t).tm_year == 1970:
            t = float(q.get("from", b"0") or 0)
        if not (now - REJECT_OLDER_S < t < now + REJECT_NEWER_S):
            raise Reject(422, "profile with labels '%s' is outside of ingestion window (profile timestamp: %s)"
                         % (ls, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))))
        if len(p["sample"]) > MAX_SAMPLES:
            raise Reject(422, "the profile with labels '%s' exceeds the samples count limit "
                         "(max_profile_stacktrace_samples, actual: %d, limit: %d)" % (ls, len(p["sample"]), MAX_SAMPLES))
        for locs, vals in p["sample"]:
            if len(vals) != len(types):
                raise Reject(422, "sample value length mismatch")
        for t in types:
            if "-" in t:
                raise Reject(422, "sample type contains -")
        for s in st:
            if not valid_utf8(s):
                raise Reject(422, "invalid utf8 string hex: %s" % s.hex())
        stacks = {}
        total = 0
        for locs, vals in p["sample"]:
            frames = []
            for lid in reversed(locs):  # root first
                for fid, line in reversed(p["location"].get(lid, [])):
                    name, fname = p["function"].get(fid, (0, 0))
                    n = st[name].decode()
                    if st[fname]:
                        n += " (%s%s)" % (st[fname].decode(), ":%d" % line if line else "")
                    frames.append(n)
            key = ";".join(frames)
            stacks[key] = stacks.get(key, 0) + vals[0]
            total += vals[0]
        # The default relabel rule: wall profiles with a "cpu" sample type are process_cpu.
        names = {t: ("process_cpu" if metric == "wall" and t == "cpu" else metric) for t in types}
        return {"service": ls["service_name"], "name": metric, "names": names, "types": types,
                "labels": ls, "samples": total, "stacks": stacks, "format": "pprof"}

    def ingest_folded(self, service, labels, spy, body):
        stacks = {}
        total = 0
        for line in body.split(b"\n"):
            if len(line) > 65536:
                break  # bufio.Scanner stops at its token limit: the rest is lost
            line = line.rstrip(b"\r")
            i = line.rfind(b" ")
            if i < 0:
                continue
            count = line[i + 1:]
            if not re.match(rb"^[+-]?[0-9]+$", count):
                raise Reject(422, 'strconv.Atoi: parsing "%s": invalid syntax' % count.decode("utf-8", "replace"))
            stack = line[:i]
            if not valid_utf8(stack):
                raise Reject(400, "pyroscopeIngesterAdapter failed to marshal pprof: string field contains invalid UTF-8")
            key = stack.decode()
            stacks[key] = stacks.get(key, 0) + int(count)
            total += int(count)
        parts = service.split(".")
        suffix = "cpu"
        if len(parts) > 1:
            suffix, service = parts[-1], ".".join(parts[:-1])
        if suffix not in FOLDED_TYPES:
            raise Reject(400, "pyroscopeIngesterAdapter failed to convert metadata: unknown profile type: %s" % suffix)
        metric = FOLDED_TYPES[suffix]
        ls = self.series_labels(metric, spy, service, labels, 400, True)
        return {"service": ls["service_name"], "name": metric, "names": {"samples": metric}, "types": ["samples"],
                "labels": ls, "samples": total, "stacks": stacks, "format": "folded"}
