/* pydetect.h: is this process, or the object behind a dlopen handle, CPython? Cheap symbol
 * look-ups only, no output, no allocation where no object defines the name. Normal context. */
#ifndef PA_PYDETECT_H
#define PA_PYDETECT_H

/* Some loaded object of the process (the global scope) exports CPython's entry points. */
int pa_py_exported(void);
/* The object behind handle (with its dependencies) does. */
int pa_py_exported_in(void *handle);
/* Does the loaded object that holds addr define name? 1 yes, 0 no, -1 it cannot be asked (no
 * GNU hash table): the loader's failed look-up, which allocates its error message, is for
 * names that are mostly absent (a debug build's symbols in a release build). */
int pa_py_defined_beside(const void *addr, const char *name);

#endif
