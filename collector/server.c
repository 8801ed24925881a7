/* server.c: libmicrohttpd glue. One idea: everything a request needs is decided on its first
 * callback (route, auth, declared size) or its last (the whole body is here), so the
 * callbacks in between only append bytes under a hard limit. */
#include "server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "body.h"
#include "connect.h"
#include "http.h"
#include "ingest.h"
#include "otlp.h"
#include "pool.h"
#include "push.h"
#include "querier.h"
#include "query.h"
#include "text.h"

struct pa_coll_server {
    struct pa_coll_server_config cfg;
    struct MHD_Daemon *d;
    atomic_int inflight;
    struct pa_coll_budget gunzip_memory;
    struct pa_coll_pool *pool;
    /* Every open connection, with the absolute deadline of what it is doing (see reaper). */
    pthread_mutex_t conns_lock;
    struct conn *conns;
    unsigned held;      /* connections in conns not being closed (see on_connection) */
    unsigned max_conns; /* --max-connections */
    uint64_t displaced; /* connections closed to make room for a newcomer */
    int64_t displaced_logged_ns;
    pthread_t reaper;
    bool reaper_started;
    atomic_bool stopping;
};

/* What a connection is doing, and so which deadline applies to it. */
enum phase {
    P_HEADERS, /* a new connection: its first request's headers */
    P_BODY,    /* a request's body */
    P_WORK,    /* the body has arrived and the request is handled: the client's deadlines do not
                * apply (decoding and storing are bounded by their own limits) */
    P_QUERY,   /* suspended while the query pool works: the query's own budget applies */
    P_ANSWER,  /* sending the answer */
    P_IDLE,    /* kept alive between requests, and the next request's headers */
};

#define KEEPALIVE_MS 30000u

struct conn {
    MHD_socket fd;
    enum phase phase;
    int64_t deadline_ns; /* 0: none */
    int64_t since_ns;    /* when it last began to wait for a request's headers */
    bool closing;        /* shut down (deadline, displaced): libmicrohttpd closes it next */
    bool late;           /* seen at its deadline with bytes unread (see reaper) */
    struct conn *prev, *next;
};

/* Room above --max-connections in libmicrohttpd's own limit, for newcomers accepted while the
 * connections they displace are being closed (see on_connection). */
#define DISPLACE_RESERVE 16u

enum route {
    R_NOT_FOUND,
    R_INGEST,
    R_HEALTH,
    R_APPS,
    R_RENDER,
    R_DIFF,
    R_HEATMAP,
    R_INDEX,
    R_PUSH,    /* Grafana Pyroscope's Push (push.h) */
    R_OTLP,    /* OpenTelemetry profiles (otlp.h) */
    R_QUERIER, /* querier.v1.QuerierService (querier.h) */
};

#define QUERIER_PREFIX "/querier.v1.QuerierService/"

/* Routes whose request is a POST body: read under max_body. */
static bool posts_body(enum route r) {
    return r == R_INGEST || r == R_PUSH || r == R_OTLP || r == R_QUERIER;
}

struct request {
    enum route route;
    uint8_t *body;
    size_t len, cap;
    size_t declared; /* Content-Length, when within the limits: the body's first allocation */
    bool too_big;
    bool answered;         /* a response was queued before the body was read */
    struct query_job *job; /* a query handed to the pool, or NULL */
};

