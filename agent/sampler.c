/* sampler.c: the SIGPROF handler, per-thread CPU timers and the thread registry.
 *
 * SIGNAL-HANDLER SIDE: on_sigprof and what it calls (pa_chain, hist_add, the walk and
 * the table). Everything else runs in normal context under `reg_lock`, which the handler
 * never takes: the handler only reads its own thread's serial from TLS and atomics. */
#include "sampler.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sched.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "../shim/log.h"
#include "../shim/realfns.h"
#include "chain.h"
#include "codecache.h"
#include "frames.h"
#include "guard.h"
#include "native.h"
#include "timers.h"

enum { MAX_DEPTH_LIMIT = 512, HIST_LINEAR = 400, HIST_STEP_NS = 25, HIST_N = HIST_LINEAR + 24 };

static struct pa_python py;
static struct pa_sampler_config cfg;
static struct pa_tables tables;
static int initialized;
static _Atomic int running;

static __thread uint32_t tls_serial __attribute__((tls_model("initial-exec")));
static __thread struct thread_ctl *tls_ctl __attribute__((tls_model("initial-exec")));

static _Atomic uint64_t n_signals, n_unreadable, n_truncated, n_foreign;
static _Atomic uint32_t hist[HIST_N];

/* What the application installed for SIGPROF while ours is the real handler. */
static struct sigaction app_prof;
static int handler_installed;

/* ---- thread registry (normal context) ---------------------------------------------------- */

/* A thread's timer, shared with the thread's own signal-side code (pa_sampler_mask_changed):
 * it lives apart from the registry array, which moves when it grows. */
struct thread_ctl {
    struct pa_timer timer; /* written under reg_lock while `armed` is 0 */
    _Atomic int armed;     /* the timer exists */
    _Atomic int blocked;   /* the thread blocks SIGPROF: its timer must not run */
    _Atomic int users;     /* signal-side users of `timer` right now */
};

struct thread_rec {
    uint32_t serial;
    pid_t tid;
    pthread_t pthread;
    struct thread_ctl *ctl;
    int alive;
    uint64_t died_at_drain; /* drain count when it died */
    char name[64];
    /* Wall mode (wall tick thread): the thread's CPU clock, its reading at the last tick, and
     * the time it spent off a CPU not yet counted. */
    clockid_t cpu_clock;
    int has_clock;
    uint64_t last_cpu_ns, off_ns;
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct thread_rec *recs;
static size_t nrecs, caprecs;
static uint32_t next_serial = 1;
static uint64_t drains; /* pa_threads_prune calls */
static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static struct thread_rec *rec_by_serial(uint32_t serial) {
    size_t lo = 0, hi = nrecs; /* serials are appended in increasing order */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (recs[mid].serial < serial)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < nrecs && recs[lo].serial == serial ? &recs[lo] : NULL;
}

static _Atomic unsigned armed_kinds; /* bit per pa_timer_kind armed so far */
static int exec_holds; /* exec calls in progress: nothing may be armed (under reg_lock) */
static int wanted;     /* sampling was started and not stopped (under reg_lock) */

/* Runs or stops the thread's timer as its SIGPROF mask says. Signal-safe: the thread calls it
 * when it changes its mask, the agent after arming. Whoever acts last saw the last mask
 * (the loop re-reads it after each system call). */
static void ctl_apply(struct thread_ctl *c) {
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
    }
    atomic_fetch_sub(&c->users, 1);
}

