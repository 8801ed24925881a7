/* ingest.h: from one POST /ingest request (query parameters, headers, body) to the row the
 * store keeps — or to a 4xx status and a one-line reason. No I/O: the HTTP layer collects the
 * request, the fuzz target calls this directly. */
#ifndef PA_COLL_INGEST_H
#define PA_COLL_INGEST_H

#include <stddef.h>
#include <stdint.h>

#include "body.h"
#include "profile.h"
#include "name.h"
#include "store.h"

struct pa_coll_ingest_request {
    const char *name, *from, *until, *sample_rate, *spy_name, *format;
    const char *content_type, *content_encoding;
    const uint8_t *body;
    size_t body_len;
    size_t max_decompressed;       /* bound on any gunzip output */
    struct pa_coll_budget *budget; /* decompression memory shared with other requests, or NULL */
    int64_t now;
};

struct pa_coll_ingest_result {
    struct pa_coll_series series;
    char *labels; /* canonical */
    int64_t from, until, sample_rate;
    uint64_t samples, stacks, dropped_lines;
    uint8_t *blob; /* the profile as gzip-compressed pprof */
    size_t blob_len;
    char *typed_app; /* "APP.MODE" for a pprof upload named "APP" (NULL: series.app as is) */
};

/* 0, or an HTTP status (400, 413, 415, 422, 503) with err. The result must be freed either way. */
int pa_coll_ingest_decode(const struct pa_coll_ingest_request *rq,
                          struct pa_coll_ingest_result *res, pa_error *err);
void pa_coll_ingest_result_free(struct pa_coll_ingest_result *res);

/* The row the store keeps for a decoded upload (pointers into res, which must outlive it). */
struct pa_coll_upload pa_coll_upload_of(const struct pa_coll_ingest_result *res,
                                        const char *spy_name);

/* The stored form of a profile (uploads and rollups alike): gzip'd pprof. 0 or -1. */
int pa_coll_profile_blob(const pa_profile *p, uint8_t **out, size_t *len);

#endif
