/* index.c: the HTML index at GET / — applications, their label sets and time coverage, links
 * to reports for common ranges, and per application a timeline of sample counts on which a
 * range (or two) is selected to open its flamegraph, time heatmap, source heatmap or the diff
 * of the two (collector/assets/index.js). Every string from the database is escaped: label
 * values come from the network, and reach the script only as JSON inside the page. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "query.h"
#include "units.h"

extern const unsigned char pa_asset_coll_index_js[], pa_asset_coll_index_css[];
extern const size_t pa_asset_coll_index_js_len, pa_asset_coll_index_css_len;

static void html(pa_buf *b, const char *s) {
    pa_buf_html_str(b, s, strlen(s));
}

/* The selector for one series: APP{k="v",...}, quoted so any value round-trips. */
static void selector_of(pa_buf *b, const char *app, const char *labels) {
    pa_buf_puts(b, app);
    pa_buf_puts(b, "{");
    char *text = strdup(labels), *p = text, *k, *v;
    if (!text)
        abort();
    for (int i = 0; pa_series_split(&p, &k, &v) == 1; i++) {
        pa_buf_printf(b, "%s%s=", i ? "," : "", k);
        pa_series_put_quoted(b, v);
    }
    free(text);
    pa_buf_puts(b, "}");
}

/* <a href="PATH?query=Q&from=F&until=U[&extra]">text</a>, escaped at both levels. */
static void link(pa_buf *b, const char *path, const char *query, const char *from,
                 const char *until, const char *extra, const char *text) {
    pa_buf u = {0};
    pa_buf_puts(&u, path);
    pa_buf_puts(&u, "?query=");
    pa_coll_url_component(&u, query);
    if (from) {
        pa_buf_puts(&u, "&from=");
        pa_coll_url_component(&u, from);
    }
    if (until) {
        pa_buf_puts(&u, "&until=");
        pa_coll_url_component(&u, until);
    }
    if (extra)
        pa_buf_puts(&u, extra);
    pa_buf_puts(b, "<a href=\"");
    pa_buf_html_str(b, u.data, u.len);
    pa_buf_puts(b, "\">");
    html(b, text);
    pa_buf_puts(b, "</a>");
    pa_buf_free(&u);
}

static void when(pa_buf *b, int64_t t) {
    struct tm tm;
    time_t tt = (time_t)t;
    char s[64];
    gmtime_r(&tt, &tm);
    strftime(s, sizeof s, "%Y-%m-%d %H:%M:%SZ", &tm);
    pa_buf_puts(b, s);
}

static void head(pa_buf *b, const char *title) {
    pa_buf_puts(b, "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
                   "<meta name=\"color-scheme\" content=\"light dark\"><title>");
    html(b, title);
    pa_buf_puts(b, "</title><style>");
    pa_buf_append(b, pa_asset_coll_index_css, pa_asset_coll_index_css_len);
    pa_buf_puts(b, "</style></head><body>");
}

static void ranges(pa_buf *b, const char *path, const char *sel, const char *extra) {
    static const char *r[][2] = {{"now-15m", "15m"},
                                 {"now-1h", "1h"},
                                 {"now-6h", "6h"},
                                 {"now-24h", "24h"},
                                 {"now-7d", "7d"}};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
        pa_buf_puts(b, " ");
        link(b, path, sel, r[i][0], "now", extra, r[i][1]);
    }
}

static void series_links(pa_buf *b, const char *sel) {
    pa_buf_puts(b, "flamegraph:");
    ranges(b, "/render", sel, NULL);
    pa_buf_puts(b, "<br>diff, last hour vs the hour before: ");
    pa_buf d = {0};
    pa_buf_puts(&d, "&leftFrom=now-2h&leftUntil=now-1h&rightFrom=now-1h&rightUntil=now");
    link(b, "/diff", sel, NULL, NULL, d.data, "diff");
    pa_buf_free(&d);
    pa_buf_puts(b, "<br>heatmap:");
    ranges(b, "/heatmap", sel, NULL);
    pa_buf_puts(b, "<br>folded:");
    ranges(b, "/render", sel, "&format=folded");
}

static void json_str(pa_buf *b, const char *s) {
    pa_buf_puts(b, "\"");
    pa_buf_json_str(b, s, strlen(s));
    pa_buf_puts(b, "\"");
}

