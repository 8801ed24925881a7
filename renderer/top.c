/* top.c - the top functions (or lines) by self and by total samples, as a terminal table.
 *
 * Total counts a sample once per function however often the function appears in its stack,
 * so recursion does not push a function past 100%. Thread roots are left out: they would
 * top the total table at 100% and say nothing. */
#include "render.h"

#include <stdlib.h>
#include <string.h>

struct row {
    uint32_t key;
    uint64_t self, total;
};

static int by_self(const void *a, const void *b) {
    const struct row *x = a, *y = b;
    if (x->self != y->self)
        return x->self < y->self ? 1 : -1;
    return x->total < y->total ? 1 : x->total > y->total ? -1 : 0;
}

static int by_total(const void *a, const void *b) {
    const struct row *x = a, *y = b;
    if (x->total != y->total)
        return x->total < y->total ? 1 : -1;
    return x->self < y->self ? 1 : x->self > y->self ? -1 : 0;
}

static void table(pa_buf *out, const char *what, struct row *rows, size_t n, size_t limit,
                  uint64_t all, const pa_profile *keys) {
    pa_buf_printf(out, "\n%s\n  %7s %10s  %7s %10s  %s\n", what, "self%", "self", "total%", "total",
                  "function");
    for (size_t i = 0; i < n && i < limit; i++) {
        size_t len;
        const char *name = pa_profile_frame(keys, rows[i].key, &len);
        pa_buf_printf(out, "  %6.2f%% %10llu  %6.2f%% %10llu  ",
                      100.0 * (double)rows[i].self / (double)all, (unsigned long long)rows[i].self,
                      100.0 * (double)rows[i].total / (double)all,
                      (unsigned long long)rows[i].total);
        /* Terminal output: control characters would move the cursor, show them instead. */
        for (size_t k = 0; k < len; k++) {
            unsigned char ch = (unsigned char)name[k];
            if (ch < 0x20 || ch == 0x7F)
                pa_buf_printf(out, "\\x%02x", ch);
            else
                pa_buf_append(out, &name[k], 1);
        }
        pa_buf_append(out, "\n", 1);
    }
}

void pa_render_top(const pa_profile *p, const pa_top_opts *opts, pa_buf *out) {
    size_t limit = opts && opts->limit ? opts->limit : 20;
    int by_line = opts && opts->by_line;
    size_t nframes = pa_profile_frame_count(p);
    pa_profile *keys = pa_profile_new();
    int64_t *key_of = malloc((nframes + 1) * sizeof *key_of);
    if (!key_of)
        abort();
    pa_buf tmp = {0};
    for (uint32_t id = 0; id < nframes; id++) {
        size_t len;
        const char *s = pa_profile_frame(p, id, &len);
        pa_frame_info fi;
        pa_frame_parse(s, len, &fi);
        if (fi.kind == PA_FRAME_THREAD) {
            key_of[id] = -1;
        } else if (!by_line && fi.file && fi.kind != PA_FRAME_NATIVE) {
            tmp.len = 0;
            pa_buf_append(&tmp, s, (size_t)(fi.file - s) + fi.file_len);
            pa_buf_puts(&tmp, ")");
            key_of[id] = pa_profile_intern(keys, tmp.data, tmp.len);
        } else {
            key_of[id] = pa_profile_intern(keys, s, len);
        }
    }
    pa_buf_free(&tmp);
    size_t nkeys = pa_profile_frame_count(keys);
    struct row *rows = calloc(nkeys + 1, sizeof *rows);
    size_t *stamp = calloc(nkeys + 1, sizeof *stamp);
    if (!rows || !stamp)
        abort();
    for (size_t k = 0; k < nkeys; k++)
        rows[k].key = (uint32_t)k;
    size_t nstacks = pa_profile_stack_count(p);
    for (size_t s = 0; s < nstacks; s++) {
        size_t n;
        uint64_t count;
        const uint32_t *ids = pa_profile_stack(p, s, &n, &count);
        for (size_t k = 0; k < n; k++) {
            int64_t key = key_of[ids[k]];
            if (key < 0 || stamp[key] == s + 1)
                continue;
            stamp[key] = s + 1;
            rows[key].total += count;
        }
        if (n && key_of[ids[n - 1]] >= 0)
            rows[key_of[ids[n - 1]]].self += count;
    }
    uint64_t all = pa_profile_total(p);
    pa_buf_printf(out, "%llu samples, %zu unique stacks, %zu %s\n", (unsigned long long)all,
                  nstacks, nkeys, by_line ? "lines" : "functions");
    if (all == 0)
        all = 1;
    qsort(rows, nkeys, sizeof *rows, by_self);
    table(out, "Top by self samples (where the time is spent)", rows, nkeys, limit, all, keys);
    qsort(rows, nkeys, sizeof *rows, by_total);
    table(out, "Top by total samples (time spent in and under)", rows, nkeys, limit, all, keys);
    free(rows);
    free(stamp);
    free(key_of);
    pa_profile_free(keys);
}
