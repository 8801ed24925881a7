/* capture.c - pyagent's binary capture (.pyacap): a profile, compact and exact, to replay later
 * into any report or export (docs/formats.md, "Binary capture").
 *
 * The one idea: store each thing once and refer to it by number. Strings sit in one table;
 * frames are records of string numbers (a Python frame's function, file, line, instruction);
 * stacks are the nodes of one prefix tree (a node is a parent and a frame), so stacks that share
 * their callers share their bytes; each stack is then its node, its weight and its time buckets
 * as gaps. Every number is a varint and the body is one zlib stream. It holds everything the
 * richest folded file holds (metadata, stacks, weights, buckets, instructions), so reading it
 * back gives the same profile, frame ids and stack order included.
 *
 * Captures are read from untrusted places (uploads, files): every count is checked against the
 * bytes that remain before anything is allocated for it, the body may not inflate beyond the
 * length its header declares (which deflate's own ratio bounds), and the stacks may not expand
 * beyond PA_CAPTURE_MAX_FRAMES frame ids, checked before they are built. */
#include "profile_int.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static const unsigned char magic[PA_CAPTURE_MAGIC_LEN] = {0x89, 'P', 'Y', 'A', 'C', 'A', 'P', '\n'};
enum { MAJOR = 1, MINOR = 0 };
enum { COMPRESS_NONE = 0, COMPRESS_ZLIB = 1 };
enum { SEC_META = 1, SEC_STRINGS = 2, SEC_FRAMES = 3, SEC_NODES = 4, SEC_STACKS = 5, SEC_TIME = 6 };
/* Section ids below this one must be understood; the others may be skipped. */
enum { SEC_FIRST_OPTIONAL = 64 };
enum { FRAME_TEXT = 0, FRAME_PYTHON = 1, FRAME_NATIVE = 2 };

#define MAX_BODY (1ull << 30)
/* deflate never compresses better than 1032:1 (zlib's technical details); a little slack for
 * the stream's own header and check value. */
#define MAX_RATIO 1032
#define MAX_WEIGHT 1000000000000000ull /* the text readers' bound on one count */
#define MAX_BUCKET_MS 3600000u
#define MAX_ABS_MS (1ll << 52) /* about 142,000 years either side of 1970 */

int pa_capture_sniff(const void *data, size_t len) {
    size_t n = len < sizeof magic ? len : sizeof magic;
    return n >= 2 && memcmp(data, magic, n) == 0;
}

/* ---- writing ---- */