static enum MHD_Result send_response(struct MHD_Connection *c, struct pa_coll_response *r,
                                     bool ask_auth) {
    /* The body's buffer passes to MHD, which frees it after sending. */
    struct MHD_Response *resp =
        r->body.data
            ? MHD_create_response_from_buffer(r->body.len, r->body.data, MHD_RESPMEM_MUST_FREE)
            : MHD_create_response_from_buffer(0, (char *)"", MHD_RESPMEM_PERSISTENT);
    if (resp == NULL)
        pa_buf_free(&r->body);
    r->body = (pa_buf){0};
    if (resp == NULL)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", r->content_type);
    if (r->disposition)
        MHD_add_response_header(resp, "Content-Disposition", r->disposition);
    /* Reports embed data from uploads: forbid anything but their own inline code. */
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; style-src "
                            "'unsafe-inline'; img-src data:; connect-src 'self'");
    if (r->location)
        MHD_add_response_header(resp, "Location", r->location);
    free(r->location);
    r->location = NULL;
    if (ask_auth)
        MHD_add_response_header(resp, "WWW-Authenticate", "Basic realm=\"pyagent-collector\"");
    /* Every 503 is a momentary shortage (memory, capacity, the disk): the client may retry. */
    if (r->status == 503)
        MHD_add_response_header(resp, "Retry-After", "1");
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static enum MHD_Result send_text(struct MHD_Connection *c, int status, bool ask_auth,
                                 const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static enum MHD_Result send_text(struct MHD_Connection *c, int status, bool ask_auth,
                                 const char *fmt, ...) {
    va_list ap;
    char line[1024];
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    struct pa_coll_response r = {0};
    pa_coll_respond_text(&r, status, "%s", line);
    return send_response(c, &r, ask_auth);
}

static enum route route_of(const char *url) {
    static const struct {
        const char *path;
        enum route route;
    } routes[] = {
        {"/ingest", R_INGEST}, {"/healthz", R_HEALTH}, {"/api/apps", R_APPS},
        {"/render", R_RENDER}, {"/diff", R_DIFF},      {"/heatmap", R_HEATMAP},
        {"/", R_INDEX},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(url, routes[i].path) == 0)
            return routes[i].route;
    if (strncmp(url, "/heatmap/", 9) == 0)
        return R_HEATMAP;
    /* Pyroscope's and OpenTelemetry's APIs. */
    if (strcmp(url, "/push.v1.PusherService/Push") == 0)
        return R_PUSH;
    if (strcmp(url, "/v1development/profiles") == 0)
        return R_OTLP;
    if (strncmp(url, QUERIER_PREFIX, strlen(QUERIER_PREFIX)) == 0)
        return R_QUERIER;
    return R_NOT_FOUND;
}

/* Decodes base64 into out (NUL-terminated); -1 on bad input or overflow. */
static int b64decode(const char *in, char *out, size_t outlen) {
    size_t n = 0;
    unsigned acc = 0;
    int bits = 0;
    for (; *in && *in != '='; in++) {
        int v = pa_coll_b64val((unsigned char)*in);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n + 1 >= outlen)
                return -1;
            out[n++] = (char)((acc >> bits) & 0xff);
        }
    }
    out[n] = '\0';
    return 0;
}

/* Compares without an early exit, so response time does not reveal the token's prefix. */
static bool same_secret(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    unsigned char diff = na != nb;
    for (size_t i = 0; i < na; i++)
        diff |= (unsigned char)a[i] ^ (unsigned char)b[i % (nb ? nb : 1)];
    return diff == 0;
}

/* Bearer TOKEN, or Basic with any user and TOKEN as the password (what Pyroscope clients
 * send with PYROSCOPE_BASIC_AUTH_*, and what a browser asks for). */
static bool authorized(const struct pa_coll_server *srv, struct MHD_Connection *c) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h == NULL)
        return false;
    if (strncasecmp(h, "Bearer ", 7) == 0)
        return same_secret(h + 7, srv->cfg.token);
    if (strncasecmp(h, "Basic ", 6) == 0) {
        char creds[1024];
        if (b64decode(h + 6, creds, sizeof creds) != 0)
            return false;
        const char *colon = strchr(creds, ':');
        return colon && same_secret(colon + 1, srv->cfg.token);
    }
    return false;
}

static const char *get_arg(void *ctx, const char *key) {
    return MHD_lookup_connection_value(ctx, MHD_GET_ARGUMENT_KIND, key);
}

static const char *client_addr(struct MHD_Connection *c, char *buf, size_t len) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    buf[0] = '\0';
    if (ci && ci->client_addr)
        getnameinfo(ci->client_addr,
                    ci->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                           : sizeof(struct sockaddr_in),
                    buf, (socklen_t)len, NULL, 0, NI_NUMERICHOST);
    return buf;
}

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The time a connection in phase p is given, in ms; 0: no deadline. */
static unsigned phase_ms(const struct pa_coll_server *srv, enum phase p) {
    return p == P_HEADERS                ? srv->cfg.header_timeout_ms
           : p == P_IDLE                 ? KEEPALIVE_MS
           : p == P_QUERY || p == P_WORK ? 0
                                         : srv->cfg.body_timeout_ms;
}

