/* options.h: the command line of pyagent-collector. */
#ifndef PA_COLL_OPTIONS_H
#define PA_COLL_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

struct pa_coll_options {
    const char *listen;
    const char *db;
    int64_t retention;          /* seconds, 0 = forever */
    int64_t retention_interval; /* seconds between retention passes, 0 = automatic */
    uint64_t max_body;
    uint64_t max_decompressed;
    uint64_t max_decompressed_total; /* shared by all requests in flight */
    char *token;                     /* owned (read from --token or --token-file) */
    unsigned threads;
    unsigned query_threads, max_queries, max_queries_per_client;
    unsigned max_connections, max_connections_per_client;
    unsigned query_timeout_ms, header_timeout_ms, body_timeout_ms;
    enum pa_coll_sync sync;
    unsigned grace_ms;
    char *source_from, *source_to; /* --source-root OLD=NEW, owned; NULL: no sources read */
    int64_t reject_older_than, reject_newer_than; /* seconds, 0 = no bound */
    int folded_dialects;
    int help, version;
};

/* 0; 2 with err for a usage error. */
int pa_coll_options_parse(int argc, char **argv, struct pa_coll_options *o, pa_error *err);
void pa_coll_options_free(struct pa_coll_options *o);
extern const char pa_coll_usage[];

#endif
