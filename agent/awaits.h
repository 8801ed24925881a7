/* awaits.h: every asyncio task of the process and what each awaits (PYAGENT_ASYNC=1).
 *
 * Normal context only: wall mode's tick thread and the agent thread (pyagent dump --async)
 * call it, never the signal handler. Reads are guarded (the calling thread must not block
 * SIGSEGV and SIGBUS) and made without the GIL, while the event loops run: a suspended
 * task's coroutines do not change until it is resumed, and a task resumed meanwhile costs
 * at worst its one sample (<unknown>), never a crash. */
#ifndef PA_AWAITS_H
#define PA_AWAITS_H

#include <stdint.h>

#include "frames.h"
#include "pyversions.h"

/* Tasks read per tick at most; the others are counted (pa_awaits_over), not sampled. */
enum { PA_AWAITS_MAX_TASKS = 1000 };

/* A task and the thread whose event loop it belongs to (pthread id; 0: unknown, its loop is
 * not running). */
struct pa_task_ref {
    uintptr_t task;
    unsigned long pthread;
};

/* Every task of the main interpreter, at most max into out; returns how many, and adds to
 * *over the tasks left out beyond max. 3.14+: each thread state's list of tasks (the offsets
 * CPython publishes); 3.11-3.13: asyncio's set of scheduled tasks (a WeakSet) and, 3.12+,
 * its set of eager tasks. 0 before the offsets are known or where neither is readable. */
int pa_awaits_list(const struct pa_python *py, struct pa_task_ref *out, int max,
                   unsigned long *over);

/* The await chain of task into out[max], leaf first: the leaf state (PA_SYN_AWAIT, what the
 * task waits on), the coroutines' frames from the innermost awaited one out to the task's
 * own, then its task:NAME frame. Returns the depth; *running is set for a task whose step
 * runs now (out then holds its task frame alone: its frames are on its thread's stack);
 * 0 for a task that is done or could not be read (counted in *unreadable). */
int pa_awaits_chain(const struct pa_python *py, uintptr_t task, struct pa_frame *out, int max,
                    int *running, unsigned long *unreadable);

/* What a PA_SYN_AWAIT frame (its line) says the task waits on. */
enum pa_await_kind {
    PA_AWAIT_SLEEP = 1,  /* <await sleep>: asyncio.sleep */
    PA_AWAIT_FUTURE = 2, /* <await Future>: a future, a task, or another awaitable */
    PA_AWAIT_LOCK = 3,   /* <await lock>: asyncio.Lock, Event, Condition or Semaphore */
    PA_AWAIT_READY = 4,  /* <ready>: nothing; its next step is scheduled (or its first) */
};
const char *pa_await_name(int kind);

#endif
