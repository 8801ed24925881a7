/* heatmap.c - the source heatmap: an index page and one page per Python source file, each
 * line coloured by the samples that ran it.
 *
 * Self samples of a line are those where it is the leaf; total samples are those where it is
 * anywhere on the stack, counted once per sample (a stamp per line remembers the last stack
 * that counted it), so recursion never pushes a line past 100%. Colour is log-scaled against
 * the hottest line of the whole profile, so pages can be compared with each other.
 * With instruction data (PYAGENT_OPCODES), a line also counts its samples that carry an
 * instruction and those whose instruction is specialized (pa_opcode_base names a base), each
 * once per sample: their ratio is the line's specialization, and a file's is the same ratio
 * over its lines' sums.
 * Sources come from the reports' one reader (source.c), which honours --source-root. */
#include "render.h"

#include "assets.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct line_entry {
    uint32_t file; /* index in the files interner */
    uint32_t line;
    uint64_t self, total;
    size_t stamp;
    uint64_t instr, spec; /* samples with an instruction here; of those, specialized */
    size_t instr_stamp, spec_stamp;
};

struct edge {
    uint32_t entry;  /* the line */
    uint32_t frame;  /* the caller's or callee's frame id */
    uint32_t callee; /* 0: frame calls this line, 1: this line calls frame */
    uint64_t count;
};

/* One bytecode instruction of a line (frames with " @OFFSET OPNAME", PYAGENT_OPCODES). */
struct instr_entry {
    uint32_t entry; /* the line */
    int64_t offset;
    int32_t col, end_col; /* its source span on the line, -1 if not recorded */
    const char *op;       /* into the profile's frame strings; NULL if unnamed */
    size_t op_len;
    uint64_t self, total;
    size_t stamp;
    int specialized; /* pa_opcode_base knows it */
};

struct file_entry {
    pa_frame_kind kind;
    uint64_t self, total;
    size_t stamp;
    uint32_t lines_hit, functions; /* with samples */
    uint64_t instr, spec;          /* sums of its lines' */
};

struct heat {
    const pa_profile *p;
    pa_profile *files;   /* interner of file names */
    pa_profile *lines;   /* interner of (file, line) keys */
    pa_profile *edgeset; /* interner of edge keys */
    struct line_entry *le;
    size_t nle, cap_le;
    struct edge *edges;
    size_t nedges, cap_edges;
    struct file_entry *fe;
    size_t cap_fe;
    int64_t *entry_of;    /* frame id -> line entry, -1 if the frame has no source line */
    int64_t *instr_of;    /* frame id -> instruction entry, -1 if the frame names none */
    pa_profile *instrset; /* interner of (line, offset, opcode) keys */
    struct instr_entry *ie;
    size_t nie, cap_ie;
    uint64_t max_total, max_self; /* of any line: the top of the two colour scales */
};

static void seterr(pa_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void seterr(pa_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
}

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q)
        abort();
    return q;
}

static uint32_t intern_file(struct heat *h, const char *file, size_t len, pa_frame_kind kind) {
    size_t before = pa_profile_frame_count(h->files);
    uint32_t id = pa_profile_intern(h->files, file, len);
    if (pa_profile_frame_count(h->files) > before) {
        if (id >= h->cap_fe) {
            h->cap_fe = h->cap_fe ? h->cap_fe * 2 : 64;
            h->fe = xrealloc(h->fe, h->cap_fe * sizeof *h->fe);
        }
        memset(&h->fe[id], 0, sizeof h->fe[id]);
        h->fe[id].kind = kind;
    }
    return id;
}

/* Adds count to *n unless stack s already did: stamp remembers the last stack (s + 1). */
static void count_once(uint64_t *n, size_t *stamp, size_t s, uint64_t count) {
    if (*stamp != s + 1) {
        *stamp = s + 1;
        *n += count;
    }
}

