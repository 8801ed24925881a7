/* send.c: the spool and the HTTP uploads (see send.h).
 *
 * A spool file is "pyagent-spool 1 QUERY\n" followed by the request body; QUERY is the
 * /ingest query string (name with labels, from, until, sampleRate, spyName, format), so a
 * file left by an earlier run is resent exactly as it was meant. File names sort by time:
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../shim/log.h"

static struct pa_config cfg;
static char name_q[2048]; /* url-encoded "APP.cpu{labels}" */
static char spool_dir[1100];
static unsigned seq;
static double retry_at; /* monotonic seconds */
static unsigned failures;
static struct pa_send_stats stats;
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

static int app_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '/' || c == '-';
}

static int label_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.';
}

/* Label values go inside {k=v,...}: no ',', '}', '=' or quotes. */
static int value_ok(const char *v, size_t n) {
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] == ',' || v[i] == '}' || v[i] == '{' || v[i] == '=' || v[i] == '"' ||
            (unsigned char)v[i] < 0x20)
            return 0;
    return 1;
}

static void add_label(char *out, size_t len, int *count, const char *k, size_t kn, const char *v,
                      size_t vn) {
    size_t used = strlen(out);
    if (*count >= 30) {
        pa_log(PA_LOG_WARN, "PYAGENT_TAGS: more than 30 labels; \"%.*s\" dropped", (int)kn, k);
        return;
    }
    int w =
        snprintf(out + used, len - used, "%s%.*s=%.*s", *count ? "," : "", (int)kn, k, (int)vn, v);
    if (w < 0 || (size_t)w >= len - used) {
        out[used] = 0;
        pa_log(PA_LOG_WARN, "PYAGENT_TAGS: too long; \"%.*s\" dropped", (int)kn, k);
        return;
    }
    (*count)++;
}

