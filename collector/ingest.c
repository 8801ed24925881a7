/* ingest.c: decoding an upload. The transport layers (Content-Encoding, multipart, pprof's
 * own gzip) are peeled here with bounded buffers; the profile itself is read by the shared
 * profile library and re-encoded as gzip'd pprof, the one form the store keeps, whatever
 * form it arrived in (see docs/collector-api.md, "Storage"). */
#include "ingest.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "body.h"
#include "profile.h"
#include "units.h"

static int fail(int status, pa_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pa_vfail(err, fmt, ap);
    va_end(ap);
    return status;
}

/* The format parameter: Pyroscope knows other formats (jfr, trie, ...), which we name in the error;
 * any other value (or none) means folded, as in Pyroscope. */
static int format_of(const char *f, bool *pprof, pa_error *err) {
    static const char *unsupported[] = {"jfr", "trie", "tree", "lines", "speedscope"};
    *pprof = f != NULL && strcmp(f, "pprof") == 0;
    for (size_t i = 0; f && i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (strcmp(f, unsupported[i]) == 0)
            return fail(415, err,
                        "format: '%s' is not supported by pyagent-collector (use pprof or "
                        "folded)",
                        f);
    return 0;
}

static int parse_rate(const char *s, int64_t *out, pa_error *err) {
    if (s == NULL || *s == '\0') {
        *out = 100; /* Pyroscope's default */
        return 0;
    }
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0' || v <= 0 || v > 1000000)
        return fail(400, err, "sampleRate: '%.32s' is not an integer from 1 to 1000000", s);
    *out = v;
    return 0;
}

/* Peels Content-Encoding, then multipart. On success *data and *len are the payload; *owned is
 * set when it had to be allocated. */
static int unwrap(const struct pa_coll_ingest_request *rq, struct pa_coll_share *share,
                  const uint8_t **data, size_t *len, uint8_t **owned, pa_error *err) {
    *data = rq->body;
    *len = rq->body_len;
    *owned = NULL;
    const char *ce = rq->content_encoding;
    if (ce && *ce && strcasecmp(ce, "identity") != 0) {
        if (strcasecmp(ce, "gzip") != 0 && strcasecmp(ce, "x-gzip") != 0)
            return fail(415, err, "Content-Encoding: '%.32s' is not supported (use gzip or none)",
                        ce);
        int rc = pa_coll_gunzip(*data, *len, rq->max_decompressed, share, owned, len, err);
        if (rc)
            return rc;
        *data = *owned;
    }
    if (pa_coll_is_multipart(rq->content_type)) {
        const uint8_t *part;
        size_t partlen;
        int rc =
            pa_coll_multipart_field(rq->content_type, *data, *len, "profile", &part, &partlen, err);
        if (rc)
            return rc;
        *data = part;
        *len = partlen;
    }
    return 0;
}

void pa_coll_pprof_times(const uint8_t *p, size_t n, uint64_t *time_ns, uint64_t *dur_ns,
                         uint64_t *period) {
    size_t i = 0;
    while (i < n) {
        uint64_t tag = 0, v = 0;
        for (unsigned sh = 0; i < n && sh < 64; sh += 7) {
            tag |= (uint64_t)(p[i] & 0x7f) << sh;
            if (!(p[i++] & 0x80))
                break;
        }
        unsigned wire = (unsigned)(tag & 7);
        if (wire == 0) {
            for (unsigned sh = 0; i < n && sh < 64; sh += 7) {
                v |= (uint64_t)(p[i] & 0x7f) << sh;
                if (!(p[i++] & 0x80))
                    break;
            }
            if ((tag >> 3) == 9)
                *time_ns = v;
            else if ((tag >> 3) == 10)
                *dur_ns = v;
            else if ((tag >> 3) == 12)
                *period = v;
        } else if (wire == 2) {
            for (unsigned sh = 0; i < n && sh < 64; sh += 7) {
                v |= (uint64_t)(p[i] & 0x7f) << sh;
                if (!(p[i++] & 0x80))
                    break;
            }
            if (v > n - i)
                return;
            i += (size_t)v;
        } else if (wire == 1 || wire == 5) {
            i += wire == 1 ? 8 : 4;
        } else {
            return;
        }
    }
}

/* Go's time.Time.String() of t_ms in UTC, as Pyroscope's messages print times:
 * "2006-01-02 15:04:05.123 +0000 UTC", the fraction without trailing zeros. */
static const char *go_time(char *buf, size_t n, int64_t t_ms) {
    time_t t = (time_t)(t_ms >= 0 ? t_ms / 1000 : (t_ms - 999) / 1000);
    int ms = (int)(t_ms - (int64_t)t * 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    size_t k = strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm);
    int digits = 3;
    for (; ms && ms % 10 == 0; ms /= 10)
        digits--;
    if (ms)
        k += (size_t)snprintf(buf + k, n - k, ".%0*d", digits, ms);
    snprintf(buf + k, n - k, " +0000 UTC");
    return buf;
}

/* Pyroscope's ingestion window (reject_older_than, reject_newer_than; pkg/validation): the
 * profile's time, in milliseconds, strictly inside (now - older, now + newer). */
static int check_window(const struct pa_coll_ingest_request *rq,
                        const struct pa_coll_ingest_result *res, int64_t t_ms, int status,
                        pa_error *err) {
    const struct pa_coll_ingest_rules *r = &rq->rules;
    int64_t now_ms = rq->now * 1000;
    int64_t start = r->reject_older_than ? now_ms - r->reject_older_than * 1000 : 0;
    int64_t end = r->reject_newer_than ? now_ms + r->reject_newer_than * 1000 : 0;
    if ((!start || t_ms > start) && (!end || t_ms < end))
        return 0;
    char when[64], from[64], to[64], window[160];
    if (start && end)
        snprintf(window, sizeof window, "the ingestion window starts at %s and ends at %s",
                 go_time(from, sizeof from, start), go_time(to, sizeof to, end));
    else if (start)
        snprintf(window, sizeof window, "the ingestion window starts at %s",
                 go_time(from, sizeof from, start));
    else
        snprintf(window, sizeof window, "the ingestion window ends at %s",
                 go_time(to, sizeof to, end));
    /* The labels as Pyroscope prints them: {service_name="APP", k="v", ...}. */
    pa_buf ls = {0};
    pa_buf_puts(&ls, "{service_name=");
    pa_series_put_quoted(&ls, res->series.app);
    for (size_t i = 0; i < res->series.nlabels; i++) {
        pa_buf_printf(&ls, ", %s=", res->series.labels[i].key);
        pa_series_put_quoted(&ls, res->series.labels[i].value);
    }
    fail(status, err,
         "profile with labels '%s}' is outside of ingestion window (profile timestamp: %s, %s)",
         ls.data, go_time(when, sizeof when, t_ms), window);
    pa_buf_free(&ls);
    return status;
}

/* Pyroscope's folded parser (pkg/og/convert/parser.go) reads each line's text after its last
 * space as an integer count and skips a line without a space: a pyagent "#" header, Austin's
 * metadata or a "#t" timeline line is refused as its Atoi is. */
static int check_flamegraph_lines(const uint8_t *data, size_t len, pa_error *err) {
    for (size_t i = 0; i < len;) {
        const uint8_t *nl = memchr(data + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - data) : len, e = end;
        if (e > i && data[e - 1] == '\r')
            e--;
        size_t sp = e;
        while (sp > i && data[sp - 1] != ' ')
            sp--;
        if (sp > i) {
            size_t k = sp;
            if (k < e && (data[k] == '+' || data[k] == '-'))
                k++;
            size_t digits = k;
            while (k < e && data[k] >= '0' && data[k] <= '9')
                k++;
            if (k == digits || k != e)
                return fail(422, err,
                            "folded: strconv.Atoi: parsing \"%.*s\": invalid syntax (Grafana "
                            "Pyroscope's folded format is flamegraph.pl's 'frame;frame COUNT' "
                            "lines only; the collector's --folded-dialects takes the others)",
                            (int)(e - sp > 64 ? 64 : e - sp), (const char *)data + sp);
        }
        i = end + 1;
    }
    return 0;
}

/* The profile type of a strict folded upload, from its name's suffix as Pyroscope reads it:
 * none or cpu and itimer (process_cpu), wall; anything else is refused. "APP.itimer" is stored
 * as "APP.cpu" (*typed, malloc'ed). */
static int folded_type(const char *app, char **typed, pa_error *err) {
    const char *dot = strrchr(app, '.');
    if (dot == NULL || strcmp(dot, ".cpu") == 0 || strcmp(dot, ".wall") == 0)
        return 0;
    if (strcmp(dot, ".itimer") == 0) {
        size_t n = (size_t)(dot - app) + 5;
        if ((*typed = malloc(n)) == NULL)
            return fail(500, err, "out of memory");
        snprintf(*typed, n, "%.*s.cpu", (int)(dot - app), app);
        return 0;
    }
    return fail(400, err,
                "name: unknown profile type: %.32s (Grafana Pyroscope's folded path knows cpu, "
                "itimer and wall; send pprof, or run the collector with --folded-dialects)",
                dot + 1);
}

static int decode_pprof(pa_profile *p, const uint8_t *data, size_t len, size_t limit,
                        struct pa_coll_share *share, uint64_t *stacks, uint64_t *time_ns,
                        pa_error *err) {
    uint8_t *plain = NULL;
    if (pa_coll_is_gzip(data, len)) {
        int rc = pa_coll_gunzip(data, len, limit, share, &plain, &len, err);
        if (rc)
            return rc;
        data = plain;
    }
    uint64_t dur = 0, period = 0;
    pa_coll_pprof_times(data, len, time_ns, &dur, &period);
    pa_parse_stats stats;
    pa_error perr = {{0}};
    memset(&stats, 0, sizeof stats);
    int rc = len == 0 ? 0 : pa_pprof_decode(p, data, len, &stats, &perr);
    free(plain);
    if (rc != 0)
        return fail(422, err, "pprof: %s", perr.msg[0] ? perr.msg : "cannot decode");
    if (stats.bad_utf8)
        return fail(422, err,
                    "pprof: %llu string(s) of the string table are not valid UTF-8 (Grafana "
                    "Pyroscope refuses the whole profile)",
                    (unsigned long long)stats.bad_utf8);
    *stacks = stats.stacks;
    return 0;
}

/* Grafana Pyroscope takes a pprof upload's whole name as its service and the profile type
 * from its sample types (the agent names pprof uploads "APP"); this store keys series by
 * "APP.MODE", as folded uploads name them. A pprof upload whose name does not end in a mode
 * gets the one its sample types say ("wall", "gil", else "cpu"). */
static char *typed_app(const char *app, const char *mode) {
    static const char *const modes[] = {"cpu", "wall", "gil"};
    const char *dot = strrchr(app, '.');
    for (size_t i = 0; dot && i < sizeof modes / sizeof modes[0]; i++)
        if (strcmp(dot + 1, modes[i]) == 0)
            return NULL;
    if (mode == NULL)
        return NULL;
    size_t n = strlen(app) + strlen(mode) + 2;
    char *out = malloc(n);
    if (out)
        snprintf(out, n, "%s.%s", app, mode);
    return out;
}

static int decode_folded(pa_profile *p, uint8_t *data, size_t len, bool strict, uint64_t *dropped,
                         uint64_t *stacks, pa_error *err) {
    if (pa_coll_is_gzip(data, len))
        return fail(422, err,
                    "folded: the body is gzip-compressed but Content-Encoding: gzip is not set "
                    "(Grafana Pyroscope would reject it too)");
    /* Pyroscope drops lines over 64 KiB and keeps the rest; so do we, and say how many. */
    *dropped = pa_coll_drop_long_lines(data, &len, PA_COLL_MAX_LINE);
    bool blank = true;
    for (size_t i = 0; i < len && blank; i++)
        blank = data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t';
    if (blank)
        return 0; /* an idle interval: nothing sampled is a valid profile */
    int rc = strict ? check_flamegraph_lines(data, len, err) : 0;
    if (rc)
        return rc;
    pa_parse_stats stats;
    pa_error perr = {{0}};
    memset(&stats, 0, sizeof stats);
    if (pa_profile_parse_buffer(p, data, len, "upload", &stats, &perr) != 0)
        return fail(422, err, "folded: %s", perr.msg[0] ? perr.msg : "cannot parse");
    if (stats.format == PA_FORMAT_PPROF)
        return fail(422, err, "folded: the body is a pprof profile; send format=pprof");
    if (stats.bad_lines > 0)
        return fail(422, err,
                    "folded: line %llu is not 'frame;frame;... count' (%llu malformed lines)",
                    (unsigned long long)stats.first_bad_line, (unsigned long long)stats.bad_lines);
    if (!pa_utf8_valid((const char *)data, len)) /* well-formed, but Pyroscope cannot store it */
        return fail(400, err, "folded: the text is not valid UTF-8");
    *stacks = stats.stacks;
    return 0;
}

/* The canonical labels of a label set's series: the upload's, and the set's (the set's win,
 * as a sample's labels are the more specific), by Pyroscope's rules: names [A-Za-z0-9_.] not
 * first a digit, those starting "__" dropped, service_name refused, at most
 * PA_COLL_MAX_LABELS in all. */
static int part_labels(const struct pa_coll_series *series, const char *text, size_t len,
                       int status, char **out, pa_error *err) {
    struct pa_coll_series s = *series; /* the upload's pairs, pointing into its buffer */
    char *copy = malloc(len + 1), *at = copy, *k, *v;
    if (!copy)
        return fail(500, err, "out of memory");
    memcpy(copy, text, len);
    copy[len] = '\0';
    int r, rc = 0;
    while (rc == 0 && (r = pa_series_split(&at, &k, &v)) == 1) {
        bool ok = *k && !(*k >= '0' && *k <= '9') && strlen(k) <= PA_COLL_MAX_KEY_LEN &&
                  strlen(v) <= PA_COLL_MAX_VALUE_LEN;
        for (const char *c = k; ok && *c; c++)
            ok = pa_series_label_char(*c);
        if (!ok) {
            rc = fail(status, err, "sample labels: label '%.64s' is not a valid label", k);
            break;
        }
        if (strncmp(k, "__", 2) == 0 || !*v)
            continue;
        if (strcmp(k, "service_name") == 0) {
            rc = fail(status, err, "sample labels: service_name is the upload's, not a sample's");
            break;
        }
        size_t i = 0;
        while (i < s.nlabels && strcmp(s.labels[i].key, k) < 0)
            i++;
        if (i < s.nlabels && strcmp(s.labels[i].key, k) == 0) {
            s.labels[i].value = v;
            continue;
        }
        if (s.nlabels == PA_COLL_MAX_LABELS) {
            rc = fail(status, err, "sample labels: more than %d labels with the upload's",
                      PA_COLL_MAX_LABELS);
            break;
        }
        memmove(&s.labels[i + 1], &s.labels[i], (s.nlabels - i) * sizeof s.labels[0]);
        s.labels[i] = (struct pa_coll_label){k, v};
        s.nlabels++;
    }
    if (rc == 0 && r < 0)
        rc = fail(status, err, "sample labels: '%.64s' is not a label text", text);
    if (rc == 0 && (*out = pa_coll_series_labels(&s)) == NULL)
        rc = fail(500, err, "out of memory");
    free(copy);
    return rc;
}

/* Labelled samples (a labels:TEXT frame: pprof's sample labels, or pyagent's folded frame)
 * are series of their own, as Grafana Pyroscope files pprof sample labels: each label set's
 * samples go to res->parts, and *pp keeps the unlabelled ones. */
static int split_labels(pa_profile **pp, struct pa_coll_ingest_result *res, int status,
                        pa_error *err) {
    uint32_t *sets;
    size_t n = pa_profile_label_sets(*pp, &sets);
    if (n == 0)
        return 0;
    /* span_id (span profiles: pyagent.SpanProcessor, Pyroscope's SDKs) names one request: a
     * series per request would grow without bound. Its samples keep their other labels
     * (span_name, ...) and lose span_id (docs/collector-api.md, "Labelled samples"). */
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *text = pa_profile_frame(*pp, sets[i], &len);
        if (memmem(text, len, "span_id=", 8)) {
            pa_profile *q = pa_profile_transform(*pp, &(pa_transform){.drop_label = "span_id"});
            pa_profile_free(*pp);
            *pp = q;
            free(sets);
            if ((n = pa_profile_label_sets(*pp, &sets)) == 0)
                return 0;
            break;
        }
    }
    int rc = 0;
    res->parts = calloc(n, sizeof *res->parts);
    if (!res->parts)
        rc = fail(500, err, "out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        struct pa_coll_ingest_part *part = &res->parts[res->nparts++];
        size_t len;
        const char *text = pa_profile_frame(*pp, sets[i], &len);
        rc = part_labels(&res->series, text + PA_LABELS_PREFIX_LEN, len - PA_LABELS_PREFIX_LEN,
                         status, &part->labels, err);
        if (rc)
            break;
        pa_profile *q = pa_profile_labelled(*pp, sets[i]);
        part->samples = pa_profile_total(q);
        part->stacks = pa_profile_stack_count(q);
        if (pa_coll_profile_blob(q, &part->blob, &part->blob_len) != 0)
            rc = fail(500, err, "cannot encode the profile");
        pa_profile_free(q);
    }
    if (rc == 0) {
        pa_profile *rest = pa_profile_labelled(*pp, UINT32_MAX);
        res->stacks = pa_profile_stack_count(rest);
        pa_profile_free(*pp);
        *pp = rest;
    }
    free(sets);
    return rc;
}

