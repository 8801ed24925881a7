/* registry.c: the program's threads, their timers, and sampling's start, stop, exec and fork.
 *
 * Normal context: everything here runs under pa_reg_lock, which no signal handler takes.
 * Every thread the program starts registers itself (pa_sampler_thread_begin, from the shim's
 * pthread_create trampoline; the main thread from the constructor) and gets its own CPU-time
 * timer, delivered to that very thread, so the handler (handler.c) walks the stack of the
 * thread that spent the time. A thread's own control of its timer while it changes its signal
 * mask is signal-side code (timerctl.c); the wall-mode tick thread is wall.c. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../base/threads.h"
#include "codecache.h"
#include "guard.h"
#include "handler.h"
#include "registry.h"
#include "sampler.h"

static struct pa_tables tables;
static int initialized;

pthread_mutex_t pa_reg_lock = PTHREAD_MUTEX_INITIALIZER;
struct pa_thread_rec *pa_reg_recs;
size_t pa_reg_n;
int pa_reg_wanted;

static size_t cap_recs;
static uint32_t next_serial = 1;
static uint64_t drains; /* pa_threads_prune calls */
static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static _Atomic unsigned armed_kinds; /* bit per pa_timer_kind armed so far */
static int exec_holds;               /* exec calls in progress: nothing may be armed */

static struct pa_thread_rec *rec_by_serial(uint32_t serial) {
    size_t lo = 0, hi = pa_reg_n; /* serials are appended in increasing order */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (pa_reg_recs[mid].serial < serial)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < pa_reg_n && pa_reg_recs[lo].serial == serial ? &pa_reg_recs[lo] : NULL;
}

size_t pa_reg_alive(void) {
    size_t alive = 0;
    for (size_t i = 0; i < pa_reg_n; i++)
        alive += pa_reg_recs[i].alive;
    return alive;
}

int pa_reg_timer_kind(const struct pa_thread_rec *r) {
    return r->ctl && atomic_load(&r->ctl->armed) ? r->ctl->timer.kind : PA_TIMER_NONE;
}

/* ---- timers ------------------------------------------------------------------------------- */

static int arm_timer(struct pa_thread_rec *r) {
    struct pa_thread_ctl *c = r->ctl;
    if (!c || atomic_load(&c->armed))
        return c ? 0 : -1;
    const struct pa_handler_config *cfg = pa_handler_config();
    /* Wall mode too: a CPU-time timer samples the thread while it runs; the wall tick
     * thread counts its time off a CPU without signalling it (wall.c). */
    int kind = pa_timer_arm(&c->timer, r->tid, r->pthread, cfg->rate, pa_sampler_timer_want());
    if (kind == PA_TIMER_NONE)
        return -1;
    if (!atomic_load(&c->blocked) && pa_timer_resume(&c->timer) != 0) {
        int e = errno;
        pa_timer_disarm(&c->timer);
        errno = e;
        return -1;
    }
    atomic_store(&c->armed, 1);
    pa_ctl_apply(c); /* the thread may have blocked SIGPROF meanwhile */
    atomic_fetch_or(&armed_kinds, 1u << kind);
    if (cfg->mode == PA_WALK_WALL)
        pa_wall_thread_armed(r);
    return 0;
}

static void disarm_timer(struct pa_thread_rec *r) {
    struct pa_thread_ctl *c = r->ctl;
    if (!c || !atomic_load(&c->armed))
        return;
    atomic_store(&c->armed, 0);
    /* Bounded: the user may be this very thread, interrupted by the signal that runs us. */
    for (int spins = 0; atomic_load(&c->users) && spins < 1000; spins++)
        sched_yield();
    pa_timer_disarm(&c->timer);
}

static int timer_want;

int pa_sampler_timer_want(void) {
    return timer_want;
}

/* ---- the registry ------------------------------------------------------------------------- */

static void on_thread_exit(void *arg) {
    (void)arg;
    uint32_t serial = pa_handler_serial;
    pa_handler_serial = 0;
    pthread_mutex_lock(&pa_reg_lock);
    struct pa_thread_rec *r = rec_by_serial(serial);
    pa_ctl_self = NULL;
    if (r) {
        disarm_timer(r);
        r->alive = 0;
        r->died_at_drain = drains;
    }
    pthread_mutex_unlock(&pa_reg_lock);
}

static void make_key(void) {
    pthread_key_create(&exit_key, on_thread_exit);
}