static void build(struct heat *h) {
    const pa_profile *p = h->p;
    size_t nframes = pa_profile_frame_count(p);
    h->entry_of = xrealloc(NULL, (nframes + 1) * sizeof *h->entry_of);
    h->instr_of = xrealloc(NULL, (nframes + 1) * sizeof *h->instr_of);
    for (uint32_t id = 0; id < nframes; id++) {
        h->instr_of[id] = -1;
        size_t len;
        const char *s = pa_profile_frame(p, id, &len);
        pa_frame_info fi;
        pa_frame_parse(s, len, &fi);
        h->entry_of[id] = -1;
        if (!fi.file || !fi.line ||
            (fi.kind != PA_FRAME_OWN && fi.kind != PA_FRAME_STDLIB && fi.kind != PA_FRAME_SITE))
            continue;
        uint32_t file = intern_file(h, fi.file, fi.file_len, fi.kind);
        uint32_t key[2] = {file, fi.line};
        size_t before = pa_profile_frame_count(h->lines);
        uint32_t e = pa_profile_intern(h->lines, (const char *)key, sizeof key);
        if (pa_profile_frame_count(h->lines) > before) {
            if (e >= h->cap_le) {
                h->cap_le = h->cap_le ? h->cap_le * 2 : 256;
                h->le = xrealloc(h->le, h->cap_le * sizeof *h->le);
            }
            memset(&h->le[e], 0, sizeof h->le[e]);
            h->le[e].file = file;
            h->le[e].line = fi.line;
            h->nle = e + 1;
        }
        h->entry_of[id] = e;
        if (fi.offset >= 0) {
            /* line entry, offset and opcode name: one instruction */
            pa_buf k = {0};
            pa_buf_append(&k, &e, sizeof e);
            pa_buf_append(&k, &fi.offset, sizeof fi.offset);
            if (fi.op)
                pa_buf_append(&k, fi.op, fi.op_len);
            size_t before_i = pa_profile_frame_count(h->instrset);
            uint32_t x = pa_profile_intern(h->instrset, k.data, k.len);
            pa_buf_free(&k);
            if (pa_profile_frame_count(h->instrset) > before_i) {
                if (x >= h->cap_ie) {
                    h->cap_ie = h->cap_ie ? h->cap_ie * 2 : 64;
                    h->ie = xrealloc(h->ie, h->cap_ie * sizeof *h->ie);
                }
                int spec = fi.op && pa_opcode_base(fi.op, fi.op_len) != NULL;
                h->ie[x] =
                    (struct instr_entry){e, fi.offset, -1, -1, fi.op, fi.op_len, 0, 0, 0, spec};
                h->nie = x + 1;
            }
            if (h->ie[x].col < 0 && fi.col >= 0) { /* frames with and without the span */
                h->ie[x].col = fi.col;
                h->ie[x].end_col = fi.end_col;
            }
            h->instr_of[id] = x;
        }
    }
    size_t nstacks = pa_profile_stack_count(p);
    for (size_t s = 0; s < nstacks; s++) {
        size_t n;
        uint64_t count;
        const uint32_t *ids = pa_profile_stack(p, s, &n, &count);
        for (size_t k = 0; k < n; k++) {
            int64_t e = h->entry_of[ids[k]];
            if (e < 0)
                continue;
            struct line_entry *l = &h->le[e];
            int64_t x = h->instr_of[ids[k]];
            if (x >= 0) {
                struct instr_entry *in = &h->ie[x];
                count_once(&in->total, &in->stamp, s, count);
                if (k == n - 1)
                    in->self += count;
                count_once(&l->instr, &l->instr_stamp, s, count);
                if (in->specialized)
                    count_once(&l->spec, &l->spec_stamp, s, count);
            }
            count_once(&l->total, &l->stamp, s, count);
            struct file_entry *f = &h->fe[l->file];
            count_once(&f->total, &f->stamp, s, count);
            if (k == n - 1) {
                l->self += count;
                f->self += count;
            }
            /* Edges to the neighbours on this stack. */
            for (int dir = 0; dir < 2; dir++) {
                if ((dir == 0 && k == 0) || (dir == 1 && k + 1 == n))
                    continue;
                uint32_t other = dir == 0 ? ids[k - 1] : ids[k + 1];
                uint32_t key[3] = {(uint32_t)e, other, (uint32_t)dir};
                size_t before = pa_profile_frame_count(h->edgeset);
                uint32_t x = pa_profile_intern(h->edgeset, (const char *)key, sizeof key);
                if (pa_profile_frame_count(h->edgeset) > before) {
                    if (x >= h->cap_edges) {
                        h->cap_edges = h->cap_edges ? h->cap_edges * 2 : 256;
                        h->edges = xrealloc(h->edges, h->cap_edges * sizeof *h->edges);
                    }
                    h->edges[x] = (struct edge){(uint32_t)e, other, (uint32_t)dir, 0};
                    h->nedges = x + 1;
                }
                h->edges[x].count += count;
            }
        }
    }
    for (size_t e = 0; e < h->nle; e++) {
        if (h->le[e].total > h->max_total)
            h->max_total = h->le[e].total;
        if (h->le[e].self > h->max_self)
            h->max_self = h->le[e].self;
        struct file_entry *f = &h->fe[h->le[e].file];
        if (h->le[e].total)
            f->lines_hit++;
        f->instr += h->le[e].instr;
        f->spec += h->le[e].spec;
    }
    /* Functions with samples per file: distinct (file, qualname) of the frames on its lines. */
    pa_profile *funcs = pa_profile_new();
    for (uint32_t id = 0; id < nframes; id++) {
        int64_t e = h->entry_of[id];
        if (e < 0 || !h->le[e].total)
            continue;
        size_t len;
        const char *s = pa_profile_frame(p, id, &len);
        pa_frame_info fi;
        pa_frame_parse(s, len, &fi);
        pa_buf k = {0};
        pa_buf_append(&k, &h->le[e].file, sizeof h->le[e].file);
        pa_buf_append(&k, fi.name, fi.name_len);
        size_t before = pa_profile_frame_count(funcs);
        pa_profile_intern(funcs, k.data, k.len);
        if (pa_profile_frame_count(funcs) > before)
            h->fe[h->le[e].file].functions++;
        pa_buf_free(&k);
    }
    pa_profile_free(funcs);
}

