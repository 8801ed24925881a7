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

/* Normal context: looks the C library's functions up (dlsym). The shim's constructor calls it
 * first of all, before any handler of ours is installed. */
void pa_real_init(void);
/* Normal context. */
int pa_real_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
                           void *arg);

#endif
