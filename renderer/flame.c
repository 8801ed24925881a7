/* flame.c - the HTML flamegraph and the differential flamegraph.
 *
 * Both are the same page (assets/flame.html + flame.js + flame.css) around a JSON payload;
 * the page tells a diff by the presence of a baseline. The page is assembled by filling
 * {{NAME}} slots of the template, and every slot is escaped for where it lands. */
#include "render.h"

#include "assets.h"

#include <stdlib.h>
#include <string.h>

/* ---- the source lines tooltips quote ----
 * Only the hottest Python locations (file, line), by samples on the stack, are quoted, each
 * with two lines either side, each line cut at a bound: the page stays small however large
 * the profile. The JSON maps a file, as the report's data names it, to its lines:
 * {"FILE": {"LINE": [FIRST, "text", ...]}}, FIRST being the number of the first text. */
enum { SOURCE_LOCATIONS = 200, SOURCE_CONTEXT = 2, SOURCE_LINE_MAX = 160 };

struct quoted {
    const char *file;
    size_t file_len;
    uint32_t line;
    uint64_t total;
};

static int by_total(const void *a, const void *b) {
    const struct quoted *x = a, *y = b;
    return x->total != y->total ? (x->total < y->total ? 1 : -1) : 0;
}

static int by_place(const void *a, const void *b) {
    const struct quoted *x = a, *y = b;
    size_t n = x->file_len < y->file_len ? x->file_len : y->file_len;
    int c = memcmp(x->file, y->file, n);
    if (c || x->file_len != y->file_len)
        return c ? c : (x->file_len < y->file_len ? -1 : 1);
    return x->line != y->line ? (x->line < y->line ? -1 : 1) : 0;
}

/* The hottest locations, at most SOURCE_LOCATIONS, sorted by file then line; *n of them. */
static struct quoted *hot_locations(const pa_profile *p, size_t *n) {
    size_t nf = pa_profile_frame_count(p);
    uint64_t *total = calloc(nf + 1, sizeof *total);
    size_t *seen = calloc(nf + 1, sizeof *seen);
    if (!total || !seen)
        abort();
    for (size_t i = 0; i < pa_profile_stack_count(p); i++) {
        size_t len;
        uint64_t count;
        const uint32_t *ids = pa_profile_stack(p, i, &len, &count);
        for (size_t j = 0; j < len; j++)
            if (seen[ids[j]] != i + 1)
                seen[ids[j]] = i + 1, total[ids[j]] += count;
    }
    /* Frames that differ only in their instruction share a location: one entry each. */
    pa_profile *places = pa_profile_new();
    struct quoted *q = malloc((nf + 1) * sizeof *q);
    if (!q)
        abort();
    size_t nq = 0;
    for (uint32_t f = 0; f < nf; f++) {
        size_t len;
        const char *s = pa_profile_frame(p, f, &len);
        pa_frame_info fi;
        pa_frame_parse(s, len, &fi);
        if (fi.kind != PA_FRAME_OWN && fi.kind != PA_FRAME_STDLIB && fi.kind != PA_FRAME_SITE)
            continue;
        if (!fi.file || !fi.line || !total[f])
            continue;
        pa_buf key = {0};
        pa_buf_printf(&key, "%u:", fi.line);
        pa_buf_append(&key, fi.file, fi.file_len);
        uint32_t id = pa_profile_intern(places, key.data, key.len);
        pa_buf_free(&key);
        if (id == nq)
            q[nq++] = (struct quoted){fi.file, fi.file_len, fi.line, 0};
        q[id].total += total[f];
    }
    pa_profile_free(places);
    free(total);
    free(seen);
    qsort(q, nq, sizeof *q, by_total);
    if (nq > SOURCE_LOCATIONS)
        nq = SOURCE_LOCATIONS;
    qsort(q, nq, sizeof *q, by_place);
    *n = nq;
    return q;
}

/* Appends lines [first, last] of text (1-based) as JSON strings, each cut at SOURCE_LINE_MAX
 * bytes on a character boundary. */
static void put_lines(pa_buf *out, const char *text, size_t len, uint32_t first, uint32_t last) {
    const char *p = text, *end = text + len;
    for (uint32_t ln = 1; ln <= last && p < end; ln++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (ln >= first) {
            size_t k = n && p[n - 1] == '\r' ? n - 1 : n;
            if (k > SOURCE_LINE_MAX) {
                k = SOURCE_LINE_MAX;
                while (k && ((unsigned char)p[k] & 0xc0) == 0x80)
                    k--;
            }
            pa_buf_puts(out, ",\"");
            pa_buf_json_str(out, p, k);
            pa_buf_puts(out, "\"");
        }
        p = nl ? nl + 1 : end;
    }
}

static void put_sources(pa_buf *out, const pa_profile *p, const pa_source_roots *roots) {
    pa_buf_puts(out, "{");
    size_t nq = 0;
    struct quoted *q = roots ? hot_locations(p, &nq) : NULL;
    int any_file = 0;
    for (size_t i = 0; i < nq;) {
        size_t j = i;
        while (j < nq && q[j].file_len == q[i].file_len &&
               !memcmp(q[j].file, q[i].file, q[i].file_len))
            j++;
        char *file = strndup(q[i].file, q[i].file_len);
        if (!file)
            abort();
        pa_buf text = {0};
        pa_error why;
        if (pa_render_read_source(roots, file, &text, &why) == 0) {
            pa_buf_puts(out, any_file ? ",\"" : "\"");
            any_file = 1;
            pa_buf_json_str(out, q[i].file, q[i].file_len);
            pa_buf_puts(out, "\":{");
            for (size_t k = i; k < j; k++) {
                uint32_t first = q[k].line > SOURCE_CONTEXT ? q[k].line - SOURCE_CONTEXT : 1;
                pa_buf_printf(out, "%s\"%u\":[%u", k > i ? "," : "", q[k].line, first);
                put_lines(out, text.data, text.len, first, q[k].line + SOURCE_CONTEXT);
                pa_buf_puts(out, "]");
            }
            pa_buf_puts(out, "}");
        }
        pa_buf_free(&text);
        free(file);
        i = j;
    }
    free(q);
    pa_buf_puts(out, "}");
}