static uint64_t zigzag(int64_t v) {
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static int64_t unzigzag(uint64_t v) {
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static void put_str(pa_buf *b, const char *s, size_t len) {
    pa_put_varint(b, len);
    pa_buf_append(b, s, len);
}

static void put_section(pa_buf *body, unsigned id, pa_buf *sec) {
    pa_put_varint(body, id);
    put_str(body, sec->data ? sec->data : "", sec->len);
    sec->len = 0;
}

/* The string table reuses a profile as an interner: a string's number is its frame id. */
static uint64_t str_num(pa_profile *strs, const char *s, size_t len) {
    return pa_profile_intern(strs, s, len);
}

/* A frame's text from its parts, as pa_frame_parse splits it; the writer keeps the parts only
 * when this gives back exactly the frame's bytes. */
static void frame_text(pa_buf *out, int kind, const char *name, size_t name_len, const char *file,
                       size_t file_len, uint64_t line, int64_t offset, int64_t col, int64_t end_col,
                       const char *op, size_t op_len) {
    pa_buf_append(out, name, name_len);
    pa_buf_puts(out, kind == FRAME_NATIVE ? " [" : " (");
    pa_buf_append(out, file, file_len);
    if (kind == FRAME_NATIVE) {
        pa_buf_puts(out, "]");
        return;
    }
    if (line)
        pa_buf_printf(out, ":%llu", (unsigned long long)line);
    pa_buf_puts(out, ")");
    if (offset < 0)
        return;
    pa_buf_printf(out, " @%lld", (long long)offset);
    if (col >= 0)
        pa_buf_printf(out, ":%lld-%lld", (long long)col, (long long)end_col);
    if (op) {
        pa_buf_puts(out, " ");
        pa_buf_append(out, op, op_len);
    }
}

static void put_frame(pa_buf *sec, pa_profile *strs, const char *s, size_t len, pa_buf *tmp) {
    pa_frame_info fi;
    pa_frame_parse(s, len, &fi);
    int kind = fi.kind == PA_FRAME_NATIVE ? FRAME_NATIVE
               : fi.file && (fi.kind == PA_FRAME_OWN || fi.kind == PA_FRAME_STDLIB ||
                             fi.kind == PA_FRAME_SITE)
                   ? FRAME_PYTHON
                   : FRAME_TEXT;
    if (kind != FRAME_TEXT) {
        int span = fi.col >= 0 && fi.end_col >= 0;
        tmp->len = 0;
        frame_text(tmp, kind, fi.name, fi.name_len, fi.file, fi.file_len, fi.line, fi.offset,
                   span ? fi.col : -1, fi.end_col, fi.op, fi.op_len);
        if (tmp->len != len || memcmp(tmp->data, s, len) != 0)
            kind = FRAME_TEXT; /* spelled in a way the parts do not give back */
    }
    pa_put_varint(sec, (uint64_t)kind);
    if (kind == FRAME_TEXT) {
        pa_put_varint(sec, str_num(strs, s, len));
        return;
    }
    pa_put_varint(sec, str_num(strs, fi.name, fi.name_len));
    pa_put_varint(sec, str_num(strs, fi.file, fi.file_len));
    if (kind == FRAME_NATIVE)
        return;
    pa_put_varint(sec, fi.line);
    pa_put_varint(sec, fi.offset < 0 ? 0 : (uint64_t)fi.offset + 1);
    if (fi.offset < 0)
        return;
    int span = fi.col >= 0 && fi.end_col >= 0;
    pa_put_varint(sec, span ? (uint64_t)fi.col + 1 : 0);
    if (span)
        pa_put_varint(sec, (uint64_t)fi.end_col);
    pa_put_varint(sec, fi.op ? str_num(strs, fi.op, fi.op_len) + 1 : 0);
}

int pa_capture_encode(const pa_profile *p, pa_buf *out, pa_error *err) {
    pa_buf body = {0}, sec = {0}, frames = {0}, tmp = {0};
    pa_profile *strs = pa_profile_new();

    size_t nmeta = pa_profile_meta_count(p);
    size_t nkept = 0;
    for (size_t i = 0; i < nmeta; i++) {
        const char *k, *v;
        pa_profile_meta_at(p, i, &k, &v);
        /* The time section holds the true width and origin (as pa_put_meta_pairs says). */
        if (strcmp(k, "bucket_ms") == 0 || strcmp(k, "t0_ms") == 0)
            continue;
        put_str(&tmp, k, strlen(k));
        put_str(&tmp, v, strlen(v));
        nkept++;
    }
    if (nkept) {
        pa_put_varint(&sec, nkept);
        pa_buf_append(&sec, tmp.data, tmp.len);
        put_section(&body, SEC_META, &sec);
    }
    tmp.len = 0;

    /* Frames first (they fill the string table), written after the strings. */
    size_t nframes = pa_profile_frame_count(p);
    pa_put_varint(&frames, nframes);
    for (uint32_t id = 0; id < nframes; id++) {
        size_t len;
        const char *s = pa_profile_frame(p, id, &len);
        put_frame(&frames, strs, s, len, &tmp);
    }
    size_t nstr = pa_profile_frame_count(strs);
    pa_put_varint(&sec, nstr);
    for (uint32_t i = 0; i < nstr; i++) {
        size_t len;
        const char *s = pa_profile_frame(strs, i, &len);
        put_str(&sec, s, len);
    }
    put_section(&body, SEC_STRINGS, &sec);
    put_section(&body, SEC_FRAMES, &frames);

    /* The prefix tree of the stacks, nodes in creation order (a parent before its children). */
    size_t nstacks = pa_profile_stack_count(p);
    pa_tree tree = {0};
    uint32_t *leaf = pa_xrealloc(NULL, (nstacks + 1) * sizeof *leaf);
    for (size_t s = 0; s < nstacks; s++) {
        size_t n;
        const uint32_t *ids = pa_profile_stack(p, s, &n, NULL);
        uint32_t node = UINT32_MAX;
        for (size_t k = 0; k < n; k++)
            node = pa_tree_child(&tree, node, ids[k]);
        leaf[s] = node;
    }
    pa_put_varint(&sec, tree.n);
    for (size_t i = 0; i < tree.n; i++) {
        pa_put_varint(&sec, tree.parent[i] == UINT32_MAX ? 0 : i - tree.parent[i]);
        pa_put_varint(&sec, tree.frame[i]);
    }
    put_section(&body, SEC_NODES, &sec);
    pa_tree_free(&tree);

    pa_put_varint(&sec, nstacks);
    int64_t prev = 0;
    for (size_t s = 0; s < nstacks; s++) {
        uint64_t count;
        pa_profile_stack(p, s, NULL, &count);
        pa_put_varint(&sec, zigzag((int64_t)leaf[s] - prev));
        pa_put_varint(&sec, count);
        prev = leaf[s];
    }
    put_section(&body, SEC_STACKS, &sec);
    free(leaf);

    uint32_t w = pa_profile_bucket_ms(p);
    if (w) {
        int64_t t0 = pa_profile_time_first(p) / w;
        pa_put_varint(&sec, w);
        pa_put_varint(&sec, zigzag(t0));
        pa_time_index ix;
        pa_time_index_init(&ix, p);
        for (size_t s = 0; s < nstacks; s++) {
            pa_put_varint(&sec, ix.start[s + 1] - ix.start[s]);
            int64_t next = t0; /* the bucket after the previous entry's */
            for (size_t i = ix.start[s]; i < ix.start[s + 1]; i++) {
                int64_t t;
                uint64_t c;
                pa_profile_time_at(p, ix.order[i], NULL, &t, &c);
                pa_put_varint(&sec, (uint64_t)(t / w - next));
                pa_put_varint(&sec, c);
                next = t / w + 1;
            }
        }
        pa_time_index_free(&ix);
        put_section(&body, SEC_TIME, &sec);
    }

    pa_buf_append(out, magic, sizeof magic);
    unsigned char head[3] = {MAJOR, MINOR, COMPRESS_ZLIB};
    pa_buf_append(out, head, sizeof head);
    pa_put_varint(out, body.len);
    int rc = pa_deflate(body.data, body.len, 0, out, err);
    pa_buf_free(&body);
    pa_buf_free(&sec);
    pa_buf_free(&frames);
    pa_buf_free(&tmp);
    pa_profile_free(strs);
    return rc;
}

/* ---- reading ---- */

struct strref {
    const char *s;
    size_t len;
};

/* What the sections read so far hold, as the later ones need it. */
struct capture {
    pa_profile *p;
    pa_parse_stats *st;
    struct strref *strs;
    uint64_t nstr;
    uint32_t *frame_id; /* the capture's frame number -> p's frame id */
    uint64_t nframes;
    uint32_t *parent, *node_frame, *depth; /* parent UINT32_MAX for a root */
    uint64_t nnodes;
    size_t *stack; /* the capture's stack number -> p's stack index (SIZE_MAX: not kept) */
    uint64_t *weight;
    uint64_t nstacks;
    int have_stacks;
    pa_error *err;
};

static int bad(struct capture *c, const char *what) {
    return pa_fail(c->err, "malformed capture: %s", what);
}

/* A count of records that each take at least min_size bytes: more than the bytes left could
 * hold is a lie, refused before anything is allocated for it. */
static int count_of(struct capture *c, pa_reader *r, size_t min_size, uint64_t *n,
                    const char *what) {
    *n = pa_get_varint(r);
    if (r->bad || *n > (uint64_t)(r->end - r->p) / min_size) {
        pa_fail(c->err, "malformed capture: %s: a count of %llu does not fit in the %zu bytes left",
                what, (unsigned long long)*n, (size_t)(r->end - r->p));
        return -1;
    }
    return 0;
}

static int get_str(pa_reader *r, struct strref *out) {
    uint64_t len = pa_get_varint(r);
    if (r->bad || len > (uint64_t)(r->end - r->p)) {
        r->bad = 1;
        return -1;
    }
    out->s = (const char *)r->p;
    out->len = (size_t)len;
    r->p += len;
    return 0;
}

static int read_meta(struct capture *c, pa_reader *r) {
    uint64_t n;
    if (count_of(c, r, 2, &n, "metadata") != 0)
        return -1;
    for (uint64_t i = 0; i < n; i++) {
        struct strref k, v;
        if (get_str(r, &k) != 0 || get_str(r, &v) != 0)
            return bad(c, "metadata cut short");
        if (k.len == 0 || memchr(k.s, '\0', k.len) || memchr(v.s, '\0', v.len))
            return bad(c, "a metadata key is empty, or a key or value holds a NUL byte");
        char *key = pa_xstrndup(k.s, k.len), *value = pa_xstrndup(v.s, v.len);
        /* As a folded header read into a profile that has stacks already: merged. */
        if (strcmp(key, "bucket_ms") != 0 && strcmp(key, "t0_ms") != 0)
            pa_profile_combine_meta(c->p, key, value);
        free(key);
        free(value);
    }
    return 0;
}

static int read_strings(struct capture *c, pa_reader *r) {
    if (count_of(c, r, 1, &c->nstr, "string table") != 0)
        return -1;
    c->strs = pa_xrealloc(NULL, (c->nstr + 1) * sizeof *c->strs);
    for (uint64_t i = 0; i < c->nstr; i++)
        if (get_str(r, &c->strs[i]) != 0)
            return bad(c, "string table cut short");
    return 0;
}

/* A string number (plus_one: 0 means none, n means string n - 1). */
static int str_at(struct capture *c, pa_reader *r, int plus_one, struct strref *out) {
    uint64_t i = pa_get_varint(r);
    if (plus_one && i == 0 && !r->bad) {
        out->s = NULL;
        out->len = 0;
        return 0;
    }
    i -= (uint64_t)plus_one;
    if (r->bad || i >= c->nstr)
        return -1;
    *out = c->strs[i];
    return 0;
}

static int read_frames(struct capture *c, pa_reader *r) {
    if (count_of(c, r, 2, &c->nframes, "frame table") != 0)
        return -1;
    c->frame_id = pa_xrealloc(NULL, (c->nframes + 1) * sizeof *c->frame_id);
    pa_buf text = {0};
    int rc = 0;
    for (uint64_t i = 0; i < c->nframes && rc == 0; i++) {
        uint64_t kind = pa_get_varint(r);
        struct strref a, b, op = {NULL, 0};
        text.len = 0;
        if (kind == FRAME_TEXT) {
            if (str_at(c, r, 0, &a) != 0)
                rc = bad(c, "a frame names a string that is not in the table");
            else
                pa_buf_append(&text, a.s, a.len);
        } else if (kind == FRAME_PYTHON || kind == FRAME_NATIVE) {
            uint64_t line = 0, offset = 0, col = 0, end_col = 0;
            if (str_at(c, r, 0, &a) != 0 || str_at(c, r, 0, &b) != 0) {
                rc = bad(c, "a frame names a string that is not in the table");
                break;
            }
            if (kind == FRAME_PYTHON) {
                line = pa_get_varint(r);
                offset = pa_get_varint(r);
                if (offset) {
                    col = pa_get_varint(r);
                    if (col)
                        end_col = pa_get_varint(r);
                    if (str_at(c, r, 1, &op) != 0)
                        rc = bad(c, "a frame names a string that is not in the table");
                }
                if (line > UINT32_MAX || offset > UINT32_MAX || col > UINT32_MAX ||
                    end_col >= UINT32_MAX)
                    rc = bad(c, "a frame's line, offset or column is out of range");
            }
            if (rc == 0)
                frame_text(&text, (int)kind, a.s, a.len, b.s, b.len, line, (int64_t)offset - 1,
                           (int64_t)col - 1, (int64_t)end_col, op.s, op.len);
        } else if (!r->bad) {
            rc = pa_fail(c->err,
                         "capture: frame kind %llu is unknown (a newer pyagent wrote this file)",
                         (unsigned long long)kind);
        }
        if (r->bad && rc == 0)
            rc = bad(c, "frame table cut short");
        if (rc == 0)
            c->frame_id[i] = pa_profile_intern(c->p, text.data ? text.data : "", text.len);
    }
    pa_buf_free(&text);
    return rc;
}

static int read_nodes(struct capture *c, pa_reader *r) {
    if (count_of(c, r, 2, &c->nnodes, "stack tree") != 0)
        return -1;
    if (c->nnodes >= UINT32_MAX)
        return bad(c, "too many stack tree nodes");
    c->parent = pa_xrealloc(NULL, (c->nnodes + 1) * sizeof *c->parent);
    c->node_frame = pa_xrealloc(NULL, (c->nnodes + 1) * sizeof *c->node_frame);
    c->depth = pa_xrealloc(NULL, (c->nnodes + 1) * sizeof *c->depth);
    for (uint64_t i = 0; i < c->nnodes; i++) {
        uint64_t up = pa_get_varint(r), frame = pa_get_varint(r);
        if (r->bad)
            return bad(c, "stack tree cut short");
        if (up > i || frame >= c->nframes)
            return bad(c, "a stack tree node names a parent or frame that is not there");
        c->parent[i] = up ? (uint32_t)(i - up) : UINT32_MAX;
        c->node_frame[i] = c->frame_id[frame];
        c->depth[i] = up ? c->depth[i - up] + 1 : 1;
    }
    return 0;
}

static int read_stacks(struct capture *c, pa_reader *r) {
    if (count_of(c, r, 2, &c->nstacks, "stack table") != 0)
        return -1;
    uint32_t *leaf = pa_xrealloc(NULL, (c->nstacks + 1) * sizeof *leaf);
    c->weight = pa_xrealloc(NULL, (c->nstacks + 1) * sizeof *c->weight);
    c->stack = pa_xrealloc(NULL, (c->nstacks + 1) * sizeof *c->stack);
    /* Check every record and what the stacks expand to before building any of them. */
    int64_t node = 0;
    uint64_t frames = 0, samples = 0;
    int rc = 0;
    for (uint64_t s = 0; s < c->nstacks && rc == 0; s++) {
        node += unzigzag(pa_get_varint(r));
        c->weight[s] = pa_get_varint(r);
        if (r->bad)
            rc = bad(c, "stack table cut short");
        else if (node < 0 || (uint64_t)node >= c->nnodes)
            rc = bad(c, "a stack names a node that is not in the tree");
        else if (c->weight[s] == 0 || c->weight[s] > MAX_WEIGHT)
            rc = bad(c, "a stack's weight is 0 or beyond any real count (10^15)");
        else if ((frames += c->depth[node]) > PA_CAPTURE_MAX_FRAMES)
            rc = pa_fail(c->err, "capture: its stacks expand to more than %llu frames; refused",
                         (unsigned long long)PA_CAPTURE_MAX_FRAMES);
        else
            leaf[s] = (uint32_t)node;
        samples += c->weight[s]; /* at most 2^32 stacks of 10^15: no overflow */
    }
    uint32_t *ids = NULL;
    size_t cap = 0;
    for (uint64_t s = 0; s < c->nstacks && rc == 0; s++) {
        uint32_t d = c->depth[leaf[s]];
        if (d > cap) {
            cap = d;
            ids = pa_xrealloc(ids, cap * sizeof *ids);
        }
        uint32_t n = leaf[s];
        for (uint32_t k = d; k-- > 0; n = c->parent[n])
            ids[k] = c->node_frame[n];
        c->stack[s] = pa_profile_add_stack_ids(c->p, ids, d, c->weight[s]);
    }
    if (rc == 0) {
        c->st->stacks += c->nstacks;
        c->st->samples += samples;
    }
    free(ids);
    free(leaf);
    c->have_stacks = 1;
    return rc;
}

static int read_time(struct capture *c, pa_reader *r) {
    if (!c->have_stacks)
        return bad(c, "time section without a stack table");
    uint64_t w = pa_get_varint(r);
    int64_t t0 = unzigzag(pa_get_varint(r));
    if (r->bad)
        return bad(c, "time section cut short");
    if (w == 0 || w > MAX_BUCKET_MS || t0 > MAX_ABS_MS / (int64_t)w ||
        t0 < -MAX_ABS_MS / (int64_t)w)
        return bad(c, "time buckets' width or origin out of range");
    /* Validate everything first, as a "#t" line is: a bad section adds no time at all. */
    const unsigned char *start = r->p;
    for (int pass = 0; pass < 2; pass++) {
        r->p = start;
        if (pass == 1)
            pa_profile_set_bucket_ms(c->p, (uint32_t)w);
        for (uint64_t s = 0; s < c->nstacks; s++) {
            uint64_t n;
            if (count_of(c, r, 2, &n, "time buckets") != 0)
                return -1;
            int64_t b = t0;
            uint64_t sum = 0;
            for (uint64_t i = 0; i < n; i++) {
                uint64_t gap = pa_get_varint(r), count = pa_get_varint(r);
                if (r->bad)
                    return bad(c, "time section cut short");
                if (gap > (uint64_t)(MAX_ABS_MS / (int64_t)w) ||
                    (b += (int64_t)gap) > MAX_ABS_MS / (int64_t)w)
                    return bad(c, "a time bucket is out of range");
                if (count == 0 || (sum += count) > c->weight[s])
                    return bad(c, "a stack's time buckets hold 0 or more samples than the stack");
                if (pass == 1 && c->stack[s] != SIZE_MAX)
                    pa_profile_add_time(c->p, c->stack[s], b * (int64_t)w, count);
                b++;
            }
        }
    }
    return 0;
}

/* Inflates the body into out, refusing one that gives more or fewer bytes than declared. */
static int inflate_body(const unsigned char *z, size_t zlen, uint64_t raw_len, pa_buf *out,
                        pa_error *err) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit(&zs) != Z_OK)
        return pa_fail(err, "cannot initialise zlib");
    pa_buf_reserve(out, raw_len + 1);
    zs.next_in = (unsigned char *)z;
    zs.avail_in = (uInt)zlen;
    zs.next_out = (unsigned char *)out->data;
    zs.avail_out = (uInt)raw_len + 1; /* one byte more, to see a body longer than declared */
    int zrc = inflate(&zs, Z_FINISH);
    size_t got = (size_t)raw_len + 1 - zs.avail_out;
    int rc = 0;
    if (zrc == Z_STREAM_END && got == raw_len && zs.avail_in == 0)
        out->len = got;
    else if (got > raw_len)
        rc = pa_fail(err, "malformed capture: the body inflates beyond its declared %llu bytes",
                     (unsigned long long)raw_len);
    else if (zrc == Z_STREAM_END && zs.avail_in)
        rc = pa_fail(err, "malformed capture: %u bytes follow the compressed body", zs.avail_in);
    else if (zrc == Z_STREAM_END)
        rc = pa_fail(err, "malformed capture: the body is %zu bytes, its header says %llu", got,
                     (unsigned long long)raw_len);
    else if (zrc == Z_DATA_ERROR)
        rc = pa_fail(err, "malformed capture: corrupt compressed body (%s)",
                     zs.msg ? zs.msg : "inflate");
    else
        rc = pa_fail(err, "truncated capture: the compressed body ends early");
    inflateEnd(&zs);
    return rc;
}

