/* encode.c - writing profiles as text: folded, speedscope JSON and the reports' JSON.
 *
 * The reports' JSON is a prefix tree of the stacks in creation order (a parent always comes
 * before its children, so the browser rebuilds any view in one pass). It is the one place
 * where the size of a report is decided, so numbers are written by hand, not by printf. */
#include "profile_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void put_u64(pa_buf *b, uint64_t v) {
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    pa_buf_reserve(b, n);
    for (size_t i = 0; i < n; i++)
        b->data[b->len + i] = tmp[n - 1 - i];
    b->len += n;
    b->data[b->len] = '\0';
}

/* Folded frames must not contain the separators of the format. */
static int folded_separator(char c) {
    return c == ';' || c == '\n' || c == '\r';
}

static void put_folded_frame(pa_buf *b, const char *s, size_t len) {
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (folded_separator(c)) {
            pa_buf_append(b, s + start, i - start);
            pa_buf_append(b, c == ';' ? ":" : " ", 1);
            start = i + 1;
        }
    }
    pa_buf_append(b, s + start, len - start);
}

/* Which frames need put_folded_frame: a frame occurs in many stacks, and scanning it once
 * rather than at each occurrence took most of the time of writing a folded file (790,000 of
 * the exit's 2.3 million instructions for `import asyncio` at 20 Hz). */
static unsigned char *frames_to_escape(const pa_profile *p) {
    size_t n = pa_profile_frame_count(p);
    unsigned char *esc = pa_xrealloc(NULL, n + 1);
    for (size_t id = 0; id < n; id++) {
        size_t len;
        const char *f = pa_profile_frame(p, (uint32_t)id, &len);
        esc[id] = 0;
        for (size_t i = 0; i < len && !esc[id]; i++)
            esc[id] = (unsigned char)folded_separator(f[i]);
    }
    return esc;
}

/* The "#t" line of every stack that has time: its entries in (stack, time) order. */
struct time_lines {
    pa_time_index ix;
    int64_t t0;
    uint32_t w;
};

static void time_lines_init(struct time_lines *tl, const pa_profile *p) {
    pa_time_index_init(&tl->ix, p);
    tl->t0 = pa_profile_time_first(p);
    tl->w = pa_profile_bucket_ms(p);
}

static void time_line(const struct time_lines *tl, const pa_profile *p, size_t s, pa_buf *out) {
    size_t a = tl->ix.start[s], z = tl->ix.start[s + 1];
    if (a == z)
        return;
    pa_buf_puts(out, "#t");
    int64_t next = INT64_MIN;
    for (size_t i = a; i < z; i++) {
        int64_t t;
        uint64_t c;
        pa_profile_time_at(p, tl->ix.order[i], NULL, &t, &c);
        int64_t b = (t - tl->t0) / tl->w;
        if (b == next) {
            pa_buf_append(out, ",", 1);
        } else {
            pa_buf_append(out, " ", 1);
            put_u64(out, (uint64_t)b);
            pa_buf_append(out, ":", 1);
        }
        put_u64(out, c);
        next = b + 1;
    }
    pa_buf_append(out, "\n", 1);
}

static void put_stack_line(const pa_profile *p, size_t s, const unsigned char *esc, pa_buf *out);

void pa_profile_encode_folded(const pa_profile *p, pa_buf *out) {
    if (pa_profile_meta_count(p) || pa_profile_bucket_ms(p)) {
        pa_buf_puts(out, "# pyagent 1");
        pa_put_meta_pairs(p, out);
        pa_buf_puts(out, "\n");
    }
    if (!pa_profile_bucket_ms(p)) {
        pa_profile_encode_folded_stacks(p, out);
        return;
    }
    struct time_lines tl;
    time_lines_init(&tl, p);
    unsigned char *esc = frames_to_escape(p);
    size_t nstacks = pa_profile_stack_count(p);
    for (size_t s = 0; s < nstacks; s++) {
        put_stack_line(p, s, esc, out);
        time_line(&tl, p, s, out);
    }
    free(esc);
    pa_time_index_free(&tl.ix);
}

void pa_profile_encode_folded_stacks(const pa_profile *p, pa_buf *out) {
    unsigned char *esc = frames_to_escape(p);
    size_t nstacks = pa_profile_stack_count(p);
    for (size_t s = 0; s < nstacks; s++)
        put_stack_line(p, s, esc, out);
    free(esc);
}