static int arm_timer(struct thread_rec *r) {
    struct thread_ctl *c = r->ctl;
    if (!c || atomic_load(&c->armed))
        return c ? 0 : -1;
    /* Wall mode too: a CPU-time timer samples the thread while it runs; the wall tick
     * thread counts its time off a CPU without signalling it (wall_tick). */
    int kind = pa_timer_arm(&c->timer, r->tid, r->pthread, cfg.rate, cfg.timer_want);
    if (kind == PA_TIMER_NONE)
        return -1;
    if (!atomic_load(&c->blocked) && pa_timer_resume(&c->timer) != 0) {
        int e = errno;
        pa_timer_disarm(&c->timer);
        errno = e;
        return -1;
    }
    atomic_store(&c->armed, 1);
    ctl_apply(c); /* the thread may have blocked SIGPROF meanwhile */
    atomic_fetch_or(&armed_kinds, 1u << kind);
    if (cfg.mode == PA_WALK_WALL) {
        struct timespec ts;
        r->has_clock = pthread_getcpuclockid(r->pthread, &r->cpu_clock) == 0 &&
                       clock_gettime(r->cpu_clock, &ts) == 0;
        r->last_cpu_ns =
            r->has_clock ? (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec : 0;
        r->off_ns = 0;
    }
    return 0;
}

static void disarm_timer(struct thread_rec *r) {
    struct thread_ctl *c = r->ctl;
    if (!c || !atomic_load(&c->armed))
        return;
    atomic_store(&c->armed, 0);
    /* Bounded: the user may be this very thread, interrupted by the signal that runs us. */
    for (int spins = 0; atomic_load(&c->users) && spins < 1000; spins++)
        sched_yield();
    pa_timer_disarm(&c->timer);
}

static int timer_kind(const struct thread_rec *r) {
    return r->ctl && atomic_load(&r->ctl->armed) ? r->ctl->timer.kind : PA_TIMER_NONE;
}

static int prof_blocked(void) {
    sigset_t cur;
    pa_real_pthread_sigmask(SIG_BLOCK, NULL, &cur);
    return sigismember(&cur, SIGPROF) == 1;
}

static void on_thread_exit(void *arg) {
    (void)arg;
    uint32_t serial = tls_serial;
    tls_serial = 0;
    pthread_mutex_lock(&reg_lock);
    struct thread_rec *r = rec_by_serial(serial);
    tls_ctl = NULL;
    if (r) {
        disarm_timer(r);
        r->alive = 0;
        r->died_at_drain = drains;
    }
    pthread_mutex_unlock(&reg_lock);
}

static void make_key(void) {
    pthread_key_create(&exit_key, on_thread_exit);
}

/* Perf-event weights (sample_weight): this thread's CPU clock at its last sample, and the part
 * of a period carried over. */
static __thread uint64_t tls_cpu_last, tls_cpu_rest __attribute__((tls_model("initial-exec")));

/* The thread's first sample stands for its CPU time from now on: from its registration, or
 * from the fork in a child, whose clock restarts at 0 while tls_cpu_last still holds the
 * parent's reading. Without this the first sample stood for one period, or for the child's
 * time less the parent's, and a child that spends its first CPU in the kernel (page faults
 * after fork, a large read), where a perf event raises no signal, lost all of it. Called
 * before the thread's timer is armed. */
static void weigh_from_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
    tls_cpu_last = now ? now : 1; /* 0 means "no reading" */
    tls_cpu_rest = 0;
}

void pa_sampler_thread_begin(void) {
    pthread_once(&key_once, make_key);
    weigh_from_now();
    pthread_mutex_lock(&reg_lock);
    if (nrecs == caprecs) {
        size_t cap = caprecs ? caprecs * 2 : 64;
        struct thread_rec *n = realloc(recs, cap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&reg_lock);
            return; /* this thread goes unsampled; the program is unaffected */
        }
        recs = n;
        caprecs = cap;
    }
    struct thread_ctl *c = calloc(1, sizeof *c);
    if (!c) {
        pthread_mutex_unlock(&reg_lock);
        return;
    }
    atomic_store(&c->blocked, prof_blocked());
    struct thread_rec *r = &recs[nrecs++];
    memset(r, 0, sizeof *r);
    r->ctl = tls_ctl = c;
    r->serial = next_serial++;
    r->tid = (pid_t)syscall(SYS_gettid);
    r->pthread = pthread_self();
    r->alive = 1;
    tls_serial = r->serial;
    /* In wall mode a thread gets a timer once it has a Python thread state (reconcile). */
    if (atomic_load(&running) && cfg.mode != PA_WALK_WALL && arm_timer(r) != 0)
        pa_log(PA_LOG_DEBUG, "cannot arm a timer for thread %d: %s", (int)r->tid, strerror(errno));
    pthread_mutex_unlock(&reg_lock);
    pthread_setspecific(exit_key, (void *)1);
}

size_t pa_threads_list(struct pa_thread_info *out, size_t max) {
    pthread_mutex_lock(&reg_lock);
    size_t n = nrecs;
    for (size_t i = 0; i < n && i < max; i++) {
        out[i].serial = recs[i].serial;
        out[i].tid = recs[i].tid;
        out[i].pthread = (unsigned long)recs[i].pthread;
        out[i].alive = recs[i].alive;
        memcpy(out[i].name, recs[i].name, sizeof out[i].name);
    }
    pthread_mutex_unlock(&reg_lock);
    return n;
}

void pa_threads_set_name(unsigned long pthread, const char *name) {
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < nrecs; i++)
        if (recs[i].alive && (unsigned long)recs[i].pthread == pthread) {
            snprintf(recs[i].name, sizeof recs[i].name, "%s", name);
            break;
        }
    pthread_mutex_unlock(&reg_lock);
}

/* Reads /proc/self/task/TID/<what> into buf (NUL-terminated, empty on failure). */
static void read_task_file(pid_t tid, const char *what, char *buf, size_t len) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/%s", (int)tid, what);
    buf[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
}

static void os_thread_name(pid_t tid, char *buf, size_t len) {
    read_task_file(tid, "comm", buf, len);
    buf[strcspn(buf, "\n")] = 0;
}