int pa_coll_ingest_decode(const struct pa_coll_ingest_request *rq,
                          struct pa_coll_ingest_result *res, pa_error *err) {
    memset(res, 0, sizeof *res);
    int rc = pa_coll_series_parse(&res->series, rq->name, err);
    if (rc)
        return rc;
    if ((res->labels = pa_coll_series_labels(&res->series)) == NULL)
        return fail(500, err, "out of memory");
    if (pa_coll_parse_timestamp(rq->from, rq->now, 0, &res->from) != 0)
        return fail(400, err, "from: '%.32s' is not a timestamp", rq->from);
    if (pa_coll_parse_timestamp(rq->until, rq->now, 1, &res->until) != 0)
        return fail(400, err, "until: '%.32s' is not a timestamp", rq->until);
    if (res->until < res->from)
        return fail(400, err, "until (%lld) is before from (%lld)", (long long)res->until,
                    (long long)res->from);
    if ((rc = parse_rate(rq->sample_rate, &res->sample_rate, err)))
        return rc;
    bool pprof;
    if ((rc = format_of(rq->format, &pprof, err)))
        return rc;
    /* Pyroscope's label validation ([A-Za-z_][A-Za-z0-9_]* once '.' is '_'), 422 on its pprof
     * path and 400 on its folded one. */
    for (size_t i = 0; i < res->series.nlabels; i++)
        if (res->series.labels[i].key[0] >= '0' && res->series.labels[i].key[0] <= '9')
            return fail(pprof ? 422 : 400, err, "labels: label name '%.64s' starts with a digit",
                        res->series.labels[i].key);

    const uint8_t *data;
    size_t len;
    uint8_t *owned;
    struct pa_coll_share share = {rq->budget, 0};
    if ((rc = unwrap(rq, &share, &data, &len, &owned, err))) {
        free(owned);
        pa_coll_share_release(&share);
        return rc;
    }
    pa_profile *p = pa_profile_new();
    uint64_t time_nanos = 0;
    if (pprof) {
        rc = decode_pprof(p, data, len, rq->max_decompressed, &share, &res->stacks, &time_nanos,
                          err);
    } else {
        /* Dropping long lines edits the text, so it needs a writable copy, unless the text
         * is the caller's scratch body (or in it: a multipart field) or gunzip's output. */
        uint8_t *text = owned;
        if (text == NULL && rq->body_scratch && len != 0)
            text = (uint8_t *)data; /* the caller's buffer, or a multipart field in it */
        else if (text == NULL)
            text = owned = malloc(len ? len : 1);
        if (text == NULL) {
            rc = fail(500, err, "out of memory");
        } else {
            if (text != data)
                memmove(text, data, len); /* data may point into owned (multipart) */
            rc = decode_folded(p, text, len, rq->rules.folded_strict, &res->dropped_lines,
                               &res->stacks, err);
        }
    }
    free(owned);
    pa_coll_share_release(&share);
    if (rc == 0 && !pprof && rq->rules.folded_strict)
        rc = folded_type(res->series.app, &res->typed_app, err);
    if (rc == 0) {
        /* The profile's own time: the caller's, else pprof's time_nanos (unless in 1970, a
         * duration mistaken for a time), else from, as Pyroscope's ingest path reads it. */
        int64_t t_ns = rq->time_ns;
        if (t_ns == 0 && pprof && time_nanos >= 365 * 86400 * INT64_C(1000000000))
            t_ns = (int64_t)time_nanos;
        int64_t t_ms = t_ns ? t_ns / 1000000 : res->from * 1000;
        rc = check_window(rq, res, t_ms, pprof ? 422 : 400, err);
    }
    if (rc == 0 && pprof &&
        (res->typed_app = typed_app(res->series.app, pa_profile_meta(p, "mode"))) &&
        !pa_coll_valid_app(res->typed_app))
        rc = fail(400, err, "name: the application name is longer than %d bytes",
                  PA_COLL_MAX_APP_LEN);
    if (rc == 0)
        rc = split_labels(&p, res, pprof ? 422 : 400, err);
    if (rc == 0) {
        res->samples = pa_profile_total(p);
        /* Stored as pprof, gzip'd: each frame string once and stacks as location ids, so
         * the blob is several times smaller than folded text before compression, which is
         * where ingest spends its CPU (see docs/collector-api.md, "Storage"). */
        if (pa_coll_profile_blob(p, &res->blob, &res->blob_len) != 0)
            rc = fail(500, err, "cannot encode the profile");
    }
    pa_profile_free(p);
    return rc;
}

