/* timers.h: what makes a thread's SIGPROF tick.
 *
 *   perf   a perf_event_open software task-clock event per thread (F_SETSIG SIGPROF,
 *          F_SETOWN_EX to the thread): CPU time at any rate, not limited by the scheduler
 *          tick. It is held by the mapping of its ring buffer alone and is made in a
 *          short-lived helper process that shares our memory but has its own copy of the
 *          descriptor table, so the program's table never holds a descriptor of ours, not
 *          even for a moment. Containers often forbid perf_event_open, hence the fallback:
 *   cpu    a POSIX timer on the thread's CPU clock (SIGEV_THREAD_ID): CPU time, but driven
 *          by the tick (250 signals per CPU-second at most here); made in microseconds, where
 *          the first perf event on a machine that has none costs the kernel's RCU grace
 *          period, so auto takes it first at rates within every kernel's tick (timers.c);
 * Wall mode uses these too, for the time a thread runs; its time off a CPU is counted by the
 * wall tick thread, which signals nobody (wall.c). Signal side: pa_timer_is_ours tells our
 * signals from the program's; pause and resume run on a thread changing its signal mask. */
#ifndef PA_TIMERS_H
#define PA_TIMERS_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

enum pa_timer_kind { PA_TIMER_NONE = 0, PA_TIMER_CPU, PA_TIMER_PERF };
enum pa_timer_want { PA_WANT_AUTO = 0, PA_WANT_PERF, PA_WANT_CPU };

struct pa_timer {
    int kind;
    timer_t timer;
    pid_t tid;                /* perf: the thread an event is made for on resume */
    _Atomic(void *) ring;     /* perf: the running event's ring buffer (the event), or NULL */
    long period_ns, first_ns; /* the period; POSIX timers: the first expiry on resume */
};

/* Normal context: makes a timer of the wanted kind for thread tid at rate per second (auto:
 * cpu up to 100 Hz where the kernel makes its signals on the way back to user mode, else perf;
 * each falling back to the other), running if start, else stopped (pa_timer_resume starts it).
 * Returns the kind made or PA_TIMER_NONE (errno set). */
int pa_timer_arm(struct pa_timer *t, pid_t tid, pthread_t pthread, unsigned rate, int want,
                 int start);
void pa_timer_disarm(struct pa_timer *t);
/* In a forked child: the parent's timers were not inherited (perf rings are not copied into
 * a child, and no descriptor of ours exists to be copied); forget them. */
void pa_timer_forget(struct pa_timer *t);

/* Signal side. Starts or stops a made timer (the thread blocks or unblocks SIGPROF). A perf
 * event cannot be stopped without a descriptor: stopping ends it (unmaps its ring), starting
 * makes a new one. Either may run on the thread and on the agent at once: the ring is swapped
 * atomically. */
int pa_timer_resume(struct pa_timer *t);
void pa_timer_pause(struct pa_timer *t);
int pa_timer_is_ours(const siginfo_t *si);
/* Signal side, on any thread: a perf event's count (its task clock, in ns, kernel time
 * included) at its latest overflow, and the event's id (never reused), read with no system
 * call from ring, the address of its ring (t->ring) now or at some time before: the reads
 * are guarded and checked. 0 if there is nothing to believe: no overflow yet, no ring there
 * any more, a record overwritten meanwhile. */
int pa_timer_perf_count(const void *ring, uint64_t *id, uint64_t *count);

#endif
