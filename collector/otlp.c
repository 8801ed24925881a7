/* otlp.c: OpenTelemetry profiles (POST /v1development/profiles, OTLP/HTTP with a protobuf
 * ExportProfilesServiceRequest body; profiles/v1development), so that OpenTelemetry's eBPF
 * profiler or an OpenTelemetry Collector can feed the collector.
 *
 * The rules are Grafana Pyroscope's (pkg/ingester/otlp): the service is the resource's
 * service.name (else "unknown_service", with ":" and process.executable.name when given), or
 * a sample's own service.name; the resource's and the scope's string attributes are the
 * series' labels; the profile type's name is process_cpu for samples/count with a
 * cpu/nanoseconds period (the eBPF profiler's, whose counts become CPU time), off_cpu for
 * off_cpu/nanoseconds, else the period type's name (wall, ...). Each profile is converted to
 * the collector's model (frames "function (file:line)", root first; an unsymbolized location
 * "0xADDRESS [mapping file]") with counts: values in nanoseconds with a period are divided by
 * it, others kept. It is then stored through the same path as a Push (push.h). The whole
 * request is checked before anything is stored. */
#include "otlp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "connect.h"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb-c.h"
#include "push.h"

typedef Opentelemetry__Proto__Profiles__V1development__ProfilesDictionary Dictionary;
typedef Opentelemetry__Proto__Profiles__V1development__Profile Profile;
typedef Opentelemetry__Proto__Common__V1__KeyValue KeyValue;
typedef Opentelemetry__Proto__Common__V1__AnyValue AnyValue;
typedef Opentelemetry__Proto__Collector__Profiles__V1development__ExportProfilesServiceRequest
    Request;

static int fail(pa_error *err, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(pa_error *err, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pa_vfail(err, fmt, ap);
    va_end(ap);
    return status;
}

/* table[i] when i is inside the table, else NULL. */
#define AT(table, n, i) ((i) >= 0 && (size_t)(i) < (n) ? (table)[i] : NULL)

static const char *str_at(const Dictionary *d, int32_t i) {
    return i >= 0 && (size_t)i < d->n_string_table ? d->string_table[i] : NULL;
}

/* A string value: string_value, or string_value_strindex into the dictionary. */
static const char *any_string(const AnyValue *v, const Dictionary *d) {
    if (!v)
        return NULL;
    if (v->value_case == OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE)
        return v->string_value;
    if (v->value_case == OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE_STRINDEX)
        return str_at(d, v->string_value_strindex);
    return NULL;
}

static const char *kv_string(KeyValue *const *kv, size_t n, const char *key, const Dictionary *d) {
    for (size_t i = 0; i < n; i++) {
        const char *k = kv[i]->key && *kv[i]->key ? kv[i]->key : str_at(d, kv[i]->key_strindex);
        if (k && strcmp(k, key) == 0)
            return any_string(kv[i]->value, d);
    }
    return NULL;
}

/* A sample's service.name attribute, or NULL. */
static const char *sample_service(const Opentelemetry__Proto__Profiles__V1development__Sample *s,
                                  const Dictionary *d) {
    for (size_t i = 0; i < s->n_attribute_indices; i++) {
        const Opentelemetry__Proto__Profiles__V1development__KeyValueAndUnit *a =
            AT(d->attribute_table, d->n_attribute_table, s->attribute_indices[i]);
        const char *k = a ? str_at(d, a->key_strindex) : NULL;
        if (k && strcmp(k, "service.name") == 0)
            return any_string(a->value, d);
    }
    return NULL;
}

/* A sample's other string attributes (not service.name or thread.name, which the stack's
 * thread root already says) are its labels: the labels:TEXT frame (profile.h), interned in
 * p, which the ingest files as labels of a series of its own; UINT32_MAX when it has none. */
static uint32_t sample_labels(pa_profile *p,
                              const Opentelemetry__Proto__Profiles__V1development__Sample *s,
                              const Dictionary *d) {
    pa_label_pair pairs[PA_COLL_MAX_LABELS];
    size_t n = 0;
    for (size_t i = 0; i < s->n_attribute_indices && n < PA_COLL_MAX_LABELS; i++) {
        const Opentelemetry__Proto__Profiles__V1development__KeyValueAndUnit *a =
            AT(d->attribute_table, d->n_attribute_table, s->attribute_indices[i]);
        const char *k = a ? str_at(d, a->key_strindex) : NULL,
                   *v = a ? any_string(a->value, d) : NULL;
        if (!k || !v || strcmp(k, "service.name") == 0 || strcmp(k, "thread.name") == 0)
            continue;
        size_t j = 0;
        while (j < n && strcmp(pairs[j].name, k) != 0)
            j++;
        pairs[j] = (pa_label_pair){k, v}; /* a name given twice: the last */
        n += j == n;
    }
    pa_buf text = {0};
    pa_buf_puts(&text, PA_LABELS_PREFIX);
    uint32_t frame = n && pa_series_labels_text(&text, pairs, n)
                         ? pa_profile_intern(p, text.data, text.len)
                         : UINT32_MAX;
    pa_buf_free(&text);
    return frame;
}

/* The frames of a location, leaf first, appended to frames (interned in p). */
static int location_frames(pa_profile *p, const Dictionary *d, int32_t li, uint32_t **frames,
                           size_t *n, size_t *cap, pa_error *err) {
    const Opentelemetry__Proto__Profiles__V1development__Location *loc =
        AT(d->location_table, d->n_location_table, li);
    if (!loc)
        return fail(err, 400, "a stack refers to a location out of the table");
    pa_buf name = {0};
    size_t lines = loc->n_lines ? loc->n_lines : 1;
    for (size_t k = 0; k < lines; k++) {
        name.len = 0;
        if (loc->n_lines) {
            const Opentelemetry__Proto__Profiles__V1development__Line *ln = loc->lines[k];
            const Opentelemetry__Proto__Profiles__V1development__Function *f =
                AT(d->function_table, d->n_function_table, ln->function_index);
            const char *fn = f ? str_at(d, f->name_strindex) : NULL;
            const char *file = f ? str_at(d, f->filename_strindex) : NULL;
            if (!f) {
                pa_buf_free(&name);
                return fail(err, 400, "a line refers to a function out of the table");
            }
            pa_buf_puts(&name, fn && *fn ? fn : "<unknown>");
            if (file && *file) {
                pa_buf_printf(&name, " (%s", file);
                if (ln->line > 0)
                    pa_buf_printf(&name, ":%lld", (long long)ln->line);
                pa_buf_puts(&name, ")");
            }
        } else {
            const Opentelemetry__Proto__Profiles__V1development__Mapping *m =
                AT(d->mapping_table, d->n_mapping_table, loc->mapping_index);
            const char *file = m ? str_at(d, m->filename_strindex) : NULL;
            pa_buf_printf(&name, "0x%llx [%s]", (unsigned long long)loc->address,
                          file && *file ? file : "unknown");
        }
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 64;
            uint32_t *nf = realloc(*frames, *cap * sizeof **frames);
            if (!nf)
                abort();
            *frames = nf;
        }
        (*frames)[(*n)++] = pa_profile_intern(p, name.data, name.len);
    }
    pa_buf_free(&name);
    return 0;
}

