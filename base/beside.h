/* beside.h: the path of a file in the directory of the loaded object that holds an address
 * (the stub finds the agent beside itself, the agent its wire library).
 *
 * Normal context (dladdr). */
#ifndef PA_BESIDE_H
#define PA_BESIDE_H

#include <stddef.h>

/* Writes into out (cap bytes) the path of `file` beside the object holding addr: its
 * directory and file, or file alone when the object's name has no directory. 0; -1 when the
 * object is unknown; -2 when the path does not fit (out holds the object's name then, for the
 * message). */
int pa_path_beside(const void *addr, const char *file, char *out, size_t cap);

#endif
