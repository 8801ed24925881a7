/* send.c: the spool and the HTTP uploads (see send.h).
 *
 * A spool file is a header line followed by the request body, so that a file left by an
 * earlier run is resent exactly as it was meant, whatever the protocol configured now:
 *   "pyagent-spool 1 QUERY\n"          POST /ingest?QUERY (name with labels, from, until,
 *                                      sampleRate, spyName, format, pyagentUploadId);
 *   "pyagent-spool 2 PATH TYPE\n"      POST PATH with Content-Type TYPE: Pyroscope's Push
 *                                      (/push.v1.PusherService/Push, Connect unary,
 *                                      application/proto) or OTLP profiles
 *                                      (/v1development/profiles, application/x-protobuf).
 * The protocol (PYAGENT_PROTOCOL: push, the default, ingest or otlp) only decides how new
 * profiles are spooled: spool, retry, ordering and the exit deadline are one path for all
 * three. File names sort by time:
 * UNTILMS-PID-SEQ.spool. A file being sent is renamed to NAME.sending-PID first, so two
 * processes sharing a spool (a program and its forked children) never send one twice.
 *
 * No lock of the program's path is held across network I/O: spooling (local disk) and sending
 * are separate steps, sending has a lock of its own, and the exit path takes that lock only
 * until its deadline and asks a transfer in flight on the agent thread to give up. Every
 * upload uses a fresh connection on a close-on-exec socket: a cached connection's descriptor
 * may have been closed by the program and its number reused for one of the program's own
 * sockets (daemons close every descriptor), and the request would be written there. */
#include "send.h"

#include <curl/curl.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/beside.h"
#include "../base/bss.h"
#include "../base/log.h"
#include "../base/rand.h"
#include "modname.h"
#include "wire.h"

/* The shim's configuration, read once per process and never changed: referred to, not
 * copied (a copy writes 25 KiB, seven pages faulted in at start-up). */
static const struct pa_config *cfg;
enum protocol {
    PROTO_PUSH = PA_PROTO_PUSH,
    PROTO_INGEST = PA_PROTO_INGEST,
    PROTO_OTLP = PA_PROTO_OTLP
};
static enum protocol protocol;
static char *name_q;          /* url-encoded "APP{labels}" (pprof) or "APP.cpu{labels}" (folded) */
static struct labels *series; /* the series' labels (push, otlp), from build_name */
static char service[256];     /* the application's name as sent */
static char spool_dir[1100] PA_LARGE_BSS(spool_dir);
static unsigned seq;
static double retry_at; /* monotonic seconds */
static unsigned failures;
/* pa_send_stats, counted under send_lock and read without it (the exit path's header). */
static struct {
    _Atomic uint64_t sent, failed_attempts, rejected, spool_dropped, rejected_dropped;
} stats;
/* the last rejection logged: each reason is said once */
static char last_reason[600] PA_LARGE_BSS(last_reason);
/* Serializes sending (spool claims, counters, back-off); never held by fork or the exit path
 * beyond the exit deadline. */
static pthread_mutex_t send_lock = PTHREAD_MUTEX_INITIALIZER;
/* Monotonic ns: a transfer that started before this gives up (exit wants the lock). */
static _Atomic uint64_t abort_before_ns;
/* The socket of the transfer in flight (-1 none), to close it in a forked child. */
static int inflight_fd = -1;
static dev_t inflight_dev;
static ino_t inflight_ino;

/* libcurl, loaded on demand. */
static struct {
    void *so;
    CURLcode (*global_init)(long);
    CURL *(*init)(void);
    void (*cleanup)(CURL *);
    CURLcode (*setopt)(CURL *, CURLoption, ...);
    CURLcode (*perform)(CURL *);
    CURLcode (*getinfo)(CURL *, CURLINFO, ...);
    const char *(*strerror)(CURLcode);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
    char *(*escape)(CURL *, const char *, int);
    void (*free)(void *);
} curl;

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double mono(void) {
    return (double)mono_ns() / 1e9;
}

/* The Push and OTLP encoders (wire.h), from libpyagent-wire.so in the agent's own directory. */
static const struct pa_wire_api *wire;

static int load_wire(void) {
    if (wire)
        return 0;
    char path[4096];
    if (pa_path_beside((void *)&load_wire, PA_WIRE_FILE, path, sizeof path) != 0) {
        pa_log(PA_LOG_ERROR,
               "cannot tell the agent's directory, so cannot load " PA_WIRE_FILE ": not uploading");
        return -1;
    }
    void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        pa_log(PA_LOG_ERROR, "cannot load %s (%s): not uploading", path, dlerror());
        return -1;
    }
    const struct pa_wire_api *api = dlsym(so, PA_WIRE_API);
    if (!api) {
        pa_log(PA_LOG_ERROR, "%s is not this agent's (no " PA_WIRE_API "): not uploading", path);
        dlclose(so);
        return -1;
    }
    wire = api;
    return 0;
}

static int load_curl(void) {
    if (curl.so)
        return 0;
    void *so = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        pa_log(PA_LOG_ERROR, "cannot load libcurl.so.4 (%s): profiles stay in the spool",
               dlerror());
        return -1;
    }
#define LOAD(f, n)                                                                                 \
    if (!(*(void **)&curl.f = dlsym(so, n)))                                                       \
        goto missing;
    LOAD(global_init, "curl_global_init");
    LOAD(init, "curl_easy_init");
    LOAD(cleanup, "curl_easy_cleanup");
    LOAD(setopt, "curl_easy_setopt");
    LOAD(perform, "curl_easy_perform");
    LOAD(getinfo, "curl_easy_getinfo");
    LOAD(strerror, "curl_easy_strerror");
    LOAD(slist_append, "curl_slist_append");
    LOAD(slist_free_all, "curl_slist_free_all");
    LOAD(escape, "curl_easy_escape");
    LOAD(free, "curl_free");
