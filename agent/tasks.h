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
    /* 3.14+ (0 before): TaskObj.task_node, its link in the list of its thread's tasks, and
     * _PyThreadStateImpl.asyncio_tasks_head, the list's head (agent/awaits.c) */
    unsigned task_node, ts_tasks_head;
};

/* Normal context, once: makes the offsets known to the walk (later calls are ignored). */
void pa_tasks_set_offsets(const struct pa_asyncio_offsets *o);
/* Normal context: are they known? */
int pa_tasks_known(void);
/* Normal context: the offsets once known, else NULL. */
const struct pa_asyncio_offsets *pa_tasks_offsets(void);

/* Under the caller's guard (signal-safe): dict[key] for an ASCII str key, or 0; a split dict
 * (an instance's attributes) is read through its shared keys and values. Bounded by the
 * dict's own size. */
uintptr_t pa_py_dict_get(const struct pa_python *py, uintptr_t dict, const char *key);
/* Under the caller's guard: the index of ASCII str key in the entries of a dict keys object
 * (any kind; a split one is an instance's shared keys), or -1. */
long pa_py_keys_index(const struct pa_python *py, uintptr_t keys, const char *key);
/* Under the caller's guard: the value of a non-negative int object below 2^64, 1 when read
 * (3.11's ob_size or 3.12+'s lv_tag, then 30-bit digits); 0 otherwise. */
int pa_py_uint(const struct pa_python *py, uintptr_t obj, unsigned long long *out);

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
