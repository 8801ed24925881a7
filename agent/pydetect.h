/* pydetect.h: is this process, or the object behind a dlopen handle, CPython? Cheap symbol
 * look-ups only, no output, no allocation where no object defines the name. Normal context. */
#ifndef PA_PYDETECT_H
#define PA_PYDETECT_H

/* Some loaded object of the process (the global scope) exports CPython's entry points. */
int pa_py_exported(void);
/* The object behind handle (with its dependencies) does. */
int pa_py_exported_in(void *handle);

#endif
