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

#include "timers.h"

/* Lives apart from the registry's array (which moves when it grows) as long as the thread. */
struct pa_thread_ctl {
    struct pa_timer timer; /* written by the registry while `armed` is 0 */
    _Atomic int armed;     /* the timer exists */
    _Atomic int blocked;   /* the thread blocks SIGPROF: its timer must not run */
    _Atomic int users;     /* signal-side users of `timer` right now */
};

/* The calling thread's control block (NULL: not registered). */
extern __thread struct pa_thread_ctl *pa_ctl_self __attribute__((tls_model("initial-exec")));

/* Runs or stops the timer as the thread's mask says: whoever acts last saw the last mask. */
void pa_ctl_apply(struct pa_thread_ctl *c);
/* The ring of the calling thread's perf event (pa_timer_perf_count reads it), or NULL. The
 * event may end at any moment after (the registry does not wait for the handler). */
const void *pa_ctl_perf_ring(void);
/* Does the calling thread block SIGPROF now? */
int pa_ctl_prof_blocked(void);
/* Takes and drops the calling thread's pending SIGPROFs of ours (a timer that fired inside
 * the last system call); a pending SIGPROF of the program's is sent again. */
void pa_ctl_drop_pending(void);

#endif
