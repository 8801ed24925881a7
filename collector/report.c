/* report.c: adapters from the collector's responses to the renderer's report writers. */
#include "report.h"

void pa_coll_report_flamegraph(const pa_profile *p, const char *title, bool svg,
                               struct pa_coll_response *r) {
    (void)p;
    (void)title;
    (void)svg;
    pa_coll_respond_text(r, 501, "html reports need the renderer library");
}

void pa_coll_report_diff(const pa_profile *baseline, const pa_profile *current, const char *title,
                         struct pa_coll_response *r) {
    (void)baseline;
    (void)current;
    (void)title;
    pa_coll_respond_text(r, 501, "html reports need the renderer library");
}

void pa_coll_report_heatmap(const pa_profile *p, const char *title, const char *file,
                            struct pa_coll_response *r) {
    (void)p;
    (void)title;
    (void)file;
    pa_coll_respond_text(r, 501, "html reports need the renderer library");
}