static void put_stack_line(const pa_profile *p, size_t s, const unsigned char *esc, pa_buf *out) {
    size_t n;
    uint64_t count;
    const uint32_t *ids = pa_profile_stack(p, s, &n, &count);
    for (size_t k = 0; k < n; k++) {
        size_t len;
        const char *f = pa_profile_frame(p, ids[k], &len);
        if (k)
            pa_buf_append(out, ";", 1);
        if (esc[ids[k]])
            put_folded_frame(out, f, len);
        else
            pa_buf_append(out, f, len);
    }
    pa_buf_append(out, " ", 1);
    put_u64(out, count);
    pa_buf_append(out, "\n", 1);
}

static void put_json_string(pa_buf *b, const char *s, size_t len) {
    pa_buf_append(b, "\"", 1);
    pa_buf_json_str(b, s, len);
    pa_buf_append(b, "\"", 1);
}

void pa_profile_encode_speedscope(const pa_profile *p, const char *name, pa_buf *out) {
    size_t nframes = pa_profile_frame_count(p);
    size_t nstacks = pa_profile_stack_count(p);
    pa_buf_puts(out, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\","
                     "\"exporter\":\"pyagent-render\",\"name\":");
    put_json_string(out, name, strlen(name));
    pa_buf_puts(out, ",\"activeProfileIndex\":0,\"shared\":{\"frames\":[");
    for (uint32_t id = 0; id < nframes; id++) {
        size_t len;
        const char *s = pa_profile_frame(p, id, &len);
        pa_frame_info fi;
        pa_frame_parse(s, len, &fi);
        pa_buf_puts(out, id ? ",{\"name\":" : "{\"name\":");
        if (fi.kind == PA_FRAME_NATIVE || fi.kind == PA_FRAME_OWN || fi.kind == PA_FRAME_STDLIB ||
            fi.kind == PA_FRAME_SITE) {
            put_json_string(out, fi.name, fi.name_len);
            pa_buf_puts(out, ",\"file\":");
            put_json_string(out, fi.file, fi.file_len);
            if (fi.line)
                pa_buf_printf(out, ",\"line\":%u", fi.line);
        } else {
            put_json_string(out, s, len);
        }
        pa_buf_puts(out, "}");
    }
    pa_buf_puts(out, "]},\"profiles\":[");

    /* One profile per thread root; stacks without one go to a profile of their own. */
    uint32_t *root = pa_xrealloc(NULL, (nstacks + 1) * sizeof *root);
    unsigned char *is_thread = calloc(nframes + 1, 1);
    if (!is_thread)
        abort();
    for (uint32_t id = 0; id < nframes; id++) {
        size_t len;
        const char *s = pa_profile_frame(p, id, &len);
        is_thread[id] = len >= 7 && memcmp(s, "thread:", 7) == 0;
    }
    const uint32_t none = UINT32_MAX;
    for (size_t s = 0; s < nstacks; s++) {
        size_t n;
        const uint32_t *ids = pa_profile_stack(p, s, &n, NULL);
        root[s] = n > 0 && is_thread[ids[0]] ? ids[0] : none;
    }
    /* The samples in the order they are written: time buckets in time order, then what each
     * stack has without time. */
    size_t ntime = pa_profile_time_count(p);
    size_t *order = pa_profile_time_order(p);
    size_t *ev_stack = pa_xrealloc(NULL, (ntime + nstacks + 1) * sizeof *ev_stack);
    uint64_t *ev_count = pa_xrealloc(NULL, (ntime + nstacks + 1) * sizeof *ev_count);
    uint64_t *rest = pa_xrealloc(NULL, (nstacks + 1) * sizeof *rest);
    size_t nev = 0;
    for (size_t s = 0; s < nstacks; s++)
        pa_profile_stack(p, s, NULL, &rest[s]);
    for (size_t i = 0; i < ntime; i++) {
        pa_profile_time_at(p, order[i], &ev_stack[nev], NULL, &ev_count[nev]);
        size_t s = ev_stack[nev];
        rest[s] -= ev_count[nev] < rest[s] ? ev_count[nev] : rest[s];
        nev++;
    }
    for (size_t s = 0; s < nstacks; s++)
        if (rest[s]) {
            ev_stack[nev] = s;
            ev_count[nev++] = rest[s];
        }
    free(order);
    free(rest);
    unsigned char *done = calloc(nframes + 1, 1);
    if (!done)
        abort();
    int first_profile = 1;
    for (size_t e0 = 0; e0 < nev; e0++) {
        uint32_t r = root[ev_stack[e0]];
        uint32_t rkey = r == none ? (uint32_t)nframes : r;
        if (done[rkey])
            continue;
        done[rkey] = 1;
        uint64_t total = 0;
        for (size_t e = e0; e < nev; e++)
            if (root[ev_stack[e]] == r)
                total += ev_count[e];
        pa_buf_puts(out, first_profile ? "{" : ",{");
        first_profile = 0;
        pa_buf_puts(out, "\"type\":\"sampled\",\"name\":");
        if (r == none) {
            pa_buf_puts(out, "\"all\"");
        } else {
            size_t len;
            const char *s = pa_profile_frame(p, r, &len);
            put_json_string(out, s, len);
        }
        pa_buf_puts(out, ",\"unit\":\"none\",\"startValue\":0,\"endValue\":");
        put_u64(out, total);
        pa_buf_puts(out, ",\"samples\":[");
        int first = 1;
        for (size_t e = e0; e < nev; e++) {
            if (root[ev_stack[e]] != r)
                continue;
            size_t n;
            const uint32_t *ids = pa_profile_stack(p, ev_stack[e], &n, NULL);
            pa_buf_puts(out, first ? "[" : ",[");
            first = 0;
            for (size_t k = r == none ? 0 : 1; k < n; k++) {
                if (k > (r == none ? 0u : 1u))
                    pa_buf_append(out, ",", 1);
                put_u64(out, ids[k]);
            }
            pa_buf_puts(out, "]");
        }
        pa_buf_puts(out, "],\"weights\":[");
        first = 1;
        for (size_t e = e0; e < nev; e++) {
            if (root[ev_stack[e]] != r)
                continue;
            if (!first)
                pa_buf_append(out, ",", 1);
            first = 0;
            put_u64(out, ev_count[e]);
        }
        pa_buf_puts(out, "]}");
    }
    free(ev_stack);
    free(ev_count);
    pa_buf_puts(out, "]}\n");
    free(done);
    free(root);
    free(is_thread);
}