/* Samples per step over [from, until) as bars to select ranges on (collector/assets/index.js);
 * the series menu chooses the selector the links use. */
static void timeline(struct pa_coll_store *st, const struct pa_coll_series_info *v, size_t n,
                     const char *app, int64_t from, int64_t until, pa_buf *b) {
    enum { BUCKETS = 120 };
    int64_t step = (until - from + BUCKETS - 1) / BUCKETS;
    if (step < 1)
        step = 1;
    uint64_t counts[BUCKETS] = {0};
    pa_error err = {""};
    for (size_t i = 0; i < n; i++)
        pa_coll_store_timeline(st, &v[i], from, step, BUCKETS, counts, &err);
    pa_buf_printf(b, "<h2>Timeline</h2><p class=\"hint\">samples per %" PRId64 " s from ", step);
    when(b, from);
    pa_buf_puts(b, "; select a range, then open a report of it</p>"
                   "<canvas id=\"timeline\" tabindex=\"0\" aria-label=\"timeline: drag or "
                   "shift+arrows to select, shift+drag a second range to compare\"></canvas>"
                   "<div id=\"tl-info\" aria-live=\"polite\"></div><p id=\"tl-actions\">"
                   "<label>series <select id=\"tl-series\">");
    pa_buf all = {0};
    pa_buf_puts(&all, app);
    pa_buf_puts(b, "<option value=\"");
    html(b, all.data);
    pa_buf_puts(b, "\">all series</option>");
    for (size_t i = 0; i < n; i++) {
        pa_buf sel = {0};
        selector_of(&sel, app, v[i].labels);
        pa_buf_puts(b, "<option value=\"");
        pa_buf_html_str(b, sel.data, sel.len);
        pa_buf_puts(b, "\">");
        html(b, *v[i].labels ? v[i].labels : "(no labels)");
        pa_buf_puts(b, "</option>");
        pa_buf_free(&sel);
    }
    pa_buf_puts(b, "</select></label> <a id=\"tl-flame\">flamegraph</a><a id=\"tl-time\">time "
                   "heatmap</a><a id=\"tl-heat\">source heatmap</a><a id=\"tl-diff\">diff "
                   "(selection vs the first)</a><a id=\"tl-zoom\">zoom the timeline</a></p>"
                   "<script type=\"application/json\" id=\"timeline-data\">{\"app\":");
    json_str(b, app);
    pa_buf_printf(b, ",\"from\":%" PRId64 ",\"step\":%" PRId64 ",\"counts\":[", from, step);
    for (int i = 0; i < BUCKETS; i++)
        pa_buf_printf(b, i ? ",%" PRIu64 : "%" PRIu64, counts[i]);
    pa_buf_puts(b, "]}</script><script>");
    pa_buf_append(b, pa_asset_coll_index_js, pa_asset_coll_index_js_len);
    pa_buf_puts(b, "</script>");
    pa_buf_free(&all);
}

static void app_page(struct pa_coll_store *st, int64_t from, int64_t until, const char *app,
                     pa_buf *b) {
    struct pa_coll_series_list l = {0};
    pa_error err = {""};
    pa_coll_store_series(st, app, pa_coll_series_collect, &l, &err);
    head(b, app);
    pa_buf_puts(b, "<p><a href=\"/\">all applications</a></p><h1>");
    html(b, app);
    pa_buf_puts(b, "</h1>");
    if (l.n == 0) {
        pa_buf_puts(b, "<p>No profiles stored for this application.</p></body></html>");
        pa_coll_series_list_free(&l);
        return;
    }
    pa_buf all = {0};
    pa_buf_puts(&all, app);
    timeline(st, l.v, l.n, app, from, until, b);
    pa_buf_puts(b, "<p>timeline range:");
    static const char *r[][2] = {
        {"now-1h", "1h"}, {"now-6h", "6h"}, {"now-24h", "24h"}, {"now-7d", "7d"}};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
        pa_buf h = {0};
        pa_buf_puts(&h, "/?app=");
        pa_coll_url_component(&h, app);
        pa_buf_printf(&h, "&from=%s", r[i][0]);
        pa_buf_puts(b, " <a href=\"");
        pa_buf_html_str(b, h.data, h.len);
        pa_buf_printf(b, "\">%s</a>", r[i][1]);
        pa_buf_free(&h);
    }
    pa_buf_puts(b, "</p><h2>All series together</h2><p>");
    series_links(b, all.data);
    pa_buf_puts(b, "</p><h2>Series</h2><table><tr><th>labels</th><th>from</th><th>until</th>"
                   "<th class=n>uploads</th><th class=n>samples</th><th>reports</th></tr>");
    for (size_t i = 0; i < l.n; i++) {
        pa_buf sel = {0};
        selector_of(&sel, app, l.v[i].labels);
        pa_buf_puts(b, "<tr><td><code>");
        html(b, *l.v[i].labels ? l.v[i].labels : "(none)");
        pa_buf_puts(b, "</code></td><td>");
        when(b, l.v[i].first_from);
        pa_buf_puts(b, "</td><td>");
        when(b, l.v[i].last_until);
        pa_buf_printf(b, "</td><td class=n>%" PRIu64 "</td><td class=n>%" PRIu64 "</td><td>",
                      l.v[i].uploads, l.v[i].samples);
        series_links(b, sel.data);
        pa_buf_puts(b, "</td></tr>");
        pa_buf_free(&sel);
    }
    pa_buf_puts(b, "</table></body></html>");
    pa_buf_free(&all);
    pa_coll_series_list_free(&l);
}

