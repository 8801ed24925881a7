/* main.c: pyagent-collector's entry — parse options, open the store, serve until SIGTERM or
 * SIGINT, then stop in order: no new connections, in-flight requests finish (their uploads
 * committed and answered), the writer drains, the database closes cleanly. */
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "options.h"
#include "pyagent_version.h"
#include "report.h"
#include "server.h"
#include "store.h"

int main(int argc, char **argv) {
    struct pa_coll_options o;
    pa_error err = {""};
    int rc = pa_coll_options_parse(argc, argv, &o, &err);
    if (rc != 0) {
        fprintf(stderr, "pyagent-collector: %s\n(see pyagent-collector --help)\n", err.msg);
        pa_coll_options_free(&o);
        return rc;
    }
    if (o.help || o.version) {
        fputs(o.help ? pa_coll_usage : PA_VERSION_LINE("pyagent-collector"), stdout);
        pa_coll_options_free(&o);
        return 0;
    }

    /* Request buffers (bodies, decompressed bodies) of 1 MiB or more are mapped and returned to
     * the system when freed. glibc's default raises this threshold after each such free, so
     * large buffers then come from per-thread arenas that keep their memory: the total bound on
     * decompression memory would hold for live buffers but not for the process's size. */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    /* Fixing that threshold also fixes the trim threshold at glibc's 128 KiB, below what one
     * upload's decode uses (body, profile, pprof, zlib's state): every upload then handed its
     * pages back (madvise) and faulted them in again, a tenth of ingest's CPU. An arena now
     * keeps up to 4 MiB of free memory at its top, a few uploads' worth; buffers of 1 MiB or
     * more are still mapped and unmapped, so the bound above holds. */
    mallopt(M_TRIM_THRESHOLD, 4 << 20);

    /* Signals are taken synchronously by this thread; every thread started below inherits
     * the blocked mask, so none of them is interrupted by SIGTERM. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (o.source_from)
        pa_coll_report_set_source_root(o.source_from, o.source_to);

    struct pa_coll_store *st;
    struct pa_coll_store_options so = {.sync = o.sync,
                                       .retention = o.retention,
                                       .retention_every = o.retention_interval,
                                       .rollup_quiet = PA_COLL_ROLLUP_QUIET};
    if (pa_coll_store_open(&st, o.db, &so, &err) != 0) {
        fprintf(stderr, "pyagent-collector: %s\n", err.msg);
        pa_coll_options_free(&o);
        return 1;
    }
    struct pa_coll_server *srv;
    struct pa_coll_server_config cfg = {
        .listen = o.listen,
        .threads = o.threads,
        .query_threads = o.query_threads,
        .max_queries = o.max_queries,
        .max_queries_per_client = o.max_queries_per_client,
        .query_timeout_ms = o.query_timeout_ms,
        .max_connections = o.max_connections,
        .max_connections_per_client = o.max_connections_per_client,
        .header_timeout_ms = o.header_timeout_ms,
        .body_timeout_ms = o.body_timeout_ms,
        .max_body = o.max_body,
        .max_decompressed = o.max_decompressed,
        .max_decompressed_total = o.max_decompressed_total,
        .token = o.token,
        .rules = {.reject_older_than = o.reject_older_than,
                  .reject_newer_than = o.reject_newer_than,
                  .folded_strict = !o.folded_dialects},
        .store = st,
    };
    unsigned port;
    if (pa_coll_server_start(&srv, &cfg, &port, &err) != 0) {
        fprintf(stderr, "pyagent-collector: %s\n", err.msg);
        pa_coll_store_close(st);
        pa_coll_options_free(&o);
        return 1;
    }
    char host[300];
    const char *colon = strrchr(o.listen, ':');
    snprintf(host, sizeof host, "%.*s", (int)(colon - o.listen), o.listen);
    printf("pyagent-collector: listening on http://%s:%u/ (db %s, retention %llds%s)\n",
           *host ? host : "0.0.0.0", port, o.db, (long long)o.retention,
           o.token ? ", token required" : "");
    fflush(stdout);

    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "pyagent-collector: %s received, finishing requests in flight\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT");
    pa_coll_server_stop(srv, o.grace_ms);
    pa_coll_store_close(st);
    fprintf(stderr, "pyagent-collector: stopped\n");
    pa_coll_options_free(&o);
    return 0;
}
