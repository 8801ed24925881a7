/* svg.c - the SVG flamegraph, with flamegraph.pl's knobs, for docs and CI artifacts.
 *
 * SVG is one element per frame, so unlike the canvas page it must prune: frames narrower than
 * --minwidth pixels are left out (and their share is printed under the graph). A small script
 * (assets/svg.js) adds hover details, click-to-zoom and reset, as flamegraph.pl's does. */
#include "render.h"

#include "assets.h"

#include <stdlib.h>
#include <string.h>

struct node {
    uint32_t frame;
    uint32_t parent;
    uint32_t first_child, next_sibling; /* UINT32_MAX = none */
    uint64_t total, self;
};

struct tree {
    struct node *n;
    size_t len, cap;
    uint32_t *slots;
    size_t slots_cap;
};

static uint32_t edge_hash(uint32_t parent, uint32_t frame) {
    uint64_t k = ((uint64_t)parent << 32 | frame) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(k >> 32);
}

static void rehash(struct tree *t) {
    size_t cap = t->slots_cap ? t->slots_cap * 2 : 1024;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        abort();
    for (size_t i = 1; i < t->len; i++) {
        size_t h = edge_hash(t->n[i].parent, t->n[i].frame) & (cap - 1);
        while (slots[h])
            h = (h + 1) & (cap - 1);
        slots[h] = (uint32_t)i;
    }
    free(t->slots);
    t->slots = slots;
    t->slots_cap = cap;
}

static uint32_t child(struct tree *t, uint32_t parent, uint32_t frame) {
    if ((t->len + 1) * 2 > t->slots_cap)
        rehash(t);
    size_t mask = t->slots_cap - 1;
    size_t h = edge_hash(parent, frame) & mask;
    while (t->slots[h]) {
        uint32_t i = t->slots[h];
        if (t->n[i].parent == parent && t->n[i].frame == frame)
            return i;
        h = (h + 1) & mask;
    }
    if (t->len == t->cap) {
        t->cap *= 2;
        t->n = realloc(t->n, t->cap * sizeof *t->n);
        if (!t->n)
            abort();
    }
    uint32_t i = (uint32_t)t->len++;
    t->n[i] = (struct node){frame, parent, UINT32_MAX, UINT32_MAX, 0, 0};
    t->slots[h] = i;
    return i;
}

static const pa_profile *cmp_profile;
static const struct tree *cmp_tree;
static int cmp_name(const void *a, const void *b) {
    const char *x = pa_profile_frame(cmp_profile, cmp_tree->n[*(const uint32_t *)a].frame, NULL);
    const char *y = pa_profile_frame(cmp_profile, cmp_tree->n[*(const uint32_t *)b].frame, NULL);
    return strcmp(x, y);
}

