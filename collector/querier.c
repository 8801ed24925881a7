/* querier.c: querier.v1.QuerierService (see querier.h).
 *
 * Pyroscope's model on ours. A stored series is "APP.MODE" + labels; to Pyroscope it is the
 * service APP with labels service_name=APP, __name__ (process_cpu for cpu, else MODE) and the
 * stored ones, in two profile types: NAME:samples:count:T:nanoseconds (the sample counts)
 * and NAME:T:nanoseconds:T:nanoseconds (their time, count x 1e9 / rate), T being cpu, wall or
 * gil. A series name without a known mode suffix is a cpu series of that service. Selectors
 * are Pyroscope's ({k="v", k2=~"re"}) and are read by the collector's own selector parser;
 * they match the labels above plus __profile_type__, __type__, __unit__, __period_type__ and
 * __period_unit__. Profiles are merged per series name by pa_coll_query_profile, time series
 * counted by pa_coll_store_timeline: the same code as /render and the index. */
#include "querier.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "connect.h"
#include "name.h"
#include "querier/v1/querier.pb-c.h"
#include "query.h"

/* ---- Pyroscope's view of a series ------------------------------------------------------- */

struct ptype {
    char id[200], name[64], type[32], unit[16], ptype[32], punit[16];
};

/* The service and mode of a stored series name. */
static void split_app(const char *app, char *service, size_t slen, char *mode, size_t mlen) {
    static const char *const modes[] = {"cpu", "wall", "gil", "off_cpu", "memory"};
    const char *dot = strrchr(app, '.');
    for (size_t i = 0; dot && i < sizeof modes / sizeof modes[0]; i++)
        if (strcmp(dot + 1, modes[i]) == 0) {
            snprintf(service, slen, "%.*s", (int)(dot - app), app);
            snprintf(mode, mlen, "%s", modes[i]);
            return;
        }
    snprintf(service, slen, "%s", app);
    snprintf(mode, mlen, "cpu");
}

/* Profile type k (0: counts, 1: time) of a mode. */
static void type_of(const char *mode, int k, struct ptype *t) {
    int timed = strcmp(mode, "cpu") == 0 || strcmp(mode, "wall") == 0 || strcmp(mode, "gil") == 0;
    snprintf(t->name, sizeof t->name, "%s", strcmp(mode, "cpu") == 0 ? "process_cpu" : mode);
    snprintf(t->ptype, sizeof t->ptype, "%s", timed ? mode : "");
    snprintf(t->punit, sizeof t->punit, "%s", timed ? "nanoseconds" : "");
    snprintf(t->type, sizeof t->type, "%s", k == 0 || !timed ? "samples" : mode);
    snprintf(t->unit, sizeof t->unit, "%s", k == 0 || !timed ? "count" : "nanoseconds");
    snprintf(t->id, sizeof t->id, "%s:%s:%s:%s:%s", t->name, t->type, t->unit, t->ptype, t->punit);
}

static int types_of(const char *mode) {
    return strcmp(mode, "cpu") == 0 || strcmp(mode, "wall") == 0 || strcmp(mode, "gil") == 0 ? 2
                                                                                             : 1;
}

/* The labels a selector sees for series s in type t: canonical "k=v,...". */
static void view_labels(const struct pa_coll_series_info *s, const char *service,
                        const struct ptype *t, pa_buf *out) {
    out->len = 0;
    pa_buf_printf(out,
                  "__name__=%s,__period_type__=%s,__period_unit__=%s,__profile_type__=%s,"
                  "__type__=%s,__unit__=%s,service_name=%s",
                  t->name, t->ptype, t->punit, t->id, t->type, t->unit, service);
    if (s->labels[0])
        pa_buf_printf(out, ",%s", s->labels);
}

/* One matching (series, type). */
struct hit {
    const struct pa_coll_series_info *s;
    char service[300], mode[32];
    struct ptype t;
    pa_buf labels; /* view_labels */
};

struct hits {
    struct pa_coll_series_list all;
    struct hit *v;
    size_t n;
};

static void hits_free(struct hits *h) {
    for (size_t i = 0; i < h->n; i++)
        pa_buf_free(&h->v[i].labels);
    free(h->v);
    pa_coll_series_list_free(&h->all);
    memset(h, 0, sizeof *h);
}

/* Parses a Pyroscope selector ("{k="v",...}", or "" for all) with the collector's parser. */
static int parse_selector(const char *text, struct pa_coll_selector *sel, pa_error *err) {
    pa_buf q = {0};
    pa_buf_puts(&q, "x"); /* the parser wants an application; matchers carry service_name */
    while (text && (*text == ' ' || *text == '\t'))
        text++;
    if (text && *text)
        pa_buf_puts(&q, text);
    int rc = pa_coll_selector_parse(sel, q.data, err);
    pa_buf_free(&q);
    return rc;
}

/* Every (series, type) whose view matches one of the selectors (none: all), of type id (NULL:
 * any), stored at some time in [from, until). 0 or a status with err. */
