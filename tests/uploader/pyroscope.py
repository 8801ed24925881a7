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

POST /push.v1.PusherService/Push (Connect unary, application/proto; pkg/distributor): each
series' labels are validated as above (service_name required, __name__ the profile type), each
raw profile (gzip or plain pprof) as on the pprof path; a break is 400 with Connect's
{"code": "invalid_argument"}. POST /v1development/profiles (OTLP/HTTP, application/x-protobuf;
pkg/ingester/otlp): the service is the resource's service.name, the labels its string
attributes (names sanitized as above) plus __delta__, __otel__, __name__ and service_name;
__name__ is process_cpu for a samples/count profile with a cpu/nanoseconds period (whose
counts become CPU time), else the period type's name; a dictionary missing or an index out of
its tables is 400; the profile time and strings are checked as on the pprof path.

Accepted profiles are kept in .accepted as dicts: service, name (__name__), types (sample
types), labels, samples (the sum of the first value, as counts), stacks ({"f1;f2": count}),
time_nanos (the profile's own time: pprof's time_nanos, OTLP's time_unix_nano, /ingest's from
for folded; 0 when the body has none, which Pyroscope stamps with the time it arrives, so a
resent spool file without one would be filed at the wrong time), bytes (its uncompressed size).

Limits (a tenant's max_profile_stacktrace_samples and max_profile_size_bytes, and the server's
clock, which a test moves forward to stand for a server that comes back hours later) are
Pyroscope's defaults unless given. FakePyroscope(otlp_partial=N) answers every OTLP request
with 200 and a partial_success of N rejected profiles (how an OTLP server refuses part of a
request), keeping nothing."""
import gzip
import http.server
import json
import re
import threading
import time
import urllib.parse
import zlib

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


class Limits:
    """A tenant's per-profile limits and the server's clock."""

    def __init__(self, max_samples=MAX_SAMPLES, max_bytes=MAX_PROFILE_BYTES, clock_offset_s=0.0):
        self.max_samples, self.max_bytes, self.clock_offset_s = max_samples, max_bytes, clock_offset_s

    def now(self):
        return time.time() + self.clock_offset_s

    def check_time(self, t, status, what):
        """Pyroscope's ingestion window: t (seconds) inside (now - 1 h, now + 10 min)."""
        now = self.now()
        if not (now - REJECT_OLDER_S < t < now + REJECT_NEWER_S):
            raise Reject(status, "profile%s is outside of ingestion window (profile timestamp: %s)"
                         % (what, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))))


DEFAULT_LIMITS = Limits()


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


def gunzip(raw, status):
    """A pprof body as Pyroscope reads it: gunzipped when it starts with gzip's magic bytes; a
    broken gzip stream is a malformed profile."""
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as e:
        raise Reject(status, "failed to decompress the profile: %s" % e)


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


def pprof_labelled_samples(raw):
    """[(frames root first, count)] of a pprof (not compressed), each sample's string labels
    (timestamps, numeric, aside) as a labels:TEXT frame under the thread root, names in
    order, as pyagent's folded file has them."""
    p = decode_pprof(raw)
    st = [s.decode("utf-8") for s in p["strings"]]
    out = []
    for f, w, v in fields(raw):
        if f != 2 or w != 2:
            continue
        locs, vals, labels = [], [], []
        for ff, ww, vv in fields(v):
            if ff == 1:
                locs += packed(ww, vv)
            elif ff == 2:
                vals += packed(ww, vv)
            elif ff == 3:
                lab = dict((a, c) for a, _, c in fields(vv))
                if lab.get(2):
                    labels.append((st[lab.get(1, 0)], st[lab[2]]))
        frames = []
        for lid in reversed(locs):
            for fid, line in reversed(p["location"].get(lid, [])):
                name, fname = p["function"][fid]
                frames.append("%s (%s:%d)" % (st[name], st[fname], line))
        user = ",".join("%s=%s" % kv for kv in sorted(labels))
        if user:
            frames.insert(1 if frames and frames[0].startswith("thread:") else 0, "labels:" + user)
        out.append((frames, vals[0] if vals else 0))
    return out