void pa_threads_name(uint32_t serial, char *buf, size_t len) {
    pthread_mutex_lock(&reg_lock);
    struct thread_rec *r = rec_by_serial(serial);
    char name[64] = "";
    pid_t tid = 0;
    int alive = 0;
    if (r) {
        memcpy(name, r->name, sizeof name);
        tid = r->tid;
        alive = r->alive;
    }
    pthread_mutex_unlock(&reg_lock);
    if (name[0]) {
        snprintf(buf, len, "%s", name);
        return;
    }
    /* Not a thread Python named: the OS name, unless it is only the program's name. */
    char comm[32] = "", self[32] = "";
    if (alive && tid != getpid()) {
        os_thread_name(tid, comm, sizeof comm);
        os_thread_name(getpid(), self, sizeof self);
    }
    if (comm[0] && strcmp(comm, self) != 0)
        snprintf(buf, len, "%s", comm);
    else if (tid == getpid())
        snprintf(buf, len, "MainThread");
    else if (tid)
        snprintf(buf, len, "tid %d", (int)tid);
    else
        snprintf(buf, len, "unknown thread");
}

void pa_threads_prune(void) {
    pthread_mutex_lock(&reg_lock);
    size_t w = 0;
    for (size_t i = 0; i < nrecs; i++) {
        if (recs[i].alive || recs[i].died_at_drain >= drains)
            recs[w++] = recs[i];
        else
            free(recs[i].ctl);
    }
    nrecs = w;
    drains++;
    pthread_mutex_unlock(&reg_lock);
}

/* ---- the handler (signal context) --------------------------------------------------------- */

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void hist_add(uint64_t ns) {
    unsigned b;
    if (ns < (uint64_t)HIST_LINEAR * HIST_STEP_NS) {
        b = (unsigned)(ns / HIST_STEP_NS);
    } else {
        b = HIST_LINEAR;
        for (uint64_t x = ns / ((uint64_t)HIST_LINEAR * HIST_STEP_NS); x > 1 && b < HIST_N - 1;
             x >>= 1)
            b++;
    }
    atomic_fetch_add_explicit(&hist[b], 1, memory_order_relaxed);
}

/* Native mode: the C stack spliced with the Python frames, back into frames[]. A function of
 * its own (never inlined) so that its buffers take stack space only when native frames are
 * on: the handler runs on whatever thread was interrupted, small stacks included. */
static __attribute__((noinline)) int splice_native(void *uc, struct pa_frame *frames, int depth) {
    struct pa_frame mixed[MAX_DEPTH_LIMIT];
    uintptr_t ips[PA_NATIVE_MAX_FRAMES];
    int nips = pa_native_backtrace(uc, ips, PA_NATIVE_MAX_FRAMES);
    int n = pa_native_interleave(ips, nips, frames, depth, mixed, (int)cfg.max_depth);
    memcpy(frames, mixed, (size_t)n * sizeof *frames);
    return n;
}

/* How many periods of this thread's CPU time the sample stands for. A POSIX timer's delayed
 * signal carries the periods that expired meanwhile (si_overrun). A perf event counts user
 * time only (timers.c: a signal raised in the kernel would interrupt a system call), so the
 * thread's CPU clock, kernel time included, gives the weight: what it used since its last
 * sample, in whole periods, the rest carried to the next. 0: not a whole period yet. */
static uint64_t sample_weight(const siginfo_t *si) {
    uint64_t w;
    if (si->si_code == SI_TIMER) {
        w = 1 + (uint64_t)(si->si_overrun > 0 ? si->si_overrun : 0);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        uint64_t now = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
        uint64_t period = 1000000000ULL / cfg.rate;
        if (tls_cpu_last == 0 || now < tls_cpu_last) { /* a thread never registered */
            w = 1;
            tls_cpu_rest = 0;
        } else {
            uint64_t used = now - tls_cpu_last + tls_cpu_rest;
            w = used / period;
            tls_cpu_rest = used % period;
        }
        tls_cpu_last = now;
    }
    return w > 1000 ? 1000 : w;
}

/* SIGNAL-HANDLER SIDE. A CPU sample while the interpreter cannot be walked: before it is
 * initialized (<startup>), or once it is finalizing or finalized (<shutdown>), so that the
 * profile's total is the process's CPU time. The interval between initialization and the
 * layout's verdict (the first handlers after it) is neither, and is not counted. No frame
 * is read. CPU mode only (wall and GIL modes keep to the interpreter's own life). */
static _Atomic int seen_ready; /* the interpreter was walkable once in this process */

static void count_outside_python(const siginfo_t *si) {
    if (cfg.mode != PA_WALK_CPU)
        return;
    int up = pa_py_initialized();
    int phase = !atomic_load_explicit(&seen_ready, memory_order_relaxed)
                    ? (up ? 0 : PA_SYN_STARTUP)
                    : (!up || pa_py_finalizing(&py) ? PA_SYN_SHUTDOWN : 0);
    uint64_t weight = phase ? sample_weight(si) : 0;
    if (!weight)
        return;
    struct pa_frame f;
    memset(&f, 0, sizeof f);
    f.id = (uint32_t)phase;
    struct pa_table *t = pa_tables_enter(&tables);
    pa_table_add(t, tls_serial, &f, 1, weight);
    pa_tables_leave(t);
}