/* What the profile measures: Pyroscope's __name__ and how a value becomes a count. */
static const char *profile_type(const Profile *pr, const Dictionary *d, int *divide) {
    const char *st = pr->sample_type ? str_at(d, pr->sample_type->type_strindex) : NULL;
    const char *su = pr->sample_type ? str_at(d, pr->sample_type->unit_strindex) : NULL;
    const char *pt =
        pr->period_type && pr->period ? str_at(d, pr->period_type->type_strindex) : NULL;
    const char *pu =
        pr->period_type && pr->period ? str_at(d, pr->period_type->unit_strindex) : NULL;
    st = st ? st : "", su = su ? su : "", pt = pt ? pt : "", pu = pu ? pu : "";
    *divide = strcmp(su, "nanoseconds") == 0 && pr->period > 0;
    if (strcmp(st, "samples") == 0 && strcmp(su, "count") == 0 && strcmp(pt, "cpu") == 0 &&
        strcmp(pu, "nanoseconds") == 0)
        return "process_cpu";
    if (strcmp(st, "off_cpu") == 0 && strcmp(su, "nanoseconds") == 0 && !*pt)
        return "off_cpu";
    return *pt ? pt : "process_cpu";
}

/* The id of a profile's upload for its si-th service: "otlp:HEX/SI" from its profile_id, so
 * that a resent request is stored once (store.h); "" when it has none (absent or all zero,
 * which OTLP calls invalid). */
static void upload_id(const Profile *pr, size_t si, char *out, size_t len) {
    const ProtobufCBinaryData *pid = &pr->profile_id;
    size_t nonzero = 0;
    for (size_t i = 0; i < pid->len; i++)
        nonzero += pid->data[i] != 0;
    if (nonzero == 0 || pid->len > 16)
        return;
    int n = snprintf(out, len, "otlp:");
    for (size_t i = 0; i < pid->len; i++)
        n += snprintf(out + n, len - (size_t)n, "%02x", pid->data[i]);
    snprintf(out + n, len - (size_t)n, "/%zu", si);
}

