/* source.c - where the reports read source files from: the one reader the heatmap's pages
 * and the flamegraph's quoted lines share. Sources are read from disk only where the user
 * allows: with --source-root given, a path must resolve (after symlinks) inside one of the
 * new roots or it is not opened at all. */
#include "render.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int under(const char *path, const char *root) {
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/')
        n--;
    return strncmp(path, root, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

int pa_render_read_source(const pa_source_roots *o, const char *file, pa_buf *out, pa_error *why) {
    char cand[PATH_MAX * 2];
    if (file[0] == '<')
        return pa_fail(why, "not a file on disk");
    if (o && o->n) {
        int mapped = 0;
        for (size_t i = 0; i < o->n && !mapped; i++) {
            if (under(file, o->from[i])) {
                size_t n = strlen(o->from[i]);
                while (n > 1 && o->from[i][n - 1] == '/')
                    n--;
                snprintf(cand, sizeof cand, "%s%s", o->to[i], file + n);
                mapped = 1;
            }
        }
        if (!mapped && file[0] != '/' && o->n)
            snprintf(cand, sizeof cand, "%s/%s", o->to[0], file), mapped = 1;
        if (!mapped)
            return pa_fail(why, "outside the --source-root mappings: not read");
        char real[PATH_MAX];
        int inside = 0, found = realpath(cand, real) != NULL;
        for (size_t i = 0; found && i < o->n && !inside; i++) {
            char root[PATH_MAX];
            if (realpath(o->to[i], root) && under(real, root))
                inside = 1;
        }
        /* One answer whether the path is missing or resolves outside the roots (through ".."
         * or a link): two would tell whoever chose the path which files exist elsewhere. */
        if (!inside)
            return pa_fail(why, "source not available (no such file under the source roots)");
        snprintf(cand, sizeof cand, "%s", real);
    } else {
        snprintf(cand, sizeof cand, "%s", file);
    }
    struct stat sb;
    if (stat(cand, &sb) != 0)
        return pa_fail(why, "source not available (%s)", strerror(errno));
    if (!S_ISREG(sb.st_mode) || sb.st_size > 16 * 1024 * 1024)
        return pa_fail(why, "source not available (not a regular file under 16 MB)");
    FILE *f = fopen(cand, "rb");
    if (!f)
        return pa_fail(why, "source not available (%s)", strerror(errno));
    int rc = pa_buf_read_stream(out, f);
    int read_errno = errno;
    fclose(f);
    if (rc != 0)
        return pa_fail(why, "source not available (%s)", strerror(read_errno));
    return 0;
}
