/* asyncio_offsets.h: learns where CPython keeps a thread's running asyncio task.
 *
 * Normal context only (reads object files). */
#ifndef PA_ASYNCIO_OFFSETS_H
#define PA_ASYNCIO_OFFSETS_H

#include "pyversions.h"

/* Looks for the _asyncio module's published layout (.AsyncioDebug) and, when found and sane,
 * hands it to the walk (pa_tasks_set_offsets). loaded NULL: in the executable and libpython
 * (the module built in), at start; else the file just loaded by dlopen, when its name says
 * _asyncio. 3.11-3.13: the agent's own table, at once. Does nothing before 3.11, on
 * versions whose block it does not know, or once the offsets are known. */
void pa_asyncio_find(const struct pa_python *py, const char *loaded);

#endif
