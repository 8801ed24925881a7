/* names.h: Python's names for threads (threading.Thread.name).
 *
 * The names live in Python objects, so reading them needs the GIL. A dedicated thread takes
 * it briefly when a new thread has appeared; nothing else in the agent ever takes the GIL,
 * so the sampler and the uploads never wait on the interpreter. */
#ifndef PA_NAMES_H
#define PA_NAMES_H

int pa_names_start(void);
/* A thread was born: look its name up soon. Normal context. */
void pa_names_wake(void);
/* At exit: stop asking (does not wait for a thread stuck on the GIL). */
void pa_names_stop(void);
void pa_names_fork_child(void);

#endif
