/* firefox.c - the Firefox Profiler's processed profile format (version 70).
 *
 * The format is a set of column tables (docs: the Firefox Profiler's src/types/profile.ts):
 * profile.shared holds the stack table (a prefix tree in topological order: prefixOffset 0
 * is a root, k points k rows back), the frame, func, resource and string tables; each thread
 * holds only its samples (stack, time, weight) and an empty marker table. A pyagent profile
 * maps onto it directly: thread roots become threads, every other frame string becomes one
 * frame, frames that differ only in line share one func. Samples with time buckets are placed
 * at their bucket's middle, weighted by their count; a profile without time has no real
 * times, so its stacks are laid out one per interval in stack order and the profile says so
 * in meta.extra. Stack rows come from a prefix tree (tree.c), so parents precede children
 * as the format requires. */
#include "profile_int.h"

#include <stdlib.h>
#include <string.h>

/* Column of a frame in the categories below. */
enum { CAT_OTHER, CAT_PYTHON, CAT_NATIVE, CAT_IDLE };

struct ff {
    const pa_profile *p;
    pa_profile *strings;                             /* interner: id = index into stringArray */
    pa_profile *funcs;                               /* "name\0file" -> func index */
    pa_profile *res;                                 /* file -> resource index */
    pa_buf fn_name, fn_res, fn_js, fn_src, res_name; /* columns being built */
    pa_profile *sources;                             /* file -> source index */
    pa_buf src_file;
    uint32_t *frame_of; /* profile frame id -> frame table index, UINT32_MAX for thread roots */
    uint32_t *func_of;  /* frame table index -> func */
    uint32_t *line_of;
    unsigned char *cat_of;
    size_t nframes;
    pa_tree stacks; /* the shared stack table */
};

static uint32_t str_id(struct ff *f, const char *s, size_t len) {
    return pa_profile_intern(f->strings, s, len);
}

static void col_add(pa_buf *col, const char *text) {
    if (col->len)
        pa_buf_append(col, ",", 1);
    pa_buf_puts(col, text);
}

static void col_add_u(pa_buf *col, uint64_t v) {
    char tmp[24];
    snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    col_add(col, tmp);
}

/* The source (file) and resource of a file name, created on first use. */
static uint32_t source_of(struct ff *f, const char *file, size_t len) {
    size_t before = pa_profile_frame_count(f->sources);
    uint32_t id = pa_profile_intern(f->sources, file, len);
    if (pa_profile_frame_count(f->sources) > before)
        col_add_u(&f->src_file, str_id(f, file, len));
    return id;
}

static uint32_t resource_of(struct ff *f, const char *file, size_t len) {
    size_t before = pa_profile_frame_count(f->res);
    uint32_t id = pa_profile_intern(f->res, file, len);
    if (pa_profile_frame_count(f->res) > before) {
        const char *base = file + len;
        while (base > file && base[-1] != '/')
            base--;
        col_add_u(&f->res_name, str_id(f, base, (size_t)(file + len - base)));
    }
    return id;
}