static void take_sample(int sig, siginfo_t *si, void *uc) {
    int saved_errno = errno;
    if (!pa_timer_is_ours(si)) {
        atomic_fetch_add_explicit(&n_foreign, 1, memory_order_relaxed);
        pa_chain(sig, si, uc, &app_prof);
        errno = saved_errno;
        return;
    }
    /* Re-arm first, whatever happens next: a perf event left un-refreshed (while sampling is
     * paused around a fork, say) would never signal again. */
    pa_timer_rearm(si);
    if (!atomic_load_explicit(&running, memory_order_acquire)) {
        errno = saved_errno;
        return;
    }
    atomic_fetch_add_explicit(&n_signals, 1, memory_order_relaxed);
    if (!pa_py_ready(&py)) {
        count_outside_python(si);
        errno = saved_errno;
        return;
    }
    atomic_store_explicit(&seen_ready, 1, memory_order_relaxed);
    uint64_t t0 = now_ns();
    uint64_t weight = sample_weight(si);
    if (weight == 0) {
        hist_add(now_ns() - t0);
        errno = saved_errno;
        return;
    }
    struct pa_frame frames[MAX_DEPTH_LIMIT];
    struct pa_walk_counts counts = {0, 0};
    /* With native frames the walker's output is raw material (markers included), bounded by
     * the buffer; the depth limit applies to the interleaved stack. */
    int depth =
        pa_walk_this_thread(&py, frames, cfg.native ? MAX_DEPTH_LIMIT : (int)cfg.max_depth, &counts,
                            cfg.mode | (cfg.native ? PA_WALK_MARK_ENTRIES : 0), uc);
    if (depth == 0) { /* not a sample of this mode (no Python thread, not the GIL holder) */
        hist_add(now_ns() - t0);
        errno = saved_errno;
        return;
    }
    if (cfg.native)
        depth = splice_native(uc, frames, depth);
    struct pa_table *t = pa_tables_enter(&tables);
    pa_table_add(t, tls_serial, frames, (uint32_t)depth, weight);
    pa_tables_leave(t);
    if (counts.unreadable)
        atomic_fetch_add_explicit(&n_unreadable, counts.unreadable, memory_order_relaxed);
    if (counts.truncated)
        atomic_fetch_add_explicit(&n_truncated, counts.truncated, memory_order_relaxed);
    hist_add(now_ns() - t0);
    errno = saved_errno;
}

static void on_sigprof(int sig, siginfo_t *si, void *uc) {
    /* In a handler, the mask is the handler's: what libunwind (or the program's handler we
     * chain to) does to it is undone by sigreturn and must not stop or start our timer.
     *
     * The handler is installed with SA_NODEFER and blocks SIGPROF itself only once
     * pa_sample_mask says what the program's mask is; it sets the program's mask back before
     * clearing pa_sample_mask. So a signal of the program's that comes in at any instruction
     * of this handler (a kill() that was pending with our timer's signal, say) finds, in the
     * mask or in pa_sample_mask, the program's mask and never our SIGPROF: the program's
     * handler runs with the mask the kernel would have given it without us. A timer signal
     * in the few instructions before the block is a sample of its own, as it should be. */
    int saved = errno;
    const sigset_t *outer = pa_sample_mask;
    const sigset_t *program = &((ucontext_t *)uc)->uc_sigmask;
    pa_handler_depth++;
    pa_sample_mask = program;
    sigset_t prof;
    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    pa_real_pthread_sigmask(SIG_BLOCK, &prof, NULL);
    errno = saved;
    take_sample(sig, si, uc);
    saved = errno;
    pa_real_pthread_sigmask(SIG_SETMASK, program, NULL);
    pa_sample_mask = outer;
    pa_handler_depth--;
    errno = saved;
}

/* ---- wall mode: time off a CPU, counted from the tick thread (normal context) --------------- */

static int tick_started;           /* under reg_lock */
static _Atomic uint64_t n_off_cpu; /* samples counted by the tick thread */

/* What thread tid waits in: the system call number (-1: running or runnable) and its first
 * argument, from /proc/self/task/TID/syscall. */
static int tick_reads_proc;

static void waiting_in(pid_t tid, struct pa_other_thread *o) {
    char buf[256];
    o->syscall_nr = -1;
    o->arg0 = 0;
    if (!tick_reads_proc)
        return; /* descriptors shared with the program: see tick_private_descriptors */
    read_task_file(tid, "syscall", buf, sizeof buf);
    char *end;
    long nr = strtol(buf, &end, 10);
    if (end == buf)
        return; /* "running" */
    o->syscall_nr = nr < 0 ? -1 : nr;
    o->arg0 = (uintptr_t)strtoull(end, NULL, 16);
}

