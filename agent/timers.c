/* timers.c: the per-thread timer sources (see timers.h).
 *
 * SIGNAL-HANDLER SIDE: pa_timer_is_ours and pa_timer_rearm (a bitmap read and an ioctl),
 * pa_timer_pause and pa_timer_resume (an ioctl or timer_settime).
 * Everything else runs in normal context under the sampler's registry lock. */
#include "timers.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { FD_BITS = 65536 };

/* The address marks our POSIX timers' signals (sigev_value). */
static const char cookie = 't';
/* Descriptors that ever carried one of our perf events. A signal already queued when an
 * event is closed arrives afterwards: it must still be recognized (and ignored), never be
 * taken for the program's, whose default SIGPROF action ends the process. Only a program that
 * itself asks for SIGPROF on a reused descriptor number (F_SETSIG) could be confused. */
static _Atomic uint64_t perf_fds[FD_BITS / 64];
/* Descriptors whose event must be re-armed after each signal (no ring buffer). */
static _Atomic uint64_t perf_refresh[FD_BITS / 64];
enum { RING_BYTES = 2 * 4096 }; /* the control page and one data page */
static int perf_denied;         /* perf_event_open refused once: do not ask again */

static void fd_mark(_Atomic uint64_t *set, int fd, int on) {
    if (fd < 0 || fd >= FD_BITS)
        return;
    if (on)
        atomic_fetch_or(&set[fd / 64], 1ULL << (fd % 64));
    else
        atomic_fetch_and(&set[fd / 64], ~(1ULL << (fd % 64)));
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

void pa_timer_rearm(const siginfo_t *si) {
    int fd = si->si_fd;
    if (si->si_code != SI_TIMER && fd >= 0 && fd < FD_BITS &&
        ((atomic_load_explicit(&perf_refresh[fd / 64], memory_order_relaxed) >> (fd % 64)) & 1))
        ioctl(fd, PERF_EVENT_IOC_REFRESH, 1); /* harmless on a closed descriptor */
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

static int arm_perf(struct pa_timer *t, pid_t tid, unsigned rate) {
    if (perf_denied) {
        errno = EACCES;
        return -1;
    }
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.type = PERF_TYPE_SOFTWARE;
    a.size = sizeof a;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.sample_period = 1000000000ULL / rate;
    a.wakeup_events = 1;
    a.disabled = 1;
    /* Only overflows in user mode signal: one raised while the thread is in the kernel would
     * be delivered into the system call it is entering, and a call such as nanosleep then
     * returns EINTR (a CPU-time profiler must never interrupt a blocked thread). The price:
     * time spent inside system calls is not sampled by perf events. */
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    int fd = (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
        if (errno == EACCES || errno == EPERM || errno == ENOSYS || errno == ENOENT)
            perf_denied = 1;
        return -1;
    }
    if (fd < 3) {
        /* Never in a standard stream's slot: a program (or a child started with its stdin
         * closed) that finds 0, 1 or 2 open behaves differently (test_posix's close_file). */
        int high = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        close(fd);
        if (high < 0)
            return -1;
        fd = high;
    }
    struct f_owner_ex owner = {F_OWNER_TID, tid};
    if (fcntl(fd, F_SETFL, O_ASYNC) != 0 || fcntl(fd, F_SETSIG, SIGPROF) != 0 ||
        fcntl(fd, F_SETOWN_EX, &owner) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    fd_mark(perf_fds, fd, 1);
    /* With a ring buffer the event signals every overflow by itself; without one it has to
     * be re-armed (an ioctl) after each signal, which costs about 10 us per sample on a VM.
     * The ring is mapped read-only: the kernel then overwrites old records and never waits
     * for us to consume them, so the handler has nothing to do. Unprivileged users have a
     * small locked-memory allowance for these rings (perf_event_mlock_kb): beyond it, the
     * event falls back to re-arming. */
    t->ring = mmap(NULL, RING_BYTES, PROT_READ, MAP_SHARED, fd, 0);
    if (t->ring == MAP_FAILED)
        t->ring = NULL;
    fd_mark(perf_refresh, fd, t->ring == NULL);
    t->fd = fd; /* created disabled: pa_timer_resume starts it */
    return 0;
}

int pa_timer_resume(const struct pa_timer *t) {
    if (t->kind == PA_TIMER_PERF)
        return t->ring ? ioctl(t->fd, PERF_EVENT_IOC_ENABLE, 0)
                       : ioctl(t->fd, PERF_EVENT_IOC_REFRESH, 1);
    if (t->kind == PA_TIMER_NONE)
        return 0;
    struct itimerspec its = {{t->period_ns / 1000000000L, t->period_ns % 1000000000L},
                             {t->first_ns / 1000000000L, t->first_ns % 1000000000L}};
    return timer_settime(t->timer, 0, &its, NULL);
}

void pa_timer_pause(const struct pa_timer *t) {
    if (t->kind == PA_TIMER_PERF) {
        ioctl(t->fd, PERF_EVENT_IOC_DISABLE, 0);
    } else if (t->kind != PA_TIMER_NONE) {
        struct itimerspec off;
        memset(&off, 0, sizeof off);
        timer_settime(t->timer, 0, &off, NULL);
    }
}

int pa_timer_arm(struct pa_timer *t, pid_t tid, pthread_t pthread, unsigned rate, int want) {
    if (t->kind != PA_TIMER_NONE)
        return t->kind;
    t->fd = -1;
    t->ring = NULL;
    /* perf events first (any rate); POSIX CPU timers (no descriptor) are the fallback. Taking
     * POSIX timers first within the kernel tick lost spawn workers' samples at SIGTERM
     * (pool_workers): open, docs/harmless.md class 10. */
    int perf_first = want == PA_WANT_PERF || want == PA_WANT_AUTO;
    if (perf_first && arm_perf(t, tid, rate) == 0)
        return t->kind = PA_TIMER_PERF;
    if (want == PA_WANT_PERF)
        return PA_TIMER_NONE;
    clockid_t clock;
    if (pthread_getcpuclockid(pthread, &clock) == 0 && arm_posix(t, clock, tid, rate) == 0)
        return t->kind = PA_TIMER_CPU;
    if (want == PA_WANT_AUTO && !perf_first && arm_perf(t, tid, rate) == 0)
        return t->kind = PA_TIMER_PERF;
    return t->kind;
}

/* Is fd still the perf event we opened? A program may have closed it and reused the number
 * (daemons close every descriptor): then it must not be closed by us. */
static int still_perf(int fd) {
    char path[64], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0)
        return 0;
    target[n] = 0;
    return strcmp(target, "anon_inode:[perf_event]") == 0;
}

void pa_timer_disarm(struct pa_timer *t) {
    if (t->kind == PA_TIMER_PERF) {
        if (still_perf(t->fd)) {
            ioctl(t->fd, PERF_EVENT_IOC_DISABLE, 0);
            close(t->fd);
        }
        if (t->ring)
            munmap(t->ring, RING_BYTES);
    } else if (t->kind != PA_TIMER_NONE) {
        timer_delete(t->timer);
    }
    t->kind = PA_TIMER_NONE;
    t->fd = -1;
    t->ring = NULL;
}

void pa_timer_forget(struct pa_timer *t) {
    /* The event belongs to the parent's thread; the child's copy of the descriptor only
     * keeps it alive. Closing our copy leaves the parent's untouched. */
    if (t->kind == PA_TIMER_PERF) {
        if (still_perf(t->fd))
            close(t->fd);
    }
    /* Perf rings are not inherited (the kernel maps them VM_DONTCOPY): nothing to unmap. */
    t->kind = PA_TIMER_NONE;
    t->fd = -1;
    t->ring = NULL;
}
