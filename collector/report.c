/* report.c: adapters from the collector's responses to the renderer's report writers
 * (render.h). The heatmap is a set of pages written to a directory; the collector renders it
 * into a private temporary directory per request and serves the one page asked for.
 *
 * Source files: a heatmap shows source lines, and frame file names come from uploads. The
 * collector must never read its own file system at a path an uploader chose, so it passes the
 * renderer a source-root mapping that sends every path into a directory (--source-root, or an
 * empty one): files outside it are "source not available". */
#include "report.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef PA_COLL_HAVE_RENDERER
#include "render.h"
#endif

static const char *source_root_from = "/", *source_root_to = NULL;

void pa_coll_report_set_source_root(const char *from, const char *to) {
    source_root_from = from;
    source_root_to = to;
}

#ifdef PA_COLL_HAVE_RENDERER

void pa_coll_report_diff(const pa_profile *baseline, const pa_profile *current, const char *title,
                         struct pa_coll_response *r) {
    r->status = 200;
    r->content_type = "text/html; charset=utf-8";
    pa_render_diff_html(baseline, current, title, &r->body);
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
            remove_tree(path);
        else
            unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static bool safe_page_name(const char *s) {
    if (s == NULL || *s == '\0' || *s == '.' || strlen(s) > 200)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-' || *s == '.'))
            return false;
    return true;
}

static const char *content_type_of(const char *page) {
    const char *dot = strrchr(page, '.');
    if (dot && strcmp(dot, ".html") == 0)
        return "text/html; charset=utf-8";
    if (dot && strcmp(dot, ".js") == 0)
        return "text/javascript; charset=utf-8";
    if (dot && strcmp(dot, ".css") == 0)
        return "text/css; charset=utf-8";
    if (dot && strcmp(dot, ".json") == 0)
        return "application/json";
    return "application/octet-stream";
}

void pa_coll_report_heatmap(const pa_profile *p, const char *title, const char *page,
                            struct pa_coll_response *r) {
    if (page == NULL)
        page = "index.html";
    if (!safe_page_name(page)) {
        pa_coll_respond_text(r, 404, "heatmap: no page named '%.100s'", page);
        return;
    }
    const char *tmp = getenv("TMPDIR");
    char dir[512], empty[600], path[800];
    snprintf(dir, sizeof dir, "%s/pyagent-collector-heatmap-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        pa_coll_respond_text(r, 500, "heatmap: cannot create a temporary directory");
        return;
    }
    snprintf(empty, sizeof empty, "%s/no-sources", dir);
    mkdir(empty, 0700);
    const char *to = source_root_to ? source_root_to : empty;
    pa_heatmap_opts o = {
        .title = title, .root_from = &source_root_from, .root_to = &to, .nroots = 1};
    pa_error perr = {{0}};
    snprintf(path, sizeof path, "%s/out", dir);
    if (pa_render_heatmap(p, &o, path, &perr) != 0) {
        pa_coll_respond_text(r, 500, "heatmap: %s", perr.msg);
    } else {
        snprintf(path, sizeof path, "%s/out/%s", dir, page);
        FILE *f = fopen(path, "rb");
        if (f == NULL) {
            pa_coll_respond_text(r, 404, "heatmap: no page named '%.100s'", page);
        } else {
            char buf[65536];
            size_t n;
            while ((n = fread(buf, 1, sizeof buf, f)) > 0)
                pa_buf_append(&r->body, buf, n);
            fclose(f);
            r->status = 200;
            r->content_type = content_type_of(page);
        }
    }
    remove_tree(dir);
}

#else /* built without the renderer library */

void pa_coll_report_diff(const pa_profile *baseline, const pa_profile *current, const char *title,
                         struct pa_coll_response *r) {
    (void)baseline, (void)current, (void)title;
    pa_coll_respond_text(r, 501, "reports need the renderer library (parender)");
}

void pa_coll_report_heatmap(const pa_profile *p, const char *title, const char *page,
                            struct pa_coll_response *r) {
    (void)p, (void)title, (void)page;
    pa_coll_respond_text(r, 501, "reports need the renderer library (parender)");
}

#endif