def pprof_stacks(p):
    """{root-first stack: first value} of a decoded pprof."""
    st = p["strings"]
    stacks = {}
    for locs, vals in p["sample"]:
        frames = []
        for lid in reversed(locs):  # root first
            for fid, line in reversed(p["location"].get(lid, [])):
                name, fname = p["function"].get(fid, (0, 0))
                n = st[name].decode("utf-8", "replace")
                if st[fname]:
                    n += " (%s%s)" % (st[fname].decode("utf-8", "replace"), ":%d" % line if line else "")
                frames.append(n)
        key = ";".join(frames)
        stacks[key] = stacks.get(key, 0) + (vals[0] if vals else 0)
    return stacks


def signed32(v):
    """An int32 field read as a varint (negative ones take ten bytes)."""
    v &= 0xFFFFFFFFFFFFFFFF
    return v - (1 << 64) if v >= 1 << 63 else v


def decode_push(body):
    """PushRequest: [([(name, value)], [raw profile bytes])] per series."""
    out = []
    for f, w, v in fields(body):
        if f != 1 or w != 2:
            continue
        labels, raws = [], []
        for ff, ww, vv in fields(v):
            if ff == 1 and ww == 2:
                lp = dict((a, bytes(c)) for a, _, c in fields(vv))
                labels.append((lp.get(1, b""), lp.get(2, b"")))
            elif ff == 2 and ww == 2:
                raws.append(bytes(dict((a, c) for a, _, c in fields(vv)).get(1, b"")))
        out.append((labels, raws))
    return out


def any_value(b, strings):
    """An AnyValue's string (string_value or string_value_strindex), else None."""
    for f, w, v in fields(b):
        if f == 1 and w == 2:
            return bytes(v)
        if f == 8 and w == 0:
            i = signed32(v)
            return strings[i] if 0 <= i < len(strings) else None
    return None


def decode_otlp(body):
    """ExportProfilesServiceRequest: (dictionary, [(resource attrs, [(scope attrs, [profile])])])
    with everything as plain Python values; index errors are left to the caller."""
    d = {"mapping": [], "location": [], "function": [], "string": [], "attribute": [], "stack": []}
    rps = []
    raw_dict = None
    for f, w, v in fields(body):
        if f == 1 and w == 2:
            rps.append(bytes(v))
        elif f == 2 and w == 2:
            raw_dict = bytes(v)
    if raw_dict is None:
        raise Reject(400, "missing profile metadata dictionary")
    for f, w, v in fields(raw_dict):
        if f == 5:
            d["string"].append(bytes(v))
    for f, w, v in fields(raw_dict):
        if f == 1:
            m = dict((a, c) for a, _, c in fields(v))
            d["mapping"].append(signed32(m.get(4, 0)))
        elif f == 2:
            lines = []
            for a, ww, c in fields(v):
                if a == 3:
                    ln = dict((x, y) for x, _, y in fields(c))
                    lines.append((signed32(ln.get(1, 0)), ln.get(2, 0)))
            loc = dict((a, c) for a, _, c in fields(v) if a in (1, 2))
            d["location"].append((signed32(loc.get(1, 0)), loc.get(2, 0), lines))
        elif f == 3:
            fn = dict((a, c) for a, _, c in fields(v))
            d["function"].append((signed32(fn.get(1, 0)), signed32(fn.get(3, 0))))
        elif f == 6:
            kv = dict((a, c) for a, _, c in fields(v))
            d["attribute"].append((signed32(kv.get(1, 0)), any_value(kv.get(2, b""), d["string"])))
        elif f == 7:
            idx = []
            for a, ww, c in fields(v):
                if a == 1:
                    idx += [signed32(x) for x in packed(ww, c)]
            d["stack"].append(idx)

    def attrs(b, field=1):
        """The KeyValues of field `field` of message b (Resource: 1, InstrumentationScope: 3)."""
        out = []
        for f, w, v in fields(b):
            if f == field and w == 2:  # KeyValue
                kv = dict((a, c) for a, _, c in fields(v))
                key = bytes(kv.get(1, b"")) or (d["string"][signed32(kv[3])] if 3 in kv else b"")
                out.append((key, any_value(kv.get(2, b""), d["string"])))
        return out

    def vtype(b):
        vt = dict((a, c) for a, _, c in fields(b))
        return (d["string"][signed32(vt.get(1, 0))], d["string"][signed32(vt.get(2, 0))])

    resources = []
    for rp in rps:
        res_attrs, scopes = [], []
        for f, w, v in fields(rp):
            if f == 1 and w == 2:
                res_attrs = attrs(v)
            elif f == 2 and w == 2:
                scope_attrs, profiles = [], []
                for ff, ww, vv in fields(v):
                    if ff == 1 and ww == 2:
                        scope_attrs = attrs(vv, 3)
                    elif ff == 2 and ww == 2:
                        pr = {"sample_type": None, "period_type": None, "period": 0, "time": 0,
                              "duration": 0, "samples": []}
                        for a, www, c in fields(vv):
                            if a == 1:
                                pr["sample_type"] = vtype(c)
                            elif a == 5:
                                pr["period_type"] = vtype(c)
                            elif a == 6:
                                pr["period"] = c
                            elif a == 3:
                                pr["time"] = int.from_bytes(c, "little")
                            elif a == 4:
                                pr["duration"] = c
                            elif a == 2:
                                sm = {"stack": 0, "attrs": [], "values": []}
                                for x, xw, y in fields(c):
                                    if x == 1:
                                        sm["stack"] = signed32(y)
                                    elif x == 2:
                                        sm["attrs"] += [signed32(i) for i in packed(xw, y)]
                                    elif x == 4:
                                        sm["values"] += [signed32(i) for i in packed(xw, y)]
                                pr["samples"].append(sm)
                        profiles.append(pr)
                scopes.append((scope_attrs, profiles))
        resources.append((res_attrs, scopes))
    return d, resources


