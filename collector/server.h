/* server.h: the HTTP front of the collector — libmicrohttpd with a thread pool, routing,
 * token auth, request-body limits, and a graceful stop that lets in-flight requests finish. */
#ifndef PA_COLL_SERVER_H
#define PA_COLL_SERVER_H

#include <stddef.h>
#include <sys/socket.h>

#include "ingest.h"
#include "store.h"

struct pa_coll_server_config {
    const char *listen;     /* ADDR:PORT, [ADDR6]:PORT or :PORT */
    unsigned threads;       /* HTTP threads: ingest, /healthz, and handing queries over */
    unsigned query_threads; /* the query pool (pool.h) */
    unsigned max_queries, max_queries_per_client;
    unsigned query_timeout_ms;
    unsigned max_connections, max_connections_per_client;
    unsigned header_timeout_ms, body_timeout_ms; /* absolute, see server.c */
    size_t max_body;
    size_t max_decompressed;
    size_t max_decompressed_total;     /* gunzip memory of all requests in flight together */
    const char *token;                 /* NULL: no auth */
    struct pa_coll_ingest_rules rules; /* what every upload must meet (ingest.h) */
    struct pa_coll_store *store;
};

struct pa_coll_server;

/* Parses ADDR:PORT, [ADDR6]:PORT or :PORT (all interfaces). 0, or -1 with err. */
int pa_coll_parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *sslen,
                         pa_error *err);

/* Binds and starts serving. *port gets the bound port (useful with port 0). 0 or -1 + err. */
int pa_coll_server_start(struct pa_coll_server **out, const struct pa_coll_server_config *cfg,
                         unsigned *port, pa_error *err);
/* Stops accepting, waits up to grace_ms for requests in flight, then stops. */
void pa_coll_server_stop(struct pa_coll_server *srv, unsigned grace_ms);

#endif
