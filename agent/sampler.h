/* sampler.h: what agent/ offers the layers above it (uploader/, shim/): sampling's control,
 * the thread registry, the stack tables and the statistics.
 *
 * Every thread of the program gets its own CPU-time timer delivered to that very thread, so a
 * sample always lands on the thread that spent the time and the handler walks its own stack.
 * Implemented by control.c and registry.c (normal context), timerctl.c (a thread's own timer
 * control, signal side) and wall.c; the handler itself is handler.c. */
#ifndef PA_SAMPLER_H
#define PA_SAMPLER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../base/error.h"
#include "pyversions.h"
#include "table.h"

struct pa_sampler_config {
    unsigned rate;      /* signals per second of thread CPU time */
    unsigned max_depth; /* frames kept per sample, <truncated> beyond */
    int timer_want;     /* enum pa_timer_want */
    int mode;           /* enum pa_walk_mode */
    int native;         /* interleave C frames (libunwind); pa_native_init done by the caller */
    int opcodes;        /* each Python frame's instruction (3.11+) */
    unsigned bucket_ms; /* time buckets' width (0: no time recorded) */
    int async_tasks;    /* wall mode: every asyncio task's await chain (agent/awaits.h) */
};

struct pa_sampler_stats {
    uint64_t samples;         /* counted in a table (weights: overruns included) */
    uint64_t signals;         /* our signals handled */
    uint64_t dropped;         /* table full */
    uint64_t unreadable;      /* frames that could not be read */
    uint64_t truncated;       /* stacks cut at max_depth */
    uint64_t foreign;         /* SIGPROFs that were not ours, passed to the program */
    uint64_t code_cache_full; /* frames unnamed because the code cache was full */
    /* Samples of Python threads holding the GIL, not holding it, waiting for it, handling an
     * exception, raising one */
    uint64_t gil_held, gil_released, gil_wait, exception, raising;
    uint64_t handler_p50_ns; /* handler time, from a histogram of every sample */
    uint64_t handler_p99_ns;
    char handler_hist[1600]; /* "FLOOR_NS:COUNT,..." quarter-octave buckets (formats.md) */
    uint64_t cpu_ns;         /* the program's CPU time while sampled (agent threads excluded) */
    uint64_t tasks_over;     /* PYAGENT_ASYNC: task samples not taken, beyond the cap per tick */
    unsigned threads;        /* threads registered now */
    const char *timer;       /* the timer kinds armed: "perf-task-clock", "cpu-timer", ... */
    char timer_buf[48];
};

/* Normal context. Allocates tables and caches; the handler is not installed yet. */
int pa_sampler_init(const struct pa_python *py, const struct pa_sampler_config *cfg);
/* Normal context, before pa_sampler_start: turns native frames off (pa_native_init failed),
 * or later while the interpreter is gone (pa_py_gone). */
void pa_sampler_set_native(int on);
/* Normal context, while the interpreter is gone (pa_py_gone): the one loaded again. */
void pa_sampler_set_python(const struct pa_python *py);
/* Normal context, after each successful dlopen of a file by the program: an _asyncio module
 * loaded now publishes where the running task is (task:NAME frames, agent/tasks.h). */
void pa_sampler_object_loaded(const char *file);
/* Installs the handler and arms a timer on every registered thread. */
int pa_sampler_start(pa_error *err);
/* Arms the calling thread's timer whatever the mode (wall mode included, before the thread
 * has a Python thread state): the main thread, when sampling starts in the constructor. */
void pa_sampler_arm_self(void);
/* Wall mode: arms timers on the threads that have a Python thread state, disarms the others
 * (native threads never get wall-clock signals). Agent thread, every 100 ms. */
void pa_sampler_reconcile(void);
/* Normal context, once the interpreter was marked gone (pa_py_set_gone) and before its
 * libpython may be unloaded: returns when the tick thread is past any pass that began
 * before, so that nothing of ours but a handler already running reads the interpreter. */
void pa_sampler_wait_readers(void);
/* Disarms every timer; handlers still running finish, later signals are ignored. */
void pa_sampler_stop(void);
int pa_sampler_running(void);
/* 1 once every thread of the program has ended (the last one left with pthread_exit, as in a
 * child forked from a worker thread): no thread of ours may then keep the process alive, and
 * each returns (glibc ends the process with exit(0) when its last thread is gone). */