static void count_off_cpu(struct thread_rec *r, uint64_t weight) {
    struct pa_other_thread o = {(unsigned long)r->pthread, -1, 0};
    waiting_in(r->tid, &o);
    struct pa_frame frames[MAX_DEPTH_LIMIT];
    struct pa_walk_counts counts = {0, 0};
    int depth = pa_walk_other_thread(&py, frames, (int)cfg.max_depth, &counts, PA_WALK_WALL, &o);
    if (depth == 0)
        return;
    struct pa_table *t = pa_tables_enter(&tables);
    pa_table_add(t, r->serial, frames, (uint32_t)depth, weight);
    pa_tables_leave(t);
    atomic_fetch_add(&n_off_cpu, 1);
    if (counts.unreadable)
        atomic_fetch_add(&n_unreadable, counts.unreadable);
    if (counts.truncated)
        atomic_fetch_add(&n_truncated, counts.truncated);
}

/* Every period: each Python thread's wall time minus its CPU time (which its CPU-time timer
 * samples) is time off a CPU; each whole period of it is one sample of the thread's stack as
 * it is now, read from here: the thread is not interrupted, so a C library's nanosleep,
 * which no handler may interrupt without an early return, is left alone. */
static void wall_tick(uint64_t elapsed) {
    for (size_t i = 0; i < nrecs; i++) {
        struct thread_rec *r = &recs[i];
        if (!r->alive || !r->has_clock || timer_kind(r) == PA_TIMER_NONE)
            continue;
        struct timespec ts;
        if (clock_gettime(r->cpu_clock, &ts) != 0)
            continue;
        uint64_t cpu = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
        uint64_t used = cpu > r->last_cpu_ns ? cpu - r->last_cpu_ns : 0;
        r->last_cpu_ns = cpu;
        r->off_ns += elapsed > used ? elapsed - used : 0;
        uint64_t period = 1000000000ULL / cfg.rate;
        if (r->off_ns < period)
            continue;
        uint64_t n = r->off_ns / period;
        r->off_ns -= n * period;
        count_off_cpu(r, n > 1000 ? 1000 : n);
    }
}

/* The program's threads still running (reg_lock held). */
static size_t alive_locked(void) {
    size_t alive = 0;
    for (size_t i = 0; i < nrecs; i++)
        alive += recs[i].alive;
    return alive;
}

int pa_sampler_program_gone(void) {
    pthread_mutex_lock(&reg_lock);
    int gone = nrecs > 0 && alive_locked() == 0;
    pthread_mutex_unlock(&reg_lock);
    return gone;
}

/* The tick thread's descriptors are its own: it opens /proc/self/task/TID/syscall for each
 * waiting thread, hundreds of times a second, and each open() takes the lowest free number
 * of the table it opens in. In the program's table that is a number the program has just
 * closed and means to take back (close(0) then open() must give 0; dup2 onto it fails with
 * EBUSY while our open() holds it; our close() then closes the program's new descriptor).
 * unshare(CLONE_FILES) gives this thread a private copy of the table, which it empties at
 * once, so that no file of the program's is kept open by the copy (a pipe's reader would
 * never see EOF). Refused (a seccomp filter, as Docker's default one without
 * CAP_SYS_ADMIN), wall mode does without /proc: waiting threads are then counted without
 * their <idle> or <waiting for the GIL> leaf, and the log says so once. */
static void tick_private_descriptors(void) {
    if (unshare(CLONE_FILES) != 0) {
        pa_log(PA_LOG_WARN,
               "wall mode: cannot give the tick thread descriptors of its own (%s); "
               "waiting threads are counted without <idle> or <waiting for the "
               "GIL>",
               strerror(errno));
        return;
    }
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 0U, ~0U, 0U) != 0)
#endif
    {
        struct rlimit lim;
        long top = getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < 1048576
                       ? (long)lim.rlim_cur
                       : 1048576;
        for (long fd = 0; fd < top; fd++)
            close((int)fd);
    }
    tick_reads_proc = 1;
}

static void *tick_main(void *arg) {
    (void)arg;
    tick_private_descriptors();
    /* The guarded reads need SIGSEGV and SIGBUS (synchronous: only this thread's faults). */
    sigset_t faults;
    sigemptyset(&faults);
    sigaddset(&faults, SIGSEGV);
    sigaddset(&faults, SIGBUS);
    pa_real_pthread_sigmask(SIG_UNBLOCK, &faults, NULL);
    uint64_t period = 1000000000ULL / cfg.rate, last = now_ns();
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (;;) {
        next.tv_nsec += (long)period;
        while (next.tv_nsec >= 1000000000L) {
            next.tv_sec++;
            next.tv_nsec -= 1000000000L;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        pthread_mutex_lock(&reg_lock);
        /* Sampling stopped, or the program's last thread has ended (pthread_exit in a child
         * forked from a worker thread): this thread must not keep the process alive. */
        if (!wanted || alive_locked() == 0) {
            tick_started = 0;
            pthread_mutex_unlock(&reg_lock);
            return NULL;
        }
        uint64_t now = now_ns();
        if (atomic_load(&running) && !pa_py_finalizing(&py))
            wall_tick(now - last);
        last = now;
        pthread_mutex_unlock(&reg_lock);
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec > next.tv_sec + 1)
            next = t; /* far behind (suspended): start again from now */
    }
}