/* Moves the connection to phase p; its deadline counts from now. */
static void set_phase(struct pa_coll_server *srv, struct MHD_Connection *c, enum phase p) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct conn *k = ci ? ci->socket_context : NULL;
    if (k == NULL)
        return;
    unsigned ms = phase_ms(srv, p);
    int64_t now = mono_ns();
    pthread_mutex_lock(&srv->conns_lock);
    k->phase = p;
    k->deadline_ns = ms ? now + (int64_t)ms * 1000000 : 0;
    k->late = false;
    if (p == P_HEADERS || p == P_IDLE)
        k->since_ns = now;
    pthread_mutex_unlock(&srv->conns_lock);
}

/* Shuts k down: libmicrohttpd sees the connection fail and closes it itself. Under conns_lock;
 * k no longer counts against --max-connections. */
static void close_conn(struct pa_coll_server *srv, struct conn *k) {
    shutdown(k->fd, SHUT_RDWR);
    k->deadline_ns = 0;
    if (!k->closing) {
        k->closing = true;
        srv->held--;
    }
}

/* Makes room for a newcomer over --max-connections: closes the connection that has waited
 * longest for a request's headers (a new connection that has not completed its first
 * request's header, or a kept-alive one between requests), the newcomer itself when it is the
 * only one. A connection with a request under way (its body arriving, a query running, an
 * answer being sent) is never chosen. Under conns_lock. */
static void displace_one(struct pa_coll_server *srv, int64_t now) {
    struct conn *victim = NULL;
    for (struct conn *k = srv->conns; k; k = k->next)
        if (!k->closing && (k->phase == P_HEADERS || k->phase == P_IDLE) &&
            (victim == NULL || k->since_ns <= victim->since_ns))
            victim = k;
    if (victim == NULL)
        return; /* cannot happen: the newcomer waits for its headers */
    close_conn(srv, victim);
    srv->displaced++;
    if (now - srv->displaced_logged_ns >= (int64_t)10 * 1000000000) {
        srv->displaced_logged_ns = now;
        fprintf(stderr,
                "pyagent-collector: --max-connections (%u) reached: closing the connections "
                "that wait longest for a request (%llu so far)\n",
                srv->max_conns, (unsigned long long)srv->displaced);
    }
}

/* libmicrohttpd's timeout is an idle timeout: a client that sends one byte now and then
 * keeps its connection forever, and a connection whose bytes wait unread while its thread
 * handles another request for longer than the timeout is cut, though the client was never
 * idle (CI: a request's first line sent during a 70 s gunzip, the connection closed when the
 * thread came back to it). So it is off (0), and the registry gives each connection an
 * absolute deadline per phase; past it the reaper shuts the socket down (libmicrohttpd then sees
 * the connection fail and closes it itself). A connection is removed in the CLOSED notification,
 * which libmicrohttpd makes before it closes the descriptor, and the reaper holds the same lock, so
 * it never shuts down a descriptor that has been reused.
 *
 * --max-connections is enforced here too, not by libmicrohttpd alone: at its limit
 * libmicrohttpd stops accepting, and a newcomer (a health probe, an upload) would wait in the
 * listen queue until a connection ends, which idle connections from many addresses postpone
 * to the header deadline. libmicrohttpd's limit is set DISPLACE_RESERVE higher, so the
 * newcomer is accepted, and one connection past --max-connections displaces another
 * (displace_one). */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    struct pa_coll_server *srv = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct conn *k = calloc(1, sizeof *k);
        if (k == NULL || ci == NULL) {
            /* A connection the registry cannot hold would have no deadline at all (there is
             * no idle timeout of libmicrohttpd's behind it): closed at once. */
            if (ci != NULL)
                shutdown(ci->connect_fd, SHUT_RDWR);
            free(k);
            return;
        }
        int64_t now = mono_ns();
        k->fd = ci->connect_fd;
        k->phase = P_HEADERS;
        k->deadline_ns = now + (int64_t)srv->cfg.header_timeout_ms * 1000000;
        k->since_ns = now;
        pthread_mutex_lock(&srv->conns_lock);
        k->next = srv->conns;
        if (srv->conns)
            srv->conns->prev = k;
        srv->conns = k;
        if (++srv->held > srv->max_conns)
            displace_one(srv, now);
        pthread_mutex_unlock(&srv->conns_lock);
        *socket_context = k;
        return;
    }
    struct conn *k = *socket_context;
    if (k == NULL)
        return;
    pthread_mutex_lock(&srv->conns_lock);
    if (!k->closing)
        srv->held--;
    if (k->prev)
        k->prev->next = k->next;
    else
        srv->conns = k->next;
    if (k->next)
        k->next->prev = k->prev;
    pthread_mutex_unlock(&srv->conns_lock);
    free(k);
    *socket_context = NULL;
}

