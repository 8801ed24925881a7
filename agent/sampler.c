/* sampler.c: the SIGPROF handler, per-thread CPU timers and the thread registry.
 *
 * SIGNAL-HANDLER SIDE: on_sigprof and what it calls (forward_to_app, hist_add, the walk and
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
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../shim/log.h"
#include "../shim/realfns.h"
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

static _Atomic uint64_t n_signals, n_unreadable, n_truncated, n_foreign;
static _Atomic uint32_t hist[HIST_N];

/* What the application installed for SIGPROF while ours is the real handler. */
static struct sigaction app_prof;
static int handler_installed;

/* ---- thread registry (normal context) ---------------------------------------------------- */

struct thread_rec {
    uint32_t serial;
    pid_t tid;
    pthread_t pthread;
    struct pa_timer timer;
    int alive;
    uint64_t died_at_drain; /* drain count when it died */
    char name[64];
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

static int arm_timer(struct thread_rec *r) {
    int want = cfg.mode == PA_WALK_WALL ? PA_WANT_WALL : cfg.timer_want;
    int kind = pa_timer_arm(&r->timer, r->tid, r->pthread, cfg.rate, want);
    if (kind == PA_TIMER_NONE)
        return -1;
    atomic_fetch_or(&armed_kinds, 1u << kind);
    return 0;
}

static void disarm_timer(struct thread_rec *r) {
    pa_timer_disarm(&r->timer);
}

static void on_thread_exit(void *arg) {
    (void)arg;
    uint32_t serial = tls_serial;
    tls_serial = 0;
    pthread_mutex_lock(&reg_lock);
    struct thread_rec *r = rec_by_serial(serial);
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

void pa_sampler_thread_begin(void) {
    pthread_once(&key_once, make_key);
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
    struct thread_rec *r = &recs[nrecs++];
    memset(r, 0, sizeof *r);
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

static void os_thread_name(pid_t tid, char *buf, size_t len) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)tid);
    buf[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n <= 0) {
        buf[0] = 0;
        return;
    }
    buf[n] = 0;
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
    for (size_t i = 0; i < nrecs; i++)
        if (recs[i].alive || recs[i].died_at_drain >= drains)
            recs[w++] = recs[i];
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

static void forward_to_app(int sig, siginfo_t *si, void *uc) {
    atomic_fetch_add_explicit(&n_foreign, 1, memory_order_relaxed);
    struct sigaction a = app_prof;
    if (a.sa_flags & SA_RESETHAND) {
        memset(&app_prof, 0, sizeof app_prof);
        app_prof.sa_handler = SIG_DFL;
    }
    if (a.sa_flags & SA_SIGINFO) {
        a.sa_sigaction(sig, si, uc);
    } else if (a.sa_handler == SIG_DFL) {
        /* SIGPROF's default action ends the process: take it, as without us. The signal is
         * blocked while we run, so it is delivered (and kills) when we return. */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        pa_real_sigaction(sig, &dfl, NULL);
        syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), sig);
    } else if (a.sa_handler != SIG_IGN) {
        a.sa_handler(sig);
    }
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

static void on_sigprof(int sig, siginfo_t *si, void *uc) {
    int saved_errno = errno;
    if (!pa_timer_is_ours(si)) {
        forward_to_app(sig, si, uc);
        errno = saved_errno;
        return;
    }
    /* Re-arm first, whatever happens next: a perf event left un-refreshed (while sampling is
     * paused around a fork, say) would never signal again. */
    pa_timer_rearm(si);
    if (!atomic_load_explicit(&running, memory_order_acquire) || pa_py_finalizing(&py)) {
        errno = saved_errno;
        return;
    }
    uint64_t t0 = now_ns();
    atomic_fetch_add_explicit(&n_signals, 1, memory_order_relaxed);
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
    /* A delayed signal stands for every period that expired meanwhile. */
    uint64_t weight = 1 + (uint64_t)(si->si_overrun > 0 ? si->si_overrun : 0);
    if (weight > 1000)
        weight = 1000;
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

struct pa_tables *pa_sampler_tables(void) {
    return &tables;
}

int pa_sampler_running(void) {
    return atomic_load(&running);
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
        /* SA_RESTART: interrupted system calls resume, as Python expects of SIGPROF. */
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (pa_real_sigaction(SIGPROF, &sa, &app_prof) != 0) {
            snprintf(err, errlen, "cannot install the SIGPROF handler: %s", strerror(errno));
            return -1;
        }
        handler_installed = 1;
    }
    pthread_mutex_lock(&reg_lock);
    atomic_store(&running, 1);
    int failed = 0;
    for (size_t i = 0; i < nrecs; i++)
        if (recs[i].alive && cfg.mode != PA_WALK_WALL && arm_timer(&recs[i]) != 0)
            failed++;
    pthread_mutex_unlock(&reg_lock);
    pa_sampler_reconcile();
    if (failed)
        pa_log(PA_LOG_WARN, "%d thread(s) could not get a CPU timer and are not sampled", failed);
    return 0;
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
        if (python && r->timer.kind == PA_TIMER_NONE)
            arm_timer(r);
        else if (!python && r->timer.kind != PA_TIMER_NONE)
            disarm_timer(r);
    }
    pthread_mutex_unlock(&reg_lock);
}

void pa_sampler_stop(void) {
    pthread_mutex_lock(&reg_lock);
    atomic_store(&running, 0);
    for (size_t i = 0; i < nrecs; i++)
        disarm_timer(&recs[i]);
    pthread_mutex_unlock(&reg_lock);
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
        : kinds & (1u << PA_TIMER_WALL) ? "wall-timer"
        : kinds & (1u << PA_TIMER_CPU)  ? "cpu-timer"
                                        : "none";
    uint32_t h[HIST_N];
    for (int i = 0; i < HIST_N; i++)
        h[i] = atomic_load_explicit(&hist[i], memory_order_relaxed);
    st->handler_p50_ns = hist_percentile(h, 0.50);
    st->handler_p99_ns = hist_percentile(h, 0.99);
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < nrecs; i++)
        st->threads += recs[i].alive;
    pthread_mutex_unlock(&reg_lock);
}

/* ---- fork --------------------------------------------------------------------------------- */

static int was_running_at_fork;

void pa_sampler_fork_prepare(void) {
    pthread_mutex_lock(&reg_lock);
    /* No handler of ours runs in the forking thread while fork copies the process. */
    was_running_at_fork = atomic_exchange(&running, 0);
}

void pa_sampler_fork_parent(void) {
    atomic_store(&running, was_running_at_fork);
    pthread_mutex_unlock(&reg_lock);
}

void pa_sampler_fork_child(void) {
    /* Timers are not inherited; only the forking thread exists. Start clean. */
    size_t keep = 0;
    pthread_t self = pthread_self();
    for (size_t i = 0; i < nrecs; i++)
        pa_timer_forget(&recs[i].timer);
    for (size_t i = 0; i < nrecs; i++)
        if (pthread_equal(recs[i].pthread, self)) {
            recs[0] = recs[i];
            recs[0].tid = (pid_t)syscall(SYS_gettid);
            keep = 1;
            break;
        }
    nrecs = keep;
    pa_table_clear(&tables.t[0]);
    pa_table_clear(&tables.t[1]);
    atomic_store(&tables.t[0].writers, 0);
    atomic_store(&tables.t[1].writers, 0);
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
}
