/* push.c: Grafana Pyroscope's Push API (see push.h). A request is decoded and every profile
 * in it checked before the first is stored: a client told 400 resends nothing of it, and one
 * told 200 has every profile stored (each committed as /ingest commits its uploads). */
#include "push.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "connect.h"
#include "name.h"
#include "push/v1/push.pb-c.h"

static int fail(pa_error *err, int status, const char *what) {
    pa_fail(err, "%s", what);
    return status;
}

ProtobufCMessage *pa_coll_proto_decode(const struct pa_coll_proto_request *rq,
                                       const ProtobufCMessageDescriptor *d, int codec, int *status,
                                       pa_error *err) {
    const uint8_t *body = rq->body;
    size_t len = rq->body_len;
    uint8_t *owned = NULL;
    struct pa_coll_share share = {rq->budget, 0};
    const char *ce = rq->content_encoding;
    *status = 0;
    if (ce && *ce && strcasecmp(ce, "identity") != 0) {
        if (strcasecmp(ce, "gzip") != 0)
            *status = fail(err, 415, "Content-Encoding: only gzip or none are supported");
        else
            *status = pa_coll_gunzip(rq->body, rq->body_len, rq->max_decompressed, &share, &owned,
                                     &len, err);
        body = owned;
    }
    ProtobufCMessage *m = NULL;
    if (*status == 0 && !(m = pa_coll_connect_decode(d, (enum pa_coll_codec)codec, body, len, err)))
        *status = 400;
    free(owned);
    pa_coll_share_release(&share);
    return m;
}

/* ---- labels ----------------------------------------------------------------------------- */