/* One profile: its samples per service, each service's converted and added to the batch. */
static int add_profile(struct pa_coll_batch *b, const Profile *pr, const Dictionary *d,
                       const char *service, const struct pa_coll_pair *labels, size_t nlabels,
                       const struct pa_coll_proto_request *rq, pa_error *err) {
    int divide;
    const char *type = profile_type(pr, d, &divide);
    int64_t from = pr->time_unix_nano ? (int64_t)(pr->time_unix_nano / 1000000000u) : rq->now;
    int64_t until =
        from + (pr->duration_nano >= 1000000000u ? (int64_t)(pr->duration_nano / 1000000000u) : 1);
    int64_t rate = pr->period > 0 && pr->period <= 1000000000 ? 1000000000 / pr->period : 0;
    /* Services in the order their first sample names them. */
    const char *services[64];
    size_t nservices = 0;
    for (size_t i = 0; i < pr->n_samples; i++) {
        const char *s = sample_service(pr->samples[i], d);
        s = s && *s ? s : service;
        size_t k = 0;
        while (k < nservices && strcmp(services[k], s) != 0)
            k++;
        if (k == nservices) {
            if (nservices == sizeof services / sizeof services[0])
                return fail(err, 400, "a profile names more than 64 services");
            services[nservices++] = s;
        }
    }
    int rc = 0;
    uint32_t *frames = NULL;
    size_t cap = 0;
    for (size_t si = 0; rc == 0 && si < nservices; si++) {
        pa_profile *p = pa_profile_new();
        for (size_t i = 0; rc == 0 && i < pr->n_samples; i++) {
            const Opentelemetry__Proto__Profiles__V1development__Sample *s = pr->samples[i];
            const char *svc = sample_service(s, d);
            if (strcmp(svc && *svc ? svc : service, services[si]) != 0)
                continue;
            int64_t v = s->n_values ? s->values[0] : (int64_t)s->n_timestamps_unix_nano;
            if (s->n_values == 0 && s->n_timestamps_unix_nano == 0) {
                rc = fail(err, 400, "sample value is required");
                break;
            }
            if (divide && v > 0) /* rounded, without overflowing near INT64_MAX */
                v = v / pr->period + (v % pr->period >= pr->period - pr->period / 2);
            const Opentelemetry__Proto__Profiles__V1development__Stack *st =
                AT(d->stack_table, d->n_stack_table, s->stack_index);
            if (!st) {
                rc = fail(err, 400, "invalid stack index");
                break;
            }
            size_t n = 0;
            for (size_t k = 0; rc == 0 && k < st->n_location_indices; k++)
                rc = location_frames(p, d, st->location_indices[k], &frames, &n, &cap, err);
            if (rc || v <= 0 || n == 0)
                continue;
            for (size_t a = 0, z = n - 1; a < z; a++, z--) { /* leaf first -> root first */
                uint32_t t = frames[a];
                frames[a] = frames[z];
                frames[z] = t;
            }
            uint32_t labels = sample_labels(p, s, d);
            if (labels != UINT32_MAX) { /* under the thread root, as the agent's folded has it */
                size_t len, at = 0;
                const char *root = pa_profile_frame(p, frames[0], &len);
                if (len >= 7 && memcmp(root, "thread:", 7) == 0)
                    at = 1;
                if (n == cap) {
                    uint32_t *more = realloc(frames, (cap = 2 * cap) * sizeof *frames);
                    if (!more) {
                        rc = fail(err, 503, "out of memory; retry later");
                        break;
                    }
                    frames = more;
                }
                memmove(frames + at + 1, frames + at, (n - at) * sizeof *frames);
                frames[at] = labels;
                n++;
            }
            pa_profile_add_stack_ids(p, frames, n, (uint64_t)v);
        }
        if (rc == 0 && pa_profile_total(p) > 0) {
            if (rate > 0) {
                char r[32];
                snprintf(r, sizeof r, "%lld", (long long)rate);
                pa_profile_set_meta(p, "rate", r);
            }
            pa_buf name = {0}, pprof = {0};
            pa_error perr = {{0}};
            rc = pa_coll_push_name(&name, services[si], type, labels, nlabels, err);
            if (rc == 0 && pa_pprof_encode(p, 0, &pprof, &perr) != 0)
                rc = fail(err, 500, "%s", perr.msg);
            char id[80] = "";
            upload_id(pr, si, id, sizeof id);
            if (rc == 0)
                rc = pa_coll_batch_add(b, name.data, "otlp", id, from, until, pr->time_unix_nano,
                                       rate, (const uint8_t *)pprof.data, pprof.len, rq, err);
            pa_buf_free(&name);
            pa_buf_free(&pprof);
        }
        pa_profile_free(p);
    }
    free(frames);
    return rc;
}

