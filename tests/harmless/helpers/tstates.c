/* tstates.c: how many thread states the main interpreter lists now, for the harmless case
 * listed_thread_states. Loaded with ctypes.PyDLL, so that the caller keeps the GIL for the whole
 * walk: no state can be freed under it (a walk in Python, one C call per step, would drop the GIL
 * between steps). The functions are the interpreter's own, found in the process (the
 * executable or libpython): no Python header is needed, so one build serves every version. */
#include <dlfcn.h>

typedef void *(*head_fn)(void *);
typedef void *(*next_fn)(void *);

int count_thread_states(void) {
    void *(*main_interp)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyInterpreterState_Main");
    head_fn head = (head_fn)dlsym(RTLD_DEFAULT, "PyInterpreterState_ThreadHead");
    next_fn next = (next_fn)dlsym(RTLD_DEFAULT, "PyThreadState_Next");
    if (!main_interp || !head || !next)
        return -1;
    int n = 0;
    for (void *ts = head(main_interp()); ts; ts = next(ts))
        n++;
    return n;
}