void pa_sampler_thread_begin(void) {
    pthread_once(&key_once, make_key);
    pa_handler_weigh_from_now();
    pthread_mutex_lock(&pa_reg_lock);
    if (pa_reg_n == cap_recs) {
        size_t cap = cap_recs ? cap_recs * 2 : 64;
        struct pa_thread_rec *n = realloc(pa_reg_recs, cap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&pa_reg_lock);
            return; /* this thread goes unsampled; the program is unaffected */
        }
        pa_reg_recs = n;
        cap_recs = cap;
    }
    struct pa_thread_ctl *c = calloc(1, sizeof *c);
    if (!c) {
        pthread_mutex_unlock(&pa_reg_lock);
        return;
    }
    atomic_store(&c->blocked, pa_ctl_prof_blocked());
    struct pa_thread_rec *r = &pa_reg_recs[pa_reg_n++];
    memset(r, 0, sizeof *r);
    r->ctl = pa_ctl_self = c;
    r->serial = next_serial++;
    r->tid = (pid_t)syscall(SYS_gettid);
    r->pthread = pthread_self();
    r->alive = 1;
    pa_handler_serial = r->serial;
    /* In wall mode a thread gets a timer once it has a Python thread state (reconcile). */
    if (atomic_load(&pa_handler_running) && pa_handler_config()->mode != PA_WALK_WALL &&
        arm_timer(r) != 0)
        pa_log(PA_LOG_DEBUG, "cannot arm a timer for thread %d: %s", (int)r->tid, strerror(errno));
    pthread_mutex_unlock(&pa_reg_lock);
    pthread_setspecific(exit_key, (void *)1);
}

size_t pa_threads_list(struct pa_thread_info *out, size_t max) {
    pthread_mutex_lock(&pa_reg_lock);
    size_t n = pa_reg_n;
    for (size_t i = 0; i < n && i < max; i++) {
        out[i].serial = pa_reg_recs[i].serial;
        out[i].tid = pa_reg_recs[i].tid;
        out[i].pthread = (unsigned long)pa_reg_recs[i].pthread;
        out[i].alive = pa_reg_recs[i].alive;
        memcpy(out[i].name, pa_reg_recs[i].name, sizeof out[i].name);
    }
    pthread_mutex_unlock(&pa_reg_lock);
    return n;
}

void pa_threads_set_name(unsigned long pthread, const char *name) {
    pthread_mutex_lock(&pa_reg_lock);
    for (size_t i = 0; i < pa_reg_n; i++)
        if (pa_reg_recs[i].alive && (unsigned long)pa_reg_recs[i].pthread == pthread) {
            snprintf(pa_reg_recs[i].name, sizeof pa_reg_recs[i].name, "%s", name);
            break;
        }
    pthread_mutex_unlock(&pa_reg_lock);
}

/* The OS's name of thread tid, from /proc/self/task/TID/comm (empty on failure). */
static void os_thread_name(pid_t tid, char *buf, size_t len) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)tid);
    buf[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    buf[strcspn(buf, "\n")] = 0;
}

void pa_threads_name(uint32_t serial, char *buf, size_t len) {
    pthread_mutex_lock(&pa_reg_lock);
    struct pa_thread_rec *r = rec_by_serial(serial);
    char name[64] = "";
    pid_t tid = 0;
    int alive = 0;
    if (r) {
        memcpy(name, r->name, sizeof name);
        tid = r->tid;
        alive = r->alive;
    }
    pthread_mutex_unlock(&pa_reg_lock);
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
    pthread_mutex_lock(&pa_reg_lock);
    size_t w = 0;
    for (size_t i = 0; i < pa_reg_n; i++) {
        if (pa_reg_recs[i].alive || pa_reg_recs[i].died_at_drain >= drains)
            pa_reg_recs[w++] = pa_reg_recs[i];
        else
            free(pa_reg_recs[i].ctl);
    }
    pa_reg_n = w;
    drains++;
    pthread_mutex_unlock(&pa_reg_lock);
}

int pa_sampler_program_gone(void) {
    pthread_mutex_lock(&pa_reg_lock);
    int gone = pa_reg_n > 0 && pa_reg_alive() == 0;
    pthread_mutex_unlock(&pa_reg_lock);
    return gone;
}

/* ---- the program's CPU time while sampled -------------------------------------------------- *
 *
 * What the samples are measured over, for the profile header: the process's CPU clock while
 * sampling runs, less the agent's own threads (base/threads.c), whose time no sample stands
 * for. Stopping freezes the figure, so the final flush's own work (draining, naming,
 * writing) is not in it. */
static uint64_t cpu_mark_ns; /* program_cpu_now() when sampling (re)started */
static uint64_t cpu_acc_ns;  /* program CPU of earlier sampled intervals */
static int cpu_counting;     /* between start and stop (under pa_reg_lock) */

static uint64_t program_cpu_now(void) {
    uint64_t agent = pa_agent_threads_cpu_ns();
    uint64_t all = pa_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    return all > agent ? all - agent : 0;
}

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

/* ---- control ------------------------------------------------------------------------------- */

