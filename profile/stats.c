/* stats.c - the exports that forget stacks and keep one row per code location, as CPython's
 * profiling.sampling writes them: pstats (the marshalled dict pstats.Stats loads) and JSON lines
 * (its JsonlCollector's records). Both come from one aggregation: each Python frame becomes a
 * location (file, line, function), native frames are (library, 0, symbol), synthetic ones
 * ("~", 0, name) like pstats' built-ins, and thread roots are not locations at all. A location
 * counts its samples as the leaf (self) and once per stack that holds it (cumulative, so
 * recursion is not counted twice). A scratch profile serves as the interner: its frame ids are
 * the location ids. */
#include "profile_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct loc {
    char *file, *name; /* valid UTF-8 */
    uint32_t line;
    int32_t col, end_col; /* JSON lines only; -1 when unknown */
    uint64_t self, cum;
    size_t seen; /* last stack index + 1 that counted cum */
} loc;

typedef struct agg {
    pa_profile *keys; /* interns location keys -> location ids */
    loc *locs;
    size_t nlocs;
    uint32_t *of_frame; /* frame id -> location id + 1; 0: not a location (thread root) */
    /* pstats' callers: (callee, caller) pairs, interned in pairs, counted in pair_n */
    pa_profile *pairs;
    uint32_t (*pair)[2];
    uint64_t *pair_n;
    size_t npairs;
    uint64_t total;
} agg;

static char *utf8_dup(const char *s, size_t n) {
    pa_buf b = {0};
    pa_buf_utf8(&b, s, n);
    pa_buf_append(&b, "", 1);
    return b.data;
}

/* The location of frame string s, created if new; UINT32_MAX for a thread root. with_col
 * keeps instructions' columns apart (JSON lines), else locations are by line (pstats). */
static uint32_t location_of(agg *a, const char *s, size_t len, int with_col) {
    pa_frame_info fi;
    pa_frame_parse(s, len, &fi);
    if (fi.kind == PA_FRAME_THREAD)
        return UINT32_MAX;
    const char *file = fi.file ? fi.file : "~";
    size_t file_len = fi.file ? fi.file_len : 1;
    uint32_t line = fi.file ? fi.line : 0;
    int32_t col = with_col ? fi.col : -1, end_col = with_col ? fi.end_col : -1;
    pa_buf key = {0};
    pa_buf_printf(&key, "%u:%d:%d:%zu:", line, col, end_col, file_len);
    pa_buf_append(&key, file, file_len);
    pa_buf_append(&key, fi.name, fi.name_len);
    uint32_t id = pa_profile_intern(a->keys, key.data, key.len);
    pa_buf_free(&key);
    if (id == a->nlocs) {
        a->locs = pa_xrealloc(a->locs, (a->nlocs + 1) * sizeof *a->locs);
        a->locs[a->nlocs++] = (loc){
            utf8_dup(file, file_len), utf8_dup(fi.name, fi.name_len), line, col, end_col, 0, 0, 0};
    }
    assert(id < a->nlocs);
    return id;
}

static void count_pair(agg *a, uint32_t callee, uint32_t caller, uint64_t n) {
    uint32_t ids[2] = {callee, caller};
    uint32_t id = pa_profile_intern(a->pairs, (const char *)ids, sizeof ids);
    if (id == a->npairs) {
        a->pair = pa_xrealloc(a->pair, (a->npairs + 1) * sizeof *a->pair);
        a->pair_n = pa_xrealloc(a->pair_n, (a->npairs + 1) * sizeof *a->pair_n);
        a->pair[id][0] = callee, a->pair[id][1] = caller, a->pair_n[id] = 0;
        a->npairs++;
    }
    a->pair_n[id] += n;
}

static void agg_build(agg *a, const pa_profile *p, int with_col, int with_callers) {
    memset(a, 0, sizeof *a);
    a->keys = pa_profile_new();
    a->pairs = with_callers ? pa_profile_new() : NULL;
    size_t nframes = pa_profile_frame_count(p);
    a->of_frame = pa_xrealloc(NULL, (nframes + 1) * sizeof *a->of_frame);
    for (uint32_t f = 0; f < nframes; f++) {
        size_t len;
        const char *s = pa_profile_frame(p, f, &len);
        uint32_t l = location_of(a, s, len, with_col);
        a->of_frame[f] = l == UINT32_MAX ? 0 : l + 1;
    }
    for (size_t i = 0; i < pa_profile_stack_count(p); i++) {
        size_t n;
        uint64_t count;
        const uint32_t *ids = pa_profile_stack(p, i, &n, &count);
        uint32_t prev = 0; /* the caller of the next frame, as location + 1 */
        uint32_t leaf = 0;
        for (size_t j = 0; j < n; j++) {
            uint32_t l = a->of_frame[ids[j]];
            if (!l)
                continue;
            loc *lo = &a->locs[l - 1];
            if (lo->seen != i + 1) {
                lo->seen = i + 1;
                lo->cum += count;
            }
            if (with_callers && prev)
                count_pair(a, l - 1, prev - 1, count);
            prev = leaf = l;
        }
        if (leaf) {
            a->locs[leaf - 1].self += count;
            a->total += count;
        }
    }
}