static int read_body(struct capture *c, const unsigned char *body, size_t len) {
    pa_reader r = {body, body + len, 0};
    uint64_t last = 0;
    int seen_strings = 0, seen_frames = 0, seen_nodes = 0;
    while (r.p < r.end) {
        uint64_t id = pa_get_varint(&r);
        struct strref payload;
        if (r.bad || get_str(&r, &payload) != 0)
            return bad(c, "a section is cut short");
        if (id <= last)
            return bad(c, "sections out of order or repeated");
        last = id;
        pa_reader sec = {(const unsigned char *)payload.s,
                         (const unsigned char *)payload.s + payload.len, 0};
        int rc = 0;
        /* A section's bytes after the fields read here are a newer minor version's: skipped. */
        switch (id) {
        case SEC_META:
            rc = read_meta(c, &sec);
            break;
        case SEC_STRINGS:
            rc = read_strings(c, &sec);
            seen_strings = 1;
            break;
        case SEC_FRAMES:
            if (!seen_strings)
                return bad(c, "frame table without a string table");
            rc = read_frames(c, &sec);
            seen_frames = 1;
            break;
        case SEC_NODES:
            if (!seen_frames)
                return bad(c, "stack tree without a frame table");
            rc = read_nodes(c, &sec);
            seen_nodes = 1;
            break;
        case SEC_STACKS:
            if (!seen_nodes)
                return bad(c, "stack table without a stack tree");
            rc = read_stacks(c, &sec);
            break;
        case SEC_TIME:
            rc = read_time(c, &sec);
            break;
        default:
            if (id < SEC_FIRST_OPTIONAL)
                return pa_fail(c->err,
                               "capture: section %llu is unknown and required (a newer pyagent "
                               "wrote this file)",
                               (unsigned long long)id);
            break;
        }
        if (rc != 0)
            return -1;
    }
    if (!c->have_stacks)
        return bad(c, "no stack table");
    return 0;
}

