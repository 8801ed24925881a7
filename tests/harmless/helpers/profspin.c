/* profspin.c: a profiler of the program's own, for the agent case own_sigprof_slow: a SIGPROF
 * handler driven by ITIMER_PROF that takes CPU time itself (as vmprof's or yappi's handler
 * does when it walks its stacks). The agent chains to it from its own SIGPROF handler; the
 * agent's timer fires while it runs. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "thread_cpu.h"

static long spin_ns;
static volatile long calls;

static void on_prof(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)si;
    (void)uc;
    int saved = errno;
    long end = thread_cpu_ns() + spin_ns;
    while (thread_cpu_ns() < end)
        ;
    calls++;
    errno = saved;
}

/* Every PERIOD_US of the process's CPU time, a handler that burns SPIN_US of it. 0 or -1. */
int profspin_start(long period_us, long spin_us) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_prof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, NULL) != 0)
        return -1;
    spin_ns = spin_us * 1000;
    struct itimerval it = {{period_us / 1000000, period_us % 1000000},
                           {period_us / 1000000, period_us % 1000000}};
    return setitimer(ITIMER_PROF, &it, NULL);
}

/* Stops the timer; the handler's calls so far. */
long profspin_stop(void) {
    struct itimerval it;
    memset(&it, 0, sizeof it);
    setitimer(ITIMER_PROF, &it, NULL);
    return calls;
}