/* Writes the template, replacing {{TITLE}}, {{CSS}}, {{JS}}, {{DATA}} and {{SOURCES}}. */
static void fill(pa_buf *out, const char *title, const pa_buf *json, const pa_buf *sources) {
    const char *t = (const char *)pa_asset_flame_html;
    const char *end = t + pa_asset_flame_html_len;
    while (t < end) {
        const char *open = strstr(t, "{{");
        if (!open) {
            pa_buf_append(out, t, (size_t)(end - t));
            break;
        }
        pa_buf_append(out, t, (size_t)(open - t));
        const char *close = strstr(open, "}}");
        if (!close)
            close = end - 2;
        size_t n = (size_t)(close - open - 2);
        const char *slot = open + 2;
        if (n == 5 && memcmp(slot, "TITLE", 5) == 0)
            pa_buf_html_str(out, title, strlen(title));
        else if (n == 3 && memcmp(slot, "CSS", 3) == 0)
            pa_buf_append(out, pa_asset_flame_css, pa_asset_flame_css_len);
        else if (n == 2 && memcmp(slot, "JS", 2) == 0)
            pa_buf_append(out, pa_asset_flame_js, pa_asset_flame_js_len);
        else if (n == 4 && memcmp(slot, "DATA", 4) == 0)
            pa_buf_append(out, json->data, json->len);
        else if (n == 7 && memcmp(slot, "SOURCES", 7) == 0)
            pa_buf_append(out, sources->data, sources->len);
        t = close + 2;
    }
}

void pa_render_flame_html(const pa_profile *p, const char *title, const pa_source_roots *sources,
                          pa_buf *out) {
    pa_buf json = {0}, src = {0};
    pa_profile_encode_report_json(p, NULL, title, &json);
    put_sources(&src, p, sources);
    fill(out, title, &json, &src);
    pa_buf_free(&json);
    pa_buf_free(&src);
}

void pa_render_diff_html(const pa_profile *base, const pa_profile *cur, const char *title,
                         pa_buf *out) {
    pa_buf json = {0};
    pa_buf none = {0};
    pa_profile_encode_report_json(cur, base, title, &json);
    put_sources(&none, cur, NULL);
    fill(out, title, &json, &none);
    pa_buf_free(&json);
    pa_buf_free(&none);
}

static void put_stack(pa_buf *out, const pa_profile *p, const uint32_t *ids, size_t n) {
    for (size_t k = 0; k < n; k++) {
        size_t len;
        const char *f = pa_profile_frame(p, ids[k], &len);
        if (k)
            pa_buf_append(out, ";", 1);
        pa_buf_append(out, f, len);
    }
}

/* The count of u's stack (ids in u's frame space) in p, through map (u id -> p id or -1). */
static uint64_t count_in(const pa_profile *p, const int64_t *map, const uint32_t *ids, size_t n,
                         uint32_t *scratch) {
    for (size_t k = 0; k < n; k++) {
        if (map[ids[k]] < 0)
            return 0;
        scratch[k] = (uint32_t)map[ids[k]];
    }
    size_t index;
    uint64_t count = 0;
    if (pa_profile_find_stack(p, scratch, n, &index) == 0)
        pa_profile_stack(p, index, NULL, &count);
    return count;
}

static int64_t *frame_map(const pa_profile *u, const pa_profile *p) {
    size_t nf = pa_profile_frame_count(u);
    int64_t *map = calloc(nf + 1, sizeof *map);
    if (!map)
        abort();
    for (uint32_t id = 0; id < nf; id++) {
        size_t len;
        const char *s = pa_profile_frame(u, id, &len);
        uint32_t pid;
        map[id] = pa_profile_find_frame(p, s, len, &pid) == 0 ? (int64_t)pid : -1;
    }
    return map;
}

void pa_render_diff_folded(const pa_profile *base, const pa_profile *cur, pa_buf *out) {
    pa_profile *u = pa_profile_new(); /* the union of both profiles' stacks */
    pa_profile_merge(u, cur);
    pa_profile_merge(u, base);
    int64_t *to_base = frame_map(u, base), *to_cur = frame_map(u, cur);
    size_t nstacks = pa_profile_stack_count(u);
    uint32_t *scratch = NULL;
    size_t cap = 0;
    for (size_t s = 0; s < nstacks; s++) {
        size_t n;
        const uint32_t *ids = pa_profile_stack(u, s, &n, NULL);
        if (n > cap) {
            cap = n * 2;
            scratch = realloc(scratch, cap * sizeof *scratch);
            if (!scratch)
                abort();
        }
        uint64_t before = count_in(base, to_base, ids, n, scratch);
        uint64_t after = count_in(cur, to_cur, ids, n, scratch);
        put_stack(out, u, ids, n);
        pa_buf_printf(out, " %llu %llu\n", (unsigned long long)before, (unsigned long long)after);
    }
    free(scratch);
    free(to_base);
    free(to_cur);
    pa_profile_free(u);
}