static void agg_free(agg *a) {
    for (size_t i = 0; i < a->nlocs; i++)
        free(a->locs[i].file), free(a->locs[i].name);
    free(a->locs);
    free(a->of_frame);
    free(a->pair);
    free(a->pair_n);
    pa_profile_free(a->keys);
    if (a->pairs)
        pa_profile_free(a->pairs);
}

/* Seconds per sample: 1/rate, or a millisecond for a profile that does not say its rate. */
static double interval_s(const pa_profile *p) {
    const char *r = pa_profile_meta(p, "rate");
    double rate = r ? strtod(r, NULL) : 0;
    return rate > 0 && isfinite(rate) ? 1.0 / rate : 0.001;
}

/* ---- marshal (Python's Python/marshal.c, version 4, without references) ---- */

static void m_u32(pa_buf *b, uint32_t v) {
    unsigned char c[4] = {v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff, v >> 24};
    pa_buf_append(b, c, 4);
}

static void m_int(pa_buf *b, uint64_t v) {
    if (v <= INT32_MAX) {
        pa_buf_puts(b, "i");
        m_u32(b, (uint32_t)v);
        return;
    }
    /* TYPE_LONG: the number of 15-bit digits, then the digits, least significant first */
    uint16_t d[5];
    uint32_t n = 0;
    for (; v; v >>= 15)
        d[n++] = v & 0x7fff;
    pa_buf_puts(b, "l");
    m_u32(b, n);
    for (uint32_t i = 0; i < n; i++) {
        unsigned char c[2] = {d[i] & 0xff, d[i] >> 8};
        pa_buf_append(b, c, 2);
    }
}

static void m_float(pa_buf *b, double v) { /* TYPE_BINARY_FLOAT, little-endian IEEE 754 */
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    pa_buf_puts(b, "g");
    for (int i = 0; i < 8; i++) {
        unsigned char c = (u >> (8 * i)) & 0xff;
        pa_buf_append(b, &c, 1);
    }
}

static void m_str(pa_buf *b, const char *s) { /* TYPE_UNICODE: UTF-8 with its length */
    size_t n = strlen(s);
    pa_buf_puts(b, "u");
    m_u32(b, (uint32_t)n);
    pa_buf_append(b, s, n);
}

static void m_tuple(pa_buf *b, unsigned n) { /* TYPE_SMALL_TUPLE */
    unsigned char c[2] = {')', (unsigned char)n};
    pa_buf_append(b, c, 2);
}

static void m_loc(pa_buf *b, const loc *l) {
    m_tuple(b, 3);
    m_str(b, l->file);
    m_int(b, l->line);
    m_str(b, l->name);
}

static int cmp_pair(const void *x, const void *y) {
    const uint32_t *a = x, *b = y;
    return a[0] != b[0] ? (a[0] > b[0]) - (a[0] < b[0]) : (a[1] > b[1]) - (a[1] < b[1]);
}

int pa_profile_encode_pstats(const pa_profile *p, pa_buf *out, pa_error *err) {
    (void)err;
    agg a;
    agg_build(&a, p, 0, 1);
    double dt = interval_s(p);
    /* Callers grouped by callee: sort (callee, caller, pair index) triples. */
    uint32_t(*order)[3] = pa_xrealloc(NULL, (a.npairs + 1) * sizeof *order);
    for (size_t i = 0; i < a.npairs; i++)
        order[i][0] = a.pair[i][0], order[i][1] = a.pair[i][1], order[i][2] = (uint32_t)i;
    qsort(order, a.npairs, sizeof *order, cmp_pair);
    size_t k = 0;
    pa_buf_puts(out, "{");
    for (uint32_t i = 0; i < a.nlocs; i++) {
        const loc *l = &a.locs[i];
        /* As CPython's sampled stats: cc counts the samples as leaf, nc those on the stack,
         * tt and ct are them in seconds; callers map a caller to its samples. */
        m_loc(out, l);
        m_tuple(out, 5);
        m_int(out, l->self);
        m_int(out, l->cum);
        m_float(out, (double)l->self * dt);
        m_float(out, (double)l->cum * dt);
        pa_buf_puts(out, "{");
        for (; k < a.npairs && order[k][0] == i; k++) {
            m_loc(out, &a.locs[order[k][1]]);
            m_int(out, a.pair_n[order[k][2]]);
        }
        pa_buf_puts(out, "0");
    }
    pa_buf_puts(out, "0");
    free(order);
    agg_free(&a);
    return 0;
}

