/* pprof.c - profile.proto written and read by hand (field numbers in ANCHORS.md).
 *
 * Only the parts of the protobuf wire format pprof uses are needed: varints, length-delimited
 * fields and packed repeated varints. Writing nests by encoding each sub-message into a
 * scratch buffer and then appending it with its length; reading walks the bytes with bounds
 * checked at every step, because uploads are untrusted. Each frame string becomes one
 * Location with one Line; Functions are shared by frames that differ only in line. */
#include "profile_int.h"

#include <stdlib.h>
#include <string.h>

/* The build_id of the mappings that name instructions' opcodes. */
#define OPCODE_MAPPING "pyagent-opcode"

/* ---- writing ---- */

static void put_uint(pa_buf *b, unsigned field, uint64_t v) {
    pa_put_varint(b, (uint64_t)field << 3);
    pa_put_varint(b, v);
}

static void put_bytes(pa_buf *b, unsigned field, const void *data, size_t len) {
    if (b->cap - b->len <= len + 20) /* one check for the tag, the length and the bytes */
        pa_buf_reserve(b, len + 20);
    pa_put_varint(b, ((uint64_t)field << 3) | 2);
    pa_put_varint(b, len);
    if (len) /* data may be NULL when len is 0 */
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

static void put_msg(pa_buf *b, unsigned field, pa_buf *msg) {
    put_bytes(b, field, msg->data ? msg->data : "", msg->len);
    msg->len = 0;
}

/* The string table reuses a profile as an interner: id + 1 is the string's index, since
 * index 0 must be "". */
static uint64_t str_index(pa_profile *strs, const char *s, size_t len) {
    return (uint64_t)pa_profile_intern(strs, s, len) + 1;
}

static void put_value_type(pa_buf *b, unsigned field, pa_profile *strs, const char *type,
                           const char *unit) {
    pa_buf vt = {0};
    put_uint(&vt, 1, str_index(strs, type, strlen(type)));
    put_uint(&vt, 2, str_index(strs, unit, strlen(unit)));
    put_msg(b, field, &vt);
    pa_buf_free(&vt);
}

/* A labels:TEXT frame as the sample's string labels (Label: key 1, str 2), which Grafana
 * Pyroscope files as the series' labels. */
static void put_labels(pa_buf *sample, pa_profile *strs, const pa_profile *p, uint32_t frame) {
    size_t len;
    const char *s = pa_profile_frame(p, frame, &len);
    char *text = pa_xrealloc(NULL, len + 1), *at = text, *key, *value;
    memcpy(text, s, len);
    text[len] = '\0';
    at += PA_LABELS_PREFIX_LEN;
    pa_buf label = {0};
    while (pa_series_split(&at, &key, &value) == 1) {
        put_uint(&label, 1, str_index(strs, key, strlen(key)));
        put_uint(&label, 2, str_index(strs, value, strlen(value)));
        put_msg(sample, 3, &label);
    }
    pa_buf_free(&label);
    free(text);
}

int pa_pprof_encode(const pa_profile *p, int gzip, pa_buf *out, pa_error *err) {
    pa_buf msg = {0}, sub = {0}, line = {0};
    pa_profile *strs = pa_profile_new();   /* string table */
    pa_profile *funcs = pa_profile_new();  /* "name\0file" -> function id - 1 */
    pa_profile *opmaps = pa_profile_new(); /* opcode name -> mapping id - 1 */
    double rate = 0;
    const char *r = pa_profile_meta(p, "rate");
    if (r)
        rate = atof(r);
    int with_cpu = rate > 0;
    /* The time type names what the samples measure; Pyroscope files by it (see profile.h). */
    const char *mode = pa_profile_meta(p, "mode");
    const char *time_type =
        mode && (strcmp(mode, "wall") == 0 || strcmp(mode, "gil") == 0) ? mode : "cpu";

    put_value_type(&msg, 1, strs, "samples", "count");
    if (with_cpu)
        put_value_type(&msg, 1, strs, time_type, "nanoseconds");

    /* Samples: location ids are frame id + 1, leaf first. A stack with time buckets is one
     * sample per bucket, labelled with the bucket's start, and one for its untimed rest. */
    size_t nstacks = pa_profile_stack_count(p);
    uint64_t period = with_cpu ? (uint64_t)(1e9 / rate) : 0;
    uint64_t *untimed = pa_xrealloc(NULL, (nstacks + 1) * sizeof *untimed);
    for (size_t s = 0; s < nstacks; s++)
        pa_profile_stack(p, s, NULL, &untimed[s]);
    size_t ntime = pa_profile_time_count(p);
    size_t *order = pa_profile_time_order(p);
    uint64_t ts_key = ntime ? str_index(strs, "timestamp", 9) : 0;
    uint64_t ts_unit = ntime ? str_index(strs, "milliseconds", 12) : 0;
    for (size_t i = 0; i <= ntime + nstacks; i++) {
        size_t s;
        int64_t t = 0;
        uint64_t count;
        if (i < ntime) {
            pa_profile_time_at(p, order[i], &s, &t, &count);
            untimed[s] -= count < untimed[s] ? count : untimed[s];
        } else if (i - ntime < nstacks) {
            s = i - ntime;
            count = untimed[s];
        } else {
            break;
        }
        if (count == 0)
            continue;
        size_t n;
        const uint32_t *ids = pa_profile_stack(p, s, &n, NULL);
        int li = pa_profile_labels_frame(p, ids, n);
        pa_buf packed = {0};
        for (size_t k = n; k-- > 0;)
            if ((int)k != li) /* the labels frame becomes the sample's labels */
                pa_put_varint(&packed, (uint64_t)ids[k] + 1);
        put_msg(&sub, 1, &packed);
        pa_put_varint(&packed, count);
        if (with_cpu)
            pa_put_varint(&packed, count * period);
        put_msg(&sub, 2, &packed);
        if (i < ntime) {
            put_uint(&packed, 1, ts_key);
            put_uint(&packed, 3, (uint64_t)t);
            put_uint(&packed, 4, ts_unit);
            put_msg(&sub, 3, &packed);
        }
        if (li >= 0)
            put_labels(&sub, strs, p, ids[li]);
        pa_buf_free(&packed);
        put_msg(&msg, 2, &sub);
    }
    free(order);
    free(untimed);

    /* Locations, one per frame string, and the functions they point at. */
    size_t nframes = pa_profile_frame_count(p);
    pa_buf fkey = {0}, fmsgs = {0};
    for (uint32_t id = 0; id < nframes; id++) {
        size_t len;
        const char *s = pa_profile_frame(p, id, &len);
        pa_frame_info fi;
        pa_frame_split(s, len, &fi);
        const char *name = s, *file = "";
        size_t nlen = len, flen = 0;
        /* Python frames split into function and file; a native frame keeps its library in
         * its name, where pprof tools show it and from where it reads back unchanged. */
        if (fi.kind != PA_FRAME_THREAD && fi.kind != PA_FRAME_SYNTHETIC &&
            fi.kind != PA_FRAME_NATIVE && fi.file) {
            name = fi.name;
            nlen = fi.name_len;
            file = fi.file;
            flen = fi.file_len;
        }
        fkey.len = 0;
        pa_buf_append(&fkey, name, nlen);
        pa_buf_append(&fkey, "", 1);
        pa_buf_append(&fkey, file, flen);
        size_t before = pa_profile_frame_count(funcs);
        uint64_t fid = (uint64_t)pa_profile_intern(funcs, fkey.data, fkey.len) + 1;
        if (pa_profile_frame_count(funcs) > before) {
            put_uint(&sub, 1, fid);
            uint64_t ni = str_index(strs, name, nlen);
            put_uint(&sub, 2, ni);
            put_uint(&sub, 3, ni);
            put_uint(&sub, 4, str_index(strs, file, flen));
            put_msg(&fmsgs, 5, &sub);
        }
        put_uint(&line, 1, fid);
        if (fi.line)
            put_uint(&line, 2, fi.line);
        put_uint(&sub, 1, (uint64_t)id + 1);
        if (fi.offset >= 0) {
            /* The instruction: its opcode as a mapping, its offset and columns as the
             * address (docs/formats.md, "Instructions"). Other readers see one more
             * location of the same function and line, which they merge. */
            size_t before = pa_profile_frame_count(opmaps);
            uint64_t mid = (uint64_t)pa_profile_intern(opmaps, fi.op ? fi.op : "", fi.op_len) + 1;
            if (pa_profile_frame_count(opmaps) > before) {
                pa_buf m = {0};
                put_uint(&m, 1, mid);
                put_uint(&m, 5, str_index(strs, fi.op ? fi.op : "", fi.op_len));
                put_uint(&m, 6, str_index(strs, OPCODE_MAPPING, strlen(OPCODE_MAPPING)));
                put_msg(&fmsgs, 3, &m);
                pa_buf_free(&m);
            }
            put_uint(&sub, 2, mid);
            put_uint(&sub, 3,
                     (uint64_t)fi.offset | (uint64_t)(uint16_t)(fi.col + 1) << 32 |
                         (uint64_t)(uint16_t)(fi.end_col + 1) << 48);
        }
        put_msg(&sub, 4, &line);
        put_msg(&msg, 4, &sub);
    }
    pa_buf_append(&msg, fmsgs.data ? fmsgs.data : "", fmsgs.len);
    pa_buf_free(&fmsgs);
    pa_buf_free(&fkey);
    pa_profile_free(opmaps);

    /* The whole header as a comment, so a pyagent profile reads back with all its metadata
     * and its time buckets' width. */
    pa_buf header = {0};
    pa_buf_puts(&header, "pyagent 1");
    pa_put_meta_pairs(p, &header);
    uint64_t comment = str_index(strs, header.data, header.len);
    pa_buf_free(&header);

    /* Fields after the string table need their strings interned first. */
    pa_buf tail = {0};
    const char *start = pa_profile_meta(p, "start");
    if (start)
        put_uint(&tail, 9, (uint64_t)strtoull(start, NULL, 10) * 1000000000ull);
    if (with_cpu) {
        put_value_type(&tail, 11, strs, time_type, "nanoseconds");
        put_uint(&tail, 12, period);
    }
    put_bytes(&msg, 6, "", 0);
    size_t nstr = pa_profile_frame_count(strs);
    for (uint32_t i = 0; i < nstr; i++) {
        size_t len;
        const char *s = pa_profile_frame(strs, i, &len);
        put_bytes(&msg, 6, s, len);
    }
    put_uint(&msg, 13, comment);
    pa_buf_append(&msg, tail.data ? tail.data : "", tail.len);
    pa_buf_free(&tail);
    pa_buf_free(&sub);
    pa_buf_free(&line);
    pa_profile_free(strs);
    pa_profile_free(funcs);

    int rc = 0;
    if (!gzip && out->data == NULL) { /* the whole message: handed over, not copied */
        *out = msg;
        return 0;
    }
    if (!gzip)
        pa_buf_append(out, msg.data ? msg.data : "", msg.len);
    else
        rc = pa_deflate(msg.data, msg.len, 1, out, err);
    pa_buf_free(&msg);
    return rc;
}

/* ---- reading ---- */

/* Reads a field header; for wire type 2 also its payload into *sub. Returns 0 at the end. */
static int next_field(pa_reader *r, unsigned *field, unsigned *wire, uint64_t *value,
                      pa_reader *sub) {
    if (r->bad || r->p >= r->end)
        return 0;
    uint64_t tag = pa_get_varint(r);
    *field = (unsigned)(tag >> 3);
    *wire = (unsigned)(tag & 7);
    switch (*wire) {
    case 0:
        *value = pa_get_varint(r);
        break;
    case 1:
    case 5: {
        size_t n = *wire == 1 ? 8 : 4;
        if ((size_t)(r->end - r->p) < n)
            r->bad = 1;
        else
            r->p += n;
        *value = 0;
        break;
    }
    case 2: {
        uint64_t len = pa_get_varint(r);
        if (r->bad || len > (uint64_t)(r->end - r->p)) {
            r->bad = 1;
            return 0;
        }
        sub->p = r->p;
        sub->end = r->p + len;
        sub->bad = 0;
        r->p += len;
        break;
    }
    default:
        r->bad = 1;
        return 0;
    }
    return !r->bad;
}

struct pfunc {
    uint64_t id, name, file;
};
struct pline {
    uint64_t func, line;
};
struct ploc {
    uint64_t id;
    uint64_t mapping, address;
    size_t first_line, nlines;
    uint32_t frame_first; /* frames built for this location, leaf first */
    uint32_t nframes;
    int built;
};
struct strref {
    const char *s;
    size_t len;
};
struct pmap {
    uint64_t id, filename, build_id;
};

static int str_is(const struct strref *strs, size_t nstr, uint64_t i, const char *want) {
    return i < nstr && strs[i].len == strlen(want) && memcmp(strs[i].s, want, strs[i].len) == 0;
}

static int cmp_func(const void *a, const void *b) {
    uint64_t x = ((const struct pfunc *)a)->id, y = ((const struct pfunc *)b)->id;
    return x < y ? -1 : x > y;
}
static int cmp_loc(const void *a, const void *b) {
    uint64_t x = ((const struct ploc *)a)->id, y = ((const struct ploc *)b)->id;
    return x < y ? -1 : x > y;
}

#define GROW(arr, n, cap)                                                                          \
    do {                                                                                           \
        if ((n) == (cap)) {                                                                        \
            (cap) = (cap) ? (cap)*2 : 64;                                                          \
            (arr) = pa_xrealloc((arr), (cap) * sizeof *(arr));                                     \
        }                                                                                          \
    } while (0)

/* A sample's string label, NUL-terminated copies. */
struct spair {
    char name[128], value[2049];
};

/* Adds (or, for a name given before, replaces) a string label; names and values longer than
 * the copies are cut, and a name outside Pyroscope's characters is kept for the reader to
 * refuse (the collector, ingest.c). */
static void add_pair(struct spair **pairs, size_t *n, size_t *cap, const struct strref *name,
                     const struct strref *value) {
    size_t i = 0, nl = name->len < 127 ? name->len : 127;
    while (i < *n &&
           !(strlen((*pairs)[i].name) == nl && memcmp((*pairs)[i].name, name->s, nl) == 0))
        i++;
    if (i == *n) {
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 8;
            *pairs = pa_xrealloc(*pairs, *cap * sizeof **pairs);
        }
        (*n)++;
    }
    size_t vl = value->len < 2048 ? value->len : 2048;
    memcpy((*pairs)[i].name, name->s, nl);
    (*pairs)[i].name[nl] = '\0';
    memcpy((*pairs)[i].value, value->s, vl);
    (*pairs)[i].value[vl] = '\0';
}

