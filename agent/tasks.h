/* tasks.h: the asyncio task a sampled thread is running, as a frame task:NAME between the
 * thread's event-loop frames and the task's coroutine frames.
 *
 * SIGNAL-HANDLER SIDE for pa_task_running and pa_task_frame (the walk calls them); the rest
 * is normal context. The offsets come from the block CPython 3.14+ publishes for its own
 * tools in the _asyncio module's .AsyncioDebug section (agent/asyncio_offsets.c finds it when
 * the module is loaded), or on 3.11-3.13 from the agent's own table; until then, and before
 * 3.11, no task frame is made. */
#ifndef PA_TASKS_H
#define PA_TASKS_H

#include <stddef.h>
#include <stdint.h>

#include "frames.h"
#include "pyversions.h"

/* Where the running task and its parts are: from the published block (3.14+), or from the
 * agent's own table with ts_running_task 0 (3.11-3.13: the running tasks are found in the
 * _asyncio module's _current_tasks dict instead). */
struct pa_asyncio_offsets {
    unsigned ts_running_task; /* _PyThreadStateImpl.asyncio_running_task (a strong reference) */
    unsigned task_name;       /* TaskObj.task_name: a str, or an int N named Task-N */
    unsigned task_coro;       /* TaskObj.task_coro: the coroutine the task steps */
};

/* Normal context, once: makes the offsets known to the walk (later calls are ignored). */
void pa_tasks_set_offsets(const struct pa_asyncio_offsets *o);
/* Normal context: are they known? */
int pa_tasks_known(void);

/* A task that may be the one the sampled thread runs: where its coroutine's frame is (in the
 * coroutine object, where a thread's frame chain meets it) and its name object. */
struct pa_running_task {
    uintptr_t frame, name;
};
enum { PA_TASKS_MAX = 8 };

/* Signal-safe, under the caller's guard (it arms one of its own, so a fault here costs only
 * the task frame): the tasks thread state ts may be running now, at most PA_TASKS_MAX into
 * out; returns how many. 3.14+: the thread's own running task. 3.11-3.13: the running task
 * of every event loop of ts's interpreter (one per thread that runs a loop), the caller
 * keeping the one whose coroutine frame is on its chain; only the main interpreter's. 0 when
 * none runs or the offsets are not known. */
int pa_task_running(const struct pa_python *py, uintptr_t ts, struct pa_running_task *out);

/* Signal-safe, under the caller's guard: the PA_SYN_TASK frame naming the name object. A str
 * name is copied (a bounded prefix) into a lock-free table of names and the frame carries its
 * index; an int N (the default name, formatted lazily by CPython) is carried in the frame. */
struct pa_frame pa_task_frame(const struct pa_python *py, uintptr_t name);

/* Normal context: "task:NAME" for a PA_SYN_TASK frame, NUL-terminated in buf; returns its
 * length (snprintf's). */
int pa_task_frame_name(const struct pa_frame *f, char *buf, size_t cap);

/* Normal context: names kept in the table, and names that found it full (task:<other>). */
unsigned long pa_tasks_names_used(void);
unsigned long pa_tasks_names_full(void);

#endif
