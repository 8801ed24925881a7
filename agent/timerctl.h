/* timerctl.h: a thread's own control of its timer (agent-internal).
 *
 * SIGNAL-HANDLER SIDE. A thread that blocks SIGPROF must get no signal of ours (sigwait would
 * take it), so its timer stops before the block and starts again after the unblock; the
 * thread does this itself from the interposed pthread_sigmask and sigprocmask, which a
 * program may call from its signal handlers. The registry (registry.c) makes and releases the
 * timer under its lock; both sides meet through atomics in pa_thread_ctl. */
#ifndef PA_TIMERCTL_H
#define PA_TIMERCTL_H

#include <stdatomic.h>
#include <stdint.h>

#include "frames.h"
#include "timers.h"
#include "../base/tls.h"

/* Lives apart from the registry's array (which moves when it grows) as long as the thread. */
struct pa_thread_ctl {
    struct pa_timer timer; /* written by the registry while `armed` is 0 */
    _Atomic int armed;     /* the timer exists */
    _Atomic int blocked;   /* the thread blocks SIGPROF: its timer must not run */
    _Atomic int users;     /* signal-side users of `timer` right now */
    /* Who counts the thread's CPU time. PA_CTL_OWN: its own samples (the handler). Any other
     * value: the tick thread (wall.c), which reads the stack of a thread that blocks SIGPROF
     * without signalling it; the value is the thread's CPU clock up to which its time is
     * counted. The thread hands its time over when it blocks SIGPROF (only it writes OWN ->
     * mark, with SIGPROF blocked), the tick thread moves the mark on with a CAS for each
     * sample it counts, and the thread's first sample after unblocking takes the mark back
     * (exchange -> OWN), weighing from there: each stretch of CPU time is counted once, by
     * whichever side holds it (docs/architecture.md, "Threads that block SIGPROF"). */
    _Atomic uint64_t counted_to;
    /* The thread's samples by state (enum pa_state_count), weighted as counted: added by its
     * handler and the tick thread, taken by the writer of profiles (pa_threads_take_states). */
    _Atomic uint64_t states[PA_COUNT_N];
};
#define PA_CTL_OWN UINT64_MAX

/* The calling thread's CPU clock at its last sample, and the time since then that did not
 * make a whole period (the handler's perf-event weights, handler.c; read here to hand the
 * thread's time over). */
#define pa_ctl_cpu_last (pa_tls.ctl_cpu_last)
#define pa_ctl_cpu_rest (pa_tls.ctl_cpu_rest)

/* The calling thread's control block (NULL: not registered). */
#define pa_ctl_self (pa_tls.ctl_self)

/* Runs or stops the timer as the thread's mask says: whoever acts last saw the last mask. */
void pa_ctl_apply(struct pa_thread_ctl *c);
/* The ring of the calling thread's perf event (pa_timer_perf_count reads it), or NULL. The
 * event may end at any moment after (the registry does not wait for the handler). */
const void *pa_ctl_perf_ring(void);
/* Does the calling thread block SIGPROF now? */
int pa_ctl_prof_blocked(void);
/* The calling thread, registered or forked, counts its own time from now; if it blocks SIGPROF
 * (inherited mask), its time is the tick thread's from now on. */
void pa_ctl_thread_start(struct pa_thread_ctl *c);
/* Handler, on the calling thread: takes its time back from the tick thread. Returns the mark
 * up to which the tick thread counted, or PA_CTL_OWN when it held nothing. */
uint64_t pa_ctl_take_back(struct pa_thread_ctl *c);
/* Takes and drops the calling thread's pending SIGPROFs of ours (a timer that fired inside
 * the last system call); a pending SIGPROF of the program's is sent again. */
void pa_ctl_drop_pending(void);

#endif