/* ---- the reports' prefix tree ---- */

struct trie {
    pa_tree tree;
    uint64_t *self[2]; /* per node: samples of stacks ending there, current and baseline */
    size_t cap;
};

static uint32_t trie_child(struct trie *t, uint32_t parent, uint32_t frame) {
    size_t before = t->tree.n;
    uint32_t i = pa_tree_child(&t->tree, parent, frame);
    if (t->tree.n > before) {
        if (t->tree.n > t->cap) {
            t->cap = t->tree.cap;
            t->self[0] = pa_xrealloc(t->self[0], t->cap * sizeof *t->self[0]);
            t->self[1] = pa_xrealloc(t->self[1], t->cap * sizeof *t->self[1]);
        }
        t->self[0][i] = t->self[1][i] = 0;
    }
    return i;
}

/* Adds p's stacks; node_of, when given, gets each stack's node (where it ends). */
static void trie_add(struct trie *t, const pa_profile *p, const uint32_t *map, int which,
                     uint32_t *node_of) {
    size_t nstacks = pa_profile_stack_count(p);
    for (size_t s = 0; s < nstacks; s++) {
        size_t n;
        uint64_t count;
        const uint32_t *ids = pa_profile_stack(p, s, &n, &count);
        uint32_t node = UINT32_MAX; /* the virtual root */
        for (size_t k = 0; k < n; k++)
            node = trie_child(t, node, map ? map[ids[k]] : ids[k]);
        if (node != UINT32_MAX)
            t->self[which][node] += count;
        if (node_of)
            node_of[s] = node;
    }
}

/* "time":{"w":BUCKET_MS,"t0":FIRST,"node":[...],"b":[...],"n":[...]}: the samples per tree
 * node and bucket (b counts buckets from t0), in time order. */