static void build_frames(struct ff *f) {
    size_t nf = pa_profile_frame_count(f->p);
    f->frame_of = pa_xrealloc(NULL, (nf + 1) * sizeof *f->frame_of);
    f->func_of = pa_xrealloc(NULL, (nf + 1) * sizeof *f->func_of);
    f->line_of = pa_xrealloc(NULL, (nf + 1) * sizeof *f->line_of);
    f->cat_of = pa_xrealloc(NULL, nf + 1);
    pa_buf key = {0};
    for (uint32_t id = 0; id < nf; id++) {
        size_t len;
        const char *s = pa_profile_frame(f->p, id, &len);
        pa_frame_info fi;
        pa_frame_parse(s, len, &fi);
        if (fi.kind == PA_FRAME_THREAD) {
            f->frame_of[id] = UINT32_MAX;
            continue;
        }
        int python =
            fi.kind == PA_FRAME_OWN || fi.kind == PA_FRAME_STDLIB || fi.kind == PA_FRAME_SITE;
        const char *name = python || fi.kind == PA_FRAME_NATIVE ? fi.name : s;
        size_t nlen = python || fi.kind == PA_FRAME_NATIVE ? fi.name_len : fi.base_len;
        key.len = 0;
        pa_buf_append(&key, name, nlen);
        pa_buf_append(&key, "", 1);
        if (fi.file)
            pa_buf_append(&key, fi.file, fi.file_len);
        size_t before = pa_profile_frame_count(f->funcs);
        uint32_t fn = pa_profile_intern(f->funcs, key.data, key.len);
        if (pa_profile_frame_count(f->funcs) > before) {
            col_add_u(&f->fn_name, str_id(f, name, nlen));
            col_add(&f->fn_js, python ? "true" : "false");
            if (fi.file) {
                col_add_u(&f->fn_res, resource_of(f, fi.file, fi.file_len));
                if (python)
                    col_add_u(&f->fn_src, source_of(f, fi.file, fi.file_len));
                else
                    col_add(&f->fn_src, "null");
            } else {
                col_add(&f->fn_res, "-1");
                col_add(&f->fn_src, "null");
            }
        }
        f->frame_of[id] = (uint32_t)f->nframes;
        f->func_of[f->nframes] = fn;
        f->line_of[f->nframes] = fi.line;
        f->cat_of[f->nframes] = python                          ? CAT_PYTHON
                                : fi.kind == PA_FRAME_NATIVE    ? CAT_NATIVE
                                : fi.kind == PA_FRAME_SYNTHETIC ? CAT_IDLE
                                                                : CAT_OTHER;
        f->nframes++;
    }
    pa_buf_free(&key);
}

/* The stack row of profile stack s without its thread root; UINT32_MAX if it has no frame
 * left (a thread root alone). */
static uint32_t stack_of(struct ff *f, size_t s) {
    size_t n;
    const uint32_t *ids = pa_profile_stack(f->p, s, &n, NULL);
    uint32_t row = UINT32_MAX;
    for (size_t k = 0; k < n; k++)
        if (f->frame_of[ids[k]] != UINT32_MAX)
            row = pa_tree_child(&f->stacks, row, f->frame_of[ids[k]]);
    return row;
}

static void put_str(pa_buf *out, const char *s, size_t len) {
    pa_buf_append(out, "\"", 1);
    pa_buf_json_str(out, s, len);
    pa_buf_append(out, "\"", 1);
}

static void put_num(pa_buf *out, double v) {
    if (v == (double)(int64_t)v)
        pa_buf_printf(out, "%lld", (long long)v);
    else
        pa_buf_printf(out, "%.3f", v);
}

struct sample {
    uint32_t thread; /* index into the thread list */
    uint32_t stack;  /* stack table row */
    double time;     /* ms since meta.startTime */
    uint64_t weight;
};

static int cmp_sample(const void *a, const void *b) {
    const struct sample *x = a, *y = b;
    if (x->thread != y->thread)
        return x->thread < y->thread ? -1 : 1;
    return x->time < y->time ? -1 : x->time > y->time;
}