static int find(struct pa_coll_store *st, char *const *selectors, size_t nsel, const char *id,
                int64_t from, int64_t until, struct hits *h, pa_error *err) {
    memset(h, 0, sizeof *h);
    struct pa_coll_selector sels[16];
    if (nsel > 16)
        nsel = 16;
    size_t parsed = 0;
    int rc = 0;
    for (; parsed < nsel && rc == 0; parsed++)
        rc = parse_selector(selectors[parsed], &sels[parsed], err);
    if (rc == 0 && pa_coll_store_series(st, NULL, pa_coll_series_collect, &h->all, err))
        rc = 500;
    size_t cap = 0;
    for (size_t i = 0; rc == 0 && i < h->all.n; i++) {
        const struct pa_coll_series_info *s = &h->all.v[i];
        if (s->last_until <= from || s->first_from >= until)
            continue;
        struct hit x = {.s = s};
        split_app(s->app, x.service, sizeof x.service, x.mode, sizeof x.mode);
        for (int k = 0; k < types_of(x.mode); k++) {
            type_of(x.mode, k, &x.t);
            if (id && strcmp(id, x.t.id) != 0)
                continue;
            pa_buf labels = {0};
            view_labels(s, x.service, &x.t, &labels);
            bool ok = nsel == 0;
            for (size_t j = 0; j < nsel && !ok; j++)
                ok = pa_coll_selector_matches(&sels[j], labels.data);
            if (!ok) {
                pa_buf_free(&labels);
                continue;
            }
            if (h->n == cap) {
                cap = cap ? cap * 2 : 16;
                struct hit *v = realloc(h->v, cap * sizeof *v);
                if (!v)
                    abort();
                h->v = v;
            }
            x.labels = labels;
            h->v[h->n++] = x;
        }
    }
    for (size_t j = 0; j < parsed; j++)
        pa_coll_selector_free(&sels[j]);
    return rc;
}

/* Calls fn for each label of a canonical label string (series.c's grammar, decoded). */
static void each_label(const char *labels, void (*fn)(const char *k, const char *v, void *arg),
                       void *arg) {
    char *text = strdup(labels), *p = text, *k, *v;
    if (!text)
        abort();
    while (pa_series_split(&p, &k, &v) == 1)
        fn(k, v, arg);
    free(text);
}

struct label_value_arg {
    const char *key;
    char *out;
    size_t outlen;
};

static void label_value_of(const char *k, const char *v, void *arg) {
    struct label_value_arg *a = arg;
    if (strcmp(k, a->key) == 0 && a->out[0] == 0)
        snprintf(a->out, a->outlen, "%s", v);
}

/* The value of label key in a canonical label string (into out), or "" when absent. */
static void label_value(const char *labels, const char *key, char *out, size_t outlen) {
    out[0] = 0;
    struct label_value_arg a = {key, out, outlen};
    each_label(labels, label_value_of, &a);
}

/* ---- time ------------------------------------------------------------------------------- */

/* Pyroscope's milliseconds to the store's seconds; 0 means the last hour. */
static void range_of(int64_t start_ms, int64_t end_ms, int64_t now, int64_t *from, int64_t *until) {
    /* Milliseconds past the year 100,000 are read as that: no arithmetic below can overflow. */
    const int64_t max_ms = 3000000000000000;
    start_ms = start_ms > max_ms ? max_ms : start_ms;
    end_ms = end_ms > max_ms ? max_ms : end_ms;
    *until = end_ms > 0 ? (end_ms + 999) / 1000 : now + 1;
    *from = start_ms > 0 ? start_ms / 1000 : *until - 3600;
    if (*until <= *from)
        *until = *from + 1;
}

/* ---- building answers ------------------------------------------------------------------- */

static void *msg_new(const ProtobufCMessageDescriptor *d) {
    ProtobufCMessage *m = calloc(1, d->sizeof_message);
    if (!m)
        abort();
    d->message_init(m);
    return m;
}

static char *xstrdup(const char *s) {
    char *d = strdup(s ? s : "");
    if (!d)
        abort();
    return d;
}

