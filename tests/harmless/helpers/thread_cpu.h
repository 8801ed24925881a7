/* thread_cpu.h: the calling thread's CPU time, for the helpers that burn a known amount of it. */
#ifndef PA_HARMLESS_THREAD_CPU_H
#define PA_HARMLESS_THREAD_CPU_H

#include <time.h>

static inline long thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

#endif
