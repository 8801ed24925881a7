/* query.c: answering queries. Every read is "the series of APP whose labels match the
 * selector, and their uploads overlapping [from, until)", merged into one profile by parsing
 * the stored pprof blobs into it; the formats then differ only in the encoder called. */
#include "query.h"

#include "pool.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "name.h"
#include "render.h"
#include "report.h"
#include "units.h"

int pa_coll_series_collect(void *ctx, const struct pa_coll_series_info *s) {
    struct pa_coll_series_list *l = ctx;
    if (l->sel && !pa_coll_selector_matches(l->sel, s->labels))
        return 0;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        struct pa_coll_series_info *v = realloc(l->v, l->cap * sizeof *v);
        if (v == NULL)
            return -1;
        l->v = v;
    }
    struct pa_coll_series_info *d = &l->v[l->n++];
    *d = *s;
    d->app = strdup(s->app);
    d->labels = strdup(s->labels);
    return 0;
}

void pa_coll_series_list_free(struct pa_coll_series_list *l) {
    for (size_t i = 0; i < l->n; i++) {
        free((char *)l->v[i].app);
        free((char *)l->v[i].labels);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

int pa_coll_time_range(const struct pa_coll_params *q, const char *fromkey, const char *untilkey,
                       const char *default_from, int64_t now, int64_t *from, int64_t *until,
                       pa_error *err) {
    const char *f = pa_coll_param(q, fromkey), *u = pa_coll_param(q, untilkey);
    if (pa_coll_parse_query_time(f ? f : default_from, now, 0, from) != 0) {
        pa_fail(err, "%s: '%.64s' is not a time (seconds, ms, now, now-1h, ...)", fromkey, f);
        return 400;
    }
    if (pa_coll_parse_query_time(u ? u : "now", now, 1, until) != 0) {
        pa_fail(err, "%s: '%.64s' is not a time (seconds, ms, now, now-1h, ...)", untilkey, u);
        return 400;
    }
    if (*until <= *from) {
        pa_fail(err, "%s must be after %s", untilkey, fromkey);
        return 400;
    }
    return 0;
}

struct merge_ctx {
    pa_profile *p;
    uint64_t uploads;
    int status; /* why the walk was stopped */
    pa_error *err;
};

static int merge_row(void *ctx, const struct pa_coll_row *r) {
    struct merge_ctx *m = ctx;
    if (pa_coll_budget_spent()) {
        pa_fail(m->err,
                "query: stopped at its time budget (--query-timeout) after %" PRIu64
                " uploads; narrow the time range or the selector, or retry later",
                m->uploads);
        m->status = 503;
        return -1;
    }
    m->uploads += r->uploads;
    if (r->samples == 0)
        return 0; /* an idle interval: nothing to add, and the parser rejects empty input */
    pa_parse_stats stats;
    pa_error perr = {{0}};
    if (pa_profile_parse_buffer(m->p, r->profile, r->profile_len, "stored profile", &stats,
                                &perr) != 0) {
        pa_fail(m->err, "a stored profile of series %" PRId64 " is unreadable: %s", r->series_id,
                perr.msg);
        m->status = 500;
        return -1;
    }
    return 0;
}

int pa_coll_query_profile(struct pa_coll_store *st, const char *query, int64_t from, int64_t until,
                          pa_profile **out, uint64_t *uploads, pa_error *err) {
    struct pa_coll_selector sel;
    int status = pa_coll_selector_parse(&sel, query, err);
    if (status) {
        pa_coll_selector_free(&sel);
        return status;
    }
    struct pa_coll_series_list l = {.sel = &sel};
    if (pa_coll_store_series(st, sel.app, pa_coll_series_collect, &l, err) != 0) {
        pa_coll_selector_free(&sel);
        pa_coll_series_list_free(&l);
        return 500;
    }
    struct merge_ctx m = {.p = pa_profile_new(), .err = err};
    for (size_t i = 0; i < l.n && status == 0; i++)
        if (pa_coll_store_scan(st, &l.v[i], from, until, merge_row, &m, err) != 0)
            status = m.status ? m.status : 500;
    pa_coll_selector_free(&sel);
    pa_coll_series_list_free(&l);
    if (status) {
        pa_profile_free(m.p);
        return status;
    }
    /* Headers of the stored uploads (pid, start, ...) describe single uploads, not the merge. */
    *out = pa_profile_transform(m.p, &(pa_transform){0});
    pa_profile_free(m.p);
    if (uploads)
        *uploads = m.uploads;
    return 0;
}

static void json_kv_str(pa_buf *b, const char *key, const char *value) {
    pa_buf_printf(b, "\"%s\":\"", key);
    pa_buf_json_str(b, value, strlen(value));
    pa_buf_puts(b, "\"");
}

/* {"k":"v",...} from a canonical label string. */
static void json_labels(pa_buf *b, const char *labels) {
    pa_buf_puts(b, "{");
    char *text = strdup(labels), *p = text, *k, *v;
    if (!text)
        abort();
    for (int i = 0; pa_series_split(&p, &k, &v) == 1; i++) {
        pa_buf_puts(b, i ? ",\"" : "\"");
        pa_buf_json_str(b, k, strlen(k));
        pa_buf_puts(b, "\":\"");
        pa_buf_json_str(b, v, strlen(v));
        pa_buf_puts(b, "\"");
    }
    free(text);
    pa_buf_puts(b, "}");
}

void pa_coll_handle_apps(struct pa_coll_store *st, const struct pa_coll_params *q, int64_t now,
                         struct pa_coll_response *r) {
    (void)now;
    pa_error err = {""};
    struct pa_coll_series_list l = {0};
    if (pa_coll_store_series(st, pa_coll_param(q, "app"), pa_coll_series_collect, &l, &err) != 0) {
        pa_coll_series_list_free(&l);
        pa_coll_respond_text(r, 500, "%s", err.msg);
        return;
    }
    pa_buf *b = &r->body;
    r->status = 200;
    r->content_type = "application/json";
    pa_buf_puts(b, "{\"apps\":[");
    for (size_t i = 0; i < l.n;) {
        /* Series arrive ordered by app: one object per run of equal names. */
        size_t j = i;
        int64_t from = l.v[i].first_from, until = l.v[i].last_until;
        uint64_t uploads = 0, samples = 0;
        for (; j < l.n && strcmp(l.v[j].app, l.v[i].app) == 0; j++) {
            from = l.v[j].first_from < from ? l.v[j].first_from : from;
            until = l.v[j].last_until > until ? l.v[j].last_until : until;
            uploads += l.v[j].uploads;
            samples += l.v[j].samples;
        }
        pa_buf_puts(b, i ? ",{" : "{");
        json_kv_str(b, "name", l.v[i].app);
        pa_buf_printf(b,
                      ",\"from\":%" PRId64 ",\"until\":%" PRId64 ",\"uploads\":%" PRIu64
                      ",\"samples\":%" PRIu64 ",\"series\":[",
                      from, until, uploads, samples);
        for (size_t k = i; k < j; k++) {
            pa_buf_puts(b, k > i ? ",{\"labels\":" : "{\"labels\":");
            json_labels(b, l.v[k].labels);
            pa_buf_printf(b,
                          ",\"from\":%" PRId64 ",\"until\":%" PRId64 ",\"uploads\":%" PRIu64
                          ",\"samples\":%" PRIu64 "}",
                          l.v[k].first_from, l.v[k].last_until, l.v[k].uploads, l.v[k].samples);
        }
        pa_buf_puts(b, "]}");
        i = j;
    }
    pa_buf_puts(b, "]}\n");
    pa_coll_series_list_free(&l);
}

static const char *param_or(const struct pa_coll_params *q, const char *key, const char *dflt) {
    const char *v = pa_coll_param(q, key);
    return v && *v ? v : dflt;
}

void pa_coll_handle_render(struct pa_coll_store *st, const struct pa_coll_params *q, int64_t now,
                           struct pa_coll_response *r) {
    pa_error err = {""};
    int64_t from, until;
    const char *query = pa_coll_param(q, "query");
    const char *format = param_or(q, "format", "html");
    int status = pa_coll_time_range(q, "from", "until", "now-1h", now, &from, &until, &err);
    if (status) {
        pa_coll_respond_text(r, status, "%s", err.msg);
        return;
    }
    pa_render_format f;
    if (pa_render_format_find(format, &f) != 0) {
        pa_buf names = {0};
        pa_render_format_names(3, &names);
        pa_coll_respond_text(r, 400, "format: '%.32s' is not one of %s", format, names.data);
        pa_buf_free(&names);
        return;
    }
    pa_profile *p;
    if ((status = pa_coll_query_profile(st, query, from, until, &p, NULL, &err))) {
        pa_coll_respond_text(r, status, "%s", err.msg);
        return;
    }
    char title[1024];
    snprintf(title, sizeof title, "%s, %" PRId64 " to %" PRId64, query, from, until);
    pa_render_args a = {.title = title};
    pa_error perr;
    r->status = 200;
    r->content_type = f.mime;
    r->disposition = f.disposition;
    if (pa_render_format_write(&f, p, &a, &r->body, &perr) != 0)
        pa_coll_respond_text(r, 500, "%s: %s", f.name, perr.msg);
    pa_profile_free(p);
}

void pa_coll_handle_diff(struct pa_coll_store *st, const struct pa_coll_params *q, int64_t now,
                         struct pa_coll_response *r) {
    pa_error err = {""};
    const char *query = pa_coll_param(q, "query");
    const char *lq = param_or(q, "leftQuery", query), *rq = param_or(q, "rightQuery", query);
    const char *format = param_or(q, "format", "html");
    if (strcmp(format, "html") && strcmp(format, "json")) {
        pa_coll_respond_text(r, 400, "format: '%.32s' is not one of html, json", format);
        return;
    }
    /* Each side's range defaults to from/until, which default to the last hour. */
    int64_t from, until, lf, lu, rf, ru;
    int status = pa_coll_time_range(q, "from", "until", "now-1h", now, &from, &until, &err);
    if (!status && pa_coll_param(q, "leftFrom"))
        status = pa_coll_time_range(q, "leftFrom", "leftUntil", "now-1h", now, &lf, &lu, &err);
    else
        lf = from, lu = until;
    if (!status && pa_coll_param(q, "rightFrom"))
        status = pa_coll_time_range(q, "rightFrom", "rightUntil", "now-1h", now, &rf, &ru, &err);
    else
        rf = from, ru = until;
    if (status) {
        pa_coll_respond_text(r, status, "%s", err.msg);
        return;
    }
    if (lq == NULL || rq == NULL) {
        pa_coll_respond_text(r, 400, "query: give 'query', or 'leftQuery' and 'rightQuery'");
        return;
    }
    pa_profile *left = NULL, *right = NULL;
    status = pa_coll_query_profile(st, lq, lf, lu, &left, NULL, &err);
    if (!status)
        status = pa_coll_query_profile(st, rq, rf, ru, &right, NULL, &err);
    if (status) {
        pa_coll_respond_text(r, status, "%s", err.msg);
    } else {
        char title[2048];
        snprintf(title, sizeof title,
                 "%s %" PRId64 "..%" PRId64 " (baseline) vs %s %" PRId64 "..%" PRId64, lq, lf, lu,
                 rq, rf, ru);
        if (strcmp(format, "json") == 0) {
            r->status = 200;
            r->content_type = "application/json";
            pa_profile_encode_report_json(right, left, title, &r->body);
        } else {
            pa_coll_report_diff(left, right, title, r);
        }
    }
    pa_profile_free(left);
    pa_profile_free(right);
}

void pa_coll_url_component(pa_buf *b, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~')
            pa_buf_append(b, s, 1);
        else
            pa_buf_printf(b, "%%%02X", c);
    }
}

void pa_coll_handle_heatmap(struct pa_coll_store *st, const struct pa_coll_params *q,
                            const char *path, int64_t now, struct pa_coll_response *r) {
    pa_error err = {""};
    int64_t from, until;
    if (path == NULL) {
        /* Pin the range so every page of this heatmap shows the same data. */
        const char *query = pa_coll_param(q, "query");
        int status = pa_coll_time_range(q, "from", "until", "now-1h", now, &from, &until, &err);
        if (!status) {
            struct pa_coll_selector sel;
            status = pa_coll_selector_parse(&sel, query, &err);
            pa_coll_selector_free(&sel);
        }
        if (status) {
            pa_coll_respond_text(r, status, "%s", err.msg);
            return;
        }
        pa_buf loc = {0};
        pa_buf_printf(&loc, "/heatmap/%" PRId64 "/%" PRId64 "/", from, until);
        pa_coll_url_component(&loc, query);
        pa_buf_puts(&loc, "/index.html");
        pa_coll_respond_text(r, 302, "see %s", loc.data);
        r->location = loc.data;
        return;
    }
    /* FROM/UNTIL/QUERY/PAGE, where QUERY may itself hold slashes (app names can). */
    char *copy = strdup(path);
    char *s1 = copy ? strchr(copy, '/') : NULL;
    char *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
    char *last = copy ? strrchr(copy, '/') : NULL;
    char *end1, *end2;
    if (s1 == NULL || s2 == NULL || last <= s2) {
        free(copy);
        pa_coll_respond_text(r, 404, "heatmap: expected /heatmap/FROM/UNTIL/QUERY/PAGE");
        return;
    }
    *s1 = *s2 = *last = '\0';
    from = strtoll(copy, &end1, 10);
    until = strtoll(s1 + 1, &end2, 10);
    if (*end1 || *end2 || until <= from) {
        free(copy);
        pa_coll_respond_text(r, 404, "heatmap: expected /heatmap/FROM/UNTIL/QUERY/PAGE");
        return;
    }
    const char *query = s2 + 1;
    pa_profile *p = NULL;
    int status = pa_coll_query_profile(st, query, from, until, &p, NULL, &err);
    if (status) {
        pa_coll_respond_text(r, status, "%s", err.msg);
    } else {
        char title[1024];
        snprintf(title, sizeof title, "%s, %" PRId64 " to %" PRId64, query, from, until);
        pa_coll_report_heatmap(p, title, last + 1, r);
    }
    pa_profile_free(p);
    free(copy);
}
