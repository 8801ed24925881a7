/* wall.c: the tick thread (normal context): wall mode's time off a CPU, and the CPU time of
 * threads that block SIGPROF, in every mode.
 *
 * A Python thread's CPU-time timer samples it while it runs. Every period, the tick thread
 * takes each Python thread's wall time minus its CPU time: the time it spent off a CPU; each
 * whole period of that is one sample of the thread's stack as it is now, read from here. The
 * thread is not interrupted, so a C library's nanosleep, which no handler may interrupt
 * without an early return, is left alone; its frame chain is stable while it waits.
 *
 * A thread that blocks SIGPROF (Apache's worker threads under mpm event block every signal)
 * must never get a signal of ours, so its timer stops; its CPU time is counted here instead,
 * from its CPU clock, with its stack read from here while it may be running (PA_WALK_RUNNING:
 * raw reads until three in a row agree; a stack that changed under every read is counted as
 * <unknown>, never as a mixture of two stacks) (docs/architecture.md, "Threads that block
 * SIGPROF"). In CPU and GIL modes the tick thread starts when the first such thread is seen. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../base/bss.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/realfns.h"
#include "../base/threads.h"
#include "awaits.h"
#include "frames.h"
#include "handler.h"
#include "registry.h"

static int tick_started; /* under pa_reg_lock */

/* What thread tid waits in: the system call number (-1: running or runnable) and its first
 * argument, from /proc/self/task/TID/syscall, hundreds of times a second. Only with a
 * descriptor table of our own (base/threads.h, PA_THREAD_PRIVATE_FILES): in the program's
 * each open() would take a number the program may have just closed to take back. Where the
 * kernel refuses one (a seccomp filter, as Docker's default one without CAP_SYS_ADMIN),
 * waiting threads are counted without their <idle> or <waiting for the GIL> leaf, and the log
 * says so once. */
static void waiting_in(pid_t tid, struct pa_other_thread *o) {
    o->syscall_nr = -1;
    o->arg0 = 0;
    if (!pa_thread_private_files())
        return;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    char *end;
    long nr = strtol(buf, &end, 10);
    if (end == buf)
        return; /* "running" */
    o->syscall_nr = nr < 0 ? -1 : nr;
    o->arg0 = (uintptr_t)strtoull(end, NULL, 16);
}

static void count_off_cpu(struct pa_thread_rec *r, uint64_t weight) {
    const struct pa_handler_config *cfg = pa_handler_config();
    const struct pa_python *py = pa_handler_python();
    struct pa_other_thread o = {(unsigned long)r->pthread, -1, 0};
    waiting_in(r->tid, &o);
    struct pa_frame frames[PA_MAX_DEPTH_LIMIT];
    struct pa_walk_counts counts = {0, 0, 0};
    int depth = pa_walk_other_thread(py, frames, (int)cfg->max_depth, &counts,
                                     PA_WALK_WALL | (cfg->opcodes ? PA_WALK_OPCODES : 0), &o);
    if (depth == 0)
        return;
    pa_handler_count(r->serial, frames, (uint32_t)depth, weight);
    pa_handler_add_counts(counts.unreadable, counts.truncated);
    pa_handler_add_state(r->ctl, counts.state, weight);
}

/* ---- threads that block SIGPROF ---------------------------------------------------------- */

/* The CPU time of the threads that block SIGPROF, since the mark each handed over (timerctl.h,
 * counted_to): every whole period of it is one sample of the stack read now. The mark moves
 * by CAS once the stack is read: a thread that unblocked and took its time back meanwhile
 * counts it with its own samples, and this one is dropped. While the interpreter cannot be
 * walked the sample is <startup> or <shutdown> in CPU mode, as the handler's are, and the
 * time passes uncounted in wall and GIL modes (pa_handler_phase). */
static void count_blocked(void) {
    const struct pa_handler_config *cfg = pa_handler_config();
    const struct pa_python *py = pa_handler_python();
    uint64_t period = 1000000000ULL / cfg->rate;
    int flags = (cfg->mode & ~PA_WALK_MARK_ENTRIES) | (cfg->opcodes ? PA_WALK_OPCODES : 0);
    int ready = -1;
    uint32_t phase = 0;
    for (size_t i = 0; i < pa_reg_n; i++) {
        struct pa_thread_rec *r = &pa_reg_recs[i];
        struct pa_thread_ctl *c = r->ctl;
        if (!r->alive || !r->has_clock || !c || !atomic_load(&c->armed) ||
            !atomic_load(&c->blocked))
            continue;
        uint64_t from = atomic_load(&c->counted_to);
        struct timespec ts;
        if (from == PA_CTL_OWN || clock_gettime(r->cpu_clock, &ts) != 0)
            continue;
        uint64_t cpu = pa_ts_ns(&ts);
        if (cpu < from || cpu - from < period)
            continue;
        uint64_t n = (cpu - from) / period;
        if (ready < 0) {
            ready = pa_py_ready(py);
            phase = pa_handler_phase(ready);
        }
        struct pa_frame frames[PA_MAX_DEPTH_LIMIT];
        struct pa_walk_counts counts = {0, 0, 0};
        int depth = 0;
        if (ready) {
            struct pa_other_thread o = {(unsigned long)r->pthread, -1, 0}; /* no state leaf */
            depth = pa_walk_other_thread(py, frames, (int)cfg->max_depth, &counts,
                                         flags | PA_WALK_RUNNING, &o);
        } else if (phase) {
            frames[0] = (struct pa_frame){phase, 0, 0};
            depth = 1;
        }
        if (!atomic_compare_exchange_strong(&c->counted_to, &from, from + n * period) || depth == 0)
            continue;
        pa_handler_count(r->serial, frames, (uint32_t)depth, n > 1000 ? 1000 : n);
        pa_handler_add_counts(counts.unreadable, counts.truncated);
        pa_handler_add_state(c, counts.state, n > 1000 ? 1000 : n);
    }
}