/* Inserts the labels:TEXT frame of pairs into stack (root first, n frames, room for one more):
 * under a thread root, else at the root. Returns the stack's new length. */
static size_t insert_labels(pa_profile *p, uint32_t *stack, size_t n, const struct spair *pairs,
                            size_t npairs) {
    pa_label_pair *lp = pa_xrealloc(NULL, npairs * sizeof *lp);
    for (size_t i = 0; i < npairs; i++)
        lp[i] = (pa_label_pair){pairs[i].name, pairs[i].value};
    pa_buf text = {0};
    pa_buf_puts(&text, PA_LABELS_PREFIX);
    size_t kept = pa_series_labels_text(&text, lp, npairs);
    free(lp);
    size_t at = 0, len;
    const char *root = pa_profile_frame(p, stack[0], &len);
    if (len >= 7 && memcmp(root, "thread:", 7) == 0)
        at = 1;
    if (kept) {
        memmove(stack + at + 1, stack + at, (n - at) * sizeof *stack);
        stack[at] = pa_profile_intern(p, text.data, text.len);
    }
    pa_buf_free(&text);
    return kept ? n + 1 : n;
}

int pa_pprof_decode(pa_profile *p, const void *data, size_t len, pa_parse_stats *stats,
                    pa_error *err) {
    pa_reader r = {data, (const unsigned char *)data + len, 0}, sub, sub2, sub3;
    struct strref *strs = NULL;
    size_t nstr = 0, capstr = 0;
    struct pfunc *funcs = NULL;
    size_t nfunc = 0, capfunc = 0;
    struct ploc *locs = NULL;
    size_t nloc = 0, caploc = 0;
    struct pline *lines = NULL;
    size_t nline = 0, capline = 0;
    struct strref *samples = NULL; /* raw Sample messages, decoded once locations are known */
    size_t nsamp = 0, capsamp = 0;
    uint64_t period = 0, time_nanos = 0;
    uint64_t types[8]; /* sample types' type string indexes */
    size_t ntypes = 0;
    uint64_t comments[16];
    size_t ncomments = 0;
    struct pmap *maps = NULL;
    size_t nmap = 0, capmap = 0;
    unsigned field, wire;
    uint64_t v;
    int rc = -1;

    while (next_field(&r, &field, &wire, &v, &sub)) {
        if (wire == 2 && field == 1) {
            while (next_field(&sub, &field, &wire, &v, &sub2))
                if (field == 1 && wire == 0 && ntypes < sizeof types / sizeof types[0])
                    types[ntypes++] = v;
            if (sub.bad)
                goto malformed;
        } else if (wire == 2 && field == 2) {
            GROW(samples, nsamp, capsamp);
            samples[nsamp++] = (struct strref){(const char *)sub.p, (size_t)(sub.end - sub.p)};
        } else if (wire == 2 && field == 4) {
            GROW(locs, nloc, caploc);
            struct ploc *l = &locs[nloc++];
            memset(l, 0, sizeof *l);
            l->first_line = nline;
            while (next_field(&sub, &field, &wire, &v, &sub2)) {
                if (field == 1 && wire == 0)
                    l->id = v;
                else if (field == 2 && wire == 0)
                    l->mapping = v;
                else if (field == 3 && wire == 0)
                    l->address = v;
                else if (field == 4 && wire == 2) {
                    GROW(lines, nline, capline);
                    struct pline *ln = &lines[nline++];
                    ln->func = ln->line = 0;
                    while (next_field(&sub2, &field, &wire, &v, &sub3)) {
                        if (field == 1 && wire == 0)
                            ln->func = v;
                        else if (field == 2 && wire == 0)
                            ln->line = v;
                    }
                    if (sub2.bad)
                        sub.bad = 1;
                }
            }
            l->nlines = nline - l->first_line;
            if (sub.bad)
                goto malformed;
        } else if (wire == 2 && field == 5) {
            GROW(funcs, nfunc, capfunc);
            struct pfunc *f = &funcs[nfunc++];
            f->id = f->name = f->file = 0;
            while (next_field(&sub, &field, &wire, &v, &sub2)) {
                if (field == 1 && wire == 0)
                    f->id = v;
                else if (field == 2 && wire == 0)
                    f->name = v;
                else if (field == 4 && wire == 0)
                    f->file = v;
            }
            if (sub.bad)
                goto malformed;
        } else if (wire == 2 && field == 6) {
            GROW(strs, nstr, capstr);
            strs[nstr++] = (struct strref){(const char *)sub.p, (size_t)(sub.end - sub.p)};
            /* Counted, not refused: readers take such names; a server that follows Grafana
             * Pyroscope refuses the whole profile. */
            if (!pa_utf8_valid((const char *)sub.p, (size_t)(sub.end - sub.p)))
                stats->bad_utf8++;
        } else if (wire == 2 && field == 3) {
            GROW(maps, nmap, capmap);
            struct pmap *m = &maps[nmap++];
            m->id = m->filename = m->build_id = 0;
            while (next_field(&sub, &field, &wire, &v, &sub2)) {
                if (field == 1 && wire == 0)
                    m->id = v;
                else if (field == 5 && wire == 0)
                    m->filename = v;
                else if (field == 6 && wire == 0)
                    m->build_id = v;
            }
            if (sub.bad)
                goto malformed;
        } else if (field == 13 && wire == 0) {
            if (ncomments < sizeof comments / sizeof comments[0])
                comments[ncomments++] = v;
        } else if (field == 13 && wire == 2) {
            while (sub.p < sub.end && !sub.bad) {
                uint64_t c = pa_get_varint(&sub);
                if (ncomments < sizeof comments / sizeof comments[0])
                    comments[ncomments++] = c;
            }
            if (sub.bad)
                goto malformed;
        } else if (wire == 0 && field == 9) {
            time_nanos = v;
        } else if (wire == 0 && field == 12) {
            period = v;
        }
    }
    if (r.bad)
        goto malformed;
    if (nstr == 0 || strs[0].len != 0) {
        pa_fail(err, "malformed pprof: the string table must start with \"\"");
        goto out;
    }
    /* Our own header first: it sets the metadata and the time buckets' width. */
    pa_text_state hs = {.last_stack = SIZE_MAX};
    int ours = 0;
    for (size_t i = 0; i < ncomments; i++) {
        if (comments[i] < nstr && strs[comments[i]].len >= 9 &&
            memcmp(strs[comments[i]].s, "pyagent 1", 9) == 0) {
            pa_parse_header(p, strs[comments[i]].s + 9, strs[comments[i]].len - 9, &hs);
            ours = 1;
        }
    }
    if (nfunc)
        qsort(funcs, nfunc, sizeof *funcs, cmp_func);
    if (nloc)
        qsort(locs, nloc, sizeof *locs, cmp_loc);

    pa_buf name = {0};
    uint32_t *frames = NULL; /* per location, its frame ids leaf first */
    size_t nframes = 0, capframes = 0;
    for (size_t i = 0; i < nloc; i++) {
        struct ploc *l = &locs[i];
        l->frame_first = (uint32_t)nframes;
        for (size_t k = 0; k < l->nlines; k++) {
            struct pline *ln = &lines[l->first_line + k];
            struct pfunc key = {ln->func, 0, 0};
            struct pfunc *f = nfunc ? bsearch(&key, funcs, nfunc, sizeof *funcs, cmp_func) : NULL;
            name.len = 0;
            if (f && f->name < nstr && strs[f->name].len) {
                pa_buf_append(&name, strs[f->name].s, strs[f->name].len);
                if (f->file < nstr && strs[f->file].len) {
                    pa_buf_puts(&name, " (");
                    pa_buf_append(&name, strs[f->file].s, strs[f->file].len);
                    if (ln->line)
                        pa_buf_printf(&name, ":%llu", (unsigned long long)ln->line);
                    pa_buf_puts(&name, ")");
                }
            } else {
                pa_buf_puts(&name, "<unknown>");
            }
            /* An instruction (only pyagent writes these mappings, and only on Python frames'
             * only line): " @OFFSET[:COL-ENDCOL][ OPNAME]". */
            struct pmap *m = NULL;
            for (size_t j = 0; ours && l->mapping && j < nmap && !m; j++)
                if (maps[j].id == l->mapping &&
                    str_is(strs, nstr, maps[j].build_id, OPCODE_MAPPING))
                    m = &maps[j];
            if (m && k == 0 && name.len && name.data[name.len - 1] == ')') {
                uint64_t a = l->address;
                unsigned col = (unsigned)(a >> 32 & 0xFFFF), end = (unsigned)(a >> 48);
                pa_buf_printf(&name, " @%u", (unsigned)(a & 0xFFFFFFFFu));
                if (col && end)
                    pa_buf_printf(&name, ":%u-%u", col - 1, end - 1);
                if (m->filename < nstr && strs[m->filename].len) {
                    pa_buf_puts(&name, " ");
                    pa_buf_append(&name, strs[m->filename].s, strs[m->filename].len);
                }
            }
            GROW(frames, nframes, capframes);
            frames[nframes++] = pa_profile_intern(p, name.data, name.len);
        }
        if (l->nlines == 0) {
            GROW(frames, nframes, capframes);
            frames[nframes++] = pa_profile_intern(p, "<unknown>", 9);
        }
        l->nframes = (uint32_t)(nframes - l->frame_first);
    }
    pa_buf_free(&name);

    uint32_t *stack = NULL;
    size_t nstack = 0, capstack = 0;
    uint64_t *locids = NULL;
    size_t nlocids = 0, caplocids = 0;
    struct spair *pairs = NULL;
    size_t npairs = 0, cappairs = 0;
    for (size_t s = 0; s < nsamp; s++) {
        pa_reader sr = {(const unsigned char *)samples[s].s,
                        (const unsigned char *)samples[s].s + samples[s].len, 0};
        uint64_t value = 0;
        int have_value = 0, timed = 0;
        int64_t t_ms = 0;
        nlocids = 0;
        npairs = 0;
        while (next_field(&sr, &field, &wire, &v, &sub)) {
            if (field == 3 && wire == 2) {
                /* Label {key 1, str 2, num 3, num_unit 4}: a numeric "timestamp" is when; string
                 * labels make the stack's labels:TEXT frame (a name given twice: the last). */
                uint64_t key = 0, num = 0, unit = 0, str = 0;
                int has_num = 0;
                while (next_field(&sub, &field, &wire, &v, &sub2)) {
                    if (field == 1 && wire == 0)
                        key = v;
                    else if (field == 2 && wire == 0)
                        str = v;
                    else if (field == 3 && wire == 0)
                        num = v, has_num = 1;
                    else if (field == 4 && wire == 0)
                        unit = v;
                }
                if (!has_num && str && key && key < nstr && str < nstr)
                    add_pair(&pairs, &npairs, &cappairs, &strs[key], &strs[str]);
                if (has_num && str_is(strs, nstr, key, "timestamp")) {
                    timed = 1;
                    t_ms = str_is(strs, nstr, unit, "nanoseconds") ? (int64_t)num / 1000000
                           : str_is(strs, nstr, unit, "seconds")   ? (int64_t)num * 1000
                                                                   : (int64_t)num;
                }
                if (sub.bad)
                    sr.bad = 1;
                continue;
            }
            if (field == 1 && wire == 0) {
                GROW(locids, nlocids, caplocids);
                locids[nlocids++] = v;
            } else if (field == 1 && wire == 2) {
                while (sub.p < sub.end && !sub.bad) {
                    uint64_t id = pa_get_varint(&sub);
                    GROW(locids, nlocids, caplocids);
                    locids[nlocids++] = id;
                }
            } else if (field == 2 && wire == 0 && !have_value) {
                value = v;
                have_value = 1;
            } else if (field == 2 && wire == 2 && !have_value) {
                value = pa_get_varint(&sub);
                have_value = 1;
            }
            if (sub.bad)
                sr.bad = 1;
        }
        if (sr.bad) {
            free(pairs);
            free(stack);
            free(locids);
            free(frames);
            goto malformed;
        }
        if ((int64_t)value <= 0 || value > 1000000000000000ull)
            continue; /* negative, or beyond any real count (same bound as text input) */
        /* location_id is leaf first, and a location's lines are leaf first too. */
        nstack = 0;
        for (size_t k = nlocids; k-- > 0;) {
            struct ploc key = {.id = locids[k]};
            struct ploc *l = nloc ? bsearch(&key, locs, nloc, sizeof *locs, cmp_loc) : NULL;
            if (!l) {
                GROW(stack, nstack, capstack);
                stack[nstack++] = pa_profile_intern(p, "<unknown>", 9);
                continue;
            }
            for (uint32_t j = l->nframes; j-- > 0;) {
                GROW(stack, nstack, capstack);
                stack[nstack++] = frames[l->frame_first + j];
            }
        }
        if (nstack == 0)
            continue;
        if (npairs) {
            GROW(stack, nstack, capstack);
            nstack = insert_labels(p, stack, nstack, pairs, npairs);
        }
        size_t index = pa_profile_add_stack_ids(p, stack, nstack, value);
        if (timed && index != SIZE_MAX) {
            /* Timestamps from a profile that does not give its buckets: 10 ms ones. */
            if (!pa_profile_time_width(p))
                pa_profile_set_bucket_ms(p, 10);
            pa_profile_add_time(p, index, t_ms, value);
        }
        stats->stacks++;
        stats->samples += value;
    }
    free(pairs);
    free(stack);
    free(locids);
    free(frames);
    if (period > 0) {
        char buf[32];
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)(1000000000ull / period));
        if (!pa_profile_meta(p, "rate") && 1000000000ull / period > 0)
            pa_profile_set_meta(p, "rate", buf);
    }
    for (size_t i = 0; i < ntypes && !pa_profile_meta(p, "mode"); i++) {
        static const char *const modes[] = {"wall", "gil", "cpu"};
        for (size_t m = 0; m < 3 && types[i] < nstr; m++)
            if (strs[types[i]].len == strlen(modes[m]) &&
                memcmp(strs[types[i]].s, modes[m], strs[types[i]].len) == 0)
                pa_profile_set_meta(p, "mode", modes[m]);
    }
    if (time_nanos && !pa_profile_meta(p, "start")) {
        char buf[32];
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)(time_nanos / 1000000000ull));
        pa_profile_set_meta(p, "start", buf);
    }
    if (stats->stacks == 0) {
        pa_fail(err, "pprof profile has no samples");
        goto out;
    }
    rc = 0;
    goto out;
malformed:
    pa_fail(err, "malformed pprof data (truncated or not a profile.proto message)");
out:
    free(strs);
    free(funcs);
    free(maps);
    free(locs);
    free(lines);
    free(samples);
    return rc;
}
