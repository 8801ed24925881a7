/* timerctl.c: a thread's own control of its timer (see timerctl.h).
 *
 * SIGNAL-HANDLER SIDE: everything here may run in signal context (the interposed
 * pthread_sigmask is async-signal-safe, so what it calls must be); atomics, the timer's
 * pause and resume, and the signal mask system call. */
#include "timerctl.h"

#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../base/realfns.h"
#include "sampler.h"

/* The calling thread, with SIGPROF blocked (so no sample of its own can run meanwhile), hands
 * its CPU time over to the tick thread, from where its own samples stopped counting: with a
 * perf event, its last sample's clock less the carried part of a period (the event's count is
 * the thread's task clock, so nothing is lost or counted twice); with a POSIX timer, whose
 * weights come from its overruns and which stopped with the block, from now. A mark the tick
 * thread still holds (the thread unblocked and blocked again before a sample of its own took
 * it back) stays: the tick thread counts on from it. */
static void hand_over(struct pa_thread_ctl *c) {
    if (atomic_load(&c->counted_to) != PA_CTL_OWN)
        return;
    uint64_t mark = 0;
    if (atomic_load(&c->armed) && c->timer.kind == PA_TIMER_PERF && pa_ctl_cpu_last)
        mark = pa_ctl_cpu_last > pa_ctl_cpu_rest ? pa_ctl_cpu_last - pa_ctl_cpu_rest : 1;
    struct timespec ts;
    if (!mark && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0)
        mark = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    atomic_store(&c->counted_to, mark ? mark : 1);
}

void pa_ctl_thread_start(struct pa_thread_ctl *c) {
    atomic_store(&c->counted_to, PA_CTL_OWN);
    if (pa_ctl_prof_blocked())
        hand_over(c);
}

uint64_t pa_ctl_take_back(struct pa_thread_ctl *c) {
    if (!c || atomic_load_explicit(&c->counted_to, memory_order_relaxed) == PA_CTL_OWN)
        return PA_CTL_OWN;
    return atomic_exchange(&c->counted_to, PA_CTL_OWN);
}

void pa_ctl_apply(struct pa_thread_ctl *c) {
    atomic_fetch_add(&c->users, 1);
    if (atomic_load(&c->armed)) {
        int b;
        do {
            b = atomic_load(&c->blocked);
            if (b)
                pa_timer_pause(&c->timer);
            else
                pa_timer_resume(&c->timer);
        } while (b != atomic_load(&c->blocked));
        /* Released meanwhile (the registry stopped waiting for us): a perf event this resume
         * made must not outlive it. */
        if (!atomic_load(&c->armed))
            pa_timer_pause(&c->timer);
    }
    atomic_fetch_sub(&c->users, 1);
}

const void *pa_ctl_perf_ring(void) {
    struct pa_thread_ctl *c = pa_ctl_self;
    if (!c || !atomic_load(&c->armed) || c->timer.kind != PA_TIMER_PERF)
        return NULL;
    return atomic_load(&c->timer.ring);
}

int pa_ctl_prof_blocked(void) {
    sigset_t cur;
    pa_real_pthread_sigmask(SIG_BLOCK, NULL, &cur);
    return sigismember(&cur, SIGPROF) == 1;
}

void pa_sampler_mask_will_block(void) {
    struct pa_thread_ctl *c = pa_ctl_self;
    if (c && !atomic_load(&c->blocked)) {
        atomic_store(&c->blocked, 1);
        pa_ctl_apply(c);
    }
}

void pa_sampler_mask_changed(void) {
    struct pa_thread_ctl *c = pa_ctl_self;
    if (!c)
        return;
    int b = pa_ctl_prof_blocked();
    if (b)
        hand_over(c); /* after the block: no sample of ours runs here until it ends */
    if (b == atomic_load(&c->blocked))
        return;
    atomic_store(&c->blocked, b);
    pa_ctl_apply(c);
}

void pa_ctl_drop_pending(void) {
    sigset_t prof, old;
    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    pa_real_pthread_sigmask(SIG_BLOCK, &prof, &old);
    struct timespec zero = {0, 0};
    siginfo_t si;
    int foreign = 0;
    while (sigtimedwait(&prof, &si, &zero) == SIGPROF)
        if (!pa_timer_is_ours(&si))
            foreign = 1; /* a standard signal is pending at most once */
    if (foreign)
        syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), SIGPROF);
    pa_real_pthread_sigmask(SIG_SETMASK, &old, NULL);
}