/* ---- wall mode: time off a CPU ------------------------------------------------------------ */

static void wall_tick(uint64_t elapsed) {
    uint64_t period = 1000000000ULL / pa_handler_config()->rate;
    for (size_t i = 0; i < pa_reg_n; i++) {
        struct pa_thread_rec *r = &pa_reg_recs[i];
        if (!r->alive || !r->has_clock || pa_reg_timer_kind(r) == PA_TIMER_NONE)
            continue;
        struct timespec ts;
        if (clock_gettime(r->cpu_clock, &ts) != 0)
            continue;
        uint64_t cpu = pa_ts_ns(&ts);
        uint64_t used = cpu > r->last_cpu_ns ? cpu - r->last_cpu_ns : 0;
        r->last_cpu_ns = cpu;
        r->off_ns += elapsed > used ? elapsed - used : 0;
        if (r->off_ns < period)
            continue;
        uint64_t n = r->off_ns / period;
        r->off_ns -= n * period;
        count_off_cpu(r, n > 1000 ? 1000 : n);
    }
}

/* ---- PYAGENT_ASYNC: every task's await chain ------------------------------------------ */

/* Task samples not taken beyond the cap, for the header (pa_wall_tasks_over). */
static _Atomic uint64_t tasks_over;
static uint64_t task_off_ns; /* wall time not yet given to the tasks, under pa_reg_lock */
static struct pa_task_ref task_refs[PA_AWAITS_MAX_TASKS] PA_LARGE_BSS(task_refs);

uint64_t pa_wall_tasks_over(void) {
    return atomic_load(&tasks_over);
}

/* The serial of the living registered thread with this pthread id, 0 if none. */
static uint32_t serial_of(unsigned long pthread) {
    for (size_t i = 0; pthread && i < pa_reg_n; i++)
        if (pa_reg_recs[i].alive && (unsigned long)pa_reg_recs[i].pthread == pthread)
            return pa_reg_recs[i].serial;
    return 0;
}

/* Every whole period of wall time, each waiting task is one sample of its await chain, under
 * the thread whose loop it belongs to. A running task is not: its thread's own samples (CPU
 * timer, off-CPU ticks) hold it, with its task:NAME frame. So every task counts one sample
 * per period of its life, running or waiting: with PYAGENT_ASYNC=1 the unit is task-time. */
static void count_tasks(uint64_t elapsed) {
    const struct pa_handler_config *cfg = pa_handler_config();
    const struct pa_python *py = pa_handler_python();
    uint64_t period = 1000000000ULL / cfg->rate;
    task_off_ns += elapsed;
    if (task_off_ns < period)
        return;
    uint64_t n = task_off_ns / period;
    task_off_ns -= n * period;
    uint64_t weight = n > 1000 ? 1000 : n;
    if (!pa_py_ready(py))
        return; /* starting, or its layout not yet checked: the time passes unsampled */
    unsigned long over = 0, unreadable = 0;
    int k = pa_awaits_list(py, task_refs, PA_AWAITS_MAX_TASKS, &over);
    struct pa_frame frames[PA_MAX_DEPTH_LIMIT];
    for (int i = 0; i < k; i++) {
        uint32_t serial = serial_of(task_refs[i].pthread);
        if (!serial)
            continue; /* its loop runs in no thread now: it makes no progress either */
        int running;
        int depth = pa_awaits_chain(py, task_refs[i].task, frames, (int)cfg->max_depth, &running,
                                    &unreadable);
        if (depth > 0 && !running)
            pa_handler_count(serial, frames, (uint32_t)depth, weight);
    }
    if (over)
        atomic_fetch_add(&tasks_over, over * weight);
    pa_handler_add_counts(unreadable, 0);
}