/* ---- control (normal context) ------------------------------------------------------------- */

int pa_sampler_init(const struct pa_python *p, const struct pa_sampler_config *c) {
    if (initialized)
        return 0;
    py = *p;
    cfg = *c;
    if (cfg.max_depth < 2)
        cfg.max_depth = 2;
    if (cfg.max_depth > MAX_DEPTH_LIMIT)
        cfg.max_depth = MAX_DEPTH_LIMIT;
    if (pa_code_cache_init(16, 16u << 20) != 0 || pa_table_init(&tables.t[0], 15, 1u << 20) != 0 ||
        pa_table_init(&tables.t[1], 15, 1u << 20) != 0)
        return -1;
    atomic_store(&tables.active, &tables.t[0]);
    srandom((unsigned)(getpid() ^ now_ns()));
    initialized = 1;
    return 0;
}

void pa_sampler_set_native(int on) {
    cfg.native = on;
}

void pa_sampler_set_python(const struct pa_python *p) {
    py = *p;
}

struct pa_tables *pa_sampler_tables(void) {
    return &tables;
}

int pa_sampler_running(void) {
    return atomic_load(&running);
}

/* ---- the program's CPU time while sampled (normal context) -------------------------------- *
 *
 * What the samples are measured over, for the profile header: the process's CPU clock while
 * sampling runs, less the agent's own threads (the uploader, the namer, the wall tick), whose
 * time no sample stands for. Each agent thread registers its CPU clock while it lives and
 * leaves its total behind when it ends. Stopping freezes the figure, so the final flush's own
 * work (draining, naming, writing) is not in it. */
enum { AGENT_THREADS_MAX = 8 };
static pthread_mutex_t cpu_lock = PTHREAD_MUTEX_INITIALIZER;
static clockid_t agent_clock[AGENT_THREADS_MAX];
static int agent_live[AGENT_THREADS_MAX];
static uint64_t agent_gone_ns;      /* CPU of agent threads that ended (under cpu_lock) */
static uint64_t cpu_mark_ns;        /* program_cpu_now() when sampling (re)started */
static uint64_t cpu_acc_ns;         /* program CPU of earlier sampled intervals */
static int cpu_counting;            /* between start and stop (under reg_lock) */
static __thread int tls_agent_slot; /* this agent thread's slot + 1 */