#undef LOAD
    curl.so = so;
    curl.global_init(CURL_GLOBAL_DEFAULT);
    return 0;
missing:
    pa_log(PA_LOG_ERROR, "libcurl.so.4 lacks a function pyagent needs; not uploading");
    dlclose(so);
    return -1;
}

/* ---- the series name ------------------------------------------------------------------------ */

/* Grafana Pyroscope's label rules (pkg/validation: 30 label names per series, names up to 1024
 * bytes, values up to 2048 bytes of valid UTF-8, no name twice). Of its 30, four are its own:
 * __name__, __delta__, pyroscope_spy and service_name. The whole name also has to fit a
 * request line (our collector takes 256 KiB of headers, Go servers 1 MiB). */
enum {
    MAX_LABELS = 26,
    MAX_LABEL_NAME = 1024,
    MAX_LABEL_VALUE = 2048,
    MAX_RAW_NAME = 32768,
};

/* Label values go inside {k=v,...}: no ',', '}', '=' or quotes. */
static int value_ok(const char *v, size_t n) {
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!pa_series_value_char(v[i]))
            return 0;
    return 1;
}

/* Warnings about the name are given once per process tree: a forked child rebuilds it. */
static int name_warned;

#define NAME_WARN(...)                                                                             \
    do {                                                                                           \
        if (!name_warned)                                                                          \
            pa_log(PA_LOG_WARN, __VA_ARGS__);                                                      \
    } while (0)

struct labels {
    pa_buf text; /* "k=v,k2=v2" */
    int count;
    char names[MAX_LABELS][MAX_LABEL_NAME + 1];
    char *values[MAX_LABELS]; /* malloc'ed */
};

static void free_labels(struct labels *l) {
    if (!l)
        return;
    for (int i = 0; i < l->count; i++)
        free(l->values[i]);
    pa_buf_free(&l->text);
    free(l);
}

static int has_label(const struct labels *l, const char *k) {
    for (int i = 0; i < l->count; i++)
        if (strcmp(l->names[i], k) == 0)
            return 1;
    return 0;
}

/* Adds k=v (k valid, v valid UTF-8 without separators), unless over a limit: said, dropped. */
static void add_label(struct labels *l, const char *k, const char *v, size_t vn, const char *what) {
    if (l->count >= MAX_LABELS) {
        NAME_WARN("%s \"%s=%.*s\": more than %d labels (Grafana Pyroscope takes 30, 4 of them "
                  "its own); dropped",
                  what, k, (int)(vn > 64 ? 64 : vn), v, MAX_LABELS);
        return;
    }
    if (l->text.len + strlen(k) + vn + 2 > MAX_RAW_NAME) {
        NAME_WARN("%s \"%s\": the labels would pass %d bytes in all; dropped", what, k,
                  MAX_RAW_NAME);
        return;
    }
    if (l->count)
        pa_buf_append(&l->text, ",", 1);
    pa_buf_printf(&l->text, "%s=%.*s", k, (int)vn, v);
    l->values[l->count] = strndup(v, vn);
    snprintf(l->names[l->count++], sizeof l->names[0], "%s", k);
}

/* One PYAGENT_TAGS entry "k=v" (n bytes at t), made to fit Pyroscope's rules or dropped, with
 * a warning either way. */
static void add_tag(struct labels *l, const char *t, size_t n) {
    const char *eq = memchr(t, '=', n);
    size_t kn = eq ? (size_t)(eq - t) : n;
    int ok = eq && kn > 0 && kn <= MAX_LABEL_NAME;
    for (size_t i = 0; ok && i < kn; i++)
        ok = pa_series_label_char(t[i]);
    if (!ok) {
        NAME_WARN("PYAGENT_TAGS: \"%.*s\" is not name=value (name: [A-Za-z0-9_.], at most %d "
                  "bytes); dropped",
                  (int)(n > 200 ? 200 : n), t, MAX_LABEL_NAME);
        return;
    }
    if (t[0] >= '0' && t[0] <= '9') {
        NAME_WARN("PYAGENT_TAGS: \"%.*s\": a label name must not start with a digit "
                  "(Pyroscope refuses it); dropped",
                  (int)(n > 200 ? 200 : n), t);
        return;
    }
    if (kn >= 2 && t[0] == '_' && t[1] == '_') {
        NAME_WARN("PYAGENT_TAGS: \"%.*s\": names starting with __ are reserved (Pyroscope drops "
                  "them); dropped",
                  (int)(n > 200 ? 200 : n), t);
        return;
    }
    if (kn == 13 && memcmp(t, "pyroscope_spy", 13) == 0) {
        NAME_WARN("PYAGENT_TAGS: \"%.*s\": Pyroscope sets pyroscope_spy itself (a second one is "
                  "refused); dropped",
                  (int)(n > 200 ? 200 : n), t);
        return;
    }
    char key[MAX_LABEL_NAME + 1];
    memcpy(key, t, kn);
    key[kn] = 0;
    if (memchr(key, '.', kn)) {
        /* Pyroscope renames it so; doing it here keeps both servers' series the same. */
        for (char *c = key; *c; c++)
            if (*c == '.')
                *c = '_';
        NAME_WARN("PYAGENT_TAGS: \"%.*s\" is sent as \"%s\" (Pyroscope's label names have no "
                  "'.')",
                  (int)kn, t, key);
    }
    if (has_label(l, key)) {
        NAME_WARN("PYAGENT_TAGS: \"%.*s\": \"%s\" is given twice; the first is kept, this one "
                  "dropped",
                  (int)(n > 200 ? 200 : n), t, key);
        return;
    }
    pa_buf value = {0};
    if (pa_buf_utf8(&value, eq + 1, n - kn - 1))
        NAME_WARN("PYAGENT_TAGS: the value of \"%s\" is not valid UTF-8; its invalid bytes are "
                  "sent as U+FFFD",
                  key);
    size_t vn = value.len;
    if (vn > MAX_LABEL_VALUE) {
        vn = MAX_LABEL_VALUE;
        while (vn > 0 && ((unsigned char)value.data[vn] & 0xC0) == 0x80)
            vn--; /* cut at a character boundary */
        NAME_WARN("PYAGENT_TAGS: the value of \"%s\" is %zu bytes; cut to %zu (Pyroscope takes "
                  "%d)",
                  key, value.len, vn, MAX_LABEL_VALUE);
    }
    if (value_ok(value.data ? value.data : "", vn))
        add_label(l, key, value.data, vn, "PYAGENT_TAGS:");
    else
        NAME_WARN("PYAGENT_TAGS: \"%.*s\": a value must be non-empty, without , = { } \" or "
                  "control characters; dropped",
                  (int)(n > 200 ? 200 : n), t);
    pa_buf_free(&value);
}