static void put_time(pa_buf *out, const pa_profile *p, const uint32_t *node_of) {
    size_t n = pa_profile_time_count(p);
    size_t *order = pa_profile_time_order(p);
    int64_t t0 = pa_profile_time_first(p);
    uint32_t w = pa_profile_bucket_ms(p);
    pa_buf_printf(out, ",\"time\":{\"w\":%u,\"t0\":%lld,\"node\":[", w, (long long)t0);
    for (size_t i = 0; i < n; i++) {
        size_t s;
        pa_profile_time_at(p, order[i], &s, NULL, NULL);
        if (i)
            pa_buf_append(out, ",", 1);
        put_u64(out, node_of[s]);
    }
    pa_buf_puts(out, "],\"b\":[");
    for (size_t i = 0; i < n; i++) {
        int64_t t;
        pa_profile_time_at(p, order[i], NULL, &t, NULL);
        if (i)
            pa_buf_append(out, ",", 1);
        put_u64(out, (uint64_t)((t - t0) / w));
    }
    pa_buf_puts(out, "],\"n\":[");
    for (size_t i = 0; i < n; i++) {
        uint64_t c;
        pa_profile_time_at(p, order[i], NULL, NULL, &c);
        if (i)
            pa_buf_append(out, ",", 1);
        put_u64(out, c);
    }
    pa_buf_puts(out, "]}");
    free(order);
}

static void put_meta(pa_buf *out, const pa_profile *p) {
    pa_buf_puts(out, "{");
    size_t n = pa_profile_meta_count(p);
    for (size_t i = 0; i < n; i++) {
        const char *k, *v;
        pa_profile_meta_at(p, i, &k, &v);
        if (i)
            pa_buf_puts(out, ",");
        put_json_string(out, k, strlen(k));
        pa_buf_puts(out, ":");
        put_json_string(out, v, strlen(v));
    }
    pa_buf_puts(out, "}");
}

