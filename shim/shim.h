/* shim.h: what shim.c (load, the agent thread, fork, exit) and signals.c (the interposed
 * signal and exec functions) say to each other. Shim-internal. */
#ifndef PA_SHIM_H
#define PA_SHIM_H

#include <stdint.h>
#include <sys/types.h>

#include "stub.h"

/* The C library's functions behind the interposed ones, from the stub (pa_core_attach). */
extern const struct pa_next *pa_shim_next;

/* The agent's versions of the interposed functions (shim.c, signals.c), which the stub calls
 * through struct pa_core. */
int pa_ix_sigaction(int sig, const struct sigaction *act, struct sigaction *old);
__sighandler_t pa_ix_signal(int sig, __sighandler_t handler);
int pa_ix_pthread_sigmask(int how, const sigset_t *set, sigset_t *old);
int pa_ix_sigprocmask(int how, const sigset_t *set, sigset_t *old);
int pa_ix_execve(const char *path, char *const argv[], char *const envp[]);
int pa_ix_execv(const char *path, char *const argv[]);
int pa_ix_execvp(const char *file, char *const argv[]);
int pa_ix_execvpe(const char *file, char *const argv[], char *const envp[]);
int pa_ix_fexecve(int fd, char *const argv[], char *const envp[]);
int pa_ix_execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags);

/* signals.c, signal-safe: is the agent on in this very process? Not in a vfork child, which
 * shares our memory. shim.c says which process owns the agent state (0: the agent is off). */
int pa_shim_owner(void);
void pa_shim_set_owner(pid_t pid);
/* Writes what was sampled before the image is replaced. */
void pa_shim_before_exec(void);
/* The final flush (exit's), from the death handler at a safe point. */
void pa_shim_death_flush(void);
/* The thread running exit's final flush (0: none), and the signal to die of once it is done. */
pid_t pa_shim_exit_flusher(void);
void pa_shim_die_after_flush(int sig);

/* The executable segments a thread interrupted by a fatal signal may be in, for signals.c to
 * say whether it may flush there: the interpreter (libpython, or python itself when it is
 * linked in), libpyagent.so, the dynamic loader, the C library, its libpthread where it has
 * one, and the library that provides malloc when it is not the C library (jemalloc,
 * tcmalloc). An object that is absent has lo == hi == 0. */
enum {
    PA_TEXT_PY,
    PA_TEXT_OWN,
    PA_TEXT_LD,
    PA_TEXT_LIBC,
    PA_TEXT_PTHREAD,
    PA_TEXT_MALLOC,
    PA_TEXT_N
};

/* signals.c: the death handler on default-fatal signals the program leaves at SIG_DFL
 * (text: lo/hi pairs, by the enum above; grace_ms: the exit deadline), and its reset in a
 * forked child. */
void pa_signals_watch_deaths(const uintptr_t text[2 * PA_TEXT_N], unsigned grace_ms);
void pa_signals_fork_child(void);

#endif
