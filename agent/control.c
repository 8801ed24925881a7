/* control.c: sampling's start and stop, exec, fork, and the statistics.
 *
 * Normal context, under the registry's lock (registry.c). Sampling starts in the constructor
 * on the main thread (shim/shim.c) and runs until the final flush; an exec stops every timer
 * first and resumes them if it fails; a forked child starts clean with its one thread. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../base/threads.h"
#include "asyncio_offsets.h"
#include "codecache.h"
#include "guard.h"
#include "handler.h"
#include "registry.h"
#include "sampler.h"

static struct pa_tables tables;
static int initialized;
static const struct pa_python *python; /* the interpreter followed (pa_sampler_set_python) */
static int exec_holds; /* exec calls in progress: nothing may be armed (under pa_reg_lock) */

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
    /* The time log holds an interval's samples: 2^20 entries of 12 bytes, reserved, not
     * touched until used (a full log leaves samples untimed, counted in the header). */
    uint32_t times = c->bucket_ms ? 1u << 20 : 0;
    if (pa_code_cache_init(16, 16u << 20) != 0 ||
        pa_table_init(&tables.t[0], 15, 1u << 20, times) != 0 ||
        pa_table_init(&tables.t[1], 15, 1u << 20, times) != 0)
        return -1;
    atomic_store(&tables.active, &tables.t[0]);
    if (c->native) {
        /* Native stacks are long and varied: new stacks would fault the slot array (a random
         * page per new stack) and the frame store in from the handler (architecture.md,
         * "Where the handler's time goes", item 5). The slots and claim lists (1.1 MiB per
         * table) and 16,384 frames (192 KiB) per table now; the drain keeps the frame store
         * of the next table ahead of what the last one used (pa_uploader_drain). */
        pa_table_prefault(&tables.t[0], 1u << 14, 1);
        pa_table_prefault(&tables.t[1], 1u << 14, 1);
    }
    struct pa_handler_config hc = {c->rate,    c->max_depth, c->mode,       c->native,
                                   c->opcodes, c->bucket_ms, c->async_tasks};
    pa_handler_setup(p, &hc, &tables);
    pa_reg_timer_want = c->timer_want;
    python = p;
    pa_asyncio_find(p, NULL); /* a built-in _asyncio publishes its layout from the start */
    initialized = 1;
    return 0;
}

void pa_sampler_object_loaded(const char *file) {
    if (initialized && file)
        pa_asyncio_find(python, file);
}

void pa_sampler_set_native(int on) {
    pa_handler_set_native(on);
}

void pa_sampler_set_python(const struct pa_python *p) {
    python = p;
    pa_handler_set_python(p);
}

struct pa_tables *pa_sampler_tables(void) {
    return &tables;
}

uint64_t pa_sampler_time_base(void) {
    return pa_handler_time_base();
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
        if (pa_reg_recs[i].alive && !wall && pa_reg_arm(&pa_reg_recs[i]) != 0 && !failed++)
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
    struct pa_thread_rec *r = pa_reg_by_serial(pa_handler_serial);
    if (r && atomic_load(&pa_handler_running))
        pa_reg_arm(r); /* a timer already armed stays as it is */
    pthread_mutex_unlock(&pa_reg_lock);
}

void pa_sampler_reconcile(void) {
    if (!atomic_load(&pa_handler_running))
        return;
    if (pa_handler_config()->mode != PA_WALK_WALL) {
        /* The tick thread reads the threads that block SIGPROF (wall.c): started when the
         * first such thread is seen, so that a program whose threads never block it has
         * none. */
        pthread_mutex_lock(&pa_reg_lock);
        for (size_t i = 0; i < pa_reg_n; i++) {
            struct pa_thread_ctl *c = pa_reg_recs[i].ctl;
            if (pa_reg_recs[i].alive && c && atomic_load(&c->armed) && atomic_load(&c->blocked)) {
                pa_wall_start();
                break;
            }
        }
        pthread_mutex_unlock(&pa_reg_lock);
        return;
    }
    const struct pa_python *py = pa_handler_python();
    pthread_mutex_lock(&pa_reg_lock);
    for (size_t i = 0; i < pa_reg_n; i++) {
        struct pa_thread_rec *r = &pa_reg_recs[i];
        if (!r->alive)
            continue;
        int python = pa_thread_is_python(py, (unsigned long)r->pthread);
        if (python && pa_reg_timer_kind(r) == PA_TIMER_NONE)
            pa_reg_arm(r);
        else if (!python && pa_reg_timer_kind(r) != PA_TIMER_NONE)
            pa_reg_disarm(r);
    }
    pthread_mutex_unlock(&pa_reg_lock);
}

void pa_sampler_wait_readers(void) {
    /* The tick thread reads the interpreter only under the registry's lock (wall.c). */
    pthread_mutex_lock(&pa_reg_lock);
    pthread_mutex_unlock(&pa_reg_lock);
}

void pa_sampler_stop(void) {
    pthread_mutex_lock(&pa_reg_lock);
    pa_reg_wanted = 0;
    atomic_store(&pa_handler_running, 0);
    for (size_t i = 0; i < pa_reg_n; i++)
        pa_reg_disarm(&pa_reg_recs[i]);
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
            pa_reg_disarm(&pa_reg_recs[i]);
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
                pa_reg_arm(&pa_reg_recs[i]);
    }
    pthread_mutex_unlock(&pa_reg_lock);
    pa_sampler_reconcile();
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
    st->gil_held = hc.gil_held;
    st->gil_released = hc.gil_released;
    st->exception = hc.exception;
    st->gil_wait = hc.gil_wait;
    st->raising = hc.raising;
    st->handler_p50_ns = hc.p50_ns;
    st->handler_p99_ns = hc.p99_ns;
    memcpy(st->handler_hist, hc.hist, sizeof st->handler_hist);
    st->code_cache_full = pa_code_cache_full;
    st->tasks_over = pa_wall_tasks_over();
    unsigned kinds = atomic_load(&pa_reg_armed_kinds);
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
    pa_reg_fork_child();
    pa_wall_fork_child();
    pa_table_clear_all(&tables.t[0]);
    pa_table_clear_all(&tables.t[1]);
    atomic_store(&tables.t[0].writers, 0);
    atomic_store(&tables.t[1].writers, 0);
    pa_agent_threads_fork_child();
    cpu_acc_ns = cpu_mark_ns = 0;
    cpu_counting = 0;
    pa_handler_fork_child();
    atomic_store(&pa_handler_running, 0);
    int known = pa_reg_n > 0; /* the forking thread was registered */
    pthread_mutex_unlock(&pa_reg_lock);
    if (!known) {
        pa_sampler_thread_begin();
    } else {
        pa_handler_weigh_from_now();
        if (pa_ctl_self)
            pa_ctl_thread_start(pa_ctl_self);
    }
}
