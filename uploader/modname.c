/* modname.c: the module a Python frame belongs to, so that uploads name frames
 * "module.qualname" (as Grafana Pyroscope's Python SDK does, grouping by package) while the
 * file and line stay in pprof's Function and Line (see modname.h).
 *
 * The agent never runs Python, so the module is derived from the code object's file name the
 * way the import system made it: the path below the sys.path entry the file was found in,
 * with "/" as "." and without ".py" or a final "__init__". The sys.path entries that can be
 * known from outside are used, longest first:
 *   1. everything up to a "site-packages/" or "dist-packages/" directory (third-party code,
 *      also in virtual environments and Debian's /usr/lib/python3/dist-packages);
 *   2. the script's directory (sys.path[0]: the first argument that is not an option of the
 *      interpreter's, from /proc/self/cmdline; the current directory for -c and -m) and the
 *      entries of PYTHONPATH;
 *   3. everything up to "/lib/pythonX.Y/" or its "lib-dynload/" (the standard library).
 * A file none of them holds is named by its base name; a relative file name is taken as
 * relative to a sys.path entry; "<frozen importlib._bootstrap>" is importlib._bootstrap; other
 * names in angle brackets (<string>, <stdin>) have no module and keep the bare qualname. The
 * program's main script is named by its file (app.py: "app"), not "__main__", so that it
 * reads the same when it is imported or run with -m. */
#include "modname.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_ROOTS = 32 };

static char *roots[MAX_ROOTS]; /* directories, each ending in '/' */
static size_t nroots;

static void add_root(const char *dir) {
    char real[PATH_MAX];
    if (nroots == MAX_ROOTS || !dir || !*dir || !realpath(dir, real))
        return;
    size_t n = strlen(real);
    char *r = malloc(n + 2);
    if (!r)
        return;
    memcpy(r, real, n);
    if (n == 0 || r[n - 1] != '/')
        r[n++] = '/';
    r[n] = 0;
    for (size_t i = 0; i < nroots; i++)
        if (strcmp(roots[i], r) == 0) {
            free(r);
            return;
        }
    roots[nroots++] = r;
}

/* Interpreter options that take the next argument (python --help). */
static int takes_argument(const char *opt) {
    static const char *const with_arg[] = {"-W", "-X", "--check-hash-based-pycs"};
    for (size_t i = 0; i < sizeof with_arg / sizeof with_arg[0]; i++)
        if (strcmp(opt, with_arg[i]) == 0)
            return 1;
    return 0;
}

/* sys.path[0]: the script's directory, or the current one for -c, -m and the REPL. */
static void add_script_root(void) {
    char buf[8192];
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return;
    buf[n] = 0;
    const char *end = buf + n, *a = buf + strlen(buf) + 1; /* argv[1] */
    while (a < end) {
        if (strcmp(a, "-c") == 0 || strcmp(a, "-m") == 0 || strcmp(a, "-") == 0)
            break;
        if (a[0] != '-') {
            char dir[PATH_MAX];
            snprintf(dir, sizeof dir, "%s", a);
            char *slash = strrchr(dir, '/');
            if (slash) {
                slash[1] = 0;
                add_root(dir);
                return;
            }
            break; /* a script in the current directory */
        }
        if (takes_argument(a))
            a += strlen(a) + 1;
        a += strlen(a) + 1;
    }
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd))
        add_root(cwd);
}

void pa_modname_init(void) {
    for (size_t i = 0; i < nroots; i++)
        free(roots[i]);
    nroots = 0;
    add_script_root();
    const char *pp = getenv("PYTHONPATH");
    while (pp && *pp) {
        const char *colon = strchr(pp, ':');
        size_t len = colon ? (size_t)(colon - pp) : strlen(pp);
        char dir[PATH_MAX];
        if (len < sizeof dir) {
            memcpy(dir, pp, len);
            dir[len] = 0;
            add_root(dir);
        }
        pp += len + (colon ? 1 : 0);
    }
}

/* The end of the last occurrence of needle in s[0, len), or NULL. */
static const char *after_last(const char *s, size_t len, const char *needle) {
    size_t n = strlen(needle);
    for (size_t i = len; i-- > 0;)
        if (i + n <= len && memcmp(s + i, needle, n) == 0)
            return s + i + n;
    return NULL;
}

