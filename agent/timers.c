/* timers.c: the per-thread timer sources (see timers.h).
 *
 * SIGNAL-HANDLER SIDE: pa_timer_is_ours (a bitmap read) and pa_timer_perf_count (guarded
 * reads of a ring) run in the handler; pa_timer_pause and pa_timer_resume (timer_settime, or
 * for a perf event munmap, and the making of a new one, in a helper process or alone: clone,
 * perf_event_open, fcntl, mmap, ioctl, close, waitpid, system calls only, no lock) run on a
 * thread that changes its signal mask. Everything else runs in normal context under the
 * registry's lock.
 *
 * A perf event lives as long as a reference to its file: a descriptor, or the mapping of its
 * ring buffer. Any descriptor made in the program's table, even for the microseconds of a
 * set-up, can be seen: a program that closes descriptor 0 and opens a file expects 0 back, a
 * child forked meanwhile inherits it, dup2 onto it fails with EBUSY (CPython's test_subprocess
 * saw each). So the event is made by a helper: a child process made with clone(CLONE_VM |
 * CLONE_VFORK) and no CLONE_FILES, which shares our memory but works in a copy of the
 * descriptor table. It opens the event for our thread, points its signal at that thread, maps
 * the ring (in the memory we share, so the mapping is ours) and exits; its copy of the table,
 * the only one that ever held the descriptor, goes with it. The calling thread waits for it
 * (vfork semantics), about 60-150 us here. While the process has a single thread, the event is
 * made in the process itself instead, with every signal blocked and the descriptor closed
 * before they are unblocked: nothing of the program's can look meanwhile, and the constructor
 * saves the helper's cost (perf_start). The helper sends no SIGCHLD (its exit signal is 0), so
 * wait() and waitpid(-1) in the program never see it; we reap it with __WCLONE. The price of
 * having no descriptor: an event cannot be disabled, so pausing ends it (munmap) and
 * resuming makes a new one, and an event without a ring (beyond the locked-memory allowance)
 * is not used. */
#include "timers.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/single_threaded.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../base/bss.h"
#include "../base/rand.h"
#include "../base/realfns.h"
#include "guard.h"

enum { FD_BITS = 65536 };

/* The address marks our POSIX timers' signals (sigev_value). */
static const char cookie = 't';
/* Descriptor numbers that carried one of our perf events while the helper set it up: its
 * signals carry that number in si_fd (the kernel keeps the number given with O_ASYNC), a
 * number of the helper's table. A signal already queued when an event ends arrives afterwards
 * too: it must still be recognized (and ignored), never be taken for the program's, whose
 * default SIGPROF action ends the process. Only a program that itself asks for SIGPROF on such
 * a number (F_SETSIG) could be confused. */
static _Atomic uint64_t perf_fds[FD_BITS / 64] PA_LARGE_BSS(perf_fds);
enum { RING_BYTES = 2 * 4096 };  /* the control page and one data page */
static _Atomic int perf_denied;  /* perf_event_open refused once: do not ask again */
static _Atomic int helper_fails; /* clone refused once (a seccomp filter): POSIX timers */

/* The sample record of an overflow (sample_type PERF_SAMPLE_READ, read_format PERF_FORMAT_ID):
 * the header, then the event's count and id. */
struct perf_sample {
    struct perf_event_header h;
    uint64_t count, id;
};

int pa_timer_perf_count(const void *ring_addr, uint64_t *id, uint64_t *count) {
    enum { DATA = RING_BYTES - 4096, WORDS = sizeof(struct perf_sample) / 8 };
    /* The event may have ended (its ring unmapped, the address unmapped or mapped again for
     * anything) at any moment: the reads run under the fault guard, and what they return is
     * checked before it is believed; the caller compares the id too. */
    const unsigned char *ring = ring_addr;
    sigjmp_buf env;
    sigjmp_buf *volatile prev = pa_guard_env;
    if (!ring)
        return 0;
    pa_guard_env = &env;
    if (sigsetjmp(env, 0)) {
        pa_guard_env = prev;
        return 0;
    }
    const struct perf_event_mmap_page *pg = (const void *)ring;
    const unsigned char *data = ring + 4096;
    int ok = 0;
    /* The last record is the latest overflow's: only sample records are written (the ring is
     * read-only, so it is overwritten, never full; no other record was asked for), except
     * throttling notices (the kernel's limit on samples per tick), 32 bytes whose last 24
     * fail the header check (the caller then reads the clock). The kernel publishes
     * data_head after writing the record; it overwrites a record only DATA bytes later, which
     * the second look at data_head rules out. */
    uint64_t head = __atomic_load_n(&pg->data_head, __ATOMIC_ACQUIRE);
    if (head >= sizeof(struct perf_sample) && head % 8 == 0) {
        uint64_t w[WORDS], at = head - sizeof(struct perf_sample);
        for (unsigned i = 0; i < WORDS; i++) /* a record may wrap around the data's end */
            w[i] = PA_READ(uint64_t, data + (at + 8 * i) % DATA);
        struct perf_event_header h;
        memcpy(&h, &w[0], sizeof h);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        uint64_t again = __atomic_load_n(&pg->data_head, __ATOMIC_RELAXED);
        if (h.type == PERF_RECORD_SAMPLE && h.size == sizeof(struct perf_sample) &&
            (h.misc & PERF_RECORD_MISC_CPUMODE_MASK) == PERF_RECORD_MISC_USER &&
            again - at <= DATA) {
            *count = w[1];
            *id = w[2];
            ok = 1;
        }
    }
    pa_guard_env = prev;
    return ok;
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
    t->first_ns = 1 + (long)(pa_rand64() % (uint64_t)t->period_ns);
    return 0;
}