void pa_profile_encode_firefox(const pa_profile *p, const char *name, pa_buf *out) {
    struct ff f;
    memset(&f, 0, sizeof f);
    f.p = p;
    f.strings = pa_profile_new();
    f.funcs = pa_profile_new();
    f.res = pa_profile_new();
    f.sources = pa_profile_new();
    build_frames(&f);

    /* Threads: one per thread root, in order of first appearance; "all" for stacks without. */
    size_t nstacks = pa_profile_stack_count(p);
    pa_profile *threads = pa_profile_new();
    uint32_t *thread_of = pa_xrealloc(NULL, (nstacks + 1) * sizeof *thread_of);
    uint32_t *row_of = pa_xrealloc(NULL, (nstacks + 1) * sizeof *row_of);
    for (size_t s = 0; s < nstacks; s++) {
        size_t n, len;
        const uint32_t *ids = pa_profile_stack(p, s, &n, NULL);
        const char *root = pa_profile_frame(p, ids[0], &len);
        if (len >= 7 && memcmp(root, "thread:", 7) == 0)
            thread_of[s] = pa_profile_intern(threads, root + 7, len - 7);
        else
            thread_of[s] = pa_profile_intern(threads, "\0all", 4);
        row_of[s] = stack_of(&f, s);
    }

    /* Samples: timed entries at their bucket's middle, the untimed rest after them. */
    const char *r = pa_profile_meta(p, "rate");
    double interval = r && atof(r) > 0 ? 1000.0 / atof(r) : 10.0;
    uint32_t w = pa_profile_bucket_ms(p);
    int64_t t0 = pa_profile_time_first(p);
    const char *start_meta = pa_profile_meta(p, "start");
    double start_ms = w ? (double)t0 : start_meta ? atof(start_meta) * 1000.0 : 0.0;
    size_t ntime = pa_profile_time_count(p);
    struct sample *smp = pa_xrealloc(NULL, (ntime + nstacks + 1) * sizeof *smp);
    size_t nsmp = 0;
    uint64_t *rest = pa_xrealloc(NULL, (nstacks + 1) * sizeof *rest);
    for (size_t s = 0; s < nstacks; s++)
        pa_profile_stack(p, s, NULL, &rest[s]);
    double end = 0;
    for (size_t i = 0; i < ntime; i++) {
        size_t s;
        int64_t t;
        uint64_t c;
        pa_profile_time_at(p, i, &s, &t, &c);
        rest[s] -= c < rest[s] ? c : rest[s];
        smp[nsmp++] = (struct sample){thread_of[s], row_of[s], (double)(t - t0) + w / 2.0, c};
        if ((double)(t - t0 + w) > end)
            end = (double)(t - t0 + w);
    }
    double next = end;
    size_t untimed = 0;
    for (size_t s = 0; s < nstacks; s++) {
        if (rest[s] == 0)
            continue;
        smp[nsmp++] = (struct sample){thread_of[s], row_of[s], next, rest[s]};
        next += interval * (double)rest[s];
        untimed += rest[s];
    }
    if (nsmp > 1)
        qsort(smp, nsmp, sizeof *smp, cmp_sample);

    pa_buf_puts(out, "{\"meta\":{\"interval\":");
    put_num(out, interval);
    pa_buf_puts(out, ",\"startTime\":");
    put_num(out, start_ms);
    pa_buf_puts(out, ",\"endTime\":");
    put_num(out, start_ms + next);
    pa_buf_puts(out, ",\"profilingStartTime\":0,\"profilingEndTime\":");
    put_num(out, next);
    pa_buf_puts(out, ",\"processType\":0,\"product\":");
    put_str(out, name, strlen(name));
    pa_buf_puts(out,
                ",\"stackwalk\":0,\"debug\":false,\"version\":36,\"preprocessedProfileVersion\":70,"
                "\"symbolicated\":true,\"symbolicationNotSupported\":true,"
                "\"usesOnlyOneStackType\":true,\"sourceCodeIsNotOnSearchfox\":true,"
                "\"keepProfileThreadOrder\":true,\"importedFrom\":\"pyagent\","
                "\"categories\":["
                "{\"name\":\"Other\",\"color\":\"grey\",\"subcategories\":[\"Other\"]},"
                "{\"name\":\"Python\",\"color\":\"yellow\",\"subcategories\":[\"Other\"]},"
                "{\"name\":\"Native\",\"color\":\"blue\",\"subcategories\":[\"Other\"]},"
                "{\"name\":\"Idle\",\"color\":\"transparent\",\"subcategories\":[\"Other\"]}],"
                "\"markerSchema\":[],\"extra\":[{\"label\":\"pyagent\",\"entries\":[");
    size_t nmeta = pa_profile_meta_count(p);
    for (size_t i = 0; i < nmeta; i++) {
        const char *k, *v;
        pa_profile_meta_at(p, i, &k, &v);
        pa_buf_puts(out, i ? ",{\"label\":" : "{\"label\":");
        put_str(out, k, strlen(k));
        pa_buf_puts(out, ",\"format\":\"string\",\"value\":");
        put_str(out, v, strlen(v));
        pa_buf_puts(out, "}");
    }
    pa_buf_printf(out, "%s{\"label\":\"sample times\",\"format\":\"string\",\"value\":\"%s\"}]}]},",
                  nmeta ? "," : "",
                  untimed == 0 ? "recorded (time buckets)"
                  : ntime      ? "recorded, and stacks without time laid out after them"
                               : "not recorded: stacks laid out one after another");
    pa_buf_puts(out,
                "\"libs\":[],\"pages\":[],\"counters\":[],\"shared\":{\"stackTable\":{\"frame\":[");
    const pa_tree *st = &f.stacks;
    for (size_t i = 0; i < st->n; i++)
        pa_buf_printf(out, i ? ",%u" : "%u", st->frame[i]);
    pa_buf_puts(out, "],\"prefixOffset\":[");
    for (size_t i = 0; i < st->n; i++)
        pa_buf_printf(out, i ? ",%llu" : "%llu",
                      (unsigned long long)(st->parent[i] == UINT32_MAX ? 0 : i - st->parent[i]));
    pa_buf_printf(out, "],\"length\":%zu},\"frameTable\":{", st->n);
    static const char *const constant_cols[][2] = {
        {"address", "-1"},        {"lib", "-1"},
        {"inlineDepth", "0"},     {"subcategory", "0"},
        {"nativeSymbol", "null"}, {"innerWindowID", "0"},
        {"column", "null"},       {"originalLocation", "null"},
    };
    for (size_t c = 0; c < sizeof constant_cols / sizeof constant_cols[0]; c++) {
        pa_buf_printf(out, "\"%s\":[", constant_cols[c][0]);
        for (size_t i = 0; i < f.nframes; i++)
            pa_buf_printf(out, i ? ",%s" : "%s", constant_cols[c][1]);
        pa_buf_puts(out, "],");
    }
    pa_buf_puts(out, "\"category\":[");
    for (size_t i = 0; i < f.nframes; i++)
        pa_buf_printf(out, i ? ",%u" : "%u", f.cat_of[i]);
    pa_buf_puts(out, "],\"func\":[");
    for (size_t i = 0; i < f.nframes; i++)
        pa_buf_printf(out, i ? ",%u" : "%u", f.func_of[i]);
    pa_buf_puts(out, "],\"line\":[");
    for (size_t i = 0; i < f.nframes; i++) {
        if (f.line_of[i])
            pa_buf_printf(out, i ? ",%u" : "%u", f.line_of[i]);
        else
            pa_buf_puts(out, i ? ",null" : "null");
    }
    size_t nfuncs = pa_profile_frame_count(f.funcs);
    pa_buf_printf(out,
                  "],\"length\":%zu},\"funcTable\":{\"name\":[%s],\"isJS\":[%s],"
                  "\"relevantForJS\":[%s],\"resource\":[%s],\"source\":[%s],",
                  f.nframes, f.fn_name.data ? f.fn_name.data : "", f.fn_js.data ? f.fn_js.data : "",
                  f.fn_js.data ? f.fn_js.data : "", f.fn_res.data ? f.fn_res.data : "",
                  f.fn_src.data ? f.fn_src.data : "");
    static const char *const null_cols[] = {"lineNumber", "columnNumber", "originalLocation"};
    for (size_t c = 0; c < 3; c++) {
        pa_buf_printf(out, "\"%s\":[", null_cols[c]);
        for (size_t i = 0; i < nfuncs; i++)
            pa_buf_puts(out, i ? ",null" : "null");
        pa_buf_puts(out, "],");
    }
    size_t nres = pa_profile_frame_count(f.res);
    pa_buf_printf(out, "\"length\":%zu},\"resourceTable\":{\"length\":%zu,\"name\":[%s],\"host\":[",
                  nfuncs, nres, f.res_name.data ? f.res_name.data : "");
    for (size_t i = 0; i < nres; i++)
        pa_buf_puts(out, i ? ",null" : "null");
    pa_buf_puts(out, "],\"type\":[");
    for (size_t i = 0; i < nres; i++)
        pa_buf_puts(out, i ? ",0" : "0");
    size_t nsrc = pa_profile_frame_count(f.sources);
    pa_buf_printf(out,
                  "]},\"nativeSymbols\":{\"libIndex\":[],\"address\":[],\"name\":[],"
                  "\"functionSize\":[],\"length\":0},\"sources\":{\"length\":%zu,\"id\":[",
                  nsrc);
    for (size_t i = 0; i < nsrc; i++)
        pa_buf_puts(out, i ? ",null" : "null");
    pa_buf_printf(out, "],\"filename\":[%s],\"startLine\":[",
                  f.src_file.data ? f.src_file.data : "");
    for (size_t i = 0; i < nsrc; i++)
        pa_buf_puts(out, i ? ",1" : "1");
    pa_buf_puts(out, "],\"startColumn\":[");
    for (size_t i = 0; i < nsrc; i++)
        pa_buf_puts(out, i ? ",1" : "1");
    pa_buf_puts(out, "],\"sourceMapURL\":[");
    for (size_t i = 0; i < nsrc; i++)
        pa_buf_puts(out, i ? ",null" : "null");
    pa_buf_puts(out, "],\"content\":[");
    for (size_t i = 0; i < nsrc; i++)
        pa_buf_puts(out, i ? ",null" : "null");
    pa_buf_puts(out, "]},\"sourceLocationTable\":{\"source\":[],\"line\":[],\"column\":[],"
                     "\"length\":0},\"stringArray\":[");
    size_t nstr = pa_profile_frame_count(f.strings);
    for (uint32_t i = 0; i < nstr; i++) {
        size_t len;
        const char *s = pa_profile_frame(f.strings, i, &len);
        if (i)
            pa_buf_append(out, ",", 1);
        put_str(out, s, len);
    }
    pa_buf_puts(out, "]},\"threads\":[");
    const char *pid = pa_profile_meta(p, "pid");
    size_t nthreads = pa_profile_frame_count(threads);
    size_t k = 0;
    for (uint32_t t = 0; t < nthreads; t++) {
        size_t len;
        const char *tn = pa_profile_frame(threads, t, &len);
        int all = len == 4 && memcmp(tn, "\0all", 4) == 0;
        pa_buf_puts(out, t ? ",{" : "{");
        pa_buf_puts(out, "\"processType\":\"default\",\"processStartupTime\":0,"
                         "\"processShutdownTime\":null,\"registerTime\":0,"
                         "\"unregisterTime\":null,\"pausedRanges\":[],\"name\":");
        if (all)
            put_str(out, "all threads", 11);
        else
            put_str(out, tn, len);
        pa_buf_printf(out, ",\"isMainThread\":%s,\"pid\":",
                      !all && len == 10 && memcmp(tn, "MainThread", 10) == 0 ? "true" : "false");
        /* pid is a string in the format; a merged profile's may list several. */
        put_str(out, pid ? pid : "0", pid ? strlen(pid) : 1);
        pa_buf_printf(out, ",\"tid\":%u,\"samples\":{\"stack\":[", t + 1);
        size_t first = k;
        while (k < nsmp && smp[k].thread == t)
            k++;
        /* A thread root alone has no frame: its samples have no stack (null). */
        for (size_t i = first; i < k; i++) {
            if (i > first)
                pa_buf_append(out, ",", 1);
            if (smp[i].stack == UINT32_MAX)
                pa_buf_puts(out, "null");
            else
                pa_buf_printf(out, "%u", smp[i].stack);
        }
        pa_buf_puts(out, "],\"time\":[");
        for (size_t i = first; i < k; i++) {
            if (i > first)
                pa_buf_append(out, ",", 1);
            put_num(out, smp[i].time);
        }
        pa_buf_puts(out, "],\"weight\":[");
        for (size_t i = first; i < k; i++)
            pa_buf_printf(out, i > first ? ",%llu" : "%llu", (unsigned long long)smp[i].weight);
        pa_buf_printf(out,
                      "],\"weightType\":\"samples\",\"length\":%zu},\"markers\":{\"data\":[],"
                      "\"name\":[],\"startTime\":[],\"endTime\":[],\"phase\":[],\"category\":[],"
                      "\"length\":0}}",
                      k - first);
    }
    pa_buf_puts(out, "]}\n");

    free(smp);
    free(rest);
    free(thread_of);
    free(row_of);
    pa_profile_free(threads);
    free(f.frame_of);
    free(f.func_of);
    free(f.line_of);
    free(f.cat_of);
    pa_tree_free(&f.stacks);
    pa_buf_free(&f.fn_name);
    pa_buf_free(&f.fn_res);
    pa_buf_free(&f.fn_js);
    pa_buf_free(&f.fn_src);
    pa_buf_free(&f.res_name);
    pa_buf_free(&f.src_file);
    pa_profile_free(f.strings);
    pa_profile_free(f.funcs);
    pa_profile_free(f.res);
    pa_profile_free(f.sources);
}