/* Where the module path starts inside file (the part below its sys.path entry). */
static const char *module_start(const char *file, size_t len) {
    const char *best = NULL;
    const char *site = after_last(file, len, "/site-packages/");
    const char *dist = after_last(file, len, "/dist-packages/");
    best = site > dist ? site : dist;
    if (best)
        return best;
    for (size_t i = 0; i < nroots; i++) {
        size_t rl = strlen(roots[i]);
        if (rl < len && memcmp(file, roots[i], rl) == 0 && (!best || file + rl > best))
            best = file + rl;
    }
    if (best)
        return best;
    const char *lib = after_last(file, len, "/lib/python");
    if (lib) {
        const char *slash = memchr(lib, '/', len - (size_t)(lib - file));
        if (slash) {
            const char *dyn = slash + 1;
            size_t left = len - (size_t)(dyn - file);
            return left > 12 && memcmp(dyn, "lib-dynload/", 12) == 0 ? dyn + 12 : dyn;
        }
    }
    if (file[0] != '/')
        return file; /* relative to a sys.path entry already */
    const char *base = after_last(file, len, "/");
    return base ? base : file;
}

int pa_modname_of(const char *file, size_t len, pa_buf *out) {
    if (len == 0)
        return -1;
    if (file[0] == '<') {
        if (len > 9 && memcmp(file, "<frozen ", 8) == 0 && file[len - 1] == '>') {
            pa_buf_append(out, file + 8, len - 9);
            return 0;
        }
        return -1;
    }
    const char *m = module_start(file, len);
    size_t mlen = len - (size_t)(m - file);
    static const char *const exts[] = {".py", ".pyw", ".pyc"};
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
        size_t el = strlen(exts[i]);
        if (mlen > el && memcmp(m + mlen - el, exts[i], el) == 0) {
            mlen -= el;
            break;
        }
    }
    if (mlen >= 9 && memcmp(m + mlen - 8, "__init__", 8) == 0 && m[mlen - 9] == '/')
        mlen -= 9; /* a package's own code: the package */
    while (mlen > 0 && m[0] == '/')
        m++, mlen--;
    if (mlen == 0)
        return -1;
    size_t start = out->len;
    pa_buf_append(out, m, mlen);
    for (size_t i = start; i < out->len; i++)
        if (out->data[i] == '/')
            out->data[i] = '.';
    return 0;
}

pa_profile *pa_modname_qualify(const pa_profile *p) {
    size_t nframes = pa_profile_frame_count(p);
    pa_profile *out = pa_profile_new();
    uint32_t *map = malloc((nframes ? nframes : 1) * sizeof *map);
    if (!map) {
        pa_profile_free(out);
        return NULL;
    }
    pa_buf name = {0};
    for (uint32_t id = 0; id < nframes; id++) {
        size_t len;
        const char *s = pa_profile_frame(p, id, &len);
        pa_frame_info fi;
        pa_frame_parse(s, len, &fi);
        int python = fi.file && (fi.kind == PA_FRAME_OWN || fi.kind == PA_FRAME_STDLIB ||
                                 fi.kind == PA_FRAME_SITE);
        name.len = 0;
        if (python && pa_modname_of(fi.file, fi.file_len, &name) == 0) {
            pa_buf_puts(&name, ".");
            pa_buf_append(&name, s, len); /* "module." + "qualname (file:line)" */
            map[id] = pa_profile_intern(out, name.data, name.len);
        } else {
            map[id] = pa_profile_intern(out, s, len);
        }
    }
    pa_buf_free(&name);
    size_t nstacks = pa_profile_stack_count(p);
    uint32_t *ids = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < nstacks; i++) {
        size_t depth;
        uint64_t count;
        const uint32_t *st = pa_profile_stack(p, i, &depth, &count);
        if (depth > cap) {
            cap = depth * 2;
            uint32_t *n = realloc(ids, cap * sizeof *ids);
            if (!n) { /* the caller sends the profile as it is rather than lose stacks */
                free(ids);
                free(map);
                pa_profile_free(out);
                return NULL;
            }
            ids = n;
        }
        for (size_t k = 0; k < depth; k++)
            ids[k] = map[st[k]];
        pa_profile_add_stack_ids(out, ids, depth, count);
    }
    free(ids);
    free(map);
    for (size_t i = 0; i < pa_profile_meta_count(p); i++) {
        const char *k, *v;
        pa_profile_meta_at(p, i, &k, &v);
        pa_profile_set_meta(out, k, v);
    }
    return out;
}