/* What the helper is asked to make, and what it made. */
struct perf_job {
    pid_t tid;
    long period_ns;
    void *ring; /* the running event, or NULL */
    int err;    /* errno of the step that failed */
};

/* Opens a running perf event for job->tid, maps its ring into job->ring and returns the
 * descriptor (the caller's table's: the helper's, or ours when nothing else can see it), or -1
 * with job->err set. System calls only; errno is the calling thread's (the helper shares its
 * thread pointer), which perf_start restores. */
static int make_event(struct perf_job *job) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.type = PERF_TYPE_SOFTWARE;
    a.size = sizeof a;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.sample_period = (uint64_t)job->period_ns;
    /* Each overflow's record carries the event's count then (kernel time included) and its
     * id: the handler weighs samples by it without a system call (pa_timer_perf_count). */
    a.sample_type = PERF_SAMPLE_READ;
    a.read_format = PERF_FORMAT_ID;
    a.wakeup_events = 1;
    a.disabled = 1; /* until its signal goes to the thread */
    /* Only overflows in user mode signal: one raised while the thread is in the kernel would
     * be delivered into the system call it is entering, and a call such as nanosleep then
     * returns EINTR (a CPU-time profiler must never interrupt a blocked thread). The price:
     * time spent inside system calls is not sampled by perf events (handler.c weighs each
     * sample by the thread's CPU clock instead). */
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    int fd = (int)syscall(SYS_perf_event_open, &a, job->tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
        job->err = errno;
        return -1;
    }
    /* The signal and its owner before O_ASYNC, which starts signalling (SIGIO by default). */
    struct f_owner_ex owner = {F_OWNER_TID, job->tid};
    if (fcntl(fd, F_SETSIG, SIGPROF) != 0 || fcntl(fd, F_SETOWN_EX, &owner) != 0) {
        job->err = errno;
        return fd;
    }
    if (fd < FD_BITS) /* before any signal can carry the number */
        atomic_fetch_or(&perf_fds[fd / 64], 1ULL << (fd % 64));
    if (fcntl(fd, F_SETFL, O_ASYNC) != 0) {
        job->err = errno;
        return fd;
    }
    /* The ring signals every overflow by itself (no re-arming) and holds the event once the
     * descriptor is gone. It is mapped read-only: the kernel then overwrites old records and
     * never waits for us to consume them. Unprivileged users have a small locked-memory
     * allowance for these rings (perf_event_mlock_kb): beyond it, no perf event. */
    void *ring = mmap(NULL, RING_BYTES, PROT_READ, MAP_SHARED, fd, 0);
    if (ring == MAP_FAILED) {
        job->err = errno;
        return fd;
    }
    if (ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0) {
        job->err = errno;
        munmap(ring, RING_BYTES);
        return fd;
    }
    job->ring = ring;
    return fd;
}

/* The helper's whole life (a process of its own, on a stack in our memory). */
static int perf_helper(void *arg) {
    make_event(arg);
    return 0; /* exit: the helper's descriptor table, and the descriptor, go with it */
}

/* Makes a running perf event for thread tid and returns its ring (which holds it); NULL with
 * errno set if it cannot be had. */
