/* tasks.h: the asyncio task a sampled thread is running, as a frame task:NAME between the
 * thread's event-loop frames and the task's coroutine frames.
 *
 * SIGNAL-HANDLER SIDE for pa_task_running and pa_task_frame (the walk calls them); the rest
 * is normal context. The offsets come from the block CPython 3.14+ publishes for its own
 * tools in the _asyncio module's .AsyncioDebug section (agent/asyncio_offsets.c finds it when
 * the module is loaded); until then, and on older versions, no task frame is made. */
#ifndef PA_TASKS_H
#define PA_TASKS_H

#include <stddef.h>
#include <stdint.h>

#include "frames.h"
#include "pyversions.h"

/* Where the running task and its parts are, from the published block. */
struct pa_asyncio_offsets {
    unsigned ts_running_task; /* _PyThreadStateImpl.asyncio_running_task (a strong reference) */
    unsigned task_name;       /* TaskObj.task_name: a str, or an int N named Task-N */
    unsigned task_coro;       /* TaskObj.task_coro: the coroutine the task steps */
};

/* Normal context, once: makes the offsets known to the walk (later calls are ignored). */
void pa_tasks_set_offsets(const struct pa_asyncio_offsets *o);
/* Normal context: are they known? */
int pa_tasks_known(void);

/* Signal-safe, under the caller's guard (it arms one of its own, so a fault here costs only
 * the task frame): the task that thread state ts runs now. Returns 1 with the address of its
 * coroutine's frame (in the coroutine object, where the thread's frame chain meets it) and
 * its name object; 0 when the thread runs no task or the offsets are not known. */
int pa_task_running(const struct pa_python *py, uintptr_t ts, uintptr_t *coro_frame,
                    uintptr_t *name);

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