/* A label of the agent's own (hostname, pid): a user tag of that name wins. */
static void add_own_label(struct labels *l, const char *k, const char *v) {
    if (has_label(l, k)) {
        NAME_WARN("PYAGENT_TAGS sets \"%s\": the agent's own label of that name is not added", k);
        return;
    }
    if (!pa_utf8_valid(v, strlen(v)) || strlen(v) > MAX_LABEL_VALUE || !value_ok(v, strlen(v))) {
        NAME_WARN("the %s label \"%.64s\" breaks the label rules; not added", k, v);
        return;
    }
    add_label(l, k, v, strlen(v), "the agent's label");
}

/* raw (the name up to its labels) with l's labels, url-encoded, malloc'ed. */
static char *name_of(pa_buf *raw, const struct labels *l) {
    pa_buf_printf(raw, "{%s}", l->text.data ? l->text.data : "");
    char *esc = curl.escape ? curl.escape(NULL, raw->data, (int)raw->len) : NULL;
    char *out = strdup(esc ? esc : raw->data);
    if (esc)
        curl.free(esc);
    return out;
}

/* The ingest name, url-encoded, malloc'ed: "APP{k=v,...}" for pprof (Pyroscope takes the
 * whole text before '{' as the service name and the profile type from the sample types),
 * "APP.MODE{k=v,...}" for folded (its folded path takes the type from the suffix). */
static char *build_name(void) {
    char app[256];
    size_t a = 0;
    for (const char *s = cfg->app_name; *s && a + 1 < sizeof app; s++)
        app[a++] = pa_series_app_char(*s) ? *s : '_';
    app[a] = 0;
    if (!a)
        strcpy(app, "python");
    if (strcmp(app, cfg->app_name) != 0)
        NAME_WARN("PYAGENT_APP_NAME=\"%.64s\" has characters outside [A-Za-z0-9_./-]; using \"%s\"",
                  cfg->app_name, app);
    struct labels *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    const char *t = cfg->tags;
    while (*t) {
        const char *end = strchr(t, ',');
        size_t n = end ? (size_t)(end - t) : strlen(t);
        if (n)
            add_tag(l, t, n);
        t += n + (end ? 1 : 0);
    }
    if (cfg->tag_host) {
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        if (host[0])
            add_own_label(l, "hostname", host);
    }
    if (cfg->tag_pid) {
        char pid[16];
        snprintf(pid, sizeof pid, "%d", (int)getpid());
        add_own_label(l, "pid", pid);
    }
    name_warned = 1;
    snprintf(service, sizeof service, "%s", app);
    pa_buf raw = {0};
    pa_buf_puts(&raw, app);
    if (!cfg->upload_pprof) /* what the samples measure, as the folded path wants it */
        pa_buf_puts(&raw, cfg->mode == PA_MODE_WALL  ? ".wall"
                          : cfg->mode == PA_MODE_GIL ? ".gil"
                                                     : ".cpu");
    free_labels(series);
    series = l;
    char *out = name_of(&raw, l);
    pa_buf_free(&raw);
    return out;
}

/* The folded /ingest name of a label set's samples (pyagent.labels): the series' labels and
 * the set's (the set's win), each set label checked as the agent's own labels are (a '.' in
 * its name sent as '_', as for PYAGENT_TAGS; one whose value holds , = { } " dropped:
 * Pyroscope's /ingest names cannot carry it); malloc'ed, url-encoded. */
static char *name_with_labels(const char *text) {
    struct labels *l = calloc(1, sizeof *l);
    char *copy = strdup(text), *at = copy, *k, *v;
    if (!l || !copy) {
        free(l);
        free(copy);
        return NULL;
    }
    while (pa_series_split(&at, &k, &v) == 1) {
        for (char *c = k; *c; c++) /* as PYAGENT_TAGS: Pyroscope's names here have no '.' */
            if (*c == '.')
                *c = '_';
        if (!has_label(l, k))
            add_own_label(l, k, v);
    }
    for (int i = 0; i < series->count; i++)
        if (!has_label(l, series->names[i]))
            add_label(l, series->names[i], series->values[i], strlen(series->values[i]),
                      "PYAGENT_TAGS:");
    pa_buf raw = {0};
    pa_buf_puts(&raw, service);
    pa_buf_puts(&raw, cfg->mode == PA_MODE_WALL  ? ".wall"
                      : cfg->mode == PA_MODE_GIL ? ".gil"
                                                 : ".cpu");
    char *out = name_of(&raw, l);
    pa_buf_free(&raw);
    free_labels(l);
    free(copy);
    return out;
}

/* ---- the spool ------------------------------------------------------------------------------ */

static int mkdirs(const char *path) {
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(tmp, 0700) != 0 && errno != EEXIST ? -1 : 0;
}

