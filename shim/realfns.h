/* realfns.h: the C library's own versions of the functions the shim interposes.
 *
 * libpyagent.so defines sigaction, signal, pthread_create, fork and _exit so that it sees
 * what the program does; everything else in the agent must call the real ones through
 * these, or it would be talking to itself. */
#ifndef PA_REALFNS_H
#define PA_REALFNS_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

int pa_real_sigaction(int sig, const struct sigaction *act, struct sigaction *old);
int pa_real_pthread_sigmask(int how, const sigset_t *set, sigset_t *old);
int pa_real_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
                           void *arg);
__attribute__((noreturn)) void pa_real_exit(int status);

/* Starts one of the agent's own (detached) threads with every signal blocked: a signal meant
 * for the program must reach the program's threads, as without us. Returns pthread_create's
 * result. */
int pa_spawn_agent_thread(void *(*fn)(void *));

/* The executable segments a thread interrupted by a fatal signal may be in, for
 * shim/signals.c to say whether it may flush there: the interpreter (libpython, or python
 * itself when it is linked in), libpyagent.so, the dynamic loader, the C library, its
 * libpthread where it has one, and the library that provides malloc when it is not the C
 * library (jemalloc, tcmalloc). An object that is absent has lo == hi == 0. */
enum {
    PA_TEXT_PY,
    PA_TEXT_OWN,
    PA_TEXT_LD,
    PA_TEXT_LIBC,
    PA_TEXT_PTHREAD,
    PA_TEXT_MALLOC,
    PA_TEXT_N
};

/* shim/signals.c: the death handler on default-fatal signals the program leaves at SIG_DFL
 * (text: lo/hi pairs, by the enum above; grace_ms: the exit deadline), and its reset in a
 * forked child. */
void pa_signals_watch_deaths(const uintptr_t text[2 * PA_TEXT_N], unsigned grace_ms);
void pa_signals_fork_child(void);

#endif