static uint64_t clock_ns(clockid_t c) {
    struct timespec ts;
    if (clock_gettime(c, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void pa_sampler_agent_thread_begin(void) {
    clockid_t c;
    if (pthread_getcpuclockid(pthread_self(), &c) != 0)
        return;
    pthread_mutex_lock(&cpu_lock);
    for (int i = 0; i < AGENT_THREADS_MAX && !tls_agent_slot; i++)
        if (!agent_live[i]) {
            agent_clock[i] = c;
            agent_live[i] = 1;
            tls_agent_slot = i + 1;
        }
    pthread_mutex_unlock(&cpu_lock);
}

void pa_sampler_agent_thread_end(void) {
    if (!tls_agent_slot)
        return;
    pthread_mutex_lock(&cpu_lock);
    agent_gone_ns += clock_ns(CLOCK_THREAD_CPUTIME_ID);
    agent_live[tls_agent_slot - 1] = 0;
    pthread_mutex_unlock(&cpu_lock);
    tls_agent_slot = 0;
}

/* The process's CPU time so far, less the agent threads'. */
static uint64_t program_cpu_now(void) {
    pthread_mutex_lock(&cpu_lock);
    uint64_t agent = agent_gone_ns;
    for (int i = 0; i < AGENT_THREADS_MAX; i++)
        if (agent_live[i])
            agent += clock_ns(agent_clock[i]);
    uint64_t all = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    pthread_mutex_unlock(&cpu_lock);
    return all > agent ? all - agent : 0;
}

/* Under reg_lock. */
static void cpu_count_start(void) {
    if (!cpu_counting) {
        cpu_mark_ns = program_cpu_now();
        cpu_counting = 1;
    }
}

static void cpu_count_stop(void) {
    if (cpu_counting) {
        uint64_t now = program_cpu_now();
        cpu_acc_ns += now > cpu_mark_ns ? now - cpu_mark_ns : 0;
        cpu_counting = 0;
    }
}

int pa_sampler_start(char *err, size_t errlen) {
    if (!initialized) {
        snprintf(err, errlen, "sampler not initialized");
        return -1;
    }
    if (pa_guard_install() != 0) {
        snprintf(err, errlen, "cannot install the fault guard: %s", strerror(errno));
        return -1;
    }
    if (!handler_installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigprof;
        /* SA_RESTART: interrupted system calls resume, as Python expects of SIGPROF.
         * SA_NODEFER: on_sigprof blocks SIGPROF itself (see there). */
        sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        if (pa_real_sigaction(SIGPROF, &sa, &app_prof) != 0) {
            snprintf(err, errlen, "cannot install the SIGPROF handler: %s", strerror(errno));
            return -1;
        }
        handler_installed = 1;
    }
    pthread_mutex_lock(&reg_lock);
    wanted = 1;
    if (exec_holds) { /* the thread that execs re-arms if exec fails */
        pthread_mutex_unlock(&reg_lock);
        return 0;
    }
    atomic_store(&running, 1);
    cpu_count_start();
    if (cfg.mode == PA_WALK_WALL && !tick_started)
        tick_started = pa_spawn_agent_thread(tick_main) == 0;
    int failed = 0, first_errno = 0;
    for (size_t i = 0; i < nrecs; i++)
        if (recs[i].alive && cfg.mode != PA_WALK_WALL && arm_timer(&recs[i]) != 0 && !failed++)
            first_errno = errno;
    pthread_mutex_unlock(&reg_lock);
    pa_sampler_reconcile();
    if (failed)
        pa_log(PA_LOG_WARN, "%d thread(s) could not get a CPU timer and are not sampled (%s)",
               failed, strerror(first_errno));
    return 0;
}

void pa_sampler_arm_self(void) {
    pthread_mutex_lock(&reg_lock);
    struct thread_rec *r = rec_by_serial(tls_serial);
    if (r && atomic_load(&running))
        arm_timer(r); /* a timer already armed stays as it is */
    pthread_mutex_unlock(&reg_lock);
}

void pa_sampler_reconcile(void) {
    if (cfg.mode != PA_WALK_WALL || !atomic_load(&running))
        return;
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < nrecs; i++) {
        struct thread_rec *r = &recs[i];
        if (!r->alive)
            continue;
        int python = pa_thread_is_python(&py, (unsigned long)r->pthread);
        if (python && timer_kind(r) == PA_TIMER_NONE)
            arm_timer(r);
        else if (!python && timer_kind(r) != PA_TIMER_NONE)
            disarm_timer(r);
    }
    pthread_mutex_unlock(&reg_lock);
}

void pa_sampler_stop(void) {
    pthread_mutex_lock(&reg_lock);
    wanted = 0;
    atomic_store(&running, 0);
    for (size_t i = 0; i < nrecs; i++)
        disarm_timer(&recs[i]);
    cpu_count_stop();
    pthread_mutex_unlock(&reg_lock);
}

/* ---- the program blocks SIGPROF, or execs (signal-safe / normal context) ------------------ */

void pa_sampler_mask_will_block(void) {
    struct thread_ctl *c = tls_ctl;
    if (c && !atomic_load(&c->blocked)) {
        atomic_store(&c->blocked, 1);
        ctl_apply(c);
    }
}

void pa_sampler_mask_changed(void) {
    struct thread_ctl *c = tls_ctl;
    if (!c)
        return;
    int b = prof_blocked();
    if (b == atomic_load(&c->blocked))
        return;
    atomic_store(&c->blocked, b);
    ctl_apply(c);
}

/* Signals of ours already queued for this thread (a timer that fired inside the last system
 * call) are taken and dropped; anything else is sent again, as it was. Signal-safe. */
static void drop_pending_ours(void) {
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

void pa_sampler_exec_prepare(void) {
    /* exec may be called from a signal handler that interrupted a holder of reg_lock: wait
     * a little for the lock, never forever. */
    int locked = 0;
    for (int tries = 0; tries < 200 && !(locked = pthread_mutex_trylock(&reg_lock) == 0); tries++)
        usleep(500);
    if (locked) {
        exec_holds++;
        atomic_store(&running, 0);
        for (size_t i = 0; i < nrecs; i++)
            disarm_timer(&recs[i]);
        pthread_mutex_unlock(&reg_lock);
    } else if (tls_ctl && atomic_load(&tls_ctl->armed)) {
        pa_timer_pause(&tls_ctl->timer); /* at least this thread's own */
    }
    drop_pending_ours();
}

void pa_sampler_exec_failed(void) {
    pthread_mutex_lock(&reg_lock);
    if (exec_holds > 0 && --exec_holds == 0 && wanted) {
        atomic_store(&running, 1);
        for (size_t i = 0; i < nrecs; i++)
            if (recs[i].alive && cfg.mode != PA_WALK_WALL)
                arm_timer(&recs[i]);
    }
    pthread_mutex_unlock(&reg_lock);
    pa_sampler_reconcile();
}

int pa_sampler_app_sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (sig != SIGPROF || !handler_installed)
        return 0;
    if (old)
        *old = app_prof;
    if (act)
        app_prof = *act;
    return 1;
}

static uint64_t hist_percentile(const uint32_t *h, double q) {
    uint64_t total = 0;
    for (int i = 0; i < HIST_N; i++)
        total += h[i];
    if (!total)
        return 0;
    uint64_t want = (uint64_t)(q * (double)total), seen = 0;
    for (int i = 0; i < HIST_N; i++) {
        seen += h[i];
        if (seen > want) {
            if (i < HIST_LINEAR)
                return (uint64_t)i * HIST_STEP_NS + HIST_STEP_NS / 2;
            return (uint64_t)HIST_LINEAR * HIST_STEP_NS << (i - HIST_LINEAR);
        }
    }
    return 0;
}

void pa_sampler_get_stats(struct pa_sampler_stats *st) {
    memset(st, 0, sizeof *st);
    st->signals = atomic_load(&n_signals);
    st->unreadable = atomic_load(&n_unreadable);
    st->truncated = atomic_load(&n_truncated);
    st->foreign = atomic_load(&n_foreign);
    st->code_cache_full = pa_code_cache_full;
    unsigned kinds = atomic_load(&armed_kinds);
    st->timer =
        kinds & (1u << PA_TIMER_PERF)
            ? (kinds & (1u << PA_TIMER_CPU) ? "perf-task-clock+cpu-timer" : "perf-task-clock")
        : kinds & (1u << PA_TIMER_CPU) ? "cpu-timer"
                                       : "none";
    if (cfg.mode == PA_WALK_WALL && kinds) {
        snprintf(st->timer_buf, sizeof st->timer_buf, "%s+wall-tick", st->timer);
        st->timer = st->timer_buf;
    }
    uint32_t h[HIST_N];
    for (int i = 0; i < HIST_N; i++)
        h[i] = atomic_load_explicit(&hist[i], memory_order_relaxed);
    st->handler_p50_ns = hist_percentile(h, 0.50);
    st->handler_p99_ns = hist_percentile(h, 0.99);
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < nrecs; i++)
        st->threads += recs[i].alive;
    st->cpu_ns = cpu_acc_ns;
    if (cpu_counting) {
        uint64_t now = program_cpu_now();
        st->cpu_ns += now > cpu_mark_ns ? now - cpu_mark_ns : 0;
    }
    pthread_mutex_unlock(&reg_lock);
}

/* ---- fork --------------------------------------------------------------------------------- */

static int was_running_at_fork;

void pa_sampler_fork_prepare(void) {
    pthread_mutex_lock(&reg_lock);
    /* No handler of ours runs in the forking thread while fork copies the process. */
    was_running_at_fork = atomic_exchange(&running, 0);
    pthread_mutex_lock(&cpu_lock);
}

void pa_sampler_fork_parent(void) {
    pthread_mutex_unlock(&cpu_lock);
    atomic_store(&running, was_running_at_fork);
    pthread_mutex_unlock(&reg_lock);
}

void pa_sampler_fork_child(void) {
    /* Timers are not inherited; only the forking thread exists. Start clean. */
    size_t keep = 0;
    pthread_t self = pthread_self();
    for (size_t i = 0; i < nrecs; i++) {
        struct thread_ctl *c = recs[i].ctl;
        if (c) {
            if (atomic_load(&c->armed))
                pa_timer_forget(&c->timer);
            atomic_store(&c->armed, 0);
            atomic_store(&c->users, 0);
        }
        if (!keep && pthread_equal(recs[i].pthread, self)) {
            struct thread_rec mine = recs[i];
            recs[i] = recs[0];
            recs[0] = mine;
            recs[0].tid = (pid_t)syscall(SYS_gettid);
            keep = 1;
        }
    }
    for (size_t i = keep; i < nrecs; i++)
        free(recs[i].ctl); /* the other threads do not exist here */
    nrecs = keep;
    tick_started = 0; /* the tick thread is the parent's */
    pa_table_clear(&tables.t[0]);
    pa_table_clear(&tables.t[1]);
    atomic_store(&tables.t[0].writers, 0);
    atomic_store(&tables.t[1].writers, 0);
    /* The agent threads are the parent's; the child's CPU clock starts at zero. */
    for (int i = 0; i < AGENT_THREADS_MAX; i++)
        agent_live[i] = 0;
    agent_gone_ns = 0;
    tls_agent_slot = 0;
    cpu_acc_ns = cpu_mark_ns = 0;
    cpu_counting = 0;
    pthread_mutex_unlock(&cpu_lock);
    atomic_store(&n_signals, 0);
    atomic_store(&n_unreadable, 0);
    atomic_store(&n_truncated, 0);
    atomic_store(&n_foreign, 0);
    for (int i = 0; i < HIST_N; i++)
        atomic_store(&hist[i], 0);
    atomic_store(&running, 0);
    pthread_mutex_unlock(&reg_lock);
    if (!keep)
        pa_sampler_thread_begin();
    else
        weigh_from_now();
}