/* "APP.cpu{k=v,...}" from the app name, PYAGENT_TAGS, hostname and pid. */
static void build_name(char *out, size_t len) {
    char app[256];
    size_t a = 0;
    for (const char *s = cfg.app_name; *s && a + 1 < sizeof app; s++)
        app[a++] = app_char(*s) ? *s : '_';
    app[a] = 0;
    if (!a)
        strcpy(app, "python");
    if (strcmp(app, cfg.app_name) != 0)
        pa_log(PA_LOG_WARN,
               "PYAGENT_APP_NAME=\"%.64s\" has characters outside [A-Za-z0-9_./-]; using \"%s\"",
               cfg.app_name, app);
    char labels[1500] = "";
    int count = 0;
    const char *t = cfg.tags;
    while (*t) {
        const char *end = strchr(t, ',');
        size_t n = end ? (size_t)(end - t) : strlen(t);
        const char *eq = memchr(t, '=', n);
        size_t kn = eq ? (size_t)(eq - t) : n;
        int ok = eq && kn > 0;
        for (size_t i = 0; ok && i < kn; i++)
            ok = label_char(t[i]);
        if (ok && value_ok(eq + 1, n - kn - 1))
            add_label(labels, sizeof labels, &count, t, kn, eq + 1, n - kn - 1);
        else if (n)
            pa_log(PA_LOG_WARN,
                   "PYAGENT_TAGS: \"%.*s\" is not name=value (name: [A-Za-z0-9_.], value without , "
                   "= { } \"); dropped",
                   (int)n, t);
        t += n + (end ? 1 : 0);
    }
    if (cfg.tag_host) {
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        if (value_ok(host, strlen(host)))
            add_label(labels, sizeof labels, &count, "hostname", 8, host, strlen(host));
    }
    if (cfg.tag_pid) {
        char pid[16];
        int n = snprintf(pid, sizeof pid, "%d", (int)getpid());
        add_label(labels, sizeof labels, &count, "pid", 3, pid, (size_t)n);
    }
    char raw[2000];
    /* The profile type after the app name: what the samples measure. */
    const char *type = cfg.mode == PA_MODE_WALL ? "wall" : cfg.mode == PA_MODE_GIL ? "gil" : "cpu";
    snprintf(raw, sizeof raw, "%s.%s{%s}", app, type, labels);
    char *esc = curl.escape ? curl.escape(NULL, raw, 0) : NULL;
    snprintf(out, len, "%s", esc ? esc : raw);
    if (esc)
        curl.free(esc);
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
    cfg = *c;
    if (!cfg.server[0])
        return 0;
    if (load_curl() != 0)
        return -1;
    if (cfg.spool_dir[0]) {
        snprintf(spool_dir, sizeof spool_dir, "%s", cfg.spool_dir);
    } else {
        const char *base = getenv("XDG_CACHE_HOME");
        const char *home = getenv("HOME");
        char app[200];
        size_t a = 0;
        for (const char *s = cfg.app_name; *s && a + 1 < sizeof app; s++)
            app[a++] = app_char(*s) && *s != '/' ? *s : '_';
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
    build_name(name_q, sizeof name_q);
    return 0;
}

void pa_send_fork_child(void) {
    if (!cfg.server[0])
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
    memset(&stats, 0, sizeof stats);
    build_name(name_q, sizeof name_q);
}

void pa_send_get_stats(struct pa_send_stats *st) {
    *st = stats;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The spool's *.spool files (and reclaimed *.sending-PID of dead processes), sorted. */
static char **list_spool(size_t *n, uint64_t *bytes) {
    *n = 0;
    *bytes = 0;
    DIR *d = opendir(spool_dir);
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
                snprintf(from, sizeof from, "%s/%s", spool_dir, e->d_name);
                snprintf(to, sizeof to, "%s/%.*s", spool_dir, (int)(s - e->d_name), e->d_name);
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
        snprintf(path, sizeof path, "%s/%s", spool_dir, e->d_name);
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

/* Keeps the spool under its bound by dropping the oldest files, counted. */
static void bound_spool(void) {
    size_t n;
    uint64_t bytes;
    char **names = list_spool(&n, &bytes);
    uint64_t max = (uint64_t)cfg.spool_max_mb << 20;
    size_t dropped = 0;
    for (size_t i = 0; i < n && bytes > max; i++) {
        char path[1400];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", spool_dir, names[i]);
        if (stat(path, &st) == 0 && unlink(path) == 0) {
            bytes -= (uint64_t)st.st_size;
            dropped++;
        }
    }
    if (dropped) {
        stats.spool_dropped += dropped;
        pa_log(PA_LOG_WARN,
               "spool %s is over %u MB: dropped its %zu oldest profile(s) (%llu so far)", spool_dir,
               cfg.spool_max_mb, dropped, (unsigned long long)stats.spool_dropped);
    }
    free_list(names, n);
}

int pa_send_spool(const pa_profile *p, time_t from, time_t until) {
    if (!cfg.server[0] || !spool_dir[0] || pa_profile_total(p) == 0)
        return 0;
    pa_buf body = {0};
    pa_error err;
    if (cfg.upload_pprof) {
        if (pa_pprof_encode(p, 1, &body, &err) != 0) {
            pa_log(PA_LOG_ERROR, "cannot encode the profile: %s", err.msg);
            pa_buf_free(&body);
            return -1;
        }
    } else {
        pa_profile_encode_folded(p, &body);
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
        fprintf(f,
                "pyagent-spool 1 "
                "name=%s&from=%lld&until=%lld&sampleRate=%s&spyName=pyagent&format=%s\n",
                name_q, (long long)from, (long long)until, rate ? rate : "100",
                cfg.upload_pprof ? "pprof" : "folded");
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
    bound_spool();
    return ok ? 0 : -1;
}

/* ---- HTTP ----------------------------------------------------------------------------------- */

struct reply {
    char text[512];
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

/* POSTs one spool file, on a connection of its own. */
static int post(const char *query, const char *body, size_t len, double deadline) {
    CURL *handle = curl.init();
    if (!handle)
        return POST_FAILED;
    uint64_t started = mono_ns();
    char url[8192];
    const char *slash = cfg.server[strlen(cfg.server) - 1] == '/' ? "" : "/";
    if (snprintf(url, sizeof url, "%s%singest?%s", cfg.server, slash, query) >= (int)sizeof url) {
        curl.cleanup(handle);
        return POST_REJECTED; /* cannot happen with our own spool files; never retry it */
    }
    long total_ms = (long)cfg.upload_timeout_ms, connect_ms = (long)cfg.connect_timeout_ms;
    if (deadline > 0) {
        long left = (long)((deadline - mono()) * 1000);
        if (left < 1) {
            pa_log(PA_LOG_DEBUG, "no time left to upload before exit");
            curl.cleanup(handle);
            return POST_FAILED;
        }
        if (total_ms > left)
            total_ms = left;
        if (connect_ms > left)
            connect_ms = left;
    }
    struct curl_slist *h = NULL;
    int pprof = strstr(query, "format=pprof") != NULL;
    h = curl.slist_append(h, pprof ? "Content-Type: application/octet-stream"
                                   : "Content-Type: text/plain");
    h = curl.slist_append(h, "Expect:");
    char line[1200];
    if (cfg.auth_token[0]) {
        snprintf(line, sizeof line, "Authorization: Bearer %s", cfg.auth_token);
        h = curl.slist_append(h, line);
    }
    if (cfg.tenant[0]) {
        snprintf(line, sizeof line, "X-Scope-OrgID: %s", cfg.tenant);
        h = curl.slist_append(h, line);
    }
    struct reply reply = {"", 0};
    curl.setopt(handle, CURLOPT_URL, url);
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
    curl.setopt(handle, CURLOPT_SSL_VERIFYPEER, cfg.tls_verify ? 1L : 0L);
    curl.setopt(handle, CURLOPT_SSL_VERIFYHOST, cfg.tls_verify ? 2L : 0L);
    if (cfg.ca_file[0])
        curl.setopt(handle, CURLOPT_CAINFO, cfg.ca_file);
    if (cfg.basic_user[0]) {
        curl.setopt(handle, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl.setopt(handle, CURLOPT_USERNAME, cfg.basic_user);
        curl.setopt(handle, CURLOPT_PASSWORD, cfg.basic_password);
    }
    CURLcode rc = curl.perform(handle);
    long status = 0;
    curl.getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
    curl.cleanup(handle);
    curl.slist_free_all(h);
    if (rc != CURLE_OK) {
        pa_log(PA_LOG_DEBUG, "upload to %s failed: %s", cfg.server, curl.strerror(rc));
        return rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
                       rc == CURLE_COULDNT_RESOLVE_PROXY
                   ? POST_UNREACHABLE
                   : POST_FAILED;
    }
    if (status >= 200 && status < 300)
        return POST_SENT;
    reply.text[strcspn(reply.text, "\r\n")] = 0;
    if (status >= 400 && status < 500 && status != 408 && status != 429) {
        pa_log(PA_LOG_ERROR, "%s rejected a profile (HTTP %ld: %s); it is dropped", cfg.server,
               status, reply.text);
        return POST_REJECTED;
    }
    pa_log(PA_LOG_DEBUG, "upload to %s: HTTP %ld %s", cfg.server, status, reply.text);
    return POST_FAILED;
}

/* Reads a claimed spool file: query (without the header's prefix) and body. */
static int read_spool(const char *path, char *query, size_t qlen, pa_buf *body) {
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char line[4200];
    if (!fgets(line, sizeof line, f) || strncmp(line, "pyagent-spool 1 ", 16) != 0) {
        fclose(f);
        return -1;
    }
    line[strcspn(line, "\n")] = 0;
    snprintf(query, qlen, "%s", line + 16);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        pa_buf_append(body, chunk, n);
    fclose(f);
    return 0;
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
    if (!cfg.server[0] || !spool_dir[0] || !curl.so)
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
    char **names = list_spool(&n, &bytes);
    pa_log(PA_LOG_DEBUG, "sending %zu spooled profile(s)%s", n, respect_backoff ? "" : " (final)");
    for (size_t i = 0; i < n; i++) {
        if (deadline > 0 && mono() >= deadline) {
            pa_log(PA_LOG_DEBUG, "exit deadline reached; %zu profile(s) stay in the spool", n - i);
            break;
        }
        char path[1400], claimed[1500], query[4200];
        snprintf(path, sizeof path, "%s/%s", spool_dir, names[i]);
        snprintf(claimed, sizeof claimed, "%s.sending-%d", path, (int)getpid());
        if (rename(path, claimed) != 0)
            continue; /* another process took it */
        pa_buf body = {0};
        if (read_spool(claimed, query, sizeof query, &body) != 0) {
            pa_log(PA_LOG_WARN, "spool file %s is unreadable; removed", path);
            unlink(claimed);
            pa_buf_free(&body);
            continue;
        }
        int r = post(query, body.data ? body.data : "", body.len, deadline);
        pa_buf_free(&body);
        if (r >= 0) {
            unlink(claimed);
            if (r == POST_SENT)
                stats.sent++;
            else
                stats.rejected++;
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
        wait *= 0.5 + (double)(random() % 1000) / 1000.0;
        retry_at = mono() + wait;
        if (failures == 1 || failures % 10 == 0)
            pa_log(PA_LOG_WARN,
                   "cannot reach %s (%u failure(s)); profiles are kept in %s and resent",
                   cfg.server, failures, spool_dir);
        break;
    }
    free_list(names, n);
    pthread_mutex_unlock(&send_lock);
}
