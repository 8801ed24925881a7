/* pool.h: where queries run — a few low-priority worker threads of their own, behind limits on
 * how many queries may be admitted at once (in total and per client address), each with a time
 * budget. Queries never run on, or wait for, the threads that serve /ingest and /healthz: a
 * client that sends heavy queries can only fill this pool, and past its limits gets a 503. */
#ifndef PA_COLL_POOL_H
#define PA_COLL_POOL_H

#include <stdbool.h>
#include <stddef.h>

#include "../base/error.h"

struct pa_coll_pool_config {
    unsigned threads;        /* worker threads */
    unsigned max_total;      /* queries admitted at once (queued or running) */
    unsigned max_per_client; /* of which from one client address */
    unsigned budget_ms;      /* time budget of one query; 0: none */
};

struct pa_coll_pool;

/* 0, or -1 (threads could not be started). */
int pa_coll_pool_start(struct pa_coll_pool **out, const struct pa_coll_pool_config *cfg);

/* Admits a job from client: 0, and run(arg, false) is later called on a worker thread with
 * the time budget armed; or 503 with err when a limit is reached (run is never called). */
int pa_coll_pool_submit(struct pa_coll_pool *p, const char *client,
                        void (*run)(void *arg, bool cancelled), void *arg, pa_error *err);

/* Jobs still queued are run with cancelled = true (so that each is answered), the running ones
 * finish, the threads are joined; from then on every submit gets a 503. */
void pa_coll_pool_stop(struct pa_coll_pool *p);
/* Frees a stopped pool, once nothing can submit to it any more. */
void pa_coll_pool_free(struct pa_coll_pool *p);

/* On a worker thread: whether the running query has used up its time budget. Work that can be
 * long (merging uploads) checks this and stops with a 503. Elsewhere always false. */
bool pa_coll_budget_spent(void);

#endif