/* Pyroscope's legacy label-name check, with '.' read as '_' (SanitizeLegacyLabelName). */
static int sanitize_name(const char *in, char *out, size_t outlen) {
    size_t n = strlen(in);
    if (n == 0 || n >= outlen)
        return -1;
    for (size_t i = 0; i < n; i++) {
        char c = in[i] == '.' ? '_' : in[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                 (i > 0 && c >= '0' && c <= '9');
        if (!ok)
            return -1;
        out[i] = c;
    }
    out[n] = 0;
    return 0;
}

static int cmp_pair(const void *a, const void *b) {
    return strcmp(((const struct pa_coll_pair *)a)->name, ((const struct pa_coll_pair *)b)->name);
}

int pa_coll_push_name(pa_buf *out, const char *service, const char *type,
                      const struct pa_coll_pair *labels, size_t n, pa_error *err) {
    if (n > PA_COLL_MAX_LABELS) {
        pa_fail(err, "profile series has %zu label names; limit %d", n, PA_COLL_MAX_LABELS);
        return 400;
    }
    if (!service || !*service)
        return fail(err, 400, "invalid labels: service name is not provided");
    struct pa_coll_pair kept[PA_COLL_MAX_LABELS];
    char names[PA_COLL_MAX_LABELS][PA_COLL_MAX_KEY_LEN + 1];
    size_t nk = 0;
    for (size_t i = 0; i < n; i++) {
        if (strlen(labels[i].name) > PA_COLL_MAX_KEY_LEN) {
            pa_fail(err, "label name too long: '%.64s...'", labels[i].name);
            return 400;
        }
        if (strlen(labels[i].value) > PA_COLL_MAX_VALUE_LEN) {
            pa_fail(err, "label value too long: the value of '%.64s'", labels[i].name);
            return 400;
        }
        if (sanitize_name(labels[i].name, names[nk], sizeof names[nk]) != 0) {
            pa_fail(err, "invalid label name '%.64s'", labels[i].name);
            return 400;
        }
        for (size_t k = 0; k < nk; k++)
            if (strcmp(names[k], names[nk]) == 0) {
                pa_fail(err, "duplicate label name: '%.64s'", names[nk]);
                return 400;
            }
        if (strncmp(names[nk], "__", 2) == 0 || strcmp(names[nk], "service_name") == 0 ||
            strcmp(names[nk], "pyroscope_spy") == 0) {
            nk++; /* counted for duplicates, but Pyroscope's own: not a label of the series */
            continue;
        }
        kept[nk] = (struct pa_coll_pair){names[nk], labels[i].value};
        nk++;
    }
    /* Only the kept ones (not "__" names) go into the name, sorted. */
    struct pa_coll_pair sorted[PA_COLL_MAX_LABELS];
    size_t ns = 0;
    for (size_t k = 0; k < nk; k++)
        if (strncmp(names[k], "__", 2) != 0 && strcmp(names[k], "service_name") != 0 &&
            strcmp(names[k], "pyroscope_spy") != 0)
            sorted[ns++] = kept[k];
    qsort(sorted, ns, sizeof *sorted, cmp_pair);
    /* Our series names keep [A-Za-z0-9_./-]: a service named otherwise (OpenTelemetry's
     * "unknown_service:node") is stored with '_' for the others. */
    size_t start = out->len;
    for (const char *s = service; *s; s++) {
        char c = *s;
        pa_buf_append(out, pa_series_app_char(c) ? &c : "_", 1);
    }
    if (out->len - start > PA_COLL_MAX_APP_LEN - 16)
        return fail(err, 400, "the service name is too long");
    if (type && *type)
        pa_buf_printf(out, ".%s", strcmp(type, "process_cpu") == 0 ? "cpu" : type);
    pa_buf_puts(out, "{");
    for (size_t i = 0; i < ns; i++) {
        pa_buf_printf(out, "%s%s=", i ? "," : "", sorted[i].name);
        pa_series_put_value(out, sorted[i].value); /* quoted where it must be (series.c) */
    }
    pa_buf_puts(out, "}");
    return 0;
}

/* ---- the batch -------------------------------------------------------------------------- */

int pa_coll_batch_add(struct pa_coll_batch *b, const char *name, const char *spy, const char *id,
                      int64_t from, int64_t until, uint64_t time_ns, int64_t rate,
                      const uint8_t *pprof, size_t len, const struct pa_coll_proto_request *rq,
                      pa_error *err) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 8;
        struct pa_coll_ingest_result *v = realloc(b->v, cap * sizeof *v);
        if (v)
            b->v = v;
        char **spies = v ? realloc(b->spy, cap * sizeof *spies) : NULL;
        if (spies)
            b->spy = spies;
        char **ids = spies ? realloc(b->id, cap * sizeof *ids) : NULL;
        if (!ids)
            return fail(err, 503, "out of memory; retry later");
        b->id = ids;
        b->cap = cap;
    }
    char f[32], u[32], r[32];
    snprintf(f, sizeof f, "%lld", (long long)from);
    snprintf(u, sizeof u, "%lld", (long long)until);
    snprintf(r, sizeof r, "%lld", (long long)rate);
    struct pa_coll_ingest_request in = {
        .name = name,
        .from = f,
        .until = u,
        .sample_rate = rate > 0 ? r : NULL,
        .format = "pprof",
        .body = pprof,
        .body_len = len,
        .max_decompressed = rq->max_decompressed,
        .budget = rq->budget,
        .now = rq->now,
        .time_ns = time_ns ? (int64_t)time_ns : rq->now * 1000000000,
        .rules = rq->rules,
    };
    struct pa_coll_ingest_result *res = &b->v[b->n];
    int rc = pa_coll_ingest_decode(&in, res, err);
    if (rc) {
        pa_coll_ingest_result_free(res);
        return rc;
    }
    b->id[b->n] = NULL;
    if (!(b->spy[b->n] = strdup(spy)) || (id && *id && !(b->id[b->n] = strdup(id)))) {
        free(b->spy[b->n]);
        pa_coll_ingest_result_free(res);
        return fail(err, 503, "out of memory; retry later");
    }
    b->n++;
    return 0;
}

int pa_coll_batch_finish(struct pa_coll_store *st, struct pa_coll_batch *b, int status,
                         pa_error *err) {
    for (size_t i = 0; status == 0 && i < b->n; i++)
        status = pa_coll_store_ingested(st, &b->v[i], b->spy[i], b->id[i], err);
    for (size_t i = 0; i < b->n; i++) {
        pa_coll_ingest_result_free(&b->v[i]);
        free(b->spy[i]);
        free(b->id[i]);
    }
    free(b->v);
    free(b->spy);
    free(b->id);
    memset(b, 0, sizeof *b);
    return status;
}

/* ---- Push ------------------------------------------------------------------------------- */

