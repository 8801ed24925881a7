/* modname.h: Python module names for the frames of an upload.
 *
 * Normal context (the agent thread, and the exit path). Uploads name a Python frame
 * "module.qualname (file:line)": pprof's Function.name is then "module.qualname", its
 * filename the code object's file, and Line.line the line, as Grafana Pyroscope's Python SDK
 * and its users expect (functions group by package). The local folded file keeps the bare
 * qualname. How the module is found: modname.c. */
#ifndef PA_MODNAME_H
#define PA_MODNAME_H

#include "../profile/profile.h"

/* Learns the sys.path entries that can be known from outside (the script's directory,
 * PYTHONPATH). Called once at start. */
void pa_modname_init(void);
/* Appends the module of a code object's file name to out; -1 (nothing appended) when the
 * file has none (<string>, <stdin>). */
int pa_modname_of(const char *file, size_t len, pa_buf *out);
/* A copy of p whose Python frames are module-qualified (same stacks, counts and meta);
 * NULL when out of memory. */
pa_profile *pa_modname_qualify(const pa_profile *p);

#endif