int pa_sampler_program_gone(void);

/* Called on every thread the program starts (and on the main thread at load): registers it
 * and, when sampling runs, arms its timer. Its exit is noticed through a pthread key. */
void pa_sampler_thread_begin(void);

struct pa_tables *pa_sampler_tables(void);
/* A time entry's bucket b started (base + b) * bucket_ms milliseconds after the Unix epoch. */
uint64_t pa_sampler_time_base(void);
void pa_sampler_get_stats(struct pa_sampler_stats *st);

/* Thread registry as the writer of profiles needs it. */
struct pa_thread_info {
    uint32_t serial;
    pid_t tid;
    unsigned long pthread; /* pthread_t, as Python's threading.get_ident() */
    int alive;
    char name[64]; /* Python's name when known, else empty */
};
/* Copies up to max entries; returns how many there are. */
size_t pa_threads_list(struct pa_thread_info *out, size_t max);
/* Records the Python name of the thread with this pthread id (namer thread). */
void pa_threads_set_name(unsigned long pthread, const char *name);
/* Name for a serial: Python's, else the OS name, else "tid N"; into buf. */
void pa_threads_name(uint32_t serial, char *buf, size_t len);
/* Normal context, a thread of ours with every signal blocked and a descriptor table of its
 * own (pyagent dump, shim/dump.c): the Python stack of thread (tid, pthread) now, read as
 * wall mode's tick reads it (guarded, no GIL, the thread not interrupted), leaf first into
 * out[max], with a <idle> or <waiting for the GIL> leaf when it waits. Returns the depth, 0
 * for a thread with no Python thread state, -1 while the interpreter is not ready (starting,
 * finalizing, or its layout not yet checked). */
struct pa_frame;
int pa_sampler_stack_now(pid_t tid, unsigned long pthread, struct pa_frame *out, int max);
/* Normal context, a thread of ours (the namer): whether the thread with this pthread id has a
 * Python thread state, read as pa_sampler_stack_now reads (no GIL): 1, 0, or -1 while that
 * cannot be told (interpreter not ready, or a read faulted). */
int pa_sampler_has_python_state(unsigned long pthread);
/* Normal context, as pa_sampler_stack_now (pyagent dump --async): calls each(arg, ...) for
 * every asyncio task of the process (PA_AWAITS_MAX_TASKS at most) with the pthread id of its
 * loop's thread (0: none runs it), its await chain leaf first (agent/awaits.h) and whether
 * its step runs now. Returns the tasks seen, -1 while the interpreter is not ready. */
int pa_sampler_tasks_now(void (*each)(void *arg, unsigned long pthread,
                                      const struct pa_frame *frames, int depth, int running),
                         void *arg);
/* Each registered thread's state counts (enum pa_state_count) added since the last call, taken
 * (a thread's come back at 0): up to max entries (none taken with max 0); returns how many
 * threads there are. Call it before
 * pa_threads_prune, so that a thread's last counts are taken before it is forgotten. */
struct pa_thread_states {
    uint32_t serial;
    uint64_t n[PA_COUNT_N];
};
size_t pa_threads_take_states(struct pa_thread_states *out, size_t max);
/* Forgets threads that died before the last drained snapshot. */
void pa_threads_prune(void);

/* The calling thread changed its signal mask (signal-safe): a thread that blocks SIGPROF gets
 * no timer signal (sigwait would take it), so its timer stops until it unblocks SIGPROF. */
void pa_sampler_mask_changed(void);
/* The calling thread is about to block SIGPROF: its timer stops first (signal-safe). */
void pa_sampler_mask_will_block(void);
/* Around an exec of this process: before it, every timer is released and this thread's
 * pending SIGPROFs of ours are dropped (none may reach the new image); if exec fails,
 * sampling resumes. */
void pa_sampler_exec_prepare(void);
void pa_sampler_exec_failed(void);

/* SIGPROF as the application sees it while the handler is ours: returns 1 if handled. */
int pa_sampler_app_sigaction(int sig, const struct sigaction *act, struct sigaction *old);

/* fork: quiesce in the parent, start clean in the child. */
void pa_sampler_fork_prepare(void);
void pa_sampler_fork_parent(void);
void pa_sampler_fork_child(void);

#endif