int pa_send_init(const struct pa_config *c) {
    cfg = c;
    if (!cfg->server[0])
        return 0;
    protocol = (enum protocol)cfg->protocol;
    pa_modname_init();
    /* Both at start, in normal context, never later: a death's flush may encode and send
     * (spooled OTLP answers need the wire library whatever the protocol now), and it must not
     * call the loader then. */
    if (load_curl() != 0 || load_wire() != 0)
        return -1;
    if (cfg->spool_dir[0]) {
        snprintf(spool_dir, sizeof spool_dir, "%s", cfg->spool_dir);
    } else {
        const char *base = getenv("XDG_CACHE_HOME");
        const char *home = getenv("HOME");
        char app[200];
        size_t a = 0;
        for (const char *s = cfg->app_name; *s && a + 1 < sizeof app; s++)
            app[a++] = pa_series_app_char(*s) && *s != '/' ? *s : '_';
        app[a] = 0;
        if (base && *base)
            snprintf(spool_dir, sizeof spool_dir, "%s/pyagent/spool/%s", base, app);
        else if (home && *home)
            snprintf(spool_dir, sizeof spool_dir, "%s/.cache/pyagent/spool/%s", home, app);
        else
            snprintf(spool_dir, sizeof spool_dir, "/tmp/pyagent-spool-%d/%s", (int)getuid(), app);
    }
    if (mkdirs(spool_dir) != 0) {
        pa_log(PA_LOG_ERROR, "cannot create the spool directory %s: %s", spool_dir,
               strerror(errno));
        spool_dir[0] = 0;
    }
    free(name_q);
    name_q = build_name();
    if (cfg->mode == PA_MODE_GIL && !cfg->upload_pprof)
        pa_log(PA_LOG_WARN, "Grafana Pyroscope has no 'gil' type for folded uploads and refuses "
                            "them (so does pyagent-collector, unless run with --folded-dialects); "
                            "PYAGENT_UPLOAD_FORMAT=pprof files them as __name__ gil");
    return 0;
}

void pa_send_fork_child(void) {
    if (!cfg->server[0])
        return;
    /* Only this thread survived: a transfer the agent thread had in flight is the parent's.
     * Its socket is closed here (if the descriptor is still that socket), its memory left. */
    pthread_mutex_init(&send_lock, NULL);
    struct stat st;
    if (inflight_fd >= 0 && fstat(inflight_fd, &st) == 0 && st.st_dev == inflight_dev &&
        st.st_ino == inflight_ino)
        close(inflight_fd);
    inflight_fd = -1;
    atomic_store(&abort_before_ns, 0);
    seq = 0;
    failures = 0;
    retry_at = 0;
    atomic_store(&stats.sent, 0);
    atomic_store(&stats.failed_attempts, 0);
    atomic_store(&stats.rejected, 0);
    atomic_store(&stats.spool_dropped, 0);
    atomic_store(&stats.rejected_dropped, 0);
    last_reason[0] = 0;
    free(name_q);
    name_q = build_name();
}

void pa_send_get_stats(struct pa_send_stats *st) {
    st->sent = atomic_load(&stats.sent);
    st->failed_attempts = atomic_load(&stats.failed_attempts);
    st->rejected = atomic_load(&stats.rejected);
    st->spool_dropped = atomic_load(&stats.spool_dropped);
    st->rejected_dropped = atomic_load(&stats.rejected_dropped);
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* dir's *.spool files (and reclaimed *.sending-PID of dead processes), sorted. */
static char **list_spool(const char *dir, size_t *n, uint64_t *bytes) {
    *n = 0;
    *bytes = 0;
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    size_t cap = 0;
    char **names = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *s = strstr(e->d_name, ".sending-");
        if (s) {
            int pid = atoi(s + 9);
            if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
                char from[1400], to[1400];
                snprintf(from, sizeof from, "%s/%s", dir, e->d_name);
                snprintf(to, sizeof to, "%s/%.*s", dir, (int)(s - e->d_name), e->d_name);
                rename(from, to);
            }
            continue;
        }
        size_t l = strlen(e->d_name);
        if (l < 7 || strcmp(e->d_name + l - 6, ".spool"))
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 32;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn)
                break;
            names = nn;
        }
        names[(*n)++] = strdup(e->d_name);
        char path[1400];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) == 0)
            *bytes += (uint64_t)st.st_size;
    }
    closedir(d);
    if (*n)
        qsort(names, *n, sizeof *names, cmp_names);
    return names;
}