/* ---- pages ---- */

static void page_head(pa_buf *b, const char *title, const char *subtitle) {
    pa_buf_puts(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                   "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                   "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n"
                   "<meta name=\"color-scheme\" content=\"light dark\">\n"
                   "<link rel=\"icon\" href=\"data:,\">\n<title>");
    pa_buf_html_str(b, title, strlen(title));
    if (subtitle) {
        pa_buf_puts(b, " — ");
        pa_buf_html_str(b, subtitle, strlen(subtitle));
    }
    pa_buf_puts(b, "</title>\n<style>\n");
    pa_buf_append(b, pa_asset_heatmap_css, pa_asset_heatmap_css_len);
    pa_buf_puts(b, "</style>\n</head>\n<body>\n");
}

static void page_tail(pa_buf *b) {
    pa_buf_puts(b, "<script>\n");
    pa_buf_append(b, pa_asset_heatmap_js, pa_asset_heatmap_js_len);
    pa_buf_puts(b, "</script>\n</body>\n</html>\n");
}

/* The view controls of every page (heatmap.js): the colour scale and the theme; on the index
 * the order of the cards, on a file page of a profile with instruction data the
 * specialization colouring. */
enum { CONTROLS_SORT = 1, CONTROLS_SPEC = 2 };
static void put_controls(pa_buf *b, int which) {
    pa_buf_puts(b, "<span class=\"views\">");
    if (which & CONTROLS_SORT)
        pa_buf_puts(b, "<label>sort by <select id=\"sort-by\"><option value=\"total\">total"
                       "</option><option value=\"self\">self</option><option value=\"name\">"
                       "name</option></select></label> ");
    if (which & CONTROLS_SPEC)
        pa_buf_puts(b, "<label><input type=\"checkbox\" id=\"by-spec\"> colour by "
                       "specialization</label> · ");
    pa_buf_puts(b, "<label>colour by <select id=\"colour-by\">"
                   "<option value=\"total\">total</option><option value=\"self\">self</option>"
                   "</select></label> <button id=\"theme\" type=\"button\">dark theme</button>"
                   "</span>");
}

/* The share of the samples with instruction data that ran a specialized instruction. */
static double spec_share(uint64_t spec, uint64_t instr) {
    return instr ? (double)spec / (double)instr : 0;
}

static double log_scale(uint64_t n, uint64_t max) {
    return n && max ? log1p((double)n) / log1p((double)max) : 0;
}

/* A row's heat (0..1, log scale) by total and by self samples, the page picks one; and its
 * specialization (0..1, linear) where it has instruction data. */
