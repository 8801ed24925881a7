/* body.h: the transport layers of an ingest body, peeled before a profile parser sees it —
 * gzip (bounded, so a 1 MB bomb cannot become 10 GB), multipart/form-data (Pyroscope's pprof
 * uploads put the profile in the field "profile"), and the 64 KiB line limit of folded text.
 * Pure functions over buffers: the fuzz target drives them directly. */
#ifndef PA_COLL_BODY_H
#define PA_COLL_BODY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/error.h"

#define PA_COLL_MAX_LINE 65536 /* Pyroscope's folded line limit */

bool pa_coll_is_gzip(const uint8_t *p, size_t n);

/* Memory shared by all requests in flight (decompression buffers): limit bytes in total, so
 * that N concurrent bombs cost one budget, not N times the per-request limit. */
struct pa_coll_budget {
    atomic_size_t used;
    size_t limit;
};

/* One request's part of a budget; pa_coll_share_release gives all of it back at once. */
struct pa_coll_share {
    struct pa_coll_budget *budget; /* NULL: unbounded (unit tests, fuzzing) */
    size_t taken;
};

/* Takes n more bytes; false (nothing taken) when that would pass the budget's limit. */
bool pa_coll_share_take(struct pa_coll_share *s, size_t n);
void pa_coll_share_release(struct pa_coll_share *s);

/* Inflates a gzip stream (concatenated members included) into a malloc'ed buffer of at most
 * limit bytes, its memory taken from share as the buffer grows (released by the caller, after
 * freeing the buffer). Returns 0; 413 when the output would exceed limit; 503 when the shared
 * budget is spent (the client should retry); 422 when the stream is corrupt or truncated. err
 * gets a one-line reason. */
int pa_coll_gunzip(const uint8_t *in, size_t n, size_t limit, struct pa_coll_share *share,
                   uint8_t **out, size_t *outlen, pa_error *err);

/* Gzip-compresses a buffer (used for stored blobs). 0 or -1. */
int pa_coll_gzip(const uint8_t *in, size_t n, uint8_t **out, size_t *outlen);

/* Finds form field `field` in a multipart/form-data body whose Content-Type header is
 * content_type. *data points into body. 0, or 422 with err. */
int pa_coll_multipart_field(const char *content_type, const uint8_t *body, size_t n,
                            const char *field, const uint8_t **data, size_t *datalen,
                            pa_error *err);

bool pa_coll_is_multipart(const char *content_type);

/* Removes, in place, every line longer than maxline bytes (newline excluded); returns how many
 * were removed. *n is updated. */
size_t pa_coll_drop_long_lines(uint8_t *buf, size_t *n, size_t maxline);

#endif
