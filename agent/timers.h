/* timers.h: what makes a thread's SIGPROF tick.
 *
 *   perf   a perf_event_open software task-clock event per thread (F_SETSIG SIGPROF,
 *          F_SETOWN_EX to the thread): CPU time at any rate, not limited by the scheduler
 *          tick. Containers often forbid perf_event_open, hence the fallback:
 *   cpu    a POSIX timer on the thread's CPU clock (SIGEV_THREAD_ID): CPU time, but driven
 *          by the tick (250 signals per CPU-second at most here);
 * Wall mode uses these too, for the time a thread runs; its time off a CPU is counted by the
 * sampler's wall tick thread, which signals nobody (sampler.c). Signal side: pa_timer_is_ours tells
 * our signals from the program's, pa_timer_rearm keeps a perf event going. */
#ifndef PA_TIMERS_H
#define PA_TIMERS_H

#include <pthread.h>
#include <signal.h>
#include <sys/types.h>
#include <time.h>

enum pa_timer_kind { PA_TIMER_NONE = 0, PA_TIMER_CPU, PA_TIMER_PERF };
enum pa_timer_want { PA_WANT_AUTO = 0, PA_WANT_PERF, PA_WANT_CPU };

struct pa_timer {
    int kind;
    timer_t timer;
    int fd;
    void *ring;               /* perf: the event's read-only ring buffer, or NULL (refresh mode) */
    long period_ns, first_ns; /* POSIX timers: the period and the first expiry on resume */
};

/* Normal context: makes a timer of the wanted kind for thread tid at rate per second (auto:
 * perf, falling back to cpu), stopped: pa_timer_resume starts it. Returns the kind made or
 * PA_TIMER_NONE (errno set). */
int pa_timer_arm(struct pa_timer *t, pid_t tid, pthread_t pthread, unsigned rate, int want);
void pa_timer_disarm(struct pa_timer *t);
/* In a forked child: the parent's perf descriptors were inherited; release them without
 * touching the parent's events. */
void pa_timer_forget(struct pa_timer *t);

/* Signal side. */
/* Starts or stops a made timer without releasing it (the thread blocks or unblocks SIGPROF). */
int pa_timer_resume(const struct pa_timer *t);
void pa_timer_pause(const struct pa_timer *t);
int pa_timer_is_ours(const siginfo_t *si);
void pa_timer_rearm(const siginfo_t *si);

#endif
