/* flame.c - the HTML flamegraph and the differential flamegraph.
 *
 * Both are the same page (assets/flame.html + flame.js + flame.css) around a JSON payload;
 * the page tells a diff by the presence of a baseline. The page is assembled by filling
 * {{NAME}} slots of the template, and every slot is escaped for where it lands. */
#include "render.h"

#include "assets.h"

#include <stdlib.h>
#include <string.h>

/* Writes the template, replacing {{TITLE}}, {{CSS}}, {{JS}} and {{DATA}}. */
static void fill(pa_buf *out, const char *title, const pa_buf *json) {
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
        t = close + 2;
    }
}

void pa_render_flame_html(const pa_profile *p, const char *title, pa_buf *out) {
    pa_buf json = {0};
    pa_profile_encode_report_json(p, NULL, title, &json);
    fill(out, title, &json);
    pa_buf_free(&json);
}

void pa_render_diff_html(const pa_profile *base, const pa_profile *cur, const char *title,
                         pa_buf *out) {
    pa_buf json = {0};
    pa_profile_encode_report_json(cur, base, title, &json);
    fill(out, title, &json);
    pa_buf_free(&json);
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
