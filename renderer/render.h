/* render.h - the reports of pyagent-render as a library (parender), so the collector can serve
 * exactly what the command line writes. Every report goes to a pa_buf; the heatmap, being a
 * set of pages, goes to a directory. Reports escape every name they print (see profile.h). */
#ifndef PA_RENDER_H
#define PA_RENDER_H

#include "profile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Self-contained interactive HTML flamegraph (canvas; no network request of any kind). */
void pa_render_flame_html(const pa_profile *p, const char *title, pa_buf *out);

/* Differential flamegraph: widths from cur, colours from the change normalised by totals. */
void pa_render_diff_html(const pa_profile *base, const pa_profile *cur, const char *title,
                         pa_buf *out);
/* "stack before after" lines, for scripts and for flamegraph.pl's difffolded users. */
void pa_render_diff_folded(const pa_profile *base, const pa_profile *cur, pa_buf *out);

/* flamegraph.pl's knobs for the SVG flamegraph. */
typedef struct pa_svg_opts {
    const char *title;  /* default "Flame Graph" */
    int width;          /* px, default 1200 */
    double minwidth;    /* px; narrower frames are omitted, default 0.1 */
    const char *colors; /* python (default), hot, mem, io, blue, aqua, green */
    int inverted;       /* icicle: root at the top */
    int reverse;        /* merge stacks by their leaf first */
} pa_svg_opts;
void pa_render_svg(const pa_profile *p, const pa_svg_opts *opts, pa_buf *out);

typedef struct pa_heatmap_opts {
    const char *title;
    /* --source-root OLD=NEW pairs: a file under OLD is read from NEW instead. When any is
     * given, files outside every NEW are not read at all. */
    const char *const *root_from;
    const char *const *root_to;
    size_t nroots;
} pa_heatmap_opts;
/* Writes index.html and one page per source file into dir (created if needed). */
int pa_render_heatmap(const pa_profile *p, const pa_heatmap_opts *opts, const char *dir,
                      pa_error *err);

typedef struct pa_top_opts {
    size_t limit; /* rows per table, default 20 */
    int by_line;  /* functions (default) or lines */
} pa_top_opts;
void pa_render_top(const pa_profile *p, const pa_top_opts *opts, pa_buf *out);

#ifdef __cplusplus
}
#endif
#endif