/* Labels from string attributes (first seen wins), service.name left out. */
static size_t add_attrs(struct pa_coll_pair *out, size_t n, KeyValue *const *kv, size_t nkv,
                        const Dictionary *d) {
    for (size_t i = 0; i < nkv && n < PA_COLL_MAX_LABELS; i++) {
        const char *k = kv[i]->key && *kv[i]->key ? kv[i]->key : str_at(d, kv[i]->key_strindex);
        const char *v = any_string(kv[i]->value, d);
        if (!k || !v || !*v || strcmp(k, "service.name") == 0)
            continue;
        size_t j = 0;
        while (j < n && strcmp(out[j].name, k) != 0)
            j++;
        if (j == n)
            out[n++] = (struct pa_coll_pair){k, v};
    }
    return n;
}

void pa_coll_handle_otlp(struct pa_coll_store *st, const struct pa_coll_proto_request *rq,
                         struct pa_coll_response *r) {
    pa_error err = {""};
    const char *ct = rq->content_type ? rq->content_type : "";
    size_t ctn = strcspn(ct, ";");
    if (!((ctn == 22 && strncasecmp(ct, "application/x-protobuf", ctn) == 0) ||
          (ctn == 20 && strncasecmp(ct, "application/protobuf", ctn) == 0))) {
        pa_coll_respond_text(r, 415,
                             "Unsupported Content-Type: %.64s (pyagent-collector takes OTLP "
                             "profiles as application/x-protobuf)",
                             ct);
        return;
    }
    int rc;
    Request *req = (Request *)pa_coll_proto_decode(
        rq,
        &opentelemetry__proto__collector__profiles__v1development__export_profiles_service_request__descriptor,
        PA_CODEC_PROTO, &rc, &err);
    if (rc == 0 && !req->dictionary)
        rc = fail(&err, 400, "missing profile metadata dictionary");
    struct pa_coll_batch b = {0};
    for (size_t i = 0; rc == 0 && i < req->n_resource_profiles; i++) {
        const Opentelemetry__Proto__Profiles__V1development__ResourceProfiles *rp =
            req->resource_profiles[i];
        const Dictionary *d = req->dictionary;
        KeyValue *const *ra = rp->resource ? rp->resource->attributes : NULL;
        size_t nra = rp->resource ? rp->resource->n_attributes : 0;
        char service[300] = "unknown_service";
        const char *sn = kv_string(ra, nra, "service.name", d);
        const char *exe = kv_string(ra, nra, "process.executable.name", d);
        if (sn && *sn)
            snprintf(service, sizeof service, "%s", sn);
        else if (exe && *exe)
            snprintf(service, sizeof service, "unknown_service:%s", exe);
        for (size_t j = 0; rc == 0 && j < rp->n_scope_profiles; j++) {
            const Opentelemetry__Proto__Profiles__V1development__ScopeProfiles *sp =
                rp->scope_profiles[j];
            struct pa_coll_pair labels[PA_COLL_MAX_LABELS];
            size_t n = add_attrs(labels, 0, ra, nra, d);
            if (sp->scope)
                n = add_attrs(labels, n, sp->scope->attributes, sp->scope->n_attributes, d);
            for (size_t k = 0; rc == 0 && k < sp->n_profiles; k++)
                rc = add_profile(&b, sp->profiles[k], d, service, labels, n, rq, &err);
        }
    }
    rc = pa_coll_batch_finish(st, &b, rc, &err);
    if (req)
        protobuf_c_message_free_unpacked(&req->base, NULL);
    if (rc) {
        pa_coll_respond_text(r, rc == 422 || rc == 413 ? 400 : rc, "%s", err.msg);
        return;
    }
    Opentelemetry__Proto__Collector__Profiles__V1development__ExportProfilesServiceResponse resp =
        OPENTELEMETRY__PROTO__COLLECTOR__PROFILES__V1DEVELOPMENT__EXPORT_PROFILES_SERVICE_RESPONSE__INIT;
    pa_coll_connect_respond(r, PA_CODEC_PROTO, &resp.base);
    r->content_type = "application/x-protobuf";
}