/* A connection at its header or body deadline whose socket holds bytes we have not read:
 * the client sent them in time, and its connection's HTTP thread was busy with another
 * request (a long gunzip). It is the collector that is late, and the client's time counts
 * from when the collector gets to those bytes: the reaper marks such a connection late and,
 * at every tick while its bytes stay unread, gives it its phase's time again from then. The
 * tick after the thread has read them (the socket is empty from then on, before the request
 * is parsed and its phase moves on) the connection has its phase's time, less at most one
 * tick, to go on. Renewing only at the deadline (as before) left it anything from nothing to
 * its phase's time, whatever it was when the thread came: CI saw a request cut after a 54 s
 * gunzip, then again after a 24 s one, its rest sent 0.5 s after the gunzip's answer within a
 * 2 s header deadline. A client that trickles its request is read as it sends (its socket is
 * empty between bytes), so it is cut as before. Under conns_lock. */
static bool unread_bytes(const struct conn *k) {
    int n = 0;
    return (k->phase == P_HEADERS || k->phase == P_BODY || k->phase == P_IDLE) &&
           ioctl(k->fd, FIONREAD, &n) == 0 && n > 0;
}

enum { REAPER_TICK_MS = 200 };

/* The reaper itself may come late: the whole collector stopped (SIGSTOP) or starved of CPU,
 * its HTTP threads with it. The time it was away (beyond a tick's slack) is the collector's,
 * not the clients': every deadline moves by it. Else, at the stall's end, a connection whose
 * request had all arrived meanwhile was cut if its thread read it before the reaper's first
 * look (no byte unread then, the deadline long past) and before the request was parsed. */
static void *reaper(void *arg) {
    struct pa_coll_server *srv = arg;
    const int64_t tick_ns = (int64_t)REAPER_TICK_MS * 1000000;
    struct timespec tick = {0, tick_ns};
    int64_t before = mono_ns();
    while (!atomic_load(&srv->stopping)) {
        nanosleep(&tick, NULL);
        int64_t now = mono_ns(), away = now - before - tick_ns;
        before = now;
        pthread_mutex_lock(&srv->conns_lock);
        for (struct conn *k = srv->conns; k; k = k->next) {
            if (k->deadline_ns && away > tick_ns)
                k->deadline_ns += away;
            if (!k->deadline_ns || (!k->late && now + tick_ns <= k->deadline_ns))
                continue;
            k->late = unread_bytes(k);
            if (k->late)
                k->deadline_ns = now + (int64_t)phase_ms(srv, k->phase) * 1000000;
            else if (now > k->deadline_ns)
                close_conn(srv, k);
        }
        pthread_mutex_unlock(&srv->conns_lock);
    }
    return NULL;
}

static enum MHD_Result do_ingest(struct pa_coll_server *srv, struct MHD_Connection *c,
                                 struct request *rq) {
    pa_error err = {""};
    int status;
    struct pa_coll_ingest_request in = {
        .name = get_arg(c, "name"),
        .from = get_arg(c, "from"),
        .until = get_arg(c, "until"),
        .sample_rate = get_arg(c, "sampleRate"),
        .spy_name = get_arg(c, "spyName"),
        .format = get_arg(c, "format"),
        .content_type = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type"),
        .content_encoding = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Encoding"),
        .body = rq->body ? rq->body : (const uint8_t *)"",
        .body_len = rq->len,
        .body_scratch = rq->body != NULL, /* freed below */
        .max_decompressed = srv->cfg.max_decompressed,
        .budget = &srv->gunzip_memory,
        .now = (int64_t)time(NULL),
        .rules = srv->cfg.rules,
    };
    struct pa_coll_ingest_result res;
    status = pa_coll_ingest_decode(&in, &res, &err);
    /* pyagentUploadId is not one of Pyroscope's parameters (its /ingest ignores those it does
     * not know): our agent's id of the upload, spooled with it, so that a resend is stored
     * once. */
    if (status == 0)
        status = pa_coll_store_ingested(srv->cfg.store, &res, in.spy_name,
                                        get_arg(c, "pyagentUploadId"), &err);
    uint64_t dropped = res.dropped_lines;
    pa_coll_ingest_result_free(&res);
    free(rq->body);
    rq->body = NULL;
    if (status != 0) {
        char addr[64], line[512];
        fprintf(stderr, "pyagent-collector: ingest from %s rejected (%d): %s\n",
                client_addr(c, addr, sizeof addr), status,
                pa_coll_one_line(line, sizeof line, err.msg));
        return send_text(c, status, false, "%s", err.msg);
    }
    if (dropped)
        return send_text(c, 200, false, "ok: dropped %llu line(s) longer than %d bytes",
                         (unsigned long long)dropped, PA_COLL_MAX_LINE);
    return send_text(c, 200, false, "ok");
}

