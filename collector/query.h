/* query.h: the read side of the collector — the application list, merged profiles of a time
 * range and label filter (/render), diffs (/diff), line heatmaps (/heatmap) and the HTML
 * index (/). Each handler reads its parameters and fills a response; the HTTP layer only
 * sends it. */
#ifndef PA_COLL_QUERY_H
#define PA_COLL_QUERY_H

#include <stdint.h>

#include "http.h"
#include "store.h"

/* The merged profile of the series selected by query ("APP.cpu{k=v,...}") over
 * [from, until). 0, or an HTTP status with err. *uploads gets the number of uploads merged. */
int pa_coll_query_profile(struct pa_coll_store *st, const char *query, int64_t from, int64_t until,
                          pa_profile **out, uint64_t *uploads, pa_error *err);

/* The range [from, until) given by parameters fromkey and untilkey (defaults: default_from and
 * now). 0, or 400 with err naming the parameter. */
int pa_coll_time_range(const struct pa_coll_params *q, const char *fromkey, const char *untilkey,
                       const char *default_from, int64_t now, int64_t *from, int64_t *until,
                       pa_error *err);

void pa_coll_handle_apps(struct pa_coll_store *st, const struct pa_coll_params *q, int64_t now,
                         struct pa_coll_response *r);
void pa_coll_handle_render(struct pa_coll_store *st, const struct pa_coll_params *q, int64_t now,
                           struct pa_coll_response *r);
void pa_coll_handle_diff(struct pa_coll_store *st, const struct pa_coll_params *q, int64_t now,
                         struct pa_coll_response *r);
/* GET /heatmap?query&from&until redirects to /heatmap/FROM/UNTIL/QUERY/index.html, a path
 * whose pages can link to each other relatively; path is what follows "/heatmap/". */
void pa_coll_handle_heatmap(struct pa_coll_store *st, const struct pa_coll_params *q,
                            const char *path, int64_t now, struct pa_coll_response *r);
void pa_coll_handle_index(struct pa_coll_store *st, const struct pa_coll_params *q, int64_t now,
                          struct pa_coll_response *r);

/* Series gathered from pa_coll_store_series (pass pa_coll_series_collect and the list), kept
 * when they match sel (NULL: all). Strings are copies; pa_coll_series_list_free releases them. */
struct pa_coll_series_list {
    struct pa_coll_series_info *v;
    size_t n, cap;
    const struct pa_coll_selector *sel;
};
/* Appends s percent-encoded: everything but RFC 3986's unreserved characters. */
void pa_coll_url_component(pa_buf *b, const char *s);

int pa_coll_series_collect(void *ctx, const struct pa_coll_series_info *s);
void pa_coll_series_list_free(struct pa_coll_series_list *l);

#endif
