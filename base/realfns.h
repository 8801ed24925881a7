/* realfns.h: the C library's own versions of the functions libpyagent.so interposes.
 *
 * The shim defines sigaction, pthread_sigmask, pthread_create, exec, _exit... so that it sees
 * what the program does; everything else in the agent must call the real ones through these,
 * or it would be talking to itself. The signal functions are async-signal-safe and never
 * look anything up: sigaction is the C library's exported __sigaction, the mask the C
 * library's function found by pa_real_init (the system call before that), the exit the system
 * call itself. */
#ifndef PA_REALFNS_H
#define PA_REALFNS_H

#include <pthread.h>
#include <signal.h>

/* Signal-safe. */
int pa_real_sigaction(int sig, const struct sigaction *act, struct sigaction *old);
/* Signal-safe; pthread_sigmask's contract (returns 0 or an error number). As the C library
 * does, the two signals it keeps for itself (thread cancellation and set*id) are never
 * blocked. */
int pa_real_pthread_sigmask(int how, const sigset_t *set, sigset_t *old);
/* Signal-safe: ends the process now (exit_group), as the C library's _exit does. */
__attribute__((noreturn)) void pa_real_exit(int status);

/* Normal context: looks the C library's functions up (dlsym), unless pa_real_set gave them.
 * The agent's start calls it first of all, before any handler of ours is installed. */
void pa_real_init(void);
/* Normal context: the C library's pthread_sigmask and pthread_create as the stub found them
 * (shim/stub.h: from the agent, loaded after the stub, dlsym's next definition is not the C
 * library's). */
void pa_real_set(int (*sigmask)(int, const sigset_t *, sigset_t *),
                 int (*create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *));
/* Normal context. */
int pa_real_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
                           void *arg);

#endif