struct pa_coll_upload pa_coll_upload_of(const struct pa_coll_ingest_result *res,
                                        const char *spy_name) {
    return (struct pa_coll_upload){
        .app = res->typed_app ? res->typed_app : res->series.app,
        .labels = res->labels,
        .from = res->from,
        .until = res->until,
        .samples = res->samples,
        .stacks = res->stacks,
        .sample_rate = res->sample_rate,
        .spy_name = spy_name,
        .dropped_lines = res->dropped_lines,
        .profile = res->blob,
        .profile_len = res->blob_len,
    };
}

int pa_coll_profile_blob(const pa_profile *p, uint8_t **out, size_t *len) {
    pa_buf pb = {0};
    pa_error perr = {{0}};
    int rc = pa_pprof_encode(p, 0, &pb, &perr) != 0 ||
                     pa_coll_gzip((const uint8_t *)pb.data, pb.len, out, len) != 0
                 ? -1
                 : 0;
    pa_buf_free(&pb);
    return rc;
}

void pa_coll_ingest_result_free(struct pa_coll_ingest_result *res) {
    for (size_t i = 0; i < res->nparts; i++) {
        free(res->parts[i].labels);
        free(res->parts[i].blob);
    }
    free(res->parts);
    pa_coll_series_free(&res->series);
    free(res->labels);
    free(res->blob);
    free(res->typed_app);
    memset(res, 0, sizeof *res);
}
