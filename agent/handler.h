/* handler.h: the SIGPROF handler and the little state it shares with the rest of agent/.
 *
 * Agent-internal. The handler (handler.c) reads: the interpreter's description, the sampling
 * configuration and the stack tables, all set before it is installed; the running flag; and
 * the interrupted thread's own serial number and CPU-clock reading (initial-exec TLS, written
 * by that thread in normal context before its timer is armed). It writes only atomics and the
 * stack table. Everything that allocates, locks or opens lives elsewhere (registry.c, wall.c). */
#ifndef PA_HANDLER_H
#define PA_HANDLER_H

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

#include "../base/error.h"
#include "pyversions.h"
#include "table.h"
#include "../base/tls.h"

enum { PA_MAX_DEPTH_LIMIT = 512 };

struct pa_handler_config {
    unsigned rate;      /* signals per second of thread CPU time */
    unsigned max_depth; /* frames kept per sample, <truncated> beyond (2..PA_MAX_DEPTH_LIMIT) */
    int mode;           /* enum pa_walk_mode */
    int native;         /* interleave C frames */
    int opcodes;        /* record each Python frame's instruction (3.11+) */
    unsigned bucket_ms; /* time buckets' width (0: no time recorded) */
    int async_tasks;    /* wall mode: every asyncio task's await chain, from the tick thread */
};

/* Normal context, before pa_handler_install. */
void pa_handler_setup(const struct pa_python *py, const struct pa_handler_config *cfg,
                      struct pa_tables *tables);
void pa_handler_set_python(const struct pa_python *py);
void pa_handler_set_native(int on);
const struct pa_handler_config *pa_handler_config(void);
const struct pa_python *pa_handler_python(void);

/* Normal context: installs the SIGPROF action (once), keeping the program's to chain to. */
int pa_handler_install(pa_error *err);

/* Signal-safe: counts a sample of frames (leaf first) on the thread with this serial in the
 * active table, with the time bucket it fell into (when buckets are on). The handler and wall
 * mode's tick thread count through here. */
void pa_handler_count(uint32_t serial, const struct pa_frame *frames, uint32_t depth,
                      uint64_t weight);
/* Signal-safe, with ready = pa_py_ready(): a CPU sample taken now while the interpreter
 * cannot be walked counts as one frame of what this returns, PA_SYN_STARTUP (before it was
 * ever ready) or PA_SYN_SHUTDOWN (finalizing or finalized), so that the profile's total is
 * the process's CPU time; 0: not counted (it is ready, it is between initialization and the
 * layout's verdict, or the mode is wall or GIL, which keep to the interpreter's life). */
uint32_t pa_handler_phase(int ready);
/* The first time bucket of the process: a time entry's bucket b started at
 * (base + b) * bucket_ms milliseconds after the Unix epoch. */
uint64_t pa_handler_time_base(void);

/* Samples are taken only while this is 1 (later signals of ours are ignored). */
extern _Atomic int pa_handler_running;

/* The calling thread's serial number in the thread registry (0: not registered). */
#define pa_handler_serial (pa_tls.handler_serial)
/* The calling thread's next sample stands for its CPU time from now on (registration, or a
 * forked child whose clock restarted). Normal context, before the thread's timer is armed. */
void pa_handler_weigh_from_now(void);
/* The calling thread's own stack, [low, low + size) above its guard page, found in normal
 * context when the thread registers; size 0: unknown (the main thread, whose stack grows). The
 * handler then never needs more stack than is left there (docs/harmless.md, class 16). */
void pa_handler_set_stack(uintptr_t low, size_t size);

struct pa_handler_counts {
    uint64_t signals;    /* our signals handled */
    uint64_t unreadable; /* frames that could not be read */
    uint64_t truncated;  /* stacks cut at max_depth */
    uint64_t foreign;    /* SIGPROFs that were not ours, passed to the program */
    /* Samples of Python threads holding the GIL, not holding it, waiting for it, handling
     * an exception, raising one */
    uint64_t gil_held, gil_released, gil_wait, exception, raising;
    uint64_t p50_ns, p99_ns;
    /* Handler time as quarter-octave buckets: "FLOOR_NS:COUNT,..." (non-empty ones). */
    char hist[1600];
};
void pa_handler_get_counts(struct pa_handler_counts *c);
/* Frames counted from outside the handler (wall mode's tick thread). */
void pa_handler_add_counts(unsigned long unreadable, unsigned long truncated);
/* Signal-safe: a sample of this weight was of a thread in this state (PA_THREAD_* bits of
 * pa_walk_counts.state; nothing counted without PA_THREAD_PYTHON): the process's counts, and
 * the thread's own in its control block c (NULL: none). */
struct pa_thread_ctl;
void pa_handler_add_state(struct pa_thread_ctl *c, unsigned state, uint64_t weight);
/* In a forked child: the parent's counts are not the child's. */
void pa_handler_fork_child(void);

#endif
