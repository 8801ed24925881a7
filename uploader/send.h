/* send.h: continuous upload to a collector or a Grafana Pyroscope server.
 *
 * Normal context, on the agent thread and once more at exit. Every interval the samples taken since
 * the last upload are encoded (pprof gzip by default, or folded), written to the spool directory,
 * and the spool is sent oldest first with POST /ingest (Pyroscope's API). A failure leaves the file
 * in the spool and backs off exponentially with jitter; the spool is bounded and drops its oldest
 * files, counted, when full. libcurl is loaded with dlopen only when a server is configured,
 * so processes that do not upload never map it. */
#ifndef PA_SEND_H
#define PA_SEND_H

#include <stdint.h>
#include <time.h>

#include "../profile/profile.h"
#include "../base/config.h"

/* cfg must live as long as the process (it is referred to, not copied). */
int pa_send_init(const struct pa_config *cfg);
/* Encodes p (the samples of [from, until)) into the spool. */
int pa_send_spool(const pa_profile *p, time_t from, time_t until);
/* Sends spooled profiles, oldest first, until one fails or the deadline (monotonic seconds,
 * 0 = none) passes. respect_backoff: skip if the last failure asked to wait. With a deadline
 * (exit), a transfer in flight on another thread is asked to end, and the call returns by the
 * deadline whatever that transfer does; a refused connection ends it at once. */
void pa_send_flush(double deadline, int respect_backoff);
/* The child of a fork: its own counters; the parent's transfer in flight is dropped. */
void pa_send_fork_child(void);

struct pa_send_stats {
    uint64_t sent, failed_attempts;
    uint64_t rejected;         /* profiles a server refused, moved to rejected/ */
    uint64_t spool_dropped;    /* spooled profiles deleted by the spool's bound, never sent */
    uint64_t rejected_dropped; /* refused profiles deleted from rejected/ by its bound */
};
void pa_send_get_stats(struct pa_send_stats *st);

#endif
