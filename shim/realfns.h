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

/* shim/signals.c: the death handler on default-fatal signals the program leaves at SIG_DFL
 * (text: the code of the interpreter, of libpyagent.so and of the loader, lo/hi pairs;
 * grace_ms: the exit deadline), and its reset in a forked child. */
void pa_signals_watch_deaths(const uintptr_t text[6], unsigned grace_ms);
void pa_signals_fork_child(void);

#endif
