/* render.h - the reports of pyagent-render as a library (parender), so the collector can serve
 * exactly what the command line writes. Every report goes to a pa_buf; the heatmap, being a
 * set of pages, goes to a directory. Reports escape every name they print (see profile.h). */
#ifndef PA_RENDER_H
#define PA_RENDER_H

#include "profile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --source-root OLD=NEW pairs: a file under OLD is read from NEW instead. When any is given,
 * files outside every NEW are not read at all; with none, files are read where recorded. */
typedef struct pa_source_roots {
    const char *const *from;
    const char *const *to;
    size_t n;
} pa_source_roots;
/* Reads a source file into out (source.c), or explains in why why not. */
int pa_render_read_source(const pa_source_roots *roots, const char *file, pa_buf *out,
                          pa_error *why);

/* Self-contained interactive HTML flamegraph (canvas; no network request of any kind). With
 * sources, the tooltips of its hottest Python frames quote their source lines, read at render
 * time (NULL: nothing is read). */
void pa_render_flame_html(const pa_profile *p, const char *title, const pa_source_roots *sources,
                          pa_buf *out);

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

/* ---- the registry of output formats ----
 * Everything pyagent-render and the collector's /render can write from one profile: the
 * reports drawn here (html, svg) and the data formats of the profile library
 * (pa_output_formats: folded, pprof, speedscope, firefox, json), under one lookup. */
typedef struct pa_render_args {
    const char *title;
    const pa_svg_opts *svg; /* NULL: flamegraph.pl's defaults */
    /* Where the HTML flamegraph reads the source lines it quotes; NULL: it reads none (the
     * collector's /render must not read its own disk for a query). */
    const pa_source_roots *sources;
} pa_render_args;

typedef struct pa_render_format {
    const char *name;
    const char *extension;
    const char *mime;
    const char *disposition; /* as pa_output_format's */
    /* A report drawn here, or NULL for a data format (then data is set). */
    void (*report)(const pa_profile *p, const pa_render_args *a, pa_buf *out);
    const pa_output_format *data;
} pa_render_format;

/* By name ("html", "svg", "folded", ...): 0 and *f, or -1. */
int pa_render_format_find(const char *name, pa_render_format *f);
/* By the output file's name: reports first (".html", ".svg"), then data formats; -1 if
 * nothing matches. */
int pa_render_format_for_path(const char *path, pa_render_format *f);
/* Writes p in format f. 0, or -1 with err (only pprof's compression can fail). */
int pa_render_format_write(const pa_render_format *f, const pa_profile *p, const pa_render_args *a,
                           pa_buf *out, pa_error *err);
/* The names, comma-separated, for usage and error messages: the reports (which & 1), the
 * data formats (which & 2), or both. */
void pa_render_format_names(int which, pa_buf *out);

typedef struct pa_top_opts {
    size_t limit; /* rows per table, default 20 */
    int by_line;  /* functions (default) or lines */
} pa_top_opts;
void pa_render_top(const pa_profile *p, const pa_top_opts *opts, pa_buf *out);

#ifdef __cplusplus
}
#endif
#endif
