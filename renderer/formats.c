/* formats.c - the renderer's face of the one registry of output formats: its own reports
 * (the HTML flamegraph, the SVG) followed by the profile library's data formats, so that the
 * command line and the collector's /render choose, name and serve a format the same way. */
#include "render.h"

#include <string.h>

static void report_html(const pa_profile *p, const pa_render_args *a, pa_buf *out) {
    pa_render_flame_html(p, a && a->title ? a->title : "Flamegraph", a ? a->sources : NULL, out);
}

static void report_svg(const pa_profile *p, const pa_render_args *a, pa_buf *out) {
    pa_svg_opts o = {.width = 1200, .minwidth = 0.1};
    if (a && a->svg)
        o = *a->svg;
    if (!o.title)
        o.title = a && a->title ? a->title : "Flame Graph";
    pa_render_svg(p, &o, out);
}

static const pa_render_format reports[] = {
    {"html", ".html", "text/html; charset=utf-8", NULL, report_html, NULL},
    {"svg", ".svg", "image/svg+xml", NULL, report_svg, NULL},
};
#define NREPORTS (sizeof reports / sizeof reports[0])

static pa_render_format of_data(const pa_output_format *f) {
    return (pa_render_format){f->name, f->extension, f->mime, f->disposition, NULL, f};
}

int pa_render_format_find(const char *name, pa_render_format *f) {
    for (size_t i = 0; i < NREPORTS; i++)
        if (strcmp(reports[i].name, name) == 0) {
            *f = reports[i];
            return 0;
        }
    const pa_output_format *d = pa_output_format_find(name);
    if (!d)
        return -1;
    *f = of_data(d);
    return 0;
}

int pa_render_format_for_path(const char *path, pa_render_format *f) {
    size_t n = strlen(path);
    for (size_t i = 0; i < NREPORTS; i++) {
        size_t e = strlen(reports[i].extension);
        if (n >= e && strcmp(path + n - e, reports[i].extension) == 0) {
            *f = reports[i];
            return 0;
        }
    }
    const pa_output_format *d = pa_output_format_for_path(path);
    if (!d)
        return -1;
    *f = of_data(d);
    return 0;
}

int pa_render_format_write(const pa_render_format *f, const pa_profile *p, const pa_render_args *a,
                           pa_buf *out, pa_error *err) {
    if (f->report) {
        f->report(p, a, out);
        return 0;
    }
    pa_output_opts o = {.title = a ? a->title : NULL};
    return f->data->encode(p, &o, out, err);
}

void pa_render_format_names(int which, pa_buf *out) {
    int first = 1;
    for (size_t i = 0; (which & 1) && i < NREPORTS; i++, first = 0)
        pa_buf_printf(out, "%s%s", first ? "" : ", ", reports[i].name);
    for (size_t i = 0; (which & 2) && pa_output_formats[i]; i++, first = 0)
        pa_buf_printf(out, "%s%s", first ? "" : ", ", pa_output_formats[i]->name);
}