def otlp_name(pr):
    """Pyroscope's __name__ of an OTLP profile, and whether its values are counts to be turned
    into CPU time."""
    st = pr["sample_type"] or (b"", b"")
    pt = pr["period_type"] if pr["period"] and pr["period_type"] else (b"", b"")
    if st == (b"samples", b"count") and pt == (b"cpu", b"nanoseconds"):
        return "process_cpu", True
    if st == (b"off_cpu", b"nanoseconds") and pt == (b"", b""):
        return "off_cpu", False
    return (pt[0].decode("utf-8", "replace") or "process_cpu"), False


def otlp_profiles(body, limits=DEFAULT_LIMITS):
    """Pyroscope's reading of an OTLP request: [record] as FakePyroscope keeps them (samples
    as counts: values in nanoseconds with a period are divided by it). Pyroscope converts each
    profile to pprof and checks that against the tenant's limits; the request's size stands
    for the pprof's here (the agent's OTLP and pprof bodies of one profile differ by little)."""
    if len(body) > limits.max_bytes:
        raise Reject(400, "uncompressed profile payload size exceeds limit of %d bytes" % limits.max_bytes)
    d, resources = decode_otlp(body)
    for s in d["string"]:
        if not valid_utf8(s):
            raise Reject(400, "string field contains invalid UTF-8")
    out = []
    for res_attrs, scopes in resources:
        service = "unknown_service"
        for k, v in res_attrs:
            if k == b"service.name" and v:
                service = v.decode()
        for scope_attrs, profiles in scopes:
            for pr in profiles:
                name, to_cpu = otlp_name(pr)
                st = pr["sample_type"] or (b"", b"")
                in_ns = st[1] == b"nanoseconds" and pr["period"]
                stacks, total = {}, 0
                for sm in pr["samples"]:
                    if not 0 <= sm["stack"] < len(d["stack"]):
                        raise Reject(400, "invalid stack index: %d" % sm["stack"])
                    frames = []
                    for li in d["stack"][sm["stack"]]:  # leaf first
                        if not 0 <= li < len(d["location"]):
                            raise Reject(400, "could not access location at index %d" % li)
                        for fi, line in reversed(d["location"][li][2]):
                            if not 0 <= fi < len(d["function"]):
                                raise Reject(400, "could not access function at index %d" % fi)
                            n, fn = d["function"][fi]
                            frame = d["string"][n].decode()
                            if d["string"][fn]:
                                frame += " (%s%s)" % (d["string"][fn].decode(), ":%d" % line if line else "")
                            frames.append(frame)
                    v = sm["values"][0] if sm["values"] else 0
                    count = v // pr["period"] if in_ns else v
                    key = ";".join(reversed(frames))
                    stacks[key] = stacks.get(key, 0) + count
                    total += count
                pairs = [("__delta__", "false"), ("__otel__", "true"), ("__name__", name), ("service_name", service)]
                seen = {"__name__", "service_name", "service.name"}
                for k, v in list(res_attrs) + list(scope_attrs):
                    k = k.decode("utf-8", "replace")
                    if k in seen or not v:
                        continue
                    seen.add(k)
                    pairs.append((k, v.decode("utf-8", "replace")))
                ls = validate_labels(pairs, 400)
                if len(pr["samples"]) > limits.max_samples:
                    raise Reject(400, "exceeds the samples count limit (actual: %d, limit: %d)"
                                 % (len(pr["samples"]), limits.max_samples))
                limits.check_time(pr["time"] / 1e9 if pr["time"] else limits.now(), 400, "")
                out.append({"service": service, "name": name, "names": {st[0].decode(): name},
                            "types": [st[0].decode()], "labels": ls, "samples": total, "stacks": stacks,
                            "format": "otlp", "to_cpu": to_cpu, "time_nanos": pr["time"], "bytes": len(body)})
    return out


