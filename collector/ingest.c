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

static int decode_pprof(pa_profile *p, const uint8_t *data, size_t len, size_t limit,
                        struct pa_coll_share *share, uint64_t *stacks, pa_error *err) {
    uint8_t *plain = NULL;
    if (pa_coll_is_gzip(data, len)) {
        int rc = pa_coll_gunzip(data, len, limit, share, &plain, &len, err);
        if (rc)
            return rc;
        data = plain;
    }
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

static int decode_folded(pa_profile *p, uint8_t *data, size_t len, uint64_t *dropped,
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
    if (pprof) {
        rc = decode_pprof(p, data, len, rq->max_decompressed, &share, &res->stacks, err);
    } else {
        /* Dropping long lines edits the text, so it needs a writable copy. */
        uint8_t *copy = owned ? owned : malloc(len ? len : 1);
        if (copy == NULL) {
            rc = fail(500, err, "out of memory");
        } else {
            if (copy != data)
                memmove(copy, data, len); /* data may point into owned (multipart) */
            owned = copy;
            rc = decode_folded(p, copy, len, &res->dropped_lines, &res->stacks, err);
        }
    }
    free(owned);
    pa_coll_share_release(&share);
    if (rc == 0 && pprof &&
        (res->typed_app = typed_app(res->series.app, pa_profile_meta(p, "mode"))) &&
        !pa_coll_valid_app(res->typed_app))
        rc = fail(400, err, "name: the application name is longer than %d bytes",
                  PA_COLL_MAX_APP_LEN);
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
    pa_coll_series_free(&res->series);
    free(res->labels);
    free(res->blob);
    free(res->typed_app);
    memset(res, 0, sizeof *res);
}