/* Push and OTLP: decoded and stored on the HTTP thread, as /ingest. */
static enum MHD_Result do_proto(struct pa_coll_server *srv, struct MHD_Connection *c,
                                struct request *rq) {
    struct pa_coll_proto_request in = {
        .content_type = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type"),
        .content_encoding = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Encoding"),
        .body = rq->body ? rq->body : (const uint8_t *)"",
        .body_len = rq->len,
        .max_decompressed = srv->cfg.max_decompressed,
        .budget = &srv->gunzip_memory,
        .now = (int64_t)time(NULL),
        .rules = srv->cfg.rules,
    };
    struct pa_coll_response r = {0};
    if (rq->route == R_PUSH)
        pa_coll_handle_push(srv->cfg.store, &in, &r);
    else
        pa_coll_handle_otlp(srv->cfg.store, &in, &r);
    free(rq->body);
    rq->body = NULL;
    if (r.status >= 400) {
        char addr[64], line[512];
        fprintf(stderr, "pyagent-collector: %s from %s rejected (%d): %s\n",
                rq->route == R_PUSH ? "push" : "otlp", client_addr(c, addr, sizeof addr), r.status,
                pa_coll_one_line(line, sizeof line, r.body.data ? r.body.data : ""));
    }
    return send_response(c, &r, false);
}

/* Fills r for a GET on a query route. On a query worker, with the connection suspended: its
 * headers and arguments stay where libmicrohttpd keeps them until it is resumed. */
static void answer_query(struct pa_coll_store *st, struct MHD_Connection *c, const char *url,
                         enum route route, struct pa_coll_response *r) {
    struct pa_coll_params q = {get_arg, c};
    int64_t now = (int64_t)time(NULL);
    switch (route) {
    case R_APPS:
        pa_coll_handle_apps(st, &q, now, r);
        break;
    case R_RENDER:
        pa_coll_handle_render(st, &q, now, r);
        break;
    case R_DIFF:
        pa_coll_handle_diff(st, &q, now, r);
        break;
    case R_HEATMAP:
        pa_coll_handle_heatmap(st, &q, url[8] == '/' ? url + 9 : NULL, now, r);
        break;
    default:
        pa_coll_handle_index(st, &q, now, r);
        break;
    }
}

/* A query handed to the pool; its connection is suspended until the answer is ready. */
struct query_job {
    struct pa_coll_store *store;
    struct MHD_Connection *c;
    enum route route;
    char *url;
    struct pa_coll_response resp;
    atomic_bool done;
    uint8_t *body; /* R_QUERIER: the request message */
    size_t len;
    char *content_type;
};

static void run_query(void *arg, bool cancelled) {
    struct query_job *j = arg;
    if (cancelled)
        pa_coll_respond_text(&j->resp, 503, "the collector is shutting down; retry later");
    else if (j->route == R_QUERIER)
        pa_coll_handle_querier(j->store, j->url + strlen(QUERIER_PREFIX), j->content_type,
                               j->body ? j->body : (const uint8_t *)"", j->len, (int64_t)time(NULL),
                               &j->resp);
    else
        answer_query(j->store, j->c, j->url, j->route, &j->resp);
    atomic_store(&j->done, true);
    MHD_resume_connection(j->c);
}

static void query_job_free(struct query_job *j) {
    if (j == NULL)
        return;
    pa_buf_free(&j->resp.body);
    free(j->resp.location);
    free(j->url);
    free(j->body);
    free(j->content_type);
    free(j);
}