static void *tick_main(void *arg) {
    (void)arg;
    if (!pa_thread_private_files())
        pa_log(PA_LOG_WARN, "wall mode: no descriptor table of its own for the tick thread; "
                            "waiting threads are counted without <idle> or <waiting for the GIL>");
    /* The guarded reads need SIGSEGV and SIGBUS (synchronous: only this thread's faults). */
    sigset_t faults;
    sigemptyset(&faults);
    sigaddset(&faults, SIGSEGV);
    sigaddset(&faults, SIGBUS);
    pa_real_pthread_sigmask(SIG_UNBLOCK, &faults, NULL);
    const struct pa_python *py = pa_handler_python();
    int wall = pa_handler_config()->mode == PA_WALK_WALL;
    /* Wall mode ticks at the rate; for the threads that block SIGPROF alone, at most 1 kHz
     * (a sample then stands for several periods: the time is measured, not counted in
     * ticks), so that a high rate does not wake this thread ten thousand times a second. */
    uint64_t period = 1000000000ULL / pa_handler_config()->rate, last = pa_mono_ns();
    if (!wall && period < 1000000)
        period = 1000000;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (;;) {
        pa_ts_add_ns(&next, period);
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        pthread_mutex_lock(&pa_reg_lock);
        /* Sampling stopped, or the program's last thread has ended (pthread_exit in a child
         * forked from a worker thread): this thread must not keep the process alive. */
        if (!pa_reg_wanted || pa_reg_alive() == 0) {
            tick_started = 0;
            pthread_mutex_unlock(&pa_reg_lock);
            return NULL;
        }
        uint64_t now = pa_mono_ns();
        if (atomic_load(&pa_handler_running)) {
            if (wall && !pa_py_finalizing(py)) {
                wall_tick(now - last);
                if (pa_handler_config()->async_tasks)
                    count_tasks(now - last);
            }
            count_blocked(); /* CPU mode counts <shutdown> too */
        }
        last = now;
        pthread_mutex_unlock(&pa_reg_lock);
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec > next.tv_sec + 1)
            next = t; /* far behind (suspended): start again from now */
    }
}

/* The guarded reads (the walk, and the layout check pa_py_ready may make) need SIGSEGV and
 * SIGBUS, unblocked only meanwhile: the calling thread (the agent thread) must not take the
 * program's process-directed signals. The caller restores *old. */
static void unblock_faults(sigset_t *old) {
    sigset_t faults;
    sigemptyset(&faults);
    sigaddset(&faults, SIGSEGV);
    sigaddset(&faults, SIGBUS);
    pa_real_pthread_sigmask(SIG_UNBLOCK, &faults, old);
}

int pa_sampler_stack_now(pid_t tid, unsigned long pthread, struct pa_frame *out, int max) {
    const struct pa_python *py = pa_handler_python();
    if (!py)
        return -1;
    struct pa_other_thread o = {pthread, -1, 0};
    waiting_in(tid, &o);
    sigset_t old;
    unblock_faults(&old);
    int depth = -1;
    if (pa_py_ready(py)) {
        struct pa_walk_counts counts = {0, 0, 0};
        depth = pa_walk_other_thread(py, out, max, &counts, PA_WALK_WALL, &o);
    }
    pa_real_pthread_sigmask(SIG_SETMASK, &old, NULL);
    return depth;
}

int pa_sampler_has_python_state(unsigned long pthread) {
    const struct pa_python *py = pa_handler_python();
    if (!py)
        return -1;
    sigset_t old;
    unblock_faults(&old);
    int has = pa_py_ready(py) ? pa_thread_has_state(py, pthread) : -1;
    pa_real_pthread_sigmask(SIG_SETMASK, &old, NULL);
    return has;
}

int pa_sampler_tasks_now(void (*each)(void *arg, unsigned long pthread,
                                      const struct pa_frame *frames, int depth, int running),
                         void *arg) {
    const struct pa_python *py = pa_handler_python();
    if (!py)
        return -1;
    /* the agent thread's alone */
    static struct pa_task_ref refs[PA_AWAITS_MAX_TASKS] PA_LARGE_BSS(agent_task_refs);
    struct pa_frame *frames = malloc(PA_MAX_DEPTH_LIMIT * sizeof *frames);
    if (!frames)
        return -1;
    sigset_t old;
    unblock_faults(&old);
    int n = -1;
    if (pa_py_ready(py)) {
        unsigned long over = 0, unreadable = 0;
        n = pa_awaits_list(py, refs, PA_AWAITS_MAX_TASKS, &over);
        for (int i = 0; i < n; i++) {
            int running;
            int depth = pa_awaits_chain(py, refs[i].task, frames,
                                        (int)pa_handler_config()->max_depth, &running, &unreadable);
            if (depth > 0)
                each(arg, refs[i].pthread, frames, depth, running);
        }
    }
    pa_real_pthread_sigmask(SIG_SETMASK, &old, NULL);
    free(frames);
    return n;
}

void pa_wall_start(void) {
    if (!tick_started)
        tick_started = pa_agent_thread_spawn(tick_main, PA_THREAD_PRIVATE_FILES) == 0;
}

void pa_wall_fork_child(void) {
    tick_started = 0; /* the tick thread is the parent's */
}
