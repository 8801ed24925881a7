/* timers.c: the per-thread timer sources (see timers.h).
 *
 * SIGNAL-HANDLER SIDE: pa_timer_is_ours (a bitmap read); pa_timer_pause and pa_timer_resume
 * (timer_settime, or for a perf event munmap, and perf_event_open, fcntl, mmap and close:
 * system calls only, no lock) run on a thread that changes its signal mask.
 * Everything else runs in normal context under the sampler's registry lock.
 *
 * A perf event lives as long as a reference to its file: its descriptor, or the mapping of
 * its ring buffer. The descriptor is closed as soon as the event is set up (owner, signal,
 * ring); signals keep coming, and the program never finds a descriptor of ours in
 * /proc/self/fd, nor closes one. The price: without a descriptor an event cannot be disabled
 * or re-armed, so pausing ends it (munmap) and resuming makes a new one (28 us for both
 * here), and an event without a ring (beyond the locked-memory allowance) is not used. */
#include "timers.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { FD_BITS = 65536 };

/* The address marks our POSIX timers' signals (sigev_value). */
static const char cookie = 't';
/* Descriptor numbers that carried one of our perf events while it was set up: its signals
 * carry that number in si_fd (the kernel keeps the number given to F_SETFL O_ASYNC), long
 * after the descriptor was closed and the number reused by the program. A signal already
 * queued when an event ends arrives afterwards too: it must still be recognized (and
 * ignored), never be taken for the program's, whose default SIGPROF action ends the process.
 * Only a program that itself asks for SIGPROF on such a number (F_SETSIG) could be
 * confused. */
static _Atomic uint64_t perf_fds[FD_BITS / 64];
enum { RING_BYTES = 2 * 4096 }; /* the control page and one data page */
static _Atomic int perf_denied; /* perf_event_open refused once: do not ask again */
/* Perf events being set up (their descriptor open), and a fork copying the process: one
 * waits for the other (pa_timer_fork_prepare). */
static _Atomic int opening, forking;

static void fd_mark(int fd) {
    if (fd >= 0 && fd < FD_BITS)
        atomic_fetch_or(&perf_fds[fd / 64], 1ULL << (fd % 64));
}

int pa_timer_is_ours(const siginfo_t *si) {
    if (si->si_code == SI_TIMER)
        return si->si_value.sival_ptr == (void *)&cookie;
    if ((si->si_code == POLL_IN || si->si_code == POLL_HUP) && si->si_fd >= 0 &&
        si->si_fd < FD_BITS)
        return (atomic_load_explicit(&perf_fds[si->si_fd / 64], memory_order_relaxed) >>
                (si->si_fd % 64)) &
               1;
    return 0;
}

static int arm_posix(struct pa_timer *t, clockid_t clock, pid_t tid, unsigned rate) {
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev.sigev_value.sival_ptr = (void *)&cookie;
    sev._sigev_un._tid = tid;
    if (timer_create(clock, &sev, &t->timer) != 0)
        return -1;
    t->period_ns = 1000000000L / (long)rate;
    /* A random first expiry spreads threads' samples instead of lining them up. */
    t->first_ns = 1 + (long)((unsigned long)random() % (unsigned long)t->period_ns);
    return 0;
}

/* Makes a running perf event for thread tid and returns its ring (which holds it), its
 * descriptor closed; NULL with errno set if it cannot be had. */
static void *perf_start(pid_t tid, long period_ns) {
    if (atomic_load(&perf_denied)) {
        errno = EACCES;
        return NULL;
    }
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.type = PERF_TYPE_SOFTWARE;
    a.size = sizeof a;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.sample_period = (uint64_t)period_ns;
    a.wakeup_events = 1;
    a.disabled = 1; /* until its signal goes to the thread */
    /* Only overflows in user mode signal: one raised while the thread is in the kernel would
     * be delivered into the system call it is entering, and a call such as nanosleep then
     * returns EINTR (a CPU-time profiler must never interrupt a blocked thread). The price:
     * time spent inside system calls is not sampled by perf events. */
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    /* While the descriptor is open, a fork must wait (the child would keep the event). The
     * forking thread may be this one, in a signal handler: the wait is bounded both ways. */
    for (int spins = 0;; spins++) {
        atomic_fetch_add(&opening, 1);
        if (!atomic_load(&forking) || spins >= 10000)
            break;
        atomic_fetch_sub(&opening, 1);
        sched_yield();
    }
    int e = 0;
    void *ring = NULL;
    int fd = (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
        e = errno;
        if (e == EACCES || e == EPERM || e == ENOSYS || e == ENOENT)
            atomic_store(&perf_denied, 1);
        goto out;
    }
    /* The signal and its owner before O_ASYNC, which starts signalling (SIGIO by default). */
    struct f_owner_ex owner = {F_OWNER_TID, tid};
    if (fcntl(fd, F_SETSIG, SIGPROF) != 0 || fcntl(fd, F_SETOWN_EX, &owner) != 0) {
        e = errno;
        goto out;
    }
    fd_mark(fd); /* before any signal can carry the number */
    if (fcntl(fd, F_SETFL, O_ASYNC) != 0) {
        e = errno;
        goto out;
    }
    /* The ring signals every overflow by itself (no re-arming) and holds the event once the
     * descriptor is closed. It is mapped read-only: the kernel then overwrites old records and
     * never waits for us to consume them. Unprivileged users have a small locked-memory
     * allowance for these rings (perf_event_mlock_kb): beyond it, no perf event. */
    ring = mmap(NULL, RING_BYTES, PROT_READ, MAP_SHARED, fd, 0);
    if (ring == MAP_FAILED) {
        e = errno;
        ring = NULL;
        goto out;
    }
    if (ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0) {
        e = errno;
        munmap(ring, RING_BYTES);
        ring = NULL;
    }
out:
    if (fd >= 0)
        close(fd);
    atomic_fetch_sub(&opening, 1);
    errno = e;
    return ring;
}