static enum MHD_Result do_get(struct pa_coll_server *srv, struct MHD_Connection *c, const char *url,
                              struct request *rq) {
    if (rq->route == R_HEALTH)
        return send_text(c, 200, false, "ok");
    if (rq->job) { /* resumed: the answer is ready */
        enum MHD_Result rc = send_response(c, &rq->job->resp, false);
        query_job_free(rq->job);
        rq->job = NULL;
        return rc;
    }
    struct query_job *j = calloc(1, sizeof *j);
    if (j == NULL || (j->url = strdup(url)) == NULL) {
        free(j);
        return send_text(c, 503, false, "out of memory; retry later");
    }
    j->store = srv->cfg.store;
    j->c = c;
    j->route = rq->route;
    if (rq->route == R_QUERIER) { /* the body goes with the job */
        const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
        j->body = rq->body;
        j->len = rq->len;
        rq->body = NULL;
        j->content_type = ct ? strdup(ct) : NULL;
    }
    char addr[64];
    pa_error err = {""};
    /* Suspended before it is queued, so that a worker may resume it at once. A refusal is
     * answered the same way, on the call that follows the resume. */
    rq->job = j;
    MHD_suspend_connection(c);
    int status =
        pa_coll_pool_submit(srv->pool, client_addr(c, addr, sizeof addr), run_query, j, &err);
    if (status) {
        pa_coll_respond_text(&j->resp, status, "%s", err.msg);
        atomic_store(&j->done, true);
        MHD_resume_connection(c);
    }
    return MHD_YES;
}

