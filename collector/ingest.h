/* ingest.h: from one POST /ingest request (query parameters, headers, body) to the row the
 * store keeps — or to a 4xx status and a one-line reason. No I/O: the HTTP layer collects the
 * request, the fuzz target calls this directly. */
#ifndef PA_COLL_INGEST_H
#define PA_COLL_INGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "body.h"
#include "profile.h"
#include "name.h"
#include "store.h"

/* What an upload must meet beyond being well formed, set by the collector's options. Zeroed:
 * no time window and every folded dialect the profile library reads. */
struct pa_coll_ingest_rules {
    int64_t reject_older_than; /* seconds: a profile not after now - this is refused; 0: none */
    int64_t reject_newer_than; /* seconds: a profile not before now + this is refused; 0: none */
    bool folded_strict;        /* Pyroscope's folded path: flamegraph.pl lines only, the type
                                  from the name's suffix (cpu, itimer, wall or none) */
};

struct pa_coll_ingest_request {
    const char *name, *from, *until, *sample_rate, *spy_name, *format;
    const char *content_type, *content_encoding;
    const uint8_t *body;
    size_t body_len;
    bool body_scratch; /* the caller discards body afterwards: decoding may edit it in place */
    size_t max_decompressed;       /* bound on any gunzip output */
    struct pa_coll_budget *budget; /* decompression memory shared with other requests, or NULL */
    int64_t now;
    int64_t time_ns; /* the profile's own time when the caller read it (0: pprof's time_nanos,
                        else from) */
    struct pa_coll_ingest_rules rules;
};

/* The samples of one label set (pprof sample labels, or pyagent's labels:TEXT frames): a
 * series of its own, the upload's labels and theirs. */
struct pa_coll_ingest_part {
    char *labels; /* canonical */
    uint64_t samples, stacks;
    uint8_t *blob;
    size_t blob_len;
};

struct pa_coll_ingest_result {
    struct pa_coll_series series;
    char *labels; /* canonical */
    int64_t from, until, sample_rate;
    uint64_t samples, stacks, dropped_lines; /* samples and stacks: the unlabelled ones */
    uint8_t *blob;                           /* the unlabelled samples as gzip-compressed pprof */
    size_t blob_len;
    char *typed_app; /* "APP.MODE" for a pprof upload named "APP" (NULL: series.app as is) */
    struct pa_coll_ingest_part *parts; /* the labelled samples, per label set */
    size_t nparts;
};

/* 0, or an HTTP status (400, 413, 415, 422, 503) with err. The result must be freed either way. */
int pa_coll_ingest_decode(const struct pa_coll_ingest_request *rq,
                          struct pa_coll_ingest_result *res, pa_error *err);
void pa_coll_ingest_result_free(struct pa_coll_ingest_result *res);

/* The row the store keeps for a decoded upload (pointers into res, which must outlive it). */
struct pa_coll_upload pa_coll_upload_of(const struct pa_coll_ingest_result *res,
                                        const char *spy_name);

/* The top-level time_nanos (9), duration_nanos (10) and period (12) of a plain pprof, read
 * without decoding the rest (each left as it was when absent); a malformed profile is left for
 * the full decoder to refuse. */
void pa_coll_pprof_times(const uint8_t *p, size_t n, uint64_t *time_ns, uint64_t *dur_ns,
                         uint64_t *period);
/* The stored form of a profile (uploads and rollups alike): gzip'd pprof. 0 or -1. */
int pa_coll_profile_blob(const pa_profile *p, uint8_t **out, size_t *len);

#endif