static void *perf_start(pid_t tid, long period_ns) {
    if (atomic_load(&perf_denied) || atomic_load(&helper_fails)) {
        errno = EACCES;
        return NULL;
    }
    struct perf_job job = {tid, period_ns, NULL, 0};
    /* The helper's stack, on ours while we wait for it (the helper makes a handful of system
     * calls). Every signal is blocked around it: the helper inherits the mask, and no handler
     * of the program's may run on the helper. */
    unsigned char stack[4096] __attribute__((aligned(16)));
    sigset_t all, old;
    sigfillset(&all);
    pa_real_pthread_sigmask(SIG_SETMASK, &all, &old);
    int saved = errno;
    int refused = 0, clone_err = 0;
    if (__libc_single_threaded) {
        /* No other thread, and with every signal blocked no handler of the program's can
         * run before the descriptor is closed again: the descriptor exists only between two
         * of our own system calls, where nothing of the program can look. This is the
         * constructor (the main thread's event, before the program runs) and every event of
         * a program that never starts a thread (and of its forked children): the helper
         * process costs about 100 us more per event (bench/perf_helper.c). The C library
         * sets the flag false at the first pthread_create, for good, forked children
         * included. */
        int fd = make_event(&job);
        if (fd >= 0)
            close(fd);
    } else {
        pid_t pid = clone(perf_helper, stack + sizeof stack, CLONE_VM | CLONE_VFORK, &job);
        clone_err = errno;
        refused = pid <= 0;
        if (!refused)
            while (waitpid(pid, NULL, __WCLONE) < 0 && errno == EINTR)
                ;
    }
    pa_real_pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (refused) {
        atomic_store(&helper_fails, 1);
        errno = clone_err;
        return NULL;
    }
    errno = saved;
    if (!job.ring) {
        int e = job.err ? job.err : EAGAIN;
        if (e == EACCES || e == EPERM || e == ENOSYS || e == ENOENT)
            atomic_store(&perf_denied, 1);
        errno = e;
    }
    return job.ring;
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

/* Whether auto takes a POSIX CPU timer first: at rates within every kernel's tick (100 Hz,
 * CONFIG_HZ's least choice), and where the kernel makes such a timer's signal on the thread's
 * way back to user mode (task work: x86-64 since Linux 5.9, POSIX_CPU_TIMERS_TASK_WORK), so
 * that it never comes while the thread is in a system call, as a perf event's does not
 * either. Elsewhere (older kernels raise it from the tick interrupt, where a blocking call
 * then returns EINTR) perf events stay first. Why not perf events everywhere: the first
 * per-task perf event on a machine that has none makes the kernel switch its scheduler hooks
 * on and wait for an RCU grace period, 5-20 ms of the program's wall time at a cold start
 * (architecture.md, "Timers and modes"); a POSIX timer costs microseconds. 1 yes, 0 no. */
enum { POSIX_FIRST_MAX_RATE = 100 };
static int posix_first(unsigned rate) {
    static _Atomic int known = -1;
    if (rate > POSIX_FIRST_MAX_RATE)
        return 0;
    int k = atomic_load(&known);
    if (k < 0) {
        struct utsname u;
        unsigned major = 0, minor = 0;
        k = uname(&u) == 0 && strcmp(u.machine, "x86_64") == 0 &&
            sscanf(u.release, "%u.%u", &major, &minor) == 2 &&
            (major > 5 || (major == 5 && minor >= 9));
        atomic_store(&known, k);
    }
    return k;
}

/* A POSIX timer on thread tid's CPU clock, started if start. */
static int arm_cpu_timer(struct pa_timer *t, pid_t tid, pthread_t pthread, unsigned rate,
                         int start) {
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

int pa_timer_arm(struct pa_timer *t, pid_t tid, pthread_t pthread, unsigned rate, int want,
                 int start) {
    if (t->kind != PA_TIMER_NONE)
        return t->kind;
    atomic_store(&t->ring, NULL);
    t->tid = tid;
    t->period_ns = 1000000000L / (long)rate;
    if (want == PA_WANT_AUTO && posix_first(rate) &&
        arm_cpu_timer(t, tid, pthread, rate, start) != PA_TIMER_NONE)
        return t->kind;
    /* perf events first above that (any rate, and never inside a system call); POSIX CPU
     * timers are the fallback. A stopped perf timer has no event: one is made (to learn whether the
     * kernel gives one) and ended at once, and pa_timer_resume makes it again. That probe counts
     * the calling thread, not thread tid: the registry arms threads that block SIGPROF from the
     * agent thread (wall mode), and an event on such a thread, running on another CPU while
     * the agent thread was preempted between making and ending it, overflowed and left a
     * SIGPROF pending on it for good (a sigwait would take it). The caller waits for the
     * helper meanwhile (vfork), so its own event counts next to nothing before it ends. */
    if (want == PA_WANT_PERF || want == PA_WANT_AUTO) {
        void *ring = perf_start(start ? tid : (pid_t)syscall(SYS_gettid), t->period_ns);
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
    return arm_cpu_timer(t, tid, pthread, rate, start);
}

void pa_timer_disarm(struct pa_timer *t) {
    if (t->kind == PA_TIMER_PERF)
        perf_stop(t);
    else if (t->kind != PA_TIMER_NONE)
        timer_delete(t->timer);
    t->kind = PA_TIMER_NONE;
}

void pa_timer_forget(struct pa_timer *t) {
    /* Perf rings are not inherited (the kernel maps them VM_DONTCOPY): what was their ring's
     * address may hold anything here; never unmap it. */
    atomic_store(&t->ring, NULL);
    t->kind = PA_TIMER_NONE;
}