/* Answers a request on its first call: MHD then sends it without reading the body. */
static enum MHD_Result reject(struct request *rq, struct MHD_Connection *c, int status,
                              bool ask_auth, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static enum MHD_Result reject(struct request *rq, struct MHD_Connection *c, int status,
                              bool ask_auth, const char *fmt, ...) {
    va_list ap;
    char line[1024];
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    rq->answered = true;
    return send_text(c, status, ask_auth, "%s", line);
}

/* What the header walk finds; see framing_error. */
struct framing {
    unsigned content_length, transfer_encoding;
    bool te_not_chunked;
    const char *bad; /* first malformed field's reason, or NULL */
};

/* RFC 9110's tchar: what a field name may contain. */
static bool is_tchar(unsigned char ch) {
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static enum MHD_Result framing_field(void *cls, enum MHD_ValueKind kind, const char *key,
                                     size_t key_size, const char *value, size_t value_size) {
    (void)kind;
    struct framing *f = cls;
    for (size_t i = 0; i < key_size && !f->bad; i++)
        if (!is_tchar((unsigned char)key[i]))
            f->bad = "a header name contains a character other than a token's";
    for (size_t i = 0; value && i < value_size && !f->bad; i++) {
        unsigned char ch = (unsigned char)value[i];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            f->bad = "a header value contains a control character (CR, LF, NUL, ...)";
    }
    if (key_size == 0 && !f->bad)
        f->bad = "a header has an empty name";
    if (strcasecmp(key, "Content-Length") == 0)
        f->content_length++;
    if (strcasecmp(key, "Transfer-Encoding") == 0) {
        f->transfer_encoding++;
        f->te_not_chunked |= value == NULL || strcasecmp(value, "chunked") != 0;
    }
    return MHD_YES;
}

/* The framing checks RFC 9112 §6 asks for that libmicrohttpd 0.9.75 does not make: a request
 * whose body length two parsers could read differently (a proxy in front and us) is the
 * basis of request smuggling. NULL when the headers are unambiguous, else the reason. */
static const char *framing_error(struct MHD_Connection *c) {
    struct framing f = {0};
    MHD_get_connection_values_n(c, MHD_HEADER_KIND, framing_field, &f);
    if (f.bad)
        return f.bad;
    if (f.content_length > 1)
        return "more than one Content-Length header";
    if (f.transfer_encoding > 1)
        return "more than one Transfer-Encoding header";
    if (f.transfer_encoding && f.te_not_chunked)
        return "Transfer-Encoding other than 'chunked'";
    if (f.transfer_encoding && f.content_length)
        return "both Content-Length and Transfer-Encoding";
    return NULL;
}

static enum MHD_Result first_call(struct pa_coll_server *srv, struct MHD_Connection *c,
                                  const char *url, const char *method, struct request *rq) {
    /* Answered on the first call, so libmicrohttpd reads nothing more and closes. */
    const char *framing = framing_error(c);
    if (framing)
        return reject(rq, c, 400, false, "bad request framing: %s", framing);
    rq->route = route_of(url);
    if (rq->route == R_NOT_FOUND)
        return reject(rq, c, 404, false, "no such endpoint: %.200s (see docs/collector-api.md)",
                      url);
    if (srv->cfg.token && rq->route != R_HEALTH && !authorized(srv, c))
        return reject(rq, c, 401, true,
                      "unauthorized: send 'Authorization: Bearer TOKEN' (or Basic with the "
                      "token as password)");
    bool post = strcmp(method, "POST") == 0;
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    if (posts_body(rq->route) ? !post : !get)
        return reject(rq, c, 405, false, "method %.16s not allowed on %.200s (use %s)", method, url,
                      posts_body(rq->route) ? "POST" : "GET");
    if (posts_body(rq->route)) {
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Expect");
        unsigned long long n = cl ? strtoull(cl, NULL, 10) : 0;
        /* A client that waits for "100 Continue" gets the 413 before sending anything. One
         * that sends at once gets it after the body, read and discarded, unless the body is
         * absurdly large: closing mid-send makes most clients report a broken pipe instead
         * of the status, so that is kept for bodies no agent would send. */
        if (n > srv->cfg.max_body &&
            ((expect && strcasecmp(expect, "100-continue") == 0) || n > 4 * srv->cfg.max_body))
            return reject(rq, c, 413, false, "body: %llu bytes exceed the limit of %zu bytes", n,
                          srv->cfg.max_body);
        rq->too_big = n > srv->cfg.max_body;
        /* Room for the whole body at once (no realloc and copy as it arrives), up to 1 MiB:
         * a declared length costs the client nothing, so it reserves no more than that. */
        rq->declared = n > (1u << 20) ? (1u << 20) : (size_t)n;
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    (void)version;
    struct pa_coll_server *srv = cls;
    struct request *rq = *con_cls;
    if (rq == NULL) {
        if ((rq = calloc(1, sizeof *rq)) == NULL)
            return MHD_NO;
        *con_cls = rq;
        atomic_fetch_add(&srv->inflight, 1);
        enum MHD_Result rc = first_call(srv, c, url, method, rq);
        set_phase(srv, c, rq->answered ? P_ANSWER : P_BODY);
        return rc;
    }
    /* A response queued on the first call ends the request: ignore any body. */
    if (rq->answered) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (!posts_body(rq->route) || rq->too_big)
            return MHD_YES;
        if (rq->len + n > srv->cfg.max_body) {
            /* Keep reading (and discarding) so the client gets a proper 413 at the end. */
            rq->too_big = true;
            free(rq->body);
            rq->body = NULL;
            return MHD_YES;
        }
        if (rq->len + n > rq->cap) {
            size_t cap = rq->cap ? rq->cap : rq->declared > 65536 ? rq->declared : 65536;
            while (cap < rq->len + n)
                cap *= 2;
            uint8_t *b = realloc(rq->body, cap);
            if (b == NULL)
                return MHD_NO;
            rq->body = b;
            rq->cap = cap;
        }
        memcpy(rq->body + rq->len, upload_data, n);
        rq->len += n;
        return MHD_YES;
    }
    if (rq->job && !atomic_load(&rq->job->done))
        return MHD_YES; /* woken before the answer is ready: keep waiting */
    /* The body is all here: the client kept its deadline, and handling it (a gunzip of up to
     * --max-decompressed, a store) may outlast what is left of it on a loaded machine. */
    if (!rq->job)
        set_phase(srv, c, P_WORK);
    enum MHD_Result rc;
    if (rq->too_big && !rq->job)
        rc = send_text(c, 413, false, "body: more than the limit of %zu bytes", srv->cfg.max_body);
    else if (rq->route == R_INGEST)
        rc = do_ingest(srv, c, rq);
    else if (rq->route == R_PUSH || rq->route == R_OTLP)
        rc = do_proto(srv, c, rq);
    else
        rc = do_get(srv, c, url, rq);
    set_phase(srv, c, rq->job ? P_QUERY : P_ANSWER);
    return rc;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)toe;
    struct pa_coll_server *srv = cls;
    struct request *rq = *con_cls;
    if (rq == NULL)
        return;
    free(rq->body);
    query_job_free(rq->job);
    free(rq);
    *con_cls = NULL;
    set_phase(srv, c, P_IDLE);
    atomic_fetch_sub(&srv->inflight, 1);
}

int pa_coll_parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *sslen,
                         pa_error *err) {
    char host[256];
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon[1] == '\0') {
        pa_fail(err, "--listen: '%s' is not ADDR:PORT (e.g. 127.0.0.1:4040)", s);
        return -1;
    }
    size_t hlen = (size_t)(colon - s);
    const char *h = s;
    if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']')
        h++, hlen -= 2;
    if (hlen >= sizeof host) {
        pa_fail(err, "--listen: the address in '%s' is too long", s);
        return -1;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port < 0 || port > 65535) {
        pa_fail(err, "--listen: '%s' is not a port number (0-65535)", colon + 1);
        return -1;
    }
    struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai;
    int rc = getaddrinfo(hlen ? host : "0.0.0.0", colon + 1, &hints, &ai);
    if (rc != 0) {
        pa_fail(err, "--listen: cannot resolve '%s': %s", host, gai_strerror(rc));
        return -1;
    }
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *sslen = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