int pa_sampler_init(const struct pa_python *p, const struct pa_sampler_config *c) {
    if (initialized)
        return 0;
    if (pa_code_cache_init(16, 16u << 20) != 0 || pa_table_init(&tables.t[0], 15, 1u << 20) != 0 ||
        pa_table_init(&tables.t[1], 15, 1u << 20) != 0)
        return -1;
    atomic_store(&tables.active, &tables.t[0]);
    struct pa_handler_config hc = {c->rate, c->max_depth, c->mode, c->native};
    pa_handler_setup(p, &hc, &tables);
    timer_want = c->timer_want;
    srandom((unsigned)(getpid() ^ pa_mono_ns()));
    initialized = 1;
    return 0;
}

void pa_sampler_set_native(int on) {
    pa_handler_set_native(on);
}

void pa_sampler_set_python(const struct pa_python *p) {
    pa_handler_set_python(p);
}

struct pa_tables *pa_sampler_tables(void) {
    return &tables;
}

int pa_sampler_running(void) {
    return atomic_load(&pa_handler_running);
}

int pa_sampler_start(pa_error *err) {
    if (!initialized)
        return pa_fail(err, "sampler not initialized");
    if (pa_guard_install() != 0)
        return pa_fail(err, "cannot install the fault guard: %s", strerror(errno));
    if (pa_handler_install(err) != 0)
        return -1;
    int wall = pa_handler_config()->mode == PA_WALK_WALL;
    pthread_mutex_lock(&pa_reg_lock);
    pa_reg_wanted = 1;
    if (exec_holds) { /* the thread that execs re-arms if exec fails */
        pthread_mutex_unlock(&pa_reg_lock);
        return 0;
    }
    atomic_store(&pa_handler_running, 1);
    cpu_count_start();
    if (wall)
        pa_wall_start();
    int failed = 0, first_errno = 0;
    for (size_t i = 0; i < pa_reg_n; i++)
        if (pa_reg_recs[i].alive && !wall && arm_timer(&pa_reg_recs[i]) != 0 && !failed++)
            first_errno = errno;
    pthread_mutex_unlock(&pa_reg_lock);
    pa_sampler_reconcile();
    if (failed)
        pa_log(PA_LOG_WARN, "%d thread(s) could not get a CPU timer and are not sampled (%s)",
               failed, strerror(first_errno));
    return 0;
}

void pa_sampler_arm_self(void) {
    pthread_mutex_lock(&pa_reg_lock);
    struct pa_thread_rec *r = rec_by_serial(pa_handler_serial);
    if (r && atomic_load(&pa_handler_running))
        arm_timer(r); /* a timer already armed stays as it is */
    pthread_mutex_unlock(&pa_reg_lock);
}

void pa_sampler_reconcile(void) {
    if (pa_handler_config()->mode != PA_WALK_WALL || !atomic_load(&pa_handler_running))
        return;
    const struct pa_python *py = pa_handler_python();
    pthread_mutex_lock(&pa_reg_lock);
    for (size_t i = 0; i < pa_reg_n; i++) {
        struct pa_thread_rec *r = &pa_reg_recs[i];
        if (!r->alive)
            continue;
        int python = pa_thread_is_python(py, (unsigned long)r->pthread);
        if (python && pa_reg_timer_kind(r) == PA_TIMER_NONE)
            arm_timer(r);
        else if (!python && pa_reg_timer_kind(r) != PA_TIMER_NONE)
            disarm_timer(r);
    }
    pthread_mutex_unlock(&pa_reg_lock);
}

void pa_sampler_stop(void) {
    pthread_mutex_lock(&pa_reg_lock);
    pa_reg_wanted = 0;
    atomic_store(&pa_handler_running, 0);
    for (size_t i = 0; i < pa_reg_n; i++)
        disarm_timer(&pa_reg_recs[i]);
    cpu_count_stop();
    pthread_mutex_unlock(&pa_reg_lock);
}

/* ---- exec ---------------------------------------------------------------------------------- */

void pa_sampler_exec_prepare(void) {
    /* exec may be called from a signal handler that interrupted a holder of pa_reg_lock:
     * wait a little for the lock, never forever. */
    int locked = 0;
    for (int tries = 0; tries < 200 && !(locked = pthread_mutex_trylock(&pa_reg_lock) == 0);
         tries++)
        usleep(500);
    if (locked) {
        exec_holds++;
        atomic_store(&pa_handler_running, 0);
        for (size_t i = 0; i < pa_reg_n; i++)
            disarm_timer(&pa_reg_recs[i]);
        pthread_mutex_unlock(&pa_reg_lock);
    } else if (pa_ctl_self && atomic_load(&pa_ctl_self->armed)) {
        pa_timer_pause(&pa_ctl_self->timer); /* at least this thread's own */
    }
    pa_ctl_drop_pending();
}