def request_stacks(path, query, body):
    """{stack: count} of one upload of any protocol (as the agent sends them)."""
    if path == "/push.v1.PusherService/Push":
        out = {}
        for _, raws in decode_push(body):
            for raw in raws:
                raw = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
                for k, v in pprof_stacks(decode_pprof(raw)).items():
                    out[k] = out.get(k, 0) + v
        return out
    if path == "/v1development/profiles":
        out = {}
        for rec in otlp_profiles(body):
            for k, v in rec["stacks"].items():
                out[k] = out.get(k, 0) + v
        return out
    if query.get("format") == "pprof":
        raw = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body
        return pprof_stacks(decode_pprof(raw))
    out = {}
    for line in body.decode("utf-8", "replace").splitlines():
        if not line or line.startswith("#"):
            continue
        stack, _, c = line.rpartition(" ")
        out[stack] = out.get(stack, 0) + int(c)
    return out


def request_labels(path, query, body):
    """The series labels of one upload of any protocol: {name: value}, service_name included."""
    if path == "/push.v1.PusherService/Push":
        return {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in decode_push(body)[0][0]}
    if path == "/v1development/profiles":
        ls = dict(otlp_profiles(body)[0]["labels"])
        return ls
    service, labels = parse_name(query.get("name", "").encode())
    if query.get("format") != "pprof" and "." in service:
        service = service.rsplit(".", 1)[0]  # the folded path's profile type suffix
    labels.setdefault("service_name", service)
    return labels


def otlp_partial_success(rejected, message):
    """An ExportProfilesServiceResponse: partial_success (1) {rejected_profiles (1),
    error_message (2)}."""
    def varint(v):
        out = b""
        while True:
            b, v = v & 0x7F, v >> 7
            out += bytes([b | (0x80 if v else 0)])
            if not v:
                return out
    msg = message.encode()
    inner = b"\x08" + varint(rejected) + b"\x12" + varint(len(msg)) + msg
    return b"\x0a" + varint(len(inner)) + inner