static void put_heat(pa_buf *b, const struct heat *h, uint64_t total, uint64_t self, uint64_t spec,
                     uint64_t instr) {
    pa_buf_printf(b, " style=\"--heat-total:%.3f;--heat-self:%.3f", log_scale(total, h->max_total),
                  log_scale(self, h->max_self));
    if (instr)
        pa_buf_printf(b, ";--spec:%.3f", spec_share(spec, instr));
    pa_buf_puts(b, "\"");
}

/* A sampled line's specialization as data-spec and in its title; a line without instruction
 * data is marked data-spec="none" (no colour by specialization) and says why. */
static void put_line_spec(pa_buf *b, const struct line_entry *l) {
    if (!l->instr) {
        pa_buf_puts(b, " data-spec=\"none\" title=\"specialization: no instruction data for this "
                       "line\"");
        return;
    }
    double share = spec_share(l->spec, l->instr);
    pa_buf_printf(b,
                  " data-spec=\"%.3f\" title=\"specialization: %.1f%% of %llu samples with "
                  "instruction data ran specialized instructions\"",
                  share, 100 * share, (unsigned long long)l->instr);
}

static void put_pct(pa_buf *b, uint64_t n, uint64_t all) {
    pa_buf_printf(b, "%.2f%%", all ? 100.0 * (double)n / (double)all : 0.0);
}

static int cmp_edge(const void *a, const void *b) {
    const struct edge *x = *(const struct edge *const *)a, *y = *(const struct edge *const *)b;
    if (x->entry != y->entry)
        return x->entry < y->entry ? -1 : 1;
    if (x->callee != y->callee)
        return x->callee < y->callee ? -1 : 1;
    return x->count < y->count ? 1 : x->count > y->count ? -1 : 0;
}

static void file_page_name(char *buf, size_t size, uint32_t file) {
    snprintf(buf, size, "file-%u.html", file);
}

/* A link to where another frame's line is shown, or its plain name. */
static void put_frame_link(pa_buf *b, const struct heat *h, uint32_t frame) {
    size_t len;
    const char *s = pa_profile_frame(h->p, frame, &len);
    int64_t e = h->entry_of[frame];
    if (e >= 0) {
        char page[64];
        file_page_name(page, sizeof page, h->le[e].file);
        pa_buf_printf(b, "<a href=\"%s#line-%u\">", page, h->le[e].line);
        pa_buf_html_str(b, s, len);
        pa_buf_puts(b, "</a>");
    } else {
        pa_buf_html_str(b, s, len);
    }
}

static void put_edges(pa_buf *b, const struct heat *h, struct edge **sorted, size_t from,
                      size_t to) {
    for (int dir = 0; dir < 2; dir++) {
        int any = 0;
        for (size_t i = from; i < to; i++) {
            const struct edge *x = sorted[i];
            if ((int)x->callee != dir)
                continue;
            if (!any)
                pa_buf_puts(b, dir == 0 ? "<div class=\"rel\"><b>callers</b><ul>"
                                        : "<div class=\"rel\"><b>callees</b><ul>");
            any = 1;
            pa_buf_printf(b, "<li><span class=\"n\">%llu</span> ", (unsigned long long)x->count);
            put_frame_link(b, h, x->frame);
            pa_buf_puts(b, "</li>");
        }
        if (any)
            pa_buf_puts(b, "</ul></div>");
    }
}