int pa_capture_decode(pa_profile *p, const void *data, size_t len, pa_parse_stats *stats,
                      pa_error *err) {
    const unsigned char *s = data;
    pa_parse_stats ignored = {0};
    if (!stats)
        stats = &ignored;
    if (len < sizeof magic + 3 || memcmp(s, magic, sizeof magic) != 0)
        return pa_fail(err, "truncated capture: %zu bytes, not even a header", len);
    unsigned major = s[sizeof magic], compress = s[sizeof magic + 2];
    if (major != MAJOR)
        return pa_fail(err, "capture version %u is not supported (this reader knows version %d)",
                       major, MAJOR);
    pa_reader r = {s + sizeof magic + 3, s + len, 0};
    uint64_t raw_len = pa_get_varint(&r);
    if (r.bad)
        return pa_fail(err, "truncated capture: the header is cut short");
    size_t zlen = (size_t)(r.end - r.p);
    if (zlen > UINT32_MAX) /* zlib counts in 32 bits; no capture is nearly that large */
        return pa_fail(err, "malformed capture: %zu bytes of body", zlen);
    pa_buf body = {0};
    const unsigned char *b;
    if (compress == COMPRESS_NONE) {
        if (raw_len != zlen)
            return pa_fail(err, "%s capture: the body is %zu bytes, its header says %llu",
                           raw_len > zlen ? "truncated" : "malformed", zlen,
                           (unsigned long long)raw_len);
        b = r.p;
    } else if (compress == COMPRESS_ZLIB) {
        if (raw_len > MAX_BODY)
            return pa_fail(err, "malformed capture: a body of %llu bytes is over the 1 GiB limit",
                           (unsigned long long)raw_len);
        if (raw_len > (uint64_t)zlen * MAX_RATIO + 64)
            return pa_fail(err,
                           "truncated or malformed capture: %zu compressed bytes cannot hold the "
                           "%llu-byte body its header declares",
                           zlen, (unsigned long long)raw_len);
        if (inflate_body(r.p, zlen, raw_len, &body, err) != 0) {
            pa_buf_free(&body);
            return -1;
        }
        b = (const unsigned char *)body.data;
    } else {
        return pa_fail(err, "capture: compression %u is unknown (a newer pyagent wrote this file)",
                       compress);
    }
    struct capture c = {.p = p, .st = stats, .err = err};
    int rc = read_body(&c, b, (size_t)raw_len);
    pa_buf_free(&body);
    free(c.strs);
    free(c.frame_id);
    free(c.parent);
    free(c.node_frame);
    free(c.depth);
    free(c.stack);
    free(c.weight);
    return rc;
}