class FakePyroscope:
    def __init__(self, limits=DEFAULT_LIMITS, otlp_partial=0):
        self.limits = limits
        self.otlp_partial = otlp_partial
        self.partial = 0  # OTLP requests answered with a partial success
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
                    if url.path == "/push.v1.PusherService/Push":
                        recs = parent.push(self.headers.get("Content-Type", ""), body)
                    elif url.path == "/v1development/profiles" and parent.otlp_partial:
                        parent.otlp(self.headers.get("Content-Type", ""), body)  # a valid request
                        msg = otlp_partial_success(parent.otlp_partial, "tenant over its series limit")
                        with parent.lock:
                            parent.partial += 1
                        self.send_response(200)
                        self.send_header("Content-Type", "application/x-protobuf")
                        self.send_header("Content-Length", str(len(msg)))
                        self.end_headers()
                        self.wfile.write(msg)
                        return
                    elif url.path == "/v1development/profiles":
                        recs = parent.otlp(self.headers.get("Content-Type", ""), body)
                    elif url.path == "/ingest":
                        q = dict(urllib.parse.parse_qsl(url.query, encoding="latin-1"))
                        recs = [parent.ingest({k: v.encode("latin-1") for k, v in q.items()}, body)]
                    else:
                        raise Reject(404, "404 page not found")
                    with parent.lock:
                        parent.accepted += recs
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
        return self.ingest_folded(service, labels, spy, q, body)

    def push(self, content_type, body):
        if content_type.split(";")[0].strip() not in ("application/proto", "application/json"):
            raise Reject(415, "invalid content-type")
        try:
            series = decode_push(body)
        except Reject:
            raise Reject(400, "unmarshal: cannot parse invalid wire-format data")
        recs = []
        for labels, raws in series:
            for k, v in labels:
                if not valid_utf8(k) or not valid_utf8(v):
                    raise Reject(400, "unmarshal: string field contains invalid UTF-8")
            pairs = [(k.decode(), v.decode()) for k, v in labels]
            ls = validate_labels(pairs, 400)
            metric = ls.get("__name__")
            if not metric:
                raise Reject(400, "profile name (__name__) is required")
            for raw in raws:
                try:
                    rec = self.check_pprof(raw, ls, 400)
                except Reject as e:
                    raise Reject(400, str(e))
                rec.update({"service": ls["service_name"], "name": metric, "format": "push",
                            "names": {t: metric for t in rec["types"]}})
                recs.append(rec)
        return recs

    def otlp(self, content_type, body):
        if content_type not in ("application/x-protobuf", "application/protobuf", "application/json"):
            raise Reject(415, "Unsupported Content-Type: %s" % content_type)
        return otlp_profiles(body, self.limits)

    def check_pprof(self, raw, ls, status):
        """The pprof rules (size, samples, UTF-8, time window); the record's stacks and types."""
        raw = gunzip(raw, status)
        if len(raw) > self.limits.max_bytes:
            raise Reject(status, "uncompressed profile payload size exceeds limit of %d bytes" % self.limits.max_bytes)
        p = decode_pprof(raw)
        st = p["strings"]
        if not st or st[0] != b"":
            raise Reject(status, "string 0 should be empty string")
        for s_ in st:
            if not valid_utf8(s_):
                raise Reject(status, "invalid utf8 string hex: %s" % s_.hex())
        if len(p["sample"]) > self.limits.max_samples:
            raise Reject(status, "exceeds the samples count limit (actual: %d, limit: %d)"
                         % (len(p["sample"]), self.limits.max_samples))
        self.limits.check_time(p["time_nanos"] / 1e9 if p["time_nanos"] else self.limits.now(), status, "")
        stacks = pprof_stacks(p)
        return {"types": [st[t_].decode() for t_, _ in p["sample_type"]], "labels": ls,
                "samples": sum(stacks.values()), "stacks": stacks, "time_nanos": p["time_nanos"],
                "bytes": len(raw)}

    def series_labels(self, metric, spy, service, labels, status, folded):
        pairs = [("__name__", metric), ("__delta__", "false"), ("pyroscope_spy", spy)]
        user = [(k, v) for k, v in labels.items() if not k.startswith("__")]
        if "service_name" not in labels:
            pairs.append(("service_name", service))
        elif folded and "app_name" not in labels:
            pairs.append(("app_name", service))
        return validate_labels(pairs + user, status)

    def ingest_pprof(self, service, labels, spy, q, body):
        raw = gunzip(body, 422)
        if len(raw) > self.limits.max_bytes:
            raise Reject(422, "uncompressed profile payload size exceeds limit of %d bytes" % self.limits.max_bytes)
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
        t = p["time_nanos"] / 1e9 if p["time_nanos"] else float(q.get("from", b"0") or 0)
        if p["time_nanos"] and time.gmtime(t).tm_year == 1970:
            t = float(q.get("from", b"0") or 0)
        self.limits.check_time(t, 422, " with labels '%s'" % ls)
        if len(p["sample"]) > self.limits.max_samples:
            raise Reject(422, "the profile with labels '%s' exceeds the samples count limit "
                         "(max_profile_stacktrace_samples, actual: %d, limit: %d)"
                         % (ls, len(p["sample"]), self.limits.max_samples))
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
                "labels": ls, "samples": total, "stacks": stacks, "format": "pprof",
                "time_nanos": p["time_nanos"], "bytes": len(raw)}

    def ingest_folded(self, service, labels, spy, q, body):
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
        # The pprof Pyroscope builds from folded text has the time of from (or of arrival).
        start = int(q.get("from", b"")) if re.match(rb"^[0-9]+$", q.get("from", b"")) else 0
        self.limits.check_time(start or self.limits.now(), 400, " with labels '%s'" % ls)
        return {"service": ls["service_name"], "name": metric, "names": {"samples": metric}, "types": ["samples"],
                "labels": ls, "samples": total, "stacks": stacks, "format": "folded",
                "time_nanos": start * 10**9, "bytes": len(body)}