static int cmp_instr(const void *a, const void *b) {
    const struct instr_entry *x = *(const struct instr_entry *const *)a,
                             *y = *(const struct instr_entry *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->total < y->total ? 1 : x->total > y->total ? -1 : 0;
}

/* Whether [col, end_col) cuts the line's text at character boundaries (the columns are UTF-8
 * byte offsets, as CPython counts them). */
static int span_fits(const char *text, size_t tlen, int32_t col, int32_t end_col) {
    if (!text || col < 0 || end_col < col || (size_t)end_col > tlen)
        return 0;
    return ((unsigned char)text[col] & 0xc0) != 0x80 &&
           ((size_t)end_col == tlen || ((unsigned char)text[end_col] & 0xc0) != 0x80);
}

/* The instructions of line e as rows of the same table, under the line's own columns (self,
 * total), in bytecode order; hidden until the line's "bytecode" button opens them. An
 * instruction with a column span shows it, and the line's text with that span marked. */
static void put_instructions(pa_buf *b, const struct heat *h, uint32_t e, uint32_t ln, uint64_t all,
                             const char *text, size_t tlen) {
    const struct instr_entry **v = xrealloc(NULL, (h->nie + 1) * sizeof *v);
    size_t n = 0;
    for (size_t x = 0; x < h->nie; x++)
        if (h->ie[x].entry == e)
            v[n++] = &h->ie[x];
    qsort(v, n, sizeof *v, cmp_instr);
    for (size_t i = 0; i < n; i++) {
        const struct instr_entry *in = v[i];
        pa_buf_printf(b, "<tr class=\"op\" data-of=\"%u\" hidden><td class=\"ln\">@%lld</td>", ln,
                      (long long)in->offset);
        pa_buf_printf(b, "<td class=\"n\" title=\"");
        put_pct(b, in->self, all);
        pa_buf_printf(b, " of all samples\">%llu</td><td class=\"n\" title=\"",
                      (unsigned long long)in->self);
        put_pct(b, in->total, all);
        pa_buf_printf(b, " of all samples\">%llu</td><td class=\"code\"><code>",
                      (unsigned long long)in->total);
        if (in->op) {
            pa_buf_html_str(b, in->op, in->op_len);
            const char *base = pa_opcode_base(in->op, in->op_len);
            if (base) {
                pa_buf_puts(b, "</code> <span class=\"spec\">specialized from ");
                pa_buf_puts(b, base); /* from the generated table: [A-Z0-9_] only */
                pa_buf_puts(b, "</span><code>");
            }
        } else {
            pa_buf_puts(b, "(opcode not recorded)");
        }
        pa_buf_puts(b, "</code>");
        if (in->col >= 0) {
            pa_buf_printf(b, " <span class=\"cols\">columns %d-%d</span>", (int)in->col,
                          (int)in->end_col);
            if (span_fits(text, tlen, in->col, in->end_col)) {
                pa_buf_puts(b, " <code class=\"span\">");
                pa_buf_html_str(b, text, (size_t)in->col);
                pa_buf_puts(b, "<mark>");
                pa_buf_html_str(b, text + in->col, (size_t)(in->end_col - in->col));
                pa_buf_puts(b, "</mark>");
                pa_buf_html_str(b, text + in->end_col, tlen - (size_t)in->end_col);
                pa_buf_puts(b, "</code>");
            }
        }
        pa_buf_puts(b, "</td></tr>\n");
    }
    free(v);
}

static int write_file(const char *dir, const char *name, const pa_buf *b, pa_error *err) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (b->len && fwrite(b->data, 1, b->len, f) != b->len) || fclose(f) != 0) {
        seterr(err, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

static int file_page(const struct heat *h, const pa_heatmap_opts *o, uint32_t file,
                     struct edge **sorted, const size_t *edge_start, const char *dir,
                     pa_error *err) {
    size_t flen;
    const char *fname = pa_profile_frame(h->files, file, &flen);
    uint64_t all = pa_profile_total(h->p);
    pa_buf b = {0}, src = {0};
    page_head(&b, fname, o && o->title ? o->title : NULL);
    pa_buf_puts(&b, "<header><a href=\"index.html\">&larr; all files</a><h1>");
    pa_buf_html_str(&b, fname, flen);
    pa_buf_puts(&b, "</h1><p class=\"sum\">");
    pa_buf_printf(&b, "%llu samples on this file's lines (", (unsigned long long)h->fe[file].total);
    put_pct(&b, h->fe[file].total, all);
    pa_buf_printf(&b, " of %llu), %llu with a line here as the leaf · %s", (unsigned long long)all,
                  (unsigned long long)h->fe[file].self, pa_frame_kind_name(h->fe[file].kind));
    if (h->fe[file].instr)
        pa_buf_printf(&b,
                      " · <span class=\"file-spec\">%.1f%%</span> of %llu samples with "
                      "instruction data on specialized instructions",
                      100 * spec_share(h->fe[file].spec, h->fe[file].instr),
                      (unsigned long long)h->fe[file].instr);
    pa_buf_puts(&b, "</p>");
    pa_buf_puts(&b, "<label><input type=\"checkbox\" id=\"hide-cold\"> hide cold lines</label> "
                    "<span class=\"legend\">colour: total or self samples, log scale · self = "
                    "samples "
                    "where the line is the leaf · total = samples where it is on the stack, "
                    "counted once · bytecode: a line's instructions (PYAGENT_OPCODES), key "
                    "b opens all</span> ");
    if (h->nie)
        pa_buf_puts(&b, "<span class=\"legend spec-legend\">colour by specialization: the share "
                        "of a line's samples with instruction data that ran specialized "
                        "(adaptive) instructions, <span class=\"swatch\" aria-hidden=\"true\">"
                        "</span> 0% to 100%; lines without instruction data stay uncoloured"
                        "</span> ");
    put_controls(&b, h->nie ? CONTROLS_SPEC : 0);
    pa_buf_puts(&b, "</header>\n");

    /* The lines with samples, by line number. */
    uint32_t maxline = 0;
    for (size_t e = 0; e < h->nle; e++)
        if (h->le[e].file == file && h->le[e].line > maxline)
            maxline = h->le[e].line;
    int64_t *by_line = xrealloc(NULL, ((size_t)maxline + 2) * sizeof *by_line);
    for (size_t i = 0; i <= maxline; i++)
        by_line[i] = -1;
    for (size_t e = 0; e < h->nle; e++)
        if (h->le[e].file == file)
            by_line[h->le[e].line] = (int64_t)e;

    pa_error why;
    pa_source_roots roots = {o ? o->root_from : NULL, o ? o->root_to : NULL, o ? o->nroots : 0};
    int have = pa_render_read_source(&roots, fname, &src, &why) == 0;
    if (!have) {
        pa_buf_puts(&b, "<p class=\"missing\">");
        pa_buf_html_str(&b, why.msg, strlen(why.msg));
        pa_buf_puts(&b, "; showing the sampled lines only.</p>\n");
    }
    pa_buf_puts(&b, "<table class=\"src\"><thead><tr><th>line</th><th>self</th><th>total</th>"
                    "<th>code</th></tr></thead><tbody>\n");
    const char *p = src.data ? src.data : "", *end = p + src.len;
    uint32_t ln = 0;
    for (;;) {
        ln++;
        const char *text = NULL;
        size_t tlen = 0;
        if (have) {
            if (p >= end && ln > maxline)
                break;
            if (p < end) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                text = p;
                tlen = nl ? (size_t)(nl - p) : (size_t)(end - p);
                p = nl ? nl + 1 : end;
                if (tlen && text[tlen - 1] == '\r')
                    tlen--;
            }
        } else {
            if (ln > maxline)
                break;
            if (by_line[ln] < 0 || !h->le[by_line[ln]].total)
                continue;
        }
        int64_t e = ln <= maxline ? by_line[ln] : -1;
        const struct line_entry *l = e >= 0 ? &h->le[e] : NULL;
        int hot = l && l->total;
        pa_buf_printf(&b, "<tr id=\"line-%u\" class=\"%s\"", ln, hot ? "hot" : "cold");
        if (hot) {
            put_heat(&b, h, l->total, l->self, l->spec, l->instr);
            if (h->nie)
                put_line_spec(&b, l);
        }
        pa_buf_printf(&b, "><td class=\"ln\"><a href=\"#line-%u\">%u</a></td>", ln, ln);
        if (hot) {
            pa_buf_printf(&b, "<td class=\"n\" title=\"");
            put_pct(&b, l->self, all);
            pa_buf_printf(&b, " of all samples\">%llu</td><td class=\"n\" title=\"",
                          (unsigned long long)l->self);
            put_pct(&b, l->total, all);
            pa_buf_printf(&b, " of all samples\">%llu</td>", (unsigned long long)l->total);
        } else {
            pa_buf_puts(&b, "<td></td><td></td>");
        }
        pa_buf_puts(&b, "<td class=\"code\">");
        if (text) {
            pa_buf_puts(&b, "<code>");
            pa_buf_html_str(&b, text, tlen);
            pa_buf_puts(&b, "</code>");
        } else if (!have) {
            pa_buf_puts(&b, "<code class=\"na\">(source not available)</code>");
        }
        if (hot && edge_start[e] < edge_start[e + 1]) {
            pa_buf_puts(&b, "<details><summary>callers &amp; callees</summary>");
            put_edges(&b, h, sorted, edge_start[e], edge_start[e + 1]);
            pa_buf_puts(&b, "</details>");
        }
        size_t ninstr = 0;
        for (size_t x = 0; hot && x < h->nie; x++)
            ninstr += h->ie[x].entry == (uint32_t)e;
        if (ninstr)
            pa_buf_printf(&b,
                          "<button type=\"button\" class=\"bc\" aria-expanded=\"false\" "
                          "data-line=\"%u\">bytecode: %zu instruction%s</button>",
                          ln, ninstr, ninstr == 1 ? "" : "s");
        pa_buf_puts(&b, "</td></tr>\n");
        if (ninstr)
            put_instructions(&b, h, (uint32_t)e, ln, all, text, tlen);
    }
    pa_buf_puts(&b, "</tbody></table>\n");
    page_tail(&b);
    char name[64];
    file_page_name(name, sizeof name, file);
    int rc = write_file(dir, name, &b, err);
    free(by_line);
    pa_buf_free(&b);
    pa_buf_free(&src);
    return rc;
}

/* A file's summary card on the index: samples total and self with their shares of the whole
 * profile (and a bar of the total's), lines and functions sampled, its specialization where it has
 * instruction data, and its three hottest lines by total, linked to their permalinks. The card
 * is tinted by the file's hottest line, on the same scales as the lines of its page. */
static void put_card(pa_buf *b, const struct heat *h, uint32_t f, uint64_t all) {
    const struct file_entry *fe = &h->fe[f];
    const struct line_entry *top[3] = {NULL, NULL, NULL};
    uint64_t hottest_self = 0;
    for (size_t e = 0; e < h->nle; e++) {
        const struct line_entry *l = &h->le[e];
        if (l->file != f || !l->total)
            continue;
        if (l->self > hottest_self)
            hottest_self = l->self;
        /* insertion into the top three: more total first, then the lower line number */
        for (size_t i = 0; i < 3; i++) {
            if (top[i] &&
                (top[i]->total > l->total || (top[i]->total == l->total && top[i]->line < l->line)))
                continue;
            for (size_t j = 2; j > i; j--)
                top[j] = top[j - 1];
            top[i] = l;
            break;
        }
    }
    size_t flen;
    const char *fname = pa_profile_frame(h->files, f, &flen);
    char page[64];
    file_page_name(page, sizeof page, f);
    pa_buf_printf(b, "<li class=\"card\" data-total=\"%llu\" data-self=\"%llu\"",
                  (unsigned long long)fe->total, (unsigned long long)fe->self);
    put_heat(b, h, top[0] ? top[0]->total : 0, hottest_self, fe->spec, fe->instr);
    pa_buf_printf(b, "><h3><a href=\"%s\">", page);
    pa_buf_html_str(b, fname, flen);
    pa_buf_puts(b, "</a></h3><div class=\"bar\" aria-hidden=\"true\"><span style=\"width:");
    put_pct(b, fe->total, all);
    pa_buf_printf(b,
                  "\"></span></div><p class=\"stats\"><span class=\"c-total\">total "
                  "<b>%llu</b> (",
                  (unsigned long long)fe->total);
    put_pct(b, fe->total, all);
    pa_buf_printf(b, ")</span> · <span class=\"c-self\">self <b>%llu</b> (",
                  (unsigned long long)fe->self);
    put_pct(b, fe->self, all);
    pa_buf_printf(b,
                  ")</span> · <span class=\"c-lines\"><b>%u</b> line%s and <b>%u</b> function%s "
                  "sampled</span>",
                  fe->lines_hit, fe->lines_hit == 1 ? "" : "s", fe->functions,
                  fe->functions == 1 ? "" : "s");
    if (fe->instr)
        pa_buf_printf(b,
                      " · <span class=\"c-spec\" title=\"share of the samples with "
                      "instruction data on this file's lines that ran specialized "
                      "instructions\"><b>%.1f%%</b> specialized</span>",
                      100 * spec_share(fe->spec, fe->instr));
    pa_buf_puts(b, "</p><p class=\"hottest\">hottest lines:");
    for (size_t i = 0; i < 3 && top[i]; i++)
        pa_buf_printf(b, "%s <a href=\"%s#line-%u\">line %u</a> <span class=\"n\">%llu</span>",
                      i ? " ·" : "", page, top[i]->line, top[i]->line,
                      (unsigned long long)top[i]->total);
    pa_buf_puts(b, "</p></li>\n");
}

static const struct heat *sort_ctx;
static int cmp_file(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const struct file_entry *fx = &sort_ctx->fe[x], *fy = &sort_ctx->fe[y];
    if (fx->total != fy->total)
        return fx->total < fy->total ? 1 : -1;
    return x < y ? -1 : x > y;
}

int pa_render_heatmap(const pa_profile *p, const pa_heatmap_opts *o, const char *dir,
                      pa_error *err) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        seterr(err, "cannot create directory %s: %s", dir, strerror(errno));
        return -1;
    }
    struct heat h;
    memset(&h, 0, sizeof h);
    h.p = p;
    h.files = pa_profile_new();
    h.lines = pa_profile_new();
    h.edgeset = pa_profile_new();
    h.instrset = pa_profile_new();
    build(&h);

    /* Edges grouped by line: a sorted array of pointers and where each line's run starts. */
    struct edge **sorted = xrealloc(NULL, (h.nedges + 1) * sizeof *sorted);
    for (size_t i = 0; i < h.nedges; i++)
        sorted[i] = &h.edges[i];
    if (h.nedges)
        qsort(sorted, h.nedges, sizeof *sorted, cmp_edge);
    size_t *edge_start = xrealloc(NULL, (h.nle + 2) * sizeof *edge_start);
    size_t k = 0;
    for (size_t e = 0; e <= h.nle; e++) {
        while (k < h.nedges && sorted[k]->entry < e)
            k++;
        edge_start[e] = k;
    }

    int rc = 0;
    size_t nfiles = pa_profile_frame_count(h.files);
    for (uint32_t f = 0; f < nfiles && rc == 0; f++)
        rc = file_page(&h, o, f, sorted, edge_start, dir, err);

    if (rc == 0) {
        uint64_t all = pa_profile_total(p);
        const char *title = o && o->title ? o->title : "Heatmap";
        pa_buf b = {0};
        page_head(&b, title, NULL);
        pa_buf_puts(&b, "<header><h1>");
        pa_buf_html_str(&b, title, strlen(title));
        pa_buf_printf(&b,
                      "</h1><p class=\"sum\">%llu samples · %zu source files · colour: total "
                      "or self samples of the file's hottest line, log scale</p>",
                      (unsigned long long)all, nfiles);
        put_controls(&b, CONTROLS_SORT);
        pa_buf_puts(&b, "</header>\n");
        uint32_t *order = xrealloc(NULL, (nfiles + 1) * sizeof *order);
        for (uint32_t f = 0; f < nfiles; f++)
            order[f] = f;
        sort_ctx = &h;
        if (nfiles)
            qsort(order, nfiles, sizeof *order, cmp_file);
        static const struct {
            pa_frame_kind kind;
            const char *title;
        } groups[] = {{PA_FRAME_OWN, "Your code"},
                      {PA_FRAME_STDLIB, "Standard library"},
                      {PA_FRAME_SITE, "site-packages"}};
        for (size_t g = 0; g < 3; g++) {
            pa_buf_printf(&b, "<section class=\"group\" id=\"group-%s\"><h2>%s</h2>",
                          pa_frame_kind_name(groups[g].kind), groups[g].title);
            int any = 0;
            for (size_t i = 0; i < nfiles; i++) {
                uint32_t f = order[i];
                if (h.fe[f].kind != groups[g].kind)
                    continue;
                if (!any)
                    pa_buf_puts(&b, "<ol class=\"cards\">\n");
                any = 1;
                put_card(&b, &h, f, all);
            }
            pa_buf_puts(&b,
                        any ? "</ol></section>\n" : "<p class=\"none\">no samples</p></section>\n");
        }
        page_tail(&b);
        rc = write_file(dir, "index.html", &b, err);
        pa_buf_free(&b);
        free(order);
    }
    free(sorted);
    free(edge_start);
    free(h.le);
    free(h.edges);
    free(h.fe);
    free(h.entry_of);
    free(h.instr_of);
    free(h.ie);
    pa_profile_free(h.instrset);
    pa_profile_free(h.files);
    pa_profile_free(h.lines);
    pa_profile_free(h.edgeset);
    return rc;
}