void pa_timer_fork_prepare(void) {
    atomic_store(&forking, 1);
    for (int spins = 0; atomic_load(&opening) && spins < 10000; spins++)
        sched_yield();
}

void pa_timer_fork_done(int child) {
    if (child)
        atomic_store(&opening, 0); /* the set-ups were the parent's other threads' */
    atomic_store(&forking, 0);
}

/* Ends the event whose ring this is: the mapping is its last reference. */
static void perf_stop(struct pa_timer *t) {
    void *ring = atomic_exchange(&t->ring, NULL);
    if (ring)
        munmap(ring, RING_BYTES);
}

int pa_timer_resume(struct pa_timer *t) {
    if (t->kind == PA_TIMER_PERF) {
        if (atomic_load(&t->ring))
            return 0;
        void *ring = perf_start(t->tid, t->period_ns);
        if (!ring)
            return -1;
        void *none = NULL;
        if (!atomic_compare_exchange_strong(&t->ring, &none, ring))
            munmap(ring, RING_BYTES); /* another resume won */
        return 0;
    }
    if (t->kind == PA_TIMER_NONE)
        return 0;
    struct itimerspec its = {{t->period_ns / 1000000000L, t->period_ns % 1000000000L},
                             {t->first_ns / 1000000000L, t->first_ns % 1000000000L}};
    return timer_settime(t->timer, 0, &its, NULL);
}

void pa_timer_pause(struct pa_timer *t) {
    perf_stop(t); /* also an event a resume made while the timer was being released */
    if (t->kind == PA_TIMER_CPU) {
        struct itimerspec off;
        memset(&off, 0, sizeof off);
        timer_settime(t->timer, 0, &off, NULL);
    }
}

int pa_timer_arm(struct pa_timer *t, pid_t tid, pthread_t pthread, unsigned rate, int want,
                 int start) {
    if (t->kind != PA_TIMER_NONE)
        return t->kind;
    atomic_store(&t->ring, NULL);
    t->tid = tid;
    t->period_ns = 1000000000L / (long)rate;
    /* perf events first (any rate); POSIX CPU timers are the fallback. Taking POSIX timers
     * first within the kernel tick lost spawn workers' samples at SIGTERM (pool_workers):
     * open. A perf event is made here to learn whether the kernel gives one (and a ring for
     * it); made stopped, it is ended at once (none exists until pa_timer_resume). */
    if (want == PA_WANT_PERF || want == PA_WANT_AUTO) {
        void *ring = perf_start(tid, t->period_ns);
        if (ring) {
            if (start)
                atomic_store(&t->ring, ring);
            else
                munmap(ring, RING_BYTES);
            return t->kind = PA_TIMER_PERF;
        }
        if (want == PA_WANT_PERF)
            return PA_TIMER_NONE;
    }
    clockid_t clock;
    if (pthread_getcpuclockid(pthread, &clock) != 0 || arm_posix(t, clock, tid, rate) != 0)
        return PA_TIMER_NONE;
    t->kind = PA_TIMER_CPU;
    if (start && pa_timer_resume(t) != 0) {
        int e = errno;
        pa_timer_disarm(t);
        errno = e;
    }
    return t->kind;
}

void pa_timer_disarm(struct pa_timer *t) {
    if (t->kind == PA_TIMER_PERF)
        perf_stop(t);
    else if (t->kind != PA_TIMER_NONE)
        timer_delete(t->timer);
    t->kind = PA_TIMER_NONE;
}

void pa_timer_forget(struct pa_timer *t) {
    /* Perf rings are not inherited (the kernel maps them VM_DONTCOPY) and the descriptors
     * were closed before the fork (pa_timer_fork_prepare): the parent's events are out of
     * reach. What was their ring's address may hold anything here: never unmap it. */
    atomic_store(&t->ring, NULL);
    t->kind = PA_TIMER_NONE;
}
