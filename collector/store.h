/* store.h: the collector's SQLite database — one row per accepted upload, grouped into series
 * (application name + canonical label string).
 *
 * Writes go through a single writer thread that commits whatever uploads are waiting in one
 * transaction (group commit): pa_coll_store_insert returns only after the COMMIT that made
 * its row durable, so an HTTP 200 is never sent for a row that a crash could take back, and
 * one fsync serves every upload that arrived meanwhile. Reads open their own connections and
 * never wait for the writer (WAL). */
#ifndef PA_COLL_STORE_H
#define PA_COLL_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/error.h"

struct pa_coll_store;

enum pa_coll_sync { PA_SYNC_FULL, PA_SYNC_NORMAL };

struct pa_coll_store_options {
    enum pa_coll_sync sync;
    int64_t retention;       /* seconds; 0 keeps everything */
    int64_t retention_every; /* seconds between retention passes; 0 picks a default */
    /* A span's rollup is built only once no upload arrived in it for this many seconds
     * (PA_COLL_ROLLUP_QUIET in the collector; 0: as soon as the span is past the grace). */
    int64_t rollup_quiet;
};

struct pa_coll_upload {
    const char *app;
    const char *labels; /* canonical "k=v,k2=v2" */
    int64_t from, until;
    uint64_t samples;
    uint64_t stacks;
    int64_t sample_rate;
    const char *spy_name;
    uint64_t dropped_lines;
    const void *profile; /* gzip-compressed pprof */
    size_t profile_len;
    const char *id; /* the client's id of this upload, or NULL/"": stored at most once */
};

int pa_coll_store_open(struct pa_coll_store **out, const char *path,
                       const struct pa_coll_store_options *opt, pa_error *err);
/* Stops the writer after the uploads already queued are committed, then closes. */
void pa_coll_store_close(struct pa_coll_store *st);

struct pa_coll_ingest_result;
/* Stores a decoded upload: its unlabelled samples (unless there are none but labelled ones)
 * and each label set's as a series of its own, under id (NULL or "": none) and, for the
 * label sets, id#N, so that a resend stores none of them twice. 0, or 503 with err. */
int pa_coll_store_ingested(struct pa_coll_store *st, const struct pa_coll_ingest_result *res,
                           const char *spy_name, const char *id, pa_error *err);
/* Queues the upload and waits for its COMMIT. 0, or 503 with err (e.g. disk full). An upload
 * whose non-empty id was stored before (and not yet removed by retention) is not stored
 * again, and still answers 0: delivery is exactly-once for a client that resends with the
 * same id, and the first body with an id is the one kept. */
int pa_coll_store_insert(struct pa_coll_store *st, const struct pa_coll_upload *u, pa_error *err);

/* Runs one retention pass now (also done periodically by the writer): deletes uploads whose
 * until is older than now - retention, and the ids received before then, forgets empty
 * series, returns free pages to the file system. *deleted gets the number of uploads
 * removed. */
int pa_coll_store_retain(struct pa_coll_store *st, int64_t now, uint64_t *deleted);

struct pa_coll_series_info {
    int64_t id;
    const char *app;
    const char *labels;
    int64_t first_from, last_until, max_span;
    uint64_t uploads, samples;
};

/* Calls fn for each series (of app, or of every app when app is NULL), ordered by app and
 * labels. A non-zero return from fn stops the walk. Returns 0 or -1 with err. */
int pa_coll_store_series(struct pa_coll_store *st, const char *app,
                         int (*fn)(void *ctx, const struct pa_coll_series_info *s), void *ctx,
                         pa_error *err);

/* Uploads are also kept pre-merged per series over each hour, 10 minutes and minute
 * (rollups), built in the background once the span is PA_COLL_ROLLUP_GRACE seconds past; an
 * upload arriving later drops the rollups it falls in (in the same transaction), and the next
 * pass rebuilds them. The spans, longest first; each divides the one before. */
#define PA_COLL_ROLLUP_LEVELS 3
extern const int64_t pa_coll_rollup_spans[PA_COLL_ROLLUP_LEVELS]; /* 3600, 600, 60 */
#define PA_COLL_ROLLUP_GRACE 300
/* A span still receiving uploads long after it ended (agents replaying spools after an
 * outage, a load of history) would be merged again at every pass, each merge thrown away
 * because another upload arrived meanwhile: its rollup waits until the span is quiet. */
#define PA_COLL_ROLLUP_QUIET 30

/* Builds the missing or dropped rollups of spans that ended before now - grace (and, with the
 * option rollup_quiet, received no upload after now - rollup_quiet).
 * *built gets how many were written. Runs in the background every few seconds; callable
 * directly. */
int pa_coll_store_compact(struct pa_coll_store *st, int64_t now, uint64_t *built);

struct pa_coll_row {
    int64_t series_id;
    int64_t from, until;
    uint64_t uploads; /* 1, or the uploads merged in a rollup */
    uint64_t samples;
    const void *profile;
    size_t profile_len;
};

/* Calls fn for every upload of the series that overlaps [from, until): an upload belongs to
 * the range when it starts before `until` and ends after `from` (a zero-length upload when
 * it starts inside), so back-to-back ranges never count an aligned upload twice. Spans (hours,
 * then 10 minutes, then minutes) that lie wholly inside the range and have a rollup, and are
 * not inside a longer span read so, come as one row each
 * (every upload starting in such a span belongs to the range, so the sum is exact); rollups
 * and uploads are read in one snapshot. */
int pa_coll_store_scan(struct pa_coll_store *st, const struct pa_coll_series_info *series,
                       int64_t from, int64_t until,
                       int (*fn)(void *ctx, const struct pa_coll_row *r), void *ctx, pa_error *err);

/* Sample counts of the series in buckets of `step` seconds from `from` (for timelines):
 * counts[i] += samples of uploads starting in [from + i*step, from + (i+1)*step). */
int pa_coll_store_timeline(struct pa_coll_store *st, const struct pa_coll_series_info *series,
                           int64_t from, int64_t step, size_t nbuckets, uint64_t *counts,
                           pa_error *err);

#endif
