/* report.h: the HTML reports of the collector, drawn by the renderer's library so that a
 * report from the server and one from `pyagent-render` are the same page. */
#ifndef PA_COLL_REPORT_H
#define PA_COLL_REPORT_H

#include <stdbool.h>

#include "http.h"
#include "profile.h"

/* Widths from current, colours from the change against baseline. */
void pa_coll_report_diff(const pa_profile *baseline, const pa_profile *current, const char *title,
                         struct pa_coll_response *r);
/* The source-line heatmap: page (default index.html) of the renderer's set of pages. */
void pa_coll_report_heatmap(const pa_profile *p, const char *title, const char *page,
                            struct pa_coll_response *r);
/* Where heatmaps read source files: a path under `from` is read from under `to`. With `to`
 * NULL (the default) no source file is ever read. The strings must outlive the server. */
void pa_coll_report_set_source_root(const char *from, const char *to);

#endif