/* Appends p to a repeated field (array *arr of *n pointers). */
static void push_ptr(void ***arr, size_t *n, void *p) {
    void **v = realloc(*arr, (*n + 1) * sizeof *v);
    if (!v)
        abort();
    v[(*n)++] = p;
    *arr = v;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted, unique strings. */
static void uniq(char **v, size_t *n) {
    if (*n == 0)
        return;
    qsort(v, *n, sizeof *v, cmp_str);
    size_t o = 1;
    for (size_t i = 1; i < *n; i++) {
        if (strcmp(v[i], v[o - 1]) == 0)
            free(v[i]);
        else
            v[o++] = v[i];
    }
    *n = o;
}

/* ---- the merged profile of a selection -------------------------------------------------- */

/* A profile and what one of its counts is worth in the requested type. */
struct weighted {
    pa_profile *p;
    double weight;
};

/* The profiles of the hits, one per series name (pa_coll_query_profile merges each), with
 * the weight that turns counts into the type's unit. */
static int merged(struct pa_coll_store *st, const struct hits *h, const char *selector,
                  int64_t from, int64_t until, struct weighted **out, size_t *nout, pa_error *err) {
    *out = NULL;
    *nout = 0;
    /* The selector's own matchers, as the collector's query syntax. */
    struct pa_coll_selector sel;
    int rc = parse_selector(selector, &sel, err);
    pa_buf matchers = {0};
    static const char *const ops[] = {"=", "!=", "=~", "!~"};
    for (size_t i = 0; rc == 0 && i < sel.nmatchers; i++) {
        const struct pa_coll_matcher *m = &sel.m[i];
        if (strncmp(m->key, "__", 2) == 0 || strcmp(m->key, "service_name") == 0)
            continue; /* decided per series name by find() */
        pa_buf_printf(&matchers, "%s%s%s", matchers.len ? "," : "", m->key, ops[m->op]);
        pa_series_put_quoted(&matchers, m->value); /* any value, re-quoted as it was read */
    }
    pa_coll_selector_free(&sel);
    for (size_t i = 0; rc == 0 && i < h->n; i++) {
        size_t j = 0;
        while (j < i && strcmp(h->v[j].s->app, h->v[i].s->app) != 0)
            j++;
        if (j < i)
            continue; /* this series name is merged already */
        pa_buf q = {0};
        pa_buf_printf(&q, "%s{%s}", h->v[i].s->app, matchers.data ? matchers.data : "");
        pa_profile *p = NULL;
        rc = pa_coll_query_profile(st, q.data, from, until, &p, NULL, err);
        pa_buf_free(&q);
        if (rc)
            break;
        const char *rate = pa_profile_meta(p, "rate");
        /* A profile stored without a rate (folded uploads) is valued at Pyroscope's default
         * sampleRate, 100 Hz. */
        double hz = rate && atof(rate) > 0 ? atof(rate) : 100;
        struct weighted *v = realloc(*out, (*nout + 1) * sizeof *v);
        if (!v)
            abort();
        *out = v;
        v[*nout].p = p;
        v[*nout].weight = strcmp(h->v[i].t.unit, "nanoseconds") == 0 ? 1e9 / hz : 1;
        (*nout)++;
    }
    pa_buf_free(&matchers);
    return rc;
}

/* The hits of one type and selector over Pyroscope's [start_ms, end_ms) (into [from, until)
 * seconds), and their merged profiles. */
static int selection(struct pa_coll_store *st, const char *id, char *selector, int64_t start_ms,
                     int64_t end_ms, int64_t now, int64_t *from, int64_t *until, struct hits *h,
                     struct weighted **w, size_t *nw, pa_error *err) {
    *w = NULL;
    *nw = 0;
    range_of(start_ms, end_ms, now, from, until);
    int rc = find(st, &selector, 1, id, *from, *until, h, err);
    return rc ? rc : merged(st, h, selector, *from, *until, w, nw, err);
}

static void weighted_free(struct weighted *w, size_t n) {
    for (size_t i = 0; i < n; i++)
        pa_profile_free(w[i].p);
    free(w);
}

/* ---- flame graphs ----------------------------------------------------------------------- */

/* A call tree with two values per node (left and right, for a diff; flame graphs use left). */
struct node {
    uint32_t name; /* index into the names */
    int64_t total[2], self[2];
    struct node *kids;
    size_t nkids, cap;
};

struct tree {
    struct node root;
    pa_profile *names; /* interner: id + 1 is the index in FlameGraph.names ("total" is 0) */
};

static struct node *child(struct node *n, uint32_t name) {
    for (size_t i = 0; i < n->nkids; i++)
        if (n->kids[i].name == name)
            return &n->kids[i];
    if (n->nkids == n->cap) {
        n->cap = n->cap ? n->cap * 2 : 4;
        struct node *k = realloc(n->kids, n->cap * sizeof *k);
        if (!k)
            abort();
        n->kids = k;
    }
    struct node *c = &n->kids[n->nkids++];
    memset(c, 0, sizeof *c);
    c->name = name;
    return c;
}

static void tree_add(struct tree *t, const struct weighted *w, int side) {
    size_t ns = pa_profile_stack_count(w->p);
    for (size_t i = 0; i < ns; i++) {
        size_t depth;
        uint64_t count;
        const uint32_t *ids = pa_profile_stack(w->p, i, &depth, &count);
        int64_t v = (int64_t)llround((double)count * w->weight);
        struct node *n = &t->root;
        n->total[side] += v;
        for (size_t k = 0; k < depth; k++) {
            size_t len;
            const char *s = pa_profile_frame(w->p, ids[k], &len);
            /* Pyroscope's flame graphs group by function: a Python frame's node is its
             * (module-qualified) name, its lines merged. */
            pa_frame_info fi;
            pa_frame_parse(s, len, &fi);
            if (fi.file &&
                (fi.kind == PA_FRAME_OWN || fi.kind == PA_FRAME_STDLIB || fi.kind == PA_FRAME_SITE))
                len = fi.name_len;
            n = child(n, pa_profile_intern(t->names, s, len) + 1);
            n->total[side] += v;
        }
        n->self[side] += v;
    }
}

static const char *name_of(const struct tree *t, uint32_t i, size_t *len) {
    if (i == 0) {
        *len = 5;
        return "total";
    }
    return pa_profile_frame(t->names, i - 1, len);
}

/* Siblings by name (qsort_r: queries run on several threads at once). */
static int cmp_node(const void *a, const void *b, void *arg) {
    const struct tree *t = arg;
    size_t la, lb;
    const char *x = name_of(t, ((const struct node *)a)->name, &la);
    const char *y = name_of(t, ((const struct node *)b)->name, &lb);
    int c = memcmp(x, y, la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

static void node_free(struct node *n) {
    for (size_t i = 0; i < n->nkids; i++)
        node_free(&n->kids[i]);
    free(n->kids);
}

/* max_nodes: below the max_nodes-th largest total, a node's children are folded into one
 * "other" child, as Pyroscope does. */
static void collect_totals(const struct node *n, int64_t **v, size_t *cnt, size_t *cap) {
    if (*cnt == *cap) {
        *cap = *cap ? *cap * 2 : 1024;
        int64_t *nv = realloc(*v, *cap * sizeof *nv);
        if (!nv)
            abort();
        *v = nv;
    }
    (*v)[(*cnt)++] = n->total[0] + n->total[1];
    for (size_t i = 0; i < n->nkids; i++)
        collect_totals(&n->kids[i], v, cnt, cap);
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

static void prune(struct node *n, int64_t min, uint32_t other) {
    struct node rest = {.name = other};
    size_t o = 0;
    for (size_t i = 0; i < n->nkids; i++) {
        struct node *k = &n->kids[i];
        if (k->total[0] + k->total[1] < min) {
            for (int s = 0; s < 2; s++) {
                rest.total[s] += k->total[s];
                rest.self[s] += k->total[s];
            }
            node_free(k);
        } else {
            prune(k, min, other);
            n->kids[o++] = *k;
        }
    }
    n->nkids = o;
    if (rest.total[0] + rest.total[1] > 0) {
        struct node *c = child(n, other);
        for (int s = 0; s < 2; s++) {
            c->total[s] += rest.total[s];
            c->self[s] += rest.self[s];
        }
    }
}

static void limit_nodes(struct tree *t, int64_t max_nodes) {
    if (max_nodes <= 0)
        return;
    int64_t *v = NULL;
    size_t n = 0, cap = 0;
    collect_totals(&t->root, &v, &n, &cap);
    if (n > (size_t)max_nodes) {
        qsort(v, n, sizeof *v, cmp_desc);
        prune(&t->root, v[max_nodes - 1], pa_profile_intern(t->names, "other", 5) + 1);
    }
    free(v);
}

/* Levels: per depth, the nodes in order, each as (offset from the end of the previous node of
 * that level, total, self[, the same three for the right side], name). */
struct levels {
    Querier__V1__Level **v;
    size_t n;
    int64_t *end[2]; /* per level, where its last node ended */
    size_t nend;
    int64_t max_self;
    int diff;
};

static void emit(struct levels *L, const struct tree *t, struct node *n, size_t depth,
                 int64_t start0, int64_t start1) {
    if (depth == L->n) {
        Querier__V1__Level *lv = msg_new(&querier__v1__level__descriptor);
        push_ptr((void ***)&L->v, &L->n, lv);
        for (int s = 0; s < 2; s++) {
            int64_t *e = realloc(L->end[s], L->n * sizeof *e);
            if (!e)
                abort();
            e[depth] = 0;
            L->end[s] = e;
        }
    }
    Querier__V1__Level *lv = L->v[depth];
    size_t per = L->diff ? 7 : 4;
    int64_t *vals = realloc(lv->values, (lv->n_values + per) * sizeof *vals);
    if (!vals)
        abort();
    lv->values = vals;
    int64_t *o = vals + lv->n_values;
    lv->n_values += per;
    o[0] = start0 - L->end[0][depth];
    o[1] = n->total[0];
    o[2] = n->self[0];
    if (L->diff) {
        o[3] = start1 - L->end[1][depth];
        o[4] = n->total[1];
        o[5] = n->self[1];
    }
    o[per - 1] = n->name;
    L->end[0][depth] = start0 + n->total[0];
    L->end[1][depth] = start1 + n->total[1];
    for (int s = 0; s < 2; s++)
        if (n->self[s] > L->max_self)
            L->max_self = n->self[s];
    if (n->nkids > 1)
        qsort_r(n->kids, n->nkids, sizeof *n->kids, cmp_node, (void *)t);
    int64_t c0 = start0, c1 = start1;
    for (size_t i = 0; i < n->nkids; i++) {
        emit(L, t, &n->kids[i], depth + 1, c0, c1);
        c0 += n->kids[i].total[0];
        c1 += n->kids[i].total[1];
    }
}

static char **tree_names(const struct tree *t, size_t *n) {
    *n = pa_profile_frame_count(t->names) + 1;
    char **v = calloc(*n, sizeof *v);
    if (!v)
        abort();
    for (size_t i = 0; i < *n; i++) {
        size_t len;
        const char *s = name_of(t, (uint32_t)i, &len);
        v[i] = strndup(s, len);
        if (!v[i])
            abort();
    }
    return v;
}

/* ---- the calls -------------------------------------------------------------------------- */

/* The tree of a SelectMergeStacktraces request into t, side 0 or 1. */
static int select_tree(struct pa_coll_store *st,
                       const Querier__V1__SelectMergeStacktracesRequest *q, int64_t now,
                       struct tree *t, int side, pa_error *err) {
    int64_t from, until;
    struct hits h;
    struct weighted *w = NULL;
    size_t nw = 0;
    int rc = selection(st, q->profile_typeid, q->label_selector, q->start, q->end, now, &from,
                       &until, &h, &w, &nw, err);
    for (size_t i = 0; rc == 0 && i < nw; i++)
        tree_add(t, &w[i], side);
    weighted_free(w, nw);
    hits_free(&h);
    return rc;
}

static ProtobufCMessage *profile_types(struct pa_coll_store *st, const ProtobufCMessage *in,
                                       int64_t now, pa_error *err, int *rc) {
    const Querier__V1__ProfileTypesRequest *q = (const void *)in;
    int64_t from, until;
    range_of(q->start, q->end, now, &from, &until);
    if (q->start == 0 && q->end == 0)
        from = 0; /* every type ever stored */
    struct hits h;
    *rc = find(st, NULL, 0, NULL, from, until, &h, err);
    Querier__V1__ProfileTypesResponse *r =
        msg_new(&querier__v1__profile_types_response__descriptor);
    for (size_t i = 0; *rc == 0 && i < h.n; i++) {
        size_t j = 0;
        while (j < r->n_profile_types && strcmp(r->profile_types[j]->id, h.v[i].t.id) != 0)
            j++;
        if (j < r->n_profile_types)
            continue;
        Types__V1__ProfileType *t = msg_new(&types__v1__profile_type__descriptor);
        t->id = xstrdup(h.v[i].t.id);
        t->name = xstrdup(h.v[i].t.name);
        t->sample_type = xstrdup(h.v[i].t.type);
        t->sample_unit = xstrdup(h.v[i].t.unit);
        t->period_type = xstrdup(h.v[i].t.ptype);
        t->period_unit = xstrdup(h.v[i].t.punit);
        push_ptr((void ***)&r->profile_types, &r->n_profile_types, t);
    }
    hits_free(&h);
    return &r->base;
}

struct names_arg {
    const char *name; /* NULL: names */
    char **v;
    size_t n;
};

static void name_or_value(const char *k, const char *v, void *arg) {
    struct names_arg *a = arg;
    if (!a->name)
        push_ptr((void ***)&a->v, &a->n, xstrdup(k));
    else if (strcmp(k, a->name) == 0)
        push_ptr((void ***)&a->v, &a->n, xstrdup(v));
}

/* Label names (name NULL) or the values of label name, of the series matching matchers. */
static ProtobufCMessage *labels_of(struct pa_coll_store *st, char *const *matchers, size_t n,
                                   const char *name, int64_t start, int64_t end, int64_t now,
                                   pa_error *err, int *rc) {
    int64_t from, until;
    range_of(start, end, now, &from, &until);
    struct hits h;
    *rc = find(st, matchers, n, NULL, from, until, &h, err);
    struct names_arg a = {name, NULL, 0};
    for (size_t i = 0; *rc == 0 && i < h.n; i++)
        each_label(h.v[i].labels.data, name_or_value, &a);
    hits_free(&h);
    char **v = a.v;
    size_t nv = a.n;
    uniq(v, &nv);
    /* LabelNamesResponse and LabelValuesResponse have the same shape. */
    Types__V1__LabelNamesResponse *r = msg_new(name ? &types__v1__label_values_response__descriptor
                                                    : &types__v1__label_names_response__descriptor);
    r->names = v;
    r->n_names = nv;
    return &r->base;
}

static Types__V1__LabelPair *pair(const char *k, size_t kl, const char *v, size_t vl) {
    Types__V1__LabelPair *p = msg_new(&types__v1__label_pair__descriptor);
    p->name = strndup(k, kl);
    p->value = strndup(v, vl);
    if (!p->name || !p->value)
        abort();
    return p;
}

struct pairs_arg {
    char *const *names; /* only these when n > 0 */
    size_t n;
    Types__V1__LabelPair ***out;
    size_t *nout;
};

static void pair_of(const char *k, const char *v, void *arg) {
    struct pairs_arg *a = arg;
    int keep = a->n == 0;
    for (size_t i = 0; i < a->n && !keep; i++)
        keep = strcmp(a->names[i], k) == 0;
    if (keep)
        push_ptr((void ***)a->out, a->nout, pair(k, strlen(k), v, strlen(v)));
}

/* The labels of a view string, only those in names[] when n > 0. */
static void pairs_of(const char *labels, char *const *names, size_t n, Types__V1__LabelPair ***out,
                     size_t *nout) {
    struct pairs_arg a = {names, n, out, nout};
    each_label(labels, pair_of, &a);
}

static ProtobufCMessage *series(struct pa_coll_store *st, const ProtobufCMessage *in, int64_t now,
                                pa_error *err, int *rc) {
    const Querier__V1__SeriesRequest *q = (const void *)in;
    int64_t from, until;
    range_of(q->start, q->end, now, &from, &until);
    struct hits h;
    *rc = find(st, q->matchers, q->n_matchers, NULL, from, until, &h, err);
    Querier__V1__SeriesResponse *r = msg_new(&querier__v1__series_response__descriptor);
    char **seen = NULL; /* the label sets listed so far */
    size_t nseen = 0;
    for (size_t i = 0; *rc == 0 && i < h.n; i++) {
        Types__V1__Labels *ls = msg_new(&types__v1__labels__descriptor);
        pairs_of(h.v[i].labels.data, q->label_names, q->n_label_names, &ls->labels, &ls->n_labels);
        pa_buf key = {0};
        for (size_t k = 0; k < ls->n_labels; k++) {
            pa_buf_printf(&key, "%s=", ls->labels[k]->name);
            pa_series_put_quoted(&key, ls->labels[k]->value);
            pa_buf_puts(&key, ",");
        }
        size_t k = 0;
        while (k < nseen && strcmp(seen[k], key.data ? key.data : "") != 0)
            k++;
        if (k < nseen) {
            protobuf_c_message_free_unpacked(&ls->base, NULL);
            pa_buf_free(&key);
            continue;
        }
        push_ptr((void ***)&seen, &nseen, key.data ? key.data : xstrdup(""));
        push_ptr((void ***)&r->labels_set, &r->n_labels_set, ls);
    }
    for (size_t k = 0; k < nseen; k++)
        free(seen[k]);
    free(seen);
    hits_free(&h);
    return &r->base;
}

static Querier__V1__FlameGraph *flamegraph_of(struct tree *t, int64_t max_nodes) {
    limit_nodes(t, max_nodes);
    struct levels L = {0};
    emit(&L, t, &t->root, 0, 0, 0);
    Querier__V1__FlameGraph *fg = msg_new(&querier__v1__flame_graph__descriptor);
    fg->names = tree_names(t, &fg->n_names);
    fg->levels = L.v;
    fg->n_levels = L.n;
    fg->total = t->root.total[0];
    fg->max_self = L.max_self;
    free(L.end[0]);
    free(L.end[1]);
    return fg;
}

/* PROFILE_FORMAT_TREE: Pyroscope's own serialisation of a call tree (its pkg/model Tree.Bytes),
 * depth first, each node before its children: the name's length (uvarint), the name, the
 * node's self value (uvarint), its number of children (uvarint). The first node is a virtual
 * root, empty name and self 0, whose children are the outermost frames; an empty tree is no
 * bytes at all. Pyroscope keeps siblings sorted by name and walks them with a stack, so they
 * come last name first: written in that order, the bytes are the ones it would send. */
static void put_uvarint(pa_buf *b, uint64_t v) {
    unsigned char out[10];
    size_t n = 0;
    do {
        out[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        out[n++] |= v ? 0x80 : 0;
    } while (v);
    pa_buf_append(b, out, n);
}

static void tree_bytes_of(pa_buf *b, const struct tree *t, struct node *n, bool root) {
    size_t len = 0;
    const char *name = root ? "" : name_of(t, n->name, &len);
    put_uvarint(b, len);
    pa_buf_append(b, name, len);
    put_uvarint(b, root || n->self[0] < 0 ? 0 : (uint64_t)n->self[0]);
    put_uvarint(b, n->nkids);
    if (n->nkids > 1)
        qsort_r(n->kids, n->nkids, sizeof *n->kids, cmp_node, (void *)t);
    for (size_t i = n->nkids; i-- > 0;)
        tree_bytes_of(b, t, &n->kids[i], false);
}

static ProtobufCBinaryData tree_bytes(struct tree *t, int64_t max_nodes) {
    limit_nodes(t, max_nodes);
    pa_buf b = {0};
    if (t->root.nkids)
        tree_bytes_of(&b, t, &t->root, true);
    return (ProtobufCBinaryData){.len = b.len, .data = (uint8_t *)b.data};
}

static ProtobufCMessage *select_merge_stacktraces(struct pa_coll_store *st,
                                                  const ProtobufCMessage *in, int64_t now,
                                                  pa_error *err, int *rc) {
    const Querier__V1__SelectMergeStacktracesRequest *q = (const void *)in;
    struct tree t = {.names = pa_profile_new()};
    *rc = select_tree(st, q, now, &t, 0, err);
    Querier__V1__SelectMergeStacktracesResponse *r =
        msg_new(&querier__v1__select_merge_stacktraces_response__descriptor);
    int64_t max_nodes = q->max_nodes ? q->max_nodes : 16384;
    if (*rc == 0 && q->format == QUERIER__V1__PROFILE_FORMAT__PROFILE_FORMAT_TREE)
        r->tree = tree_bytes(&t, max_nodes);
    else if (*rc == 0)
        r->flamegraph = flamegraph_of(&t, max_nodes);
    node_free(&t.root);
    pa_profile_free(t.names);
    return &r->base;
}

static ProtobufCMessage *diff(struct pa_coll_store *st, const ProtobufCMessage *in, int64_t now,
                              pa_error *err, int *rc) {
    const Querier__V1__DiffRequest *q = (const void *)in;
    Querier__V1__DiffResponse *r = msg_new(&querier__v1__diff_response__descriptor);
    if (!q->left || !q->right) {
        pa_fail(err, "Diff needs both left and right");
        *rc = 400;
        return &r->base;
    }
    struct tree t = {.names = pa_profile_new()};
    *rc = select_tree(st, q->left, now, &t, 0, err);
    if (*rc == 0)
        *rc = select_tree(st, q->right, now, &t, 1, err);
    if (*rc == 0) {
        int64_t mx = q->left->max_nodes ? q->left->max_nodes : 16384;
        limit_nodes(&t, mx);
        struct levels L = {.diff = 1};
        emit(&L, &t, &t.root, 0, 0, 0);
        Querier__V1__FlameGraphDiff *fg = msg_new(&querier__v1__flame_graph_diff__descriptor);
        fg->names = tree_names(&t, &fg->n_names);
        fg->levels = L.v;
        fg->n_levels = L.n;
        fg->leftticks = t.root.total[0];
        fg->rightticks = t.root.total[1];
        fg->total = fg->leftticks + fg->rightticks;
        fg->max_self = L.max_self;
        free(L.end[0]);
        free(L.end[1]);
        r->flamegraph = fg;
    }
    node_free(&t.root);
    pa_profile_free(t.names);
    return &r->base;
}

/* SelectMergeProfile's answer is pprof, which is what the collector stores: our encoder's
 * bytes are the google.v1.Profile message (re-read with its descriptor for JSON). */
static int select_merge_profile(struct pa_coll_store *st, const ProtobufCMessage *in, int64_t now,
                                enum pa_coll_codec codec, struct pa_coll_response *r,
                                pa_error *err) {
    const Querier__V1__SelectMergeProfileRequest *q = (const void *)in;
    int64_t from, until;
    struct hits h;
    struct weighted *w = NULL;
    size_t nw = 0;
    int rc = selection(st, q->profile_typeid, q->label_selector, q->start, q->end, now, &from,
                       &until, &h, &w, &nw, err);
    pa_profile *all = pa_profile_new();
    for (size_t i = 0; i < nw; i++) {
        pa_profile_merge(all, w[i].p);
        const char *rate = pa_profile_meta(w[i].p, "rate");
        if (rate && !pa_profile_meta(all, "rate"))
            pa_profile_set_meta(all, "rate", rate);
    }
    if (rc == 0 && h.n) {
        pa_profile_set_meta(all, "mode", h.v[0].mode);
        char start[32];
        snprintf(start, sizeof start, "%lld", (long long)from);
        pa_profile_set_meta(all, "start", start);
    }
    weighted_free(w, nw);
    hits_free(&h);
    pa_buf pb = {0};
    pa_error perr = {{0}};
    if (rc == 0 && pa_pprof_encode(all, 0, &pb, &perr) != 0) {
        pa_fail(err, "%s", perr.msg);
        rc = 500;
    }
    pa_profile_free(all);
    if (rc == 0) {
        pa_buf_free(&r->body);
        r->status = 200;
        if (codec == PA_CODEC_PROTO) {
            r->content_type = "application/proto";
            r->body = pb;
            pb = (pa_buf){0};
        } else {
            ProtobufCMessage *m =
                protobuf_c_message_unpack(&google__v1__profile__descriptor, NULL, pb.len,
                                          (const uint8_t *)(pb.data ? pb.data : ""));
            if (!m)
                abort(); /* our own encoder's output */
            r->content_type = "application/json";
            pa_coll_pb_to_json(m, &r->body);
            protobuf_c_message_free_unpacked(m, NULL);
        }
    }
    pa_buf_free(&pb);
    return rc;
}

/* The weight of hit i: merged() gave one profile per series name, in order of first hit. */
static double app_weight(const struct hits *h, const struct weighted *w, size_t nw, size_t i) {
    size_t idx = 0;
    for (size_t j = 0; j < h->n; j++) {
        size_t k = 0;
        while (k < j && strcmp(h->v[k].s->app, h->v[j].s->app) != 0)
            k++;
        if (k < j)
            continue; /* not the first hit of its series name */
        if (strcmp(h->v[j].s->app, h->v[i].s->app) == 0)
            return idx < nw ? w[idx].weight : 1;
        idx++;
    }
    return 1;
}

/* One group of SelectSeries: its labels and per-step values. */
struct group {
    char key[2048];
    Types__V1__Series *s;
    double *values;
    size_t nseries;
    double sum;
};

static int cmp_group_sum(const void *a, const void *b) {
    double x = ((const struct group *)a)->sum, y = ((const struct group *)b)->sum;
    return (x < y) - (x > y);
}

static ProtobufCMessage *select_series(struct pa_coll_store *st, const ProtobufCMessage *in,
                                       int64_t now, pa_error *err, int *rc) {
    const Querier__V1__SelectSeriesRequest *q = (const void *)in;
    Querier__V1__SelectSeriesResponse *r =
        msg_new(&querier__v1__select_series_response__descriptor);
    int64_t from, until;
    range_of(q->start, q->end, now, &from, &until);
    int64_t step = q->step >= 1e9             ? 1000000000 /* beyond any range: one point */
                   : q->step >= 1             ? (int64_t)q->step
                   : (until - from) / 100 > 0 ? (until - from) / 100
                                              : 1;
    size_t nb = (size_t)((until - from + step - 1) / step);
    if (nb > 11000) {
        pa_fail(err, "step: %lld s makes %zu points; at most 11000", (long long)step, nb);
        *rc = 400;
        return &r->base;
    }
    struct hits h;
    char *sel = q->label_selector;
    *rc = find(st, &sel, 1, q->profile_typeid, from, until, &h, err);
    /* The rate of each series name, from its merged profile (as SelectMergeStacktraces). */
    struct weighted *w = NULL;
    size_t nw = 0;
    if (*rc == 0)
        *rc = merged(st, &h, q->label_selector, from, until, &w, &nw, err);
    struct group *g = NULL;
    size_t ng = 0;
    uint64_t *counts = calloc(nb ? nb : 1, sizeof *counts);
    if (!counts)
        abort();
    for (size_t i = 0; *rc == 0 && i < h.n; i++) {
        double weight = app_weight(&h, w, nw, i);
        memset(counts, 0, nb * sizeof *counts);
        if (pa_coll_store_timeline(st, h.v[i].s, from, step, nb, counts, err) != 0) {
            *rc = 500;
            break;
        }
        char key[2048] = "";
        size_t kl = 0;
        for (size_t k = 0; k < q->n_group_by; k++) {
            char v[512];
            label_value(h.v[i].labels.data, q->group_by[k], v, sizeof v);
            kl += (size_t)snprintf(key + kl, kl < sizeof key ? sizeof key - kl : 0, "%s=%s,",
                                   q->group_by[k], v);
            if (kl >= sizeof key)
                kl = sizeof key - 1;
        }
        size_t gi = 0;
        while (gi < ng && strcmp(g[gi].key, key) != 0)
            gi++;
        if (gi == ng) {
            struct group *ngr = realloc(g, (ng + 1) * sizeof *ngr);
            if (!ngr)
                abort();
            g = ngr;
            memset(&g[ng], 0, sizeof g[ng]);
            snprintf(g[ng].key, sizeof g[ng].key, "%s", key);
            g[ng].values = calloc(nb ? nb : 1, sizeof *g[ng].values);
            g[ng].s = msg_new(&types__v1__series__descriptor);
            if (!g[ng].values)
                abort();
            for (size_t k = 0; k < q->n_group_by; k++) {
                char v[512];
                label_value(h.v[i].labels.data, q->group_by[k], v, sizeof v);
                push_ptr((void ***)&g[ng].s->labels, &g[ng].s->n_labels,
                         pair(q->group_by[k], strlen(q->group_by[k]), v, strlen(v)));
            }
            ng++;
        }
        g[gi].nseries++;
        for (size_t b = 0; b < nb; b++) {
            g[gi].values[b] += (double)counts[b] * weight;
            g[gi].sum += (double)counts[b] * weight;
        }
    }
    free(counts);
    weighted_free(w, nw);
    hits_free(&h);
    if (ng)
        qsort(g, ng, sizeof *g, cmp_group_sum);
    for (size_t gi = 0; gi < ng; gi++) {
        int keep = *rc == 0 && (q->limit <= 0 || gi < (size_t)q->limit);
        for (size_t b = 0; keep && b < nb; b++) {
            if (g[gi].values[b] == 0)
                continue;
            Types__V1__Point *p = msg_new(&types__v1__point__descriptor);
            p->value = g[gi].values[b];
            if (q->aggregation ==
                TYPES__V1__TIME_SERIES_AGGREGATION_TYPE__TIME_SERIES_AGGREGATION_TYPE_AVERAGE)
                p->value /= (double)g[gi].nseries;
            p->timestamp = (from + (int64_t)b * step) * 1000;
            push_ptr((void ***)&g[gi].s->points, &g[gi].s->n_points, p);
        }
        if (keep)
            push_ptr((void ***)&r->series, &r->n_series, g[gi].s);
        else
            protobuf_c_message_free_unpacked(&g[gi].s->base, NULL);
        free(g[gi].values);
    }
    free(g);
    return &r->base;
}

/* ---- dispatch --------------------------------------------------------------------------- */

void pa_coll_handle_querier(struct pa_coll_store *st, const char *method, const char *content_type,
                            const uint8_t *body, size_t len, int64_t now,
                            struct pa_coll_response *r) {
    static const struct {
        const char *name;
        const ProtobufCMessageDescriptor *in;
    } methods[] = {
        {"ProfileTypes", &querier__v1__profile_types_request__descriptor},
        {"LabelNames", &types__v1__label_names_request__descriptor},
        {"LabelValues", &types__v1__label_values_request__descriptor},
        {"Series", &querier__v1__series_request__descriptor},
        {"SelectMergeStacktraces", &querier__v1__select_merge_stacktraces_request__descriptor},
        {"SelectMergeProfile", &querier__v1__select_merge_profile_request__descriptor},
        {"SelectSeries", &querier__v1__select_series_request__descriptor},
        {"Diff", &querier__v1__diff_request__descriptor},
    };
    pa_error err = {""};
    size_t m = 0;
    while (m < sizeof methods / sizeof methods[0] && strcmp(methods[m].name, method) != 0)
        m++;
    if (m == sizeof methods / sizeof methods[0]) {
        pa_fail(&err, "querier.v1.QuerierService/%.64s is not served by pyagent-collector", method);
        pa_coll_connect_error(r, 404, err.msg);
        return;
    }
    enum pa_coll_codec codec;
    if (pa_coll_connect_codec(content_type, &codec) != 0) {
        pa_coll_respond_text(r, 415,
                             "Content-Type: '%.64s' is not a Connect codec (application/proto or "
                             "application/json)",
                             content_type ? content_type : "");
        return;
    }
    ProtobufCMessage *in = pa_coll_connect_decode(methods[m].in, codec, body, len, &err);
    if (!in) {
        pa_coll_connect_error(r, 400, err.msg);
        return;
    }
    int rc = 0;
    ProtobufCMessage *out = NULL;
    switch (m) {
    case 0:
        out = profile_types(st, in, now, &err, &rc);
        break;
    case 1: {
        const Types__V1__LabelNamesRequest *q = (const void *)in;
        out = labels_of(st, q->matchers, q->n_matchers, NULL, q->start, q->end, now, &err, &rc);
        break;
    }
    case 2: {
        const Types__V1__LabelValuesRequest *q = (const void *)in;
        out = labels_of(st, q->matchers, q->n_matchers, q->name, q->start, q->end, now, &err, &rc);
        break;
    }
    case 3:
        out = series(st, in, now, &err, &rc);
        break;
    case 4:
        out = select_merge_stacktraces(st, in, now, &err, &rc);
        break;
    case 5:
        rc = select_merge_profile(st, in, now, codec, r, &err);
        break;
    case 6:
        out = select_series(st, in, now, &err, &rc);
        break;
    default:
        out = diff(st, in, now, &err, &rc);
        break;
    }
    if (rc)
        pa_coll_connect_error(r, rc, err.msg);
    else if (out)
        pa_coll_connect_respond(r, codec, out);
    if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    protobuf_c_message_free_unpacked(in, NULL);
}