static uint32_t name_hash(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static void colour(pa_buf *b, const char *scheme, const char *name, size_t len) {
    double v = (double)(name_hash(name) % 1000) / 1000.0;
    double w = (double)((name_hash(name) / 1000) % 1000) / 1000.0;
    int r, g, bl;
    if (!strcmp(scheme, "hot")) {
        r = 205 + (int)(50 * w), g = (int)(230 * v), bl = (int)(55 * v);
    } else if (!strcmp(scheme, "mem") || !strcmp(scheme, "green")) {
        r = 0, g = 190 + (int)(50 * w), bl = (int)(210 * v);
    } else if (!strcmp(scheme, "io") || !strcmp(scheme, "blue")) {
        r = 80 + (int)(60 * v), g = 80 + (int)(60 * v), bl = 190 + (int)(55 * w);
    } else if (!strcmp(scheme, "aqua")) {
        r = 50 + (int)(60 * v), g = 165 + (int)(55 * v), bl = 165 + (int)(55 * v);
    } else {
        pa_frame_info fi;
        pa_frame_parse(name, len, &fi);
        switch (fi.kind) {
        case PA_FRAME_OWN:
            r = 235, g = 110 + (int)(70 * v), bl = 40 + (int)(30 * w);
            break;
        case PA_FRAME_STDLIB:
            r = 225, g = 205 + (int)(30 * v), bl = 60 + (int)(40 * w);
            break;
        case PA_FRAME_SITE:
            r = 90 + (int)(40 * v), g = 160 + (int)(40 * w), bl = 225;
            break;
        case PA_FRAME_NATIVE:
            r = 170 + (int)(30 * v), g = 150 + (int)(20 * v), bl = 130;
            break;
        case PA_FRAME_SYNTHETIC:
            r = 185, g = 160 + (int)(25 * v), bl = 215;
            break;
        case PA_FRAME_THREAD:
            r = g = bl = 180;
            break;
        default:
            r = 205 + (int)(50 * w), g = (int)(230 * v), bl = (int)(55 * v);
            break;
        }
    }
    pa_buf_printf(b, "rgb(%d,%d,%d)", r, g, bl);
}

void pa_render_svg(const pa_profile *p, const pa_svg_opts *opts, pa_buf *out) {
    const char *title = opts && opts->title ? opts->title : "Flame Graph";
    int width = opts && opts->width > 0 ? opts->width : 1200;
    double minwidth = opts ? opts->minwidth : 0.1;
    const char *scheme = opts && opts->colors ? opts->colors : "python";
    int inverted = opts && opts->inverted, reverse = opts && opts->reverse;

    struct tree t = {0};
    t.cap = 1024;
    t.n = malloc(t.cap * sizeof *t.n);
    if (!t.n)
        abort();
    t.n[0] = (struct node){UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, 0, 0};
    t.len = 1;
    size_t nstacks = pa_profile_stack_count(p);
    for (size_t s = 0; s < nstacks; s++) {
        size_t n;
        uint64_t count;
        const uint32_t *ids = pa_profile_stack(p, s, &n, &count);
        uint32_t v = 0;
        t.n[0].total += count;
        for (size_t k = 0; k < n; k++) {
            v = child(&t, v, ids[reverse ? n - 1 - k : k]);
            t.n[v].total += count;
        }
        t.n[v].self += count;
    }
    /* Children lists sorted by name, as flamegraph.pl does. */
    uint32_t *order = malloc((t.len + 1) * sizeof *order);
    if (!order)
        abort();
    for (size_t i = 1; i < t.len; i++)
        order[i - 1] = (uint32_t)i;
    cmp_profile = p;
    cmp_tree = &t;
    qsort(order, t.len - 1, sizeof *order, cmp_name);
    for (size_t i = t.len - 1; i-- > 0;) {
        struct node *nd = &t.n[order[i]];
        nd->next_sibling = t.n[nd->parent].first_child;
        t.n[nd->parent].first_child = order[i];
    }
    free(order);

    /* Layout: depth of the deepest frame wide enough to draw. */
    const int row = 16, pad_top = 56, pad_bottom = 40, xpad = 10;
    double all = (double)(t.n[0].total ? t.n[0].total : 1);
    double scale = (width - 2 * xpad) / all;
    uint32_t *stack = malloc((t.len + 1) * sizeof *stack);
    uint32_t *depth = calloc(t.len + 1, sizeof *depth);
    double *x = calloc(t.len + 1, sizeof *x);
    if (!stack || !depth || !x)
        abort();
    size_t sp = 0;
    uint32_t maxdepth = 0;
    uint64_t pruned = 0;
    stack[sp++] = 0;
    while (sp) {
        uint32_t v = stack[--sp];
        if (depth[v] > maxdepth)
            maxdepth = depth[v];
        double cx = x[v];
        for (uint32_t c = t.n[v].first_child; c != UINT32_MAX; c = t.n[c].next_sibling) {
            x[c] = cx;
            depth[c] = depth[v] + 1;
            cx += (double)t.n[c].total * scale;
            if ((double)t.n[c].total * scale < minwidth) {
                pruned += t.n[c].total;
                depth[c] = UINT32_MAX; /* not drawn */
                continue;
            }
            stack[sp++] = c;
        }
    }
    int height = (int)(maxdepth + 1) * row + pad_top + pad_bottom;
    pa_buf_printf(out,
                  "<?xml version=\"1.0\" standalone=\"no\"?>\n"
                  "<svg version=\"1.1\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                  "xmlns=\"http://www.w3.org/2000/svg\" data-row=\"%d\" data-xpad=\"%d\" "
                  "data-inverted=\"%d\">\n",
                  width, height, width, height, row, xpad, inverted);
    pa_buf_puts(out, "<style>text{font:12px Verdana,sans-serif;fill:#000}"
                     "g.f:hover rect{stroke:#000;stroke-width:0.5}g.f{cursor:pointer}"
                     "#details,#info{font-size:12px}#title{font-size:17px}"
                     "#reset{cursor:pointer;fill:#2060c0}</style>\n");
    pa_buf_printf(out,
                  "<rect width=\"100%%\" height=\"100%%\" fill=\"#f8f8f4\"/>\n"
                  "<text id=\"title\" x=\"%d\" y=\"24\" text-anchor=\"middle\">",
                  width / 2);
    pa_buf_html_str(out, title, strlen(title));
    pa_buf_printf(out,
                  "</text>\n<text id=\"reset\" x=\"%d\" y=\"24\" visibility=\"hidden\">Reset "
                  "Zoom</text>\n<text id=\"details\" x=\"%d\" y=\"%d\"> </text>\n",
                  xpad, xpad, height - 22);
    pa_buf_printf(out, "<text id=\"info\" x=\"%d\" y=\"%d\">%llu samples", xpad, height - 6,
                  (unsigned long long)t.n[0].total);
    if (pruned)
        pa_buf_printf(out, "; frames narrower than %.2f px omitted: %.2f%% of samples", minwidth,
                      100.0 * (double)pruned / all);
    pa_buf_puts(out, "</text>\n<g id=\"frames\">\n");

    pa_buf label = {0};
    sp = 0;
    stack[sp++] = 0;
    while (sp) {
        uint32_t v = stack[--sp];
        const struct node *nd = &t.n[v];
        double w = (double)nd->total * scale;
        int d = (int)depth[v];
        double y = inverted ? pad_top + d * row : height - pad_bottom - (d + 1) * row;
        const char *name = "all";
        size_t len = 3;
        if (v)
            name = pa_profile_frame(p, nd->frame, &len);
        pa_buf_puts(out, "<g class=\"f\"><title>");
        pa_buf_html_str(out, name, len);
        pa_buf_printf(out,
                      " (%llu samples, %.2f%%)</title><rect x=\"%.2f\" y=\"%.0f\" "
                      "width=\"%.2f\" height=\"%d\" rx=\"2\" fill=\"",
                      (unsigned long long)nd->total, 100.0 * (double)nd->total / all, xpad + x[v],
                      y, w, row - 1);
        if (v)
            colour(out, scheme, name, len);
        else
            pa_buf_puts(out, "rgb(200,200,205)");
        pa_buf_printf(out, "\"/><text x=\"%.2f\" y=\"%.0f\">", xpad + x[v] + 3, y + row - 4);
        /* Text that fits: about 7 px per character at 12 px. */
        size_t fit = w > 21 ? (size_t)((w - 6) / 7) : 0;
        if (fit >= 3) {
            label.len = 0;
            if (len <= fit) {
                pa_buf_append(&label, name, len);
            } else {
                size_t cut = fit - 2;
                while (cut > 0 && ((unsigned char)name[cut] & 0xC0) == 0x80)
                    cut--; /* keep UTF-8 sequences whole */
                pa_buf_append(&label, name, cut);
                pa_buf_puts(&label, "..");
            }
            pa_buf_html_str(out, label.data, label.len);
        }
        pa_buf_puts(out, "</text></g>\n");
        /* Push children in reverse so they come out left to right. */
        size_t mark = sp;
        for (uint32_t c = nd->first_child; c != UINT32_MAX; c = t.n[c].next_sibling)
            if (depth[c] != UINT32_MAX)
                stack[sp++] = c;
        for (size_t i = mark, j = sp - 1; sp > mark && i < j; i++, j--) {
            uint32_t tmp = stack[i];
            stack[i] = stack[j];
            stack[j] = tmp;
        }
    }
    pa_buf_free(&label);
    pa_buf_puts(out, "</g>\n<script type=\"text/ecmascript\"><![CDATA[\n");
    pa_buf_append(out, pa_asset_svg_js, pa_asset_svg_js_len);
    pa_buf_puts(out, "]]></script>\n</svg>\n");
    free(stack);
    free(depth);
    free(x);
    free(t.n);
    free(t.slots);
}
