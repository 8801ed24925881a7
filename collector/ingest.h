/* ingest.h: from one POST /ingest request (query parameters, headers, body) to the row the
 * store keeps — or to a 4xx status and a one-line reason. No I/O: the HTTP layer collects the
 * request, the fuzz target calls this directly. */
#ifndef PA_COLL_INGEST_H
#define PA_COLL_INGEST_H

#include <stddef.h>
#include <stdint.h>

#include "name.h"

struct pa_coll_ingest_request {
    const char *name, *from, *until, *sample_rate, *spy_name, *format;
    const char *content_type, *content_encoding;
    const uint8_t *body;
    size_t body_len;
    size_t max_decompressed; /* bound on any gunzip output */
    int64_t now;
};

struct pa_coll_ingest_result {
    struct pa_coll_series series;
    char *labels; /* canonical */
    int64_t from, until, sample_rate;
    uint64_t samples, stacks, dropped_lines;
    uint8_t *blob; /* the profile as gzip-compressed pprof */
    size_t blob_len;
};

/* 0, or an HTTP status (400, 413, 415, 422) with msg. The result must be freed either way. */
int pa_coll_ingest_decode(const struct pa_coll_ingest_request *rq,
                          struct pa_coll_ingest_result *res, char *msg, size_t msglen);
void pa_coll_ingest_result_free(struct pa_coll_ingest_result *res);

#endif