static void free_list(char **names, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* Keeps a spool directory under PYAGENT_SPOOL_MAX_MB by deleting its oldest files. The spool's
 * profiles are counted in one warning per pass (a server away for long: they were never
 * refused). In rejected/ every deletion is a profile a server refused and nobody has looked at
 * yet: each one is said on its own line, by name, and counted (rejected_dropped in the local
 * file's header), so that the bound never loses an upload silently. The bound stays: a server
 * that refuses everything must not fill the disk. */
static void bound_spool(const char *dir, int rejected) {
    size_t n;
    uint64_t bytes;
    char **names = list_spool(dir, &n, &bytes);
    uint64_t max = (uint64_t)cfg->spool_max_mb << 20;
    size_t dropped = 0;
    for (size_t i = 0; i < n && bytes > max; i++) {
        char path[1400];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (stat(path, &st) != 0 || unlink(path) != 0)
            continue;
        bytes -= (uint64_t)st.st_size;
        dropped++;
        if (rejected)
            pa_log(PA_LOG_ERROR,
                   "%s is over PYAGENT_SPOOL_MAX_MB=%u: deleted %s, a profile the server had "
                   "refused (%llu rejected profile(s) deleted so far)",
                   dir, cfg->spool_max_mb, names[i],
                   (unsigned long long)(atomic_fetch_add(&stats.rejected_dropped, 1) + 1));
    }
    if (dropped && !rejected) {
        pa_log(PA_LOG_WARN,
               "spool %s is over %u MB: dropped its %zu oldest profile(s) (%llu so far)", dir,
               cfg->spool_max_mb, dropped,
               (unsigned long long)(atomic_fetch_add(&stats.spool_dropped, dropped) + dropped));
    }
    free_list(names, n);
}

/* Grafana Pyroscope refuses a profile of more than 16000 samples (pprof Samples, our unique
 * stacks; PYAGENT_MAX_PROFILE_STACKS for a tenant with another limit) or 4 MiB of uncompressed
 * pprof (max_profile_stacktrace_samples, max_profile_size_bytes); on its folded path the same
 * limits apply to the pprof it builds. */
enum { MAX_PROFILE_BYTES = 4 << 20 };

/* An upper bound of p's size as uncompressed pprof: each frame's strings, Location, Line and
 * Function, each stack's location ids and values. */
static size_t pprof_size_bound(const pa_profile *p) {
    size_t bytes = 64, nframes = pa_profile_frame_count(p), nstacks = pa_profile_stack_count(p);
    for (uint32_t id = 0; id < nframes; id++) {
        size_t len;
        pa_profile_frame(p, id, &len);
        bytes += len + 64;
    }
    for (size_t i = 0; i < nstacks; i++) {
        size_t depth;
        uint64_t count;
        pa_profile_stack(p, i, &depth, &count);
        bytes += depth * 5 + 32;
    }
    return bytes;
}

static int spool_one(const pa_profile *p, time_t from, time_t until, const char *name);
static int spool_parts(const pa_profile *p, time_t from, time_t until, const char *name);
static int spool_label_sets(const pa_profile *p, time_t from, time_t until);

int pa_send_spool(const pa_profile *p, time_t from, time_t until) {
    if (!cfg->server[0] || !spool_dir[0] || !name_q || pa_profile_total(p) == 0)
        return 0;
    /* Frames are sent module-qualified (modname.h); without memory for that, as they are.
     * The profile's time is pprof's time_nanos, which Pyroscope's time window checks. */
    pa_profile *q = pa_modname_qualify(p);
    if (q) {
        char start[32];
        snprintf(start, sizeof start, "%lld", (long long)from);
        pa_profile_set_meta(q, "start", start);
    }
    int folded = protocol == PROTO_INGEST && !cfg->upload_pprof;
    /* Folded /ingest sends each label set as an upload of its own: with span_id, one per
     * request. Those uploads go without span_id (as the collector files them), with their
     * span_name. */
    pa_profile *r =
        folded ? pa_profile_transform(q ? q : p, &(pa_transform){.drop_label = "span_id"}) : NULL;
    int rc =
        folded ? spool_label_sets(r, from, until) : spool_parts(q ? q : p, from, until, name_q);
    pa_profile_free(r);
    pa_profile_free(q);
    return rc;
}

/* Folded /ingest: the text has no place for a sample's labels (Pyroscope would read a
 * labels:TEXT frame as a frame), so each label set's samples are an upload of their own,
 * named with the set's labels (name_with_labels); the unlabelled ones keep the plain name. */
static int spool_label_sets(const pa_profile *p, time_t from, time_t until) {
    uint32_t *sets;
    size_t n = pa_profile_label_sets(p, &sets);
    if (n == 0)
        return spool_parts(p, from, until, name_q);
    int rc = 0;
    for (size_t i = 0; i <= n; i++) {
        pa_profile *part = pa_profile_labelled(p, i < n ? sets[i] : UINT32_MAX);
        char *name = NULL;
        if (i < n) {
            size_t len;
            const char *text = pa_profile_frame(p, sets[i], &len);
            name = name_with_labels(text + PA_LABELS_PREFIX_LEN);
        }
        if (pa_profile_total(part) > 0) /* its rate, mode and start came with it */
            rc |= i < n && !name ? -1 : spool_parts(part, from, until, i < n ? name : name_q);
        free(name);
        pa_profile_free(part);
    }
    free(sets);
    return rc;
}

static int spool_parts(const pa_profile *p, time_t from, time_t until, const char *name) {
    size_t n = pa_profile_stack_count(p);
    if (n < 2 || (n <= cfg->max_profile_stacks && pprof_size_bound(p) <= MAX_PROFILE_BYTES))
        return spool_one(p, from, until, name);
    /* Split in halves (each with only its own frames) until every part fits: the same
     * samples, as several profiles of the same interval, which Pyroscope adds up. */
    static int split_logged;
    if (!split_logged++)
        pa_log(PA_LOG_INFO,
               "a profile of %zu stacks is over Grafana Pyroscope's per-profile limits (%u "
               "stacks, %d MiB); it is sent in parts (said once)",
               n, cfg->max_profile_stacks, MAX_PROFILE_BYTES >> 20);
    int rc = 0;
    size_t half = (n + 1) / 2;
    for (size_t first = 0; first < n; first += half) {
        pa_profile *part = pa_profile_new();
        pa_profile_merge_stacks(part, p, first, half);
        for (size_t i = 0; i < pa_profile_meta_count(p); i++) { /* rate, mode, start */
            const char *k, *v;
            pa_profile_meta_at(p, i, &k, &v);
            pa_profile_set_meta(part, k, v);
        }
        rc |= spool_parts(part, from, until, name);
        pa_profile_free(part);
    }
    return rc;
}

/* A random UUID (version 4) naming one profile, as bytes and as text: it is spooled with the
 * upload (in the body, or in the /ingest query), so a resent spool file carries the same, and
 * our collector stores it once (docs/continuous.md, "Delivery"). */
static void new_id(unsigned char b[16], char *out, size_t len) {
    memset(b, 0, 16);
    if (getrandom(b, 16, GRND_NONBLOCK) != 16)
        for (size_t i = 0; i < 16; i++)
            b[i] = (unsigned char)(pa_rand64() >> 24);
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, len, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

/* Push and OTLP: the body, and the spool header naming where it goes. */
static int encode_message(const pa_profile *p, time_t from, time_t until, pa_buf *body,
                          pa_buf *head, pa_error *err) {
    struct pa_wire_label ls[MAX_LABELS];
    size_t n = 0;
    const char *svc = service;
    /* A service_name tag is the service (as on /ingest, where it replaces the name): sent as
     * a second service_name label it would be a duplicate, which Pyroscope refuses. */
    for (int i = 0; series && i < series->count; i++)
        if (strcmp(series->names[i], "service_name") == 0)
            svc = series->values[i];
        else
            ls[n++] = (struct pa_wire_label){series->names[i], series->values[i]};
    unsigned char raw[16];
    char id[40];
    new_id(raw, id, sizeof id);
    if (protocol == PROTO_PUSH) {
        pa_buf_puts(head, "pyagent-spool 2 /push.v1.PusherService/Push application/proto\n");
        return wire->push(p, svc, ls, n, id, body, err);
    }
    pa_buf_puts(head, "pyagent-spool 2 /v1development/profiles application/x-protobuf\n");
    return wire->otlp(p, svc, ls, n, from, until, raw, body, err);
}

static int spool_one(const pa_profile *p, time_t from, time_t until, const char *name) {
    pa_buf body = {0}, head = {0};
    pa_error err;
    if (protocol != PROTO_INGEST) {
        if (encode_message(p, from, until, &body, &head, &err) != 0) {
            pa_log(PA_LOG_ERROR, "cannot encode the profile: %s", err.msg);
            pa_buf_free(&body);
            pa_buf_free(&head);
            return -1;
        }
    } else if (cfg->upload_pprof) {
        if (pa_pprof_encode(p, 1, &body, &err) != 0) {
            pa_log(PA_LOG_ERROR, "cannot encode the profile: %s", err.msg);
            pa_buf_free(&body);
            return -1;
        }
    } else {
        /* No "# pyagent" header: Pyroscope's folded parser refuses the line (422). */
        pa_profile_encode_folded_stacks(p, &body);
    }
    const char *rate = pa_profile_meta(p, "rate");
    char path[1400], tmp[1500];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(path, sizeof path, "%s/%013lld-%010d-%06u.spool", spool_dir,
             (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000, (int)getpid(), seq++);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "we");
    int ok = f != NULL;
    if (ok) {
        unsigned char raw[16];
        char id[40];
        new_id(raw, id, sizeof id);
        /* pyagentUploadId is ours: Pyroscope's /ingest ignores parameters it does not know. */
        if (head.len)
            fputs(head.data, f);
        else
            fprintf(f,
                    "pyagent-spool 1 "
                    "name=%s&from=%lld&until=%lld&sampleRate=%s&spyName=pyagent&format=%s"
                    "&pyagentUploadId=%s\n",
                    name, (long long)from, (long long)until, rate ? rate : "100",
                    cfg->upload_pprof ? "pprof" : "folded", id);
        ok = fwrite(body.data, 1, body.len, f) == body.len;
        ok = (fclose(f) == 0) && ok;
    }
    if (ok)
        ok = rename(tmp, path) == 0;
    if (!ok) {
        pa_log(PA_LOG_ERROR, "cannot write to the spool %s: %s", spool_dir, strerror(errno));
        unlink(tmp);
    }
    pa_buf_free(&body);
    pa_buf_free(&head);
    bound_spool(spool_dir, 0);
    return ok ? 0 : -1;
}

/* ---- HTTP ----------------------------------------------------------------------------------- */

struct reply {
    char text[4096]; /* the start of the answer: a reason, or an OTLP response */
    size_t len;
};

static size_t on_reply(char *data, size_t size, size_t n, void *arg) {
    struct reply *r = arg;
    size_t bytes = size * n;
    size_t room = sizeof r->text - 1 - r->len;
    size_t take = bytes < room ? bytes : room;
    memcpy(r->text + r->len, data, take);
    r->len += take;
    r->text[r->len] = 0;
    return bytes;
}

static curl_socket_t open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *a) {
    (void)arg;
    (void)purpose;
    int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0) {
        inflight_dev = st.st_dev;
        inflight_ino = st.st_ino;
        inflight_fd = fd;
    }
    return fd >= 0 ? fd : CURL_SOCKET_BAD;
}

static int close_socket(void *arg, curl_socket_t fd) {
    (void)arg;
    if (fd == inflight_fd)
        inflight_fd = -1;
    return close(fd);
}

/* Progress callback: nonzero ends the transfer (the exit path wants the lock), but only
 * while the body is still going out. Once the server has the whole body it may have stored
 * it: ending the transfer then, and sending the same spool file again from the exit path,
 * would count its samples twice; the exit path waits for the answer instead (within its
 * deadline; past it the file stays spooled, as any unanswered upload does). */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
    (void)dltotal, (void)dlnow;
    if (ultotal > 0 && ulnow >= ultotal)
        return 0;
    return *(const uint64_t *)arg < atomic_load(&abort_before_ns);
}