void pa_sampler_exec_failed(void) {
    pthread_mutex_lock(&pa_reg_lock);
    if (exec_holds > 0 && --exec_holds == 0 && pa_reg_wanted) {
        atomic_store(&pa_handler_running, 1);
        for (size_t i = 0; i < pa_reg_n; i++)
            if (pa_reg_recs[i].alive && pa_handler_config()->mode != PA_WALK_WALL)
                arm_timer(&pa_reg_recs[i]);
    }
    pthread_mutex_unlock(&pa_reg_lock);
    pa_sampler_reconcile();
}

int pa_sampler_app_sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    return pa_handler_app_sigaction(sig, act, old);
}

/* ---- statistics ---------------------------------------------------------------------------- */

void pa_sampler_get_stats(struct pa_sampler_stats *st) {
    memset(st, 0, sizeof *st);
    struct pa_handler_counts hc;
    pa_handler_get_counts(&hc);
    st->signals = hc.signals;
    st->unreadable = hc.unreadable;
    st->truncated = hc.truncated;
    st->foreign = hc.foreign;
    st->handler_p50_ns = hc.p50_ns;
    st->handler_p99_ns = hc.p99_ns;
    st->code_cache_full = pa_code_cache_full;
    unsigned kinds = atomic_load(&armed_kinds);
    st->timer =
        kinds & (1u << PA_TIMER_PERF)
            ? (kinds & (1u << PA_TIMER_CPU) ? "perf-task-clock+cpu-timer" : "perf-task-clock")
        : kinds & (1u << PA_TIMER_CPU) ? "cpu-timer"
                                       : "none";
    if (pa_handler_config()->mode == PA_WALK_WALL && kinds) {
        snprintf(st->timer_buf, sizeof st->timer_buf, "%s+wall-tick", st->timer);
        st->timer = st->timer_buf;
    }
    pthread_mutex_lock(&pa_reg_lock);
    for (size_t i = 0; i < pa_reg_n; i++)
        st->threads += pa_reg_recs[i].alive;
    st->cpu_ns = cpu_acc_ns;
    if (cpu_counting) {
        uint64_t now = program_cpu_now();
        st->cpu_ns += now > cpu_mark_ns ? now - cpu_mark_ns : 0;
    }
    pthread_mutex_unlock(&pa_reg_lock);
}

/* ---- fork ---------------------------------------------------------------------------------- */

static int was_running_at_fork;

void pa_sampler_fork_prepare(void) {
    pthread_mutex_lock(&pa_reg_lock);
    /* No handler of ours runs in the forking thread while fork copies the process. */
    was_running_at_fork = atomic_exchange(&pa_handler_running, 0);
    pa_agent_threads_fork_prepare();
}

void pa_sampler_fork_parent(void) {
    pa_agent_threads_fork_parent();
    atomic_store(&pa_handler_running, was_running_at_fork);
    pthread_mutex_unlock(&pa_reg_lock);
}

void pa_sampler_fork_child(void) {
    /* Timers are not inherited; only the forking thread exists. Start clean. */
    size_t keep = 0;
    pthread_t self = pthread_self();
    for (size_t i = 0; i < pa_reg_n; i++) {
        struct pa_thread_ctl *c = pa_reg_recs[i].ctl;
        if (c) {
            if (atomic_load(&c->armed))
                pa_timer_forget(&c->timer);
            atomic_store(&c->armed, 0);
            atomic_store(&c->users, 0);
        }
        if (!keep && pthread_equal(pa_reg_recs[i].pthread, self)) {
            struct pa_thread_rec mine = pa_reg_recs[i];
            pa_reg_recs[i] = pa_reg_recs[0];
            pa_reg_recs[0] = mine;
            pa_reg_recs[0].tid = (pid_t)syscall(SYS_gettid);
            keep = 1;
        }
    }
    for (size_t i = keep; i < pa_reg_n; i++)
        free(pa_reg_recs[i].ctl); /* the other threads do not exist here */
    pa_reg_n = keep;
    pa_wall_fork_child();
    pa_table_clear(&tables.t[0]);
    pa_table_clear(&tables.t[1]);
    atomic_store(&tables.t[0].writers, 0);
    atomic_store(&tables.t[1].writers, 0);
    pa_agent_threads_fork_child();
    cpu_acc_ns = cpu_mark_ns = 0;
    cpu_counting = 0;
    pa_handler_fork_child();
    atomic_store(&pa_handler_running, 0);
    pthread_mutex_unlock(&pa_reg_lock);
    if (!keep)
        pa_sampler_thread_begin();
    else
        pa_handler_weigh_from_now();
}