void pa_coll_handle_index(struct pa_coll_store *st, const struct pa_coll_params *q, int64_t now,
                          struct pa_coll_response *r) {
    r->status = 200;
    r->content_type = "text/html; charset=utf-8";
    const char *app = pa_coll_param(q, "app");
    if (app && *app) {
        int64_t from, until;
        pa_error err = {""};
        if (pa_coll_time_range(q, "from", "until", "now-6h", now, &from, &until, &err))
            pa_coll_respond_text(r, 400, "%s", err.msg);
        else
            app_page(st, from, until, app, &r->body);
        return;
    }
    struct pa_coll_series_list l = {0};
    pa_error err = {""};
    pa_buf *b = &r->body;
    head(b, "pyagent-collector");
    pa_buf_puts(b, "<h1>pyagent-collector</h1>");
    if (pa_coll_store_series(st, NULL, pa_coll_series_collect, &l, &err) != 0) {
        pa_buf_puts(b, "<p>database error: ");
        html(b, err.msg);
        pa_buf_puts(b, "</p>");
    } else if (l.n == 0) {
        pa_buf_puts(b, "<p>No profiles yet. Point an agent here: "
                       "<code>PYAGENT_SERVER=http://HOST:PORT</code></p>");
    } else {
        pa_buf_puts(b, "<table><tr><th>application</th><th>label sets</th><th>from</th>"
                       "<th>until</th><th class=n>samples</th><th>flamegraph</th></tr>");
        for (size_t i = 0; i < l.n;) {
            size_t j = i;
            int64_t from = l.v[i].first_from, until = l.v[i].last_until;
            uint64_t samples = 0;
            for (; j < l.n && strcmp(l.v[j].app, l.v[i].app) == 0; j++) {
                from = l.v[j].first_from < from ? l.v[j].first_from : from;
                until = l.v[j].last_until > until ? l.v[j].last_until : until;
                samples += l.v[j].samples;
            }
            pa_buf h = {0};
            pa_buf_puts(&h, "/?app=");
            pa_coll_url_component(&h, l.v[i].app);
            pa_buf_puts(b, "<tr><td><a href=\"");
            pa_buf_html_str(b, h.data, h.len);
            pa_buf_puts(b, "\">");
            html(b, l.v[i].app);
            pa_buf_printf(b, "</a></td><td class=n>%zu</td><td>", j - i);
            when(b, from);
            pa_buf_puts(b, "</td><td>");
            when(b, until);
            pa_buf_printf(b, "</td><td class=n>%" PRIu64 "</td><td>", samples);
            ranges(b, "/render", l.v[i].app, NULL);
            pa_buf_puts(b, "</td></tr>");
            pa_buf_free(&h);
            i = j;
        }
        pa_buf_puts(b, "</table>");
    }
    pa_buf_puts(b, "<p>API: <a href=\"/api/apps\">/api/apps</a> &middot; "
                   "<code>/render?query=APP.cpu{k=v}&amp;from=now-1h&amp;until=now"
                   "&amp;format=html|svg|folded|pprof|speedscope|firefox|json|pstats|jsonl|capture"
                   "</code></p>"
                   "</body></html>");
    pa_coll_series_list_free(&l);
}