void pa_profile_encode_report_json(const pa_profile *cur, const pa_profile *base, const char *title,
                                   pa_buf *out) {
    /* Frames of both profiles in one table: cur's ids stay, base's are mapped. */
    pa_profile *u = pa_profile_new();
    size_t ncur = pa_profile_frame_count(cur);
    for (uint32_t id = 0; id < ncur; id++) {
        size_t len;
        const char *s = pa_profile_frame(cur, id, &len);
        pa_profile_intern(u, s, len);
    }
    uint32_t *map = NULL;
    if (base) {
        size_t nb = pa_profile_frame_count(base);
        map = pa_xrealloc(NULL, (nb + 1) * sizeof *map);
        for (uint32_t id = 0; id < nb; id++) {
            size_t len;
            const char *s = pa_profile_frame(base, id, &len);
            map[id] = pa_profile_intern(u, s, len);
        }
    }
    struct trie t = {0};
    uint32_t *node_of = NULL;
    if (pa_profile_time_count(cur))
        node_of = pa_xrealloc(NULL, (pa_profile_stack_count(cur) + 1) * sizeof *node_of);
    trie_add(&t, cur, NULL, 0, node_of);
    if (base)
        trie_add(&t, base, map, 1, NULL);

    size_t nframes = pa_profile_frame_count(u);
    pa_frame_info *fi = pa_xrealloc(NULL, (nframes + 1) * sizeof *fi);
    pa_profile *files = pa_profile_new();
    for (uint32_t id = 0; id < nframes; id++) {
        size_t len;
        const char *s = pa_profile_frame(u, id, &len);
        pa_frame_parse(s, len, &fi[id]);
    }

    pa_buf_puts(out, "{\"version\":1,\"title\":");
    put_json_string(out, title ? title : "", title ? strlen(title) : 0);
    pa_buf_puts(out, ",\"total\":");
    put_u64(out, pa_profile_total(cur));
    if (base) {
        pa_buf_puts(out, ",\"baseTotal\":");
        put_u64(out, pa_profile_total(base));
        pa_buf_puts(out, ",\"baseMeta\":");
        put_meta(out, base);
    }
    pa_buf_puts(out, ",\"meta\":");
    put_meta(out, cur);
    pa_buf_puts(out, ",\"frames\":{\"name\":[");
    for (uint32_t id = 0; id < nframes; id++) {
        if (id)
            pa_buf_append(out, ",", 1);
        put_json_string(out, fi[id].name, fi[id].name_len);
    }
    pa_buf_puts(out, "],\"file\":[");
    for (uint32_t id = 0; id < nframes; id++) {
        if (id)
            pa_buf_append(out, ",", 1);
        if (fi[id].file) {
            put_u64(out, pa_profile_intern(files, fi[id].file, fi[id].file_len) + 1);
        } else {
            pa_buf_append(out, "0", 1);
        }
    }
    pa_buf_puts(out, "],\"line\":[");
    for (uint32_t id = 0; id < nframes; id++) {
        if (id)
            pa_buf_append(out, ",", 1);
        put_u64(out, fi[id].line);
    }
    pa_buf_puts(out, "],\"kind\":[");
    for (uint32_t id = 0; id < nframes; id++) {
        if (id)
            pa_buf_append(out, ",", 1);
        put_u64(out, (uint64_t)fi[id].kind);
    }
    /* Instructions (PYAGENT_OPCODES): offset (-1: none) and opcode name (an index into
     * "ops", 0: none), only when some frame has one; and the column span ("col", "endcol",
     * -1: none) only when some frame has one. */
    int any_instr = 0;
    for (uint32_t id = 0; id < nframes && !any_instr; id++)
        any_instr = fi[id].offset >= 0;
    if (any_instr) {
        pa_profile *ops = pa_profile_new();
        pa_profile_intern(ops, "", 0);
        pa_buf_puts(out, "],\"off\":[");
        for (uint32_t id = 0; id < nframes; id++)
            pa_buf_printf(out, id ? ",%lld" : "%lld", (long long)fi[id].offset);
        int any_span = 0;
        for (uint32_t id = 0; id < nframes && !any_span; id++)
            any_span = fi[id].col >= 0;
        if (any_span) {
            pa_buf_puts(out, "],\"col\":[");
            for (uint32_t id = 0; id < nframes; id++)
                pa_buf_printf(out, id ? ",%d" : "%d", (int)fi[id].col);
            pa_buf_puts(out, "],\"endcol\":[");
            for (uint32_t id = 0; id < nframes; id++)
                pa_buf_printf(out, id ? ",%d" : "%d", (int)fi[id].end_col);
        }
        pa_buf_puts(out, "],\"op\":[");
        for (uint32_t id = 0; id < nframes; id++)
            pa_buf_printf(out, id ? ",%u" : "%u",
                          fi[id].op ? pa_profile_intern(ops, fi[id].op, fi[id].op_len) : 0);
        pa_buf_puts(out, "],\"ops\":[");
        size_t nops = pa_profile_frame_count(ops);
        for (uint32_t i = 0; i < nops; i++) {
            size_t len;
            const char *op = pa_profile_frame(ops, i, &len);
            const char *basename = i ? pa_opcode_base(op, len) : NULL;
            if (i)
                pa_buf_append(out, ",", 1);
            /* "NAME" or "NAME|BASE" for a specialized instruction */
            pa_buf_append(out, "\"", 1);
            pa_buf_json_str(out, op, len);
            if (basename) {
                pa_buf_puts(out, "|");
                pa_buf_puts(out, basename);
            }
            pa_buf_append(out, "\"", 1);
        }
        pa_profile_free(ops);
    }
    /* files[0] is "no file", so file indexes above are 1-based */
    pa_buf_puts(out, "]},\"files\":[\"\"");
    size_t nfiles = pa_profile_frame_count(files);
    for (uint32_t i = 0; i < nfiles; i++) {
        size_t len;
        const char *s = pa_profile_frame(files, i, &len);
        pa_buf_append(out, ",", 1);
        put_json_string(out, s, len);
    }
    /* parent is written as the distance back to it (the virtual root is at -1) */
    pa_buf_puts(out, "],\"nodes\":{\"up\":[");
    for (size_t i = 0; i < t.tree.n; i++) {
        if (i)
            pa_buf_append(out, ",", 1);
        put_u64(out, t.tree.parent[i] == UINT32_MAX ? i + 1 : i - t.tree.parent[i]);
    }
    pa_buf_puts(out, "],\"frame\":[");
    for (size_t i = 0; i < t.tree.n; i++) {
        if (i)
            pa_buf_append(out, ",", 1);
        put_u64(out, t.tree.frame[i]);
    }
    pa_buf_puts(out, "],\"self\":[");
    for (size_t i = 0; i < t.tree.n; i++) {
        if (i)
            pa_buf_append(out, ",", 1);
        put_u64(out, t.self[0][i]);
    }
    if (base) {
        pa_buf_puts(out, "],\"base\":[");
        for (size_t i = 0; i < t.tree.n; i++) {
            if (i)
                pa_buf_append(out, ",", 1);
            put_u64(out, t.self[1][i]);
        }
    }
    pa_buf_puts(out, "]}");
    if (node_of)
        put_time(out, cur, node_of);
    pa_buf_puts(out, "}");
    free(node_of);

    pa_tree_free(&t.tree);
    free(t.self[0]);
    free(t.self[1]);
    free(fi);
    free(map);
    pa_profile_free(files);
    pa_profile_free(u);
}