enum { POST_SENT = 0, POST_REJECTED = 1, POST_FAILED = -1, POST_UNREACHABLE = -2 };

/* Where a spool file goes, from its header line (without "pyagent-spool "). */
struct target {
    char *head;        /* the header line, malloc'ed */
    pa_buf path;       /* "ingest?QUERY", "push.v1.PusherService/Push", ... */
    const char *ctype; /* Content-Type (in head, or static) */
    int connect, otlp;
};

static void free_target(struct target *t) {
    free(t->head);
    pa_buf_free(&t->path);
}

static int parse_target(const char *head, struct target *t) {
    if (strncmp(head, "1 ", 2) == 0) {
        pa_buf_printf(&t->path, "ingest?%s", head + 2);
        t->ctype = strstr(head, "format=pprof") ? "application/octet-stream" : "text/plain";
        return 0;
    }
    const char *sp = strncmp(head, "2 /", 3) == 0 ? strchr(head + 3, ' ') : NULL;
    if (!sp)
        return -1;
    pa_buf_append(&t->path, head + 3, (size_t)(sp - head - 3));
    t->ctype = sp + 1;
    t->connect = strstr(t->path.data, ".v1.") != NULL; /* a Connect service's procedure */
    t->otlp = strcmp(t->path.data, "v1development/profiles") == 0;
    return 0;
}