/* One series' profiles into the batch. */
static int add_series(struct pa_coll_batch *b, const Push__V1__RawProfileSeries *s,
                      const struct pa_coll_proto_request *rq, pa_error *err) {
    struct pa_coll_pair ls[PA_COLL_MAX_LABELS + 1];
    const char *service = NULL, *type = NULL, *spy = NULL;
    if (s->n_labels > PA_COLL_MAX_LABELS) {
        pa_fail(err, "profile series has %zu label names; limit %d", s->n_labels,
                PA_COLL_MAX_LABELS);
        return 400;
    }
    for (size_t i = 0; i < s->n_labels; i++) {
        ls[i] = (struct pa_coll_pair){s->labels[i]->name, s->labels[i]->value};
        if (strcmp(ls[i].name, "service_name") == 0)
            service = ls[i].value;
        else if (strcmp(ls[i].name, "__name__") == 0)
            type = ls[i].value;
        else if (strcmp(ls[i].name, "pyroscope_spy") == 0)
            spy = ls[i].value; /* the client, as /ingest's spyName: not a label of the series */
    }
    if (!type || !*type) { /* Pyroscope: an empty metric name is invalid */
        pa_fail(err, "profile name (__name__) is required");
        return 400;
    }
    pa_buf name = {0};
    int rc = pa_coll_push_name(&name, service, type, ls, s->n_labels, err);
    for (size_t k = 0; rc == 0 && k < s->n_samples; k++) {
        const ProtobufCBinaryData *raw = &s->samples[k]->raw_profile;
        struct pa_coll_share share = {rq->budget, 0};
        uint8_t *plain = NULL;
        const uint8_t *data = raw->data ? raw->data : (const uint8_t *)"";
        size_t len = raw->len;
        if (pa_coll_is_gzip(data, len)) {
            rc = pa_coll_gunzip(data, len, rq->max_decompressed, &share, &plain, &len, err);
            data = plain;
        }
        uint64_t t = 0, dur = 0, period = 0;
        if (rc == 0) {
            pa_coll_pprof_times(data, len, &t, &dur, &period);
            /* Like Pyroscope, a profile without a time is taken as of now. */
            int64_t from = t ? (int64_t)(t / 1000000000u) : rq->now;
            int64_t until = from + (dur >= 1000000000u ? (int64_t)(dur / 1000000000u) : 1);
            int64_t rate =
                period > 0 && period <= 1000000000u ? (int64_t)(1000000000u / period) : 0;
            /* The sample's ID: Pyroscope's clients set a random one per profile (ours: a
             * UUID, spooled with the body), so a resend is stored once (store.h). */
            rc = pa_coll_batch_add(b, name.data, spy ? spy : "push", s->samples[k]->id, from, until,
                                   t, rate, data, len, rq, err);
        }
        free(plain);
        pa_coll_share_release(&share);
    }
    pa_buf_free(&name);
    return rc;
}

void pa_coll_handle_push(struct pa_coll_store *st, const struct pa_coll_proto_request *rq,
                         struct pa_coll_response *r) {
    pa_error err = {""};
    enum pa_coll_codec codec;
    if (pa_coll_connect_codec(rq->content_type, &codec) != 0) {
        pa_coll_respond_text(r, 415,
                             "Content-Type: '%.64s' is not a Connect codec (application/proto or "
                             "application/json)",
                             rq->content_type ? rq->content_type : "");
        return;
    }
    int rc;
    Push__V1__PushRequest *req = (Push__V1__PushRequest *)pa_coll_proto_decode(
        rq, &push__v1__push_request__descriptor, codec, &rc, &err);
    struct pa_coll_batch b = {0};
    for (size_t i = 0; rc == 0 && req && i < req->n_series; i++)
        rc = add_series(&b, req->series[i], rq, &err);
    rc = pa_coll_batch_finish(st, &b, rc, &err);
    if (req)
        protobuf_c_message_free_unpacked(&req->base, NULL);
    if (rc) {
        pa_coll_connect_error(r, rc, err.msg);
        return;
    }
    Push__V1__PushResponse resp = PUSH__V1__PUSH_RESPONSE__INIT;
    pa_coll_connect_respond(r, codec, &resp.base);
}