int pa_coll_server_start(struct pa_coll_server **out, const struct pa_coll_server_config *cfg,
                         unsigned *port, pa_error *err) {
    struct sockaddr_storage ss;
    socklen_t sslen;
    if (pa_coll_parse_listen(cfg->listen, &ss, &sslen, err) != 0)
        return -1;
    struct pa_coll_server *srv = calloc(1, sizeof *srv);
    if (srv == NULL)
        return -1;
    srv->cfg = *cfg;
    srv->gunzip_memory.limit = cfg->max_decompressed_total ? cfg->max_decompressed_total : SIZE_MAX;
    struct pa_coll_pool_config pc = {
        .threads = cfg->query_threads ? cfg->query_threads : 2,
        .max_total = cfg->max_queries ? cfg->max_queries : 16,
        .max_per_client = cfg->max_queries_per_client ? cfg->max_queries_per_client : 4,
        .budget_ms = cfg->query_timeout_ms,
    };
    if (pa_coll_pool_start(&srv->pool, &pc) != 0) {
        pa_fail(err, "cannot start the query threads");
        free(srv);
        return -1;
    }
    if (srv->cfg.header_timeout_ms == 0)
        srv->cfg.header_timeout_ms = 10000;
    if (srv->cfg.body_timeout_ms == 0)
        srv->cfg.body_timeout_ms = 60000;
    pthread_mutex_init(&srv->conns_lock, NULL);
    srv->max_conns = cfg->max_connections ? cfg->max_connections : 1024;
    unsigned reserve = srv->max_conns < DISPLACE_RESERVE ? srv->max_conns : DISPLACE_RESERVE;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG | (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    srv->d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_THREAD_POOL_SIZE, cfg->threads, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)0,
        MHD_OPTION_CONNECTION_LIMIT, srv->max_conns + reserve, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        cfg->max_connections_per_client, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)256 * 1024,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)511, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
        srv, MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv, MHD_OPTION_END);
    if (srv->d == NULL) {
        pa_fail(err, "cannot listen on %s (address in use or not available?)", cfg->listen);
        pa_coll_pool_free(srv->pool);
        pthread_mutex_destroy(&srv->conns_lock);
        free(srv);
        return -1;
    }
    srv->reaper_started = pthread_create(&srv->reaper, NULL, reaper, srv) == 0;
    if (!srv->reaper_started) {
        pa_fail(err, "cannot start the connection reaper thread");
        pa_coll_server_stop(srv, 0);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->d, MHD_DAEMON_INFO_BIND_PORT);
    *port = di ? di->port : 0;
    *out = srv;
    return 0;
}

void pa_coll_server_stop(struct pa_coll_server *srv, unsigned grace_ms) {
    MHD_socket ls = MHD_quiesce_daemon(srv->d);
    struct timespec tick = {0, 10 * 1000 * 1000};
    for (unsigned waited = 0; atomic_load(&srv->inflight) > 0 && waited < grace_ms; waited += 10)
        nanosleep(&tick, NULL);
    /* Queries still queued are answered 503 and running ones finish (within their budget), so
     * that no connection is left suspended when the daemon stops. */
    pa_coll_pool_stop(srv->pool);
    atomic_store(&srv->stopping, true);
    if (srv->reaper_started)
        pthread_join(srv->reaper, NULL);
    MHD_stop_daemon(srv->d);
    pa_coll_pool_free(srv->pool);
    pthread_mutex_destroy(&srv->conns_lock);
    if (ls != MHD_INVALID_SOCKET)
        close(ls);
    free(srv);
}
