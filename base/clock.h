/* clock.h: clock readings in nanoseconds, the unit every part of the agent counts time in.
 *
 * Async-signal-safe (clock_gettime is), so the handler uses them too. A clock that cannot be
 * read (a thread's CPU clock after the thread ended) reads 0. */
#ifndef PA_CLOCK_H
#define PA_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t pa_ts_ns(const struct timespec *ts) {
    return (uint64_t)ts->tv_sec * 1000000000ULL + (uint64_t)ts->tv_nsec;
}

static inline uint64_t pa_clock_ns(clockid_t clock) {
    struct timespec ts;
    if (clock_gettime(clock, &ts) != 0)
        return 0;
    return pa_ts_ns(&ts);
}

static inline uint64_t pa_mono_ns(void) {
    return pa_clock_ns(CLOCK_MONOTONIC);
}

/* An absolute time n nanoseconds after *t (for clock_nanosleep and timed waits). */
static inline void pa_ts_add_ns(struct timespec *t, uint64_t n) {
    n += (uint64_t)t->tv_nsec;
    t->tv_sec += (time_t)(n / 1000000000ULL);
    t->tv_nsec = (long)(n % 1000000000ULL);
}

#endif