/* POSTs one spool file, on a connection of its own. A rejection's reason (the status and the
 * server's answer) goes to reason. */
static int post(const struct target *t, const char *body, size_t len, double deadline,
                pa_error *reason) {
    CURL *handle = curl.init();
    if (!handle)
        return POST_FAILED;
    uint64_t started = mono_ns();
    const char *slash = cfg->server[strlen(cfg->server) - 1] == '/' ? "" : "/";
    pa_buf url = {0};
    pa_buf_printf(&url, "%s%s%s", cfg->server, slash, t->path.data);
    long total_ms = (long)cfg->upload_timeout_ms, connect_ms = (long)cfg->connect_timeout_ms;
    if (deadline > 0) {
        long left = (long)((deadline - mono()) * 1000);
        if (left < 1) {
            pa_log(PA_LOG_DEBUG, "no time left to upload before exit");
            curl.cleanup(handle);
            pa_buf_free(&url);
            return POST_FAILED;
        }
        if (total_ms > left)
            total_ms = left;
        if (connect_ms > left)
            connect_ms = left;
    }
    struct curl_slist *h = NULL;
    char line[1200];
    snprintf(line, sizeof line, "Content-Type: %s", t->ctype);
    h = curl.slist_append(h, line);
    h = curl.slist_append(h, "Expect:");
    if (t->connect)
        h = curl.slist_append(h, "Connect-Protocol-Version: 1");
    if (cfg->auth_token[0]) {
        snprintf(line, sizeof line, "Authorization: Bearer %s", cfg->auth_token);
        h = curl.slist_append(h, line);
    }
    if (cfg->tenant[0]) {
        snprintf(line, sizeof line, "X-Scope-OrgID: %s", cfg->tenant);
        h = curl.slist_append(h, line);
    }
    struct reply reply = {"", 0};
    curl.setopt(handle, CURLOPT_URL, url.data);
    curl.setopt(handle, CURLOPT_POST, 1L);
    curl.setopt(handle, CURLOPT_POSTFIELDS, body);
    curl.setopt(handle, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl.setopt(handle, CURLOPT_HTTPHEADER, h);
    curl.setopt(handle, CURLOPT_USERAGENT, "pyagent/0.1");
    /* No SIGALRM for DNS time-outs: the program's signals are its own. */
    curl.setopt(handle, CURLOPT_NOSIGNAL, 1L);
    curl.setopt(handle, CURLOPT_FORBID_REUSE, 1L);
    curl.setopt(handle, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl.setopt(handle, CURLOPT_CLOSESOCKETFUNCTION, close_socket);
    curl.setopt(handle, CURLOPT_NOPROGRESS, 0L);
    curl.setopt(handle, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl.setopt(handle, CURLOPT_XFERINFODATA, &started);
    curl.setopt(handle, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    curl.setopt(handle, CURLOPT_TIMEOUT_MS, total_ms);
    curl.setopt(handle, CURLOPT_WRITEFUNCTION, on_reply);
    curl.setopt(handle, CURLOPT_WRITEDATA, &reply);
    curl.setopt(handle, CURLOPT_SSL_VERIFYPEER, cfg->tls_verify ? 1L : 0L);
    curl.setopt(handle, CURLOPT_SSL_VERIFYHOST, cfg->tls_verify ? 2L : 0L);
    if (cfg->ca_file[0])
        curl.setopt(handle, CURLOPT_CAINFO, cfg->ca_file);
    if (cfg->basic_user[0]) {
        curl.setopt(handle, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl.setopt(handle, CURLOPT_USERNAME, cfg->basic_user);
        curl.setopt(handle, CURLOPT_PASSWORD, cfg->basic_password);
    }
    CURLcode rc = curl.perform(handle);
    long status = 0;
    curl.getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
    curl.cleanup(handle);
    curl.slist_free_all(h);
    pa_buf_free(&url);
    if (rc != CURLE_OK) {
        pa_log(PA_LOG_DEBUG, "upload to %s failed: %s", cfg->server, curl.strerror(rc));
        return rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
                       rc == CURLE_COULDNT_RESOLVE_PROXY
                   ? POST_UNREACHABLE
                   : POST_FAILED;
    }
    if (status >= 200 && status < 300 && t->otlp) {
        /* OTLP's partial success: the server will never take those profiles either. */
        pa_error why;
        int64_t n = wire->otlp_rejected(reply.text, reply.len, &why);
        if (n > 0) {
            pa_fail(reason, "OTLP partial success, %lld rejected: %s", (long long)n, why.msg);
            return POST_REJECTED;
        }
    }
    if (status >= 200 && status < 300)
        return POST_SENT;
    reply.text[strcspn(reply.text, "\r\n")] = 0;
    if (status >= 400 && status < 500 && status != 408 && status != 429) {
        pa_fail(reason, "HTTP %ld: %s", status, reply.text);
        return POST_REJECTED;
    }
    pa_log(PA_LOG_DEBUG, "upload to %s: HTTP %ld %s", cfg->server, status, reply.text);
    return POST_FAILED;
}

/* Reads a claimed spool file: its target (from the header) and body. */
static int read_spool(const char *path, struct target *t, pa_buf *body) {
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    if (getline(&line, &cap, f) < 16 || strncmp(line, "pyagent-spool ", 14) != 0) {
        free(line);
        fclose(f);
        return -1;
    }
    line[strcspn(line, "\n")] = 0;
    t->head = line;
    if (parse_target(line + 14, t) != 0) {
        fclose(f);
        return -1;
    }
    int rc = pa_buf_read_stream(body, f);
    fclose(f);
    return rc;
}

/* A profile the server refused (4xx): it moves to the spool's rejected/ directory (bounded
 * like the spool, each deletion said: bound_spool), where it can be read, fixed and sent again by
 * hand. The server's reason is logged once per distinct reason; stats.rejected counts them all. */
static void keep_rejected(const char *claimed, const char *path, const char *name,
                          const char *reason) {
    char dir[1200], to[1500];
    snprintf(dir, sizeof dir, "%s/rejected", spool_dir);
    snprintf(to, sizeof to, "%s/%s", dir, name);
    if ((mkdir(dir, 0700) != 0 && errno != EEXIST) || rename(claimed, to) != 0) {
        pa_log(PA_LOG_ERROR,
               "%s rejected a profile (%s) and it cannot be moved to %s (%s); it "
               "stays in the spool",
               cfg->server, reason, dir, strerror(errno));
        rename(claimed, path);
        return;
    }
    uint64_t rejected = atomic_fetch_add(&stats.rejected, 1) + 1;
    if (strcmp(reason, last_reason) != 0) {
        snprintf(last_reason, sizeof last_reason, "%s", reason);
        pa_log(PA_LOG_ERROR,
               "%s rejected a profile (%s); it is kept in %s (%llu rejected so far; the same "
               "reason is not repeated)",
               cfg->server, reason, dir, (unsigned long long)rejected);
    }
    bound_spool(dir, 1);
}

/* The send lock; at exit (deadline > 0) only until the deadline, after asking a transfer in
 * flight to end. Returns 0 when held. */
static int lock_sending(double deadline) {
    if (deadline <= 0)
        return pthread_mutex_lock(&send_lock);
    atomic_store(&abort_before_ns, mono_ns());
    struct timespec until = {(time_t)deadline, (long)((deadline - (double)(time_t)deadline) * 1e9)};
    return pthread_mutex_clocklock(&send_lock, CLOCK_MONOTONIC, &until);
}

void pa_send_flush(double deadline, int respect_backoff) {
    if (!cfg->server[0] || !spool_dir[0] || !curl.so)
        return;
    if (lock_sending(deadline) != 0) {
        pa_log(PA_LOG_DEBUG, "an upload in flight outlasted the exit deadline; the profile stays "
                             "in the spool");
        return;
    }
    if (respect_backoff && mono() < retry_at) {
        pthread_mutex_unlock(&send_lock);
        return;
    }
    size_t n;
    uint64_t bytes;
    char **names = list_spool(spool_dir, &n, &bytes);
    pa_log(PA_LOG_DEBUG, "sending %zu spooled profile(s)%s", n, respect_backoff ? "" : " (final)");
    for (size_t i = 0; i < n; i++) {
        /* The exit path wants the lock: it sends what is left. */
        if (deadline <= 0 && atomic_load(&abort_before_ns))
            break;
        if (deadline > 0 && mono() >= deadline) {
            pa_log(PA_LOG_DEBUG, "exit deadline reached; %zu profile(s) stay in the spool", n - i);
            break;
        }
        char path[1400], claimed[1500];
        pa_error reason;
        struct target t = {0};
        snprintf(path, sizeof path, "%s/%s", spool_dir, names[i]);
        snprintf(claimed, sizeof claimed, "%s.sending-%d", path, (int)getpid());
        if (rename(path, claimed) != 0)
            continue; /* another process took it */
        pa_buf body = {0};
        if (read_spool(claimed, &t, &body) != 0) {
            free_target(&t);
            pa_log(PA_LOG_WARN, "spool file %s is unreadable; removed", path);
            unlink(claimed);
            pa_buf_free(&body);
            continue;
        }
        int r = post(&t, body.data ? body.data : "", body.len, deadline, &reason);
        free_target(&t);
        pa_buf_free(&body);
        if (r == POST_SENT) {
            unlink(claimed);
            stats.sent++;
            failures = 0;
            continue;
        }
        if (r == POST_REJECTED) {
            keep_rejected(claimed, path, names[i], reason.msg);
            failures = 0;
            continue;
        }
        rename(claimed, path);
        stats.failed_attempts++;
        failures++;
        /* Ended because the exit path wants the lock: it sends what is left. */
        if (deadline <= 0 && atomic_load(&abort_before_ns))
            break;
        /* At exit there is no later: use the time that is left to try again (a server that
         * resets or restarts is often back within a second), then leave the rest spooled. A
         * server that refuses connections is not coming back within the deadline: the exit
         * does not wait for it. */
        if (!respect_backoff && deadline > 0 && r != POST_UNREACHABLE && deadline - mono() > 0.3) {
            struct timespec pause = {0, 200 * 1000000L};
            nanosleep(&pause, NULL);
            i--;
            continue;
        }
        /* Exponential backoff with jitter: 1 s, 2 s, 4 s ... at most 60 s, +-50%. */
        double wait = failures >= 7 ? 60.0 : (double)(1u << (failures - 1));
        if (wait > 60)
            wait = 60;
        wait *= 0.5 + (double)(pa_rand64() % 1000) / 1000.0;
        retry_at = mono() + wait;
        if (failures == 1 || failures % 10 == 0)
            pa_log(PA_LOG_WARN,
                   "cannot reach %s (%u failure(s)); profiles are kept in %s and resent",
                   cfg->server, failures, spool_dir);
        break;
    }
    free_list(names, n);
    uint64_t rejected = atomic_load(&stats.rejected);
    if (!respect_backoff && rejected)
        pa_log(PA_LOG_WARN, "%llu profile(s) rejected by %s in this process; kept in %s/rejected",
               (unsigned long long)rejected, cfg->server, spool_dir);
    pthread_mutex_unlock(&send_lock);
}