/* ---- JSON lines (CPython's jsonl_collector.py, record schema version 0) ---- */

enum { CHUNK = 256 };

static void j_head(pa_buf *out, const char *type, const char *run_id) {
    pa_buf_printf(out, "{\"type\":\"%s\",\"v\":0,\"run_id\":\"%s\"", type, run_id);
}

int pa_profile_encode_jsonl(const pa_profile *p, pa_buf *out, pa_error *err) {
    (void)err;
    agg a;
    agg_build(&a, p, 1, 0);
    /* The run id tags the records of one file; derived from the profile, so the same profile
     * always exports the same bytes. */
    pa_buf folded = {0};
    pa_profile_encode_folded(p, &folded);
    char run_id[33];
    snprintf(run_id, sizeof run_id, "%016llx%016llx",
             (unsigned long long)pa_hash_bytes(folded.data, folded.len),
             (unsigned long long)pa_hash_bytes(folded.data, folded.len / 2));
    pa_buf_free(&folded);

    j_head(out, "meta", run_id);
    pa_buf_printf(out, ",\"sample_interval_usec\":%lld", (long long)(interval_s(p) * 1e6 + 0.5));
    const char *mode = pa_profile_meta(p, "mode");
    if (mode && (!strcmp(mode, "wall") || !strcmp(mode, "cpu") || !strcmp(mode, "gil")))
        pa_buf_printf(out, ",\"mode\":\"%s\"", mode);
    pa_buf_puts(out, "}\n");

    /* Strings: each location's function, then its file, interned in that order. */
    pa_profile *strs = pa_profile_new();
    uint32_t(*sid)[2] = pa_xrealloc(NULL, (a.nlocs + 1) * sizeof *sid);
    for (size_t i = 0; i < a.nlocs; i++) {
        sid[i][0] = pa_profile_intern(strs, a.locs[i].name, strlen(a.locs[i].name));
        sid[i][1] = pa_profile_intern(strs, a.locs[i].file, strlen(a.locs[i].file));
    }
    size_t nstrs = pa_profile_frame_count(strs);
    for (size_t i = 0; i < nstrs; i++) {
        if (i % CHUNK == 0) {
            j_head(out, "string_table", run_id);
            pa_buf_puts(out, ",\"strings\":[");
        }
        size_t len;
        const char *s = pa_profile_frame(strs, (uint32_t)i, &len);
        pa_buf_printf(out, "%s{\"str_id\":%zu,\"value\":\"", i % CHUNK ? "," : "", i);
        pa_buf_json_str(out, s, len);
        pa_buf_puts(out, "\"}");
        if (i % CHUNK == CHUNK - 1 || i == nstrs - 1)
            pa_buf_puts(out, "]}\n");
    }
    for (size_t i = 0; i < a.nlocs; i++) {
        const loc *l = &a.locs[i];
        if (i % CHUNK == 0) {
            j_head(out, "frame_table", run_id);
            pa_buf_puts(out, ",\"frames\":[");
        }
        /* Absent keys mean "not known": a frame has columns when it names its instruction,
         * never an end line. */
        pa_buf_printf(out, "%s{\"frame_id\":%zu,\"path_str_id\":%u,\"func_str_id\":%u,\"line\":%u",
                      i % CHUNK ? "," : "", i, sid[i][1], sid[i][0], l->line);
        if (l->col >= 0)
            pa_buf_printf(out, ",\"col\":%d", l->col);
        if (l->end_col >= 0)
            pa_buf_printf(out, ",\"end_col\":%d", l->end_col);
        pa_buf_puts(out, "}");
        if (i % CHUNK == CHUNK - 1 || i == a.nlocs - 1)
            pa_buf_puts(out, "]}\n");
    }
    for (size_t i = 0; i < a.nlocs; i++) {
        if (i % CHUNK == 0) {
            j_head(out, "agg", run_id);
            pa_buf_printf(out,
                          ",\"kind\":\"frame\",\"scope\":\"final\",\"samples_total\":%llu,"
                          "\"entries\":[",
                          (unsigned long long)a.total);
        }
        pa_buf_printf(out, "%s{\"frame_id\":%zu,\"self\":%llu,\"cumulative\":%llu}",
                      i % CHUNK ? "," : "", i, (unsigned long long)a.locs[i].self,
                      (unsigned long long)a.locs[i].cum);
        if (i % CHUNK == CHUNK - 1 || i == a.nlocs - 1)
            pa_buf_puts(out, "]}\n");
    }
    j_head(out, "end", run_id);
    pa_buf_printf(out, ",\"samples_total\":%llu}\n", (unsigned long long)a.total);
    free(sid);
    pa_profile_free(strs);
    agg_free(&a);
    return 0;
}
