/* stub.h: what the stub libpyagent.so (shim/stub.c) and the agent libpyagent-core.so (shim.c,
 * signals.c) give each other.
 *
 * A process preloads the stub. It exports every interposed function and passes each straight
 * to the C library until the process is known to be CPython (its constructor, or a dlopen of
 * libpython); then it loads the agent beside it and from then on hands every call to the
 * agent's version. A process that is not Python (the shell, the compiler, git) pays the
 * loader's work for the stub alone. docs/architecture.md, "Start-up cost". */
#ifndef PA_STUB_H
#define PA_STUB_H

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* The agent's file, in the stub's directory. */
#define PA_CORE_FILE "libpyagent-core.so"
/* The agent's one export: pa_core_attach. */
#define PA_CORE_ATTACH "pa_core_attach"

/* The exec functions, as members of both tables below. */
#define PA_EXEC_FUNCTIONS                                                                          \
    int (*execve)(const char *, char *const[], char *const[]);                                     \
    int (*execv)(const char *, char *const[]);                                                     \
    int (*execvp)(const char *, char *const[]);                                                    \
    int (*execvpe)(const char *, char *const[], char *const[]);                                    \
    int (*fexecve)(int, char *const[], char *const[]);                                             \
    int (*execveat)(int, const char *, char *const[], char *const[], int);

/* The C library's functions behind the interposed ones, looked up by the stub: the next
 * definition after a preloaded object is the C library's, while from an object loaded later
 * (the agent) it would be nothing or the stub itself. */
struct pa_next {
    int (*pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    int (*pthread_sigmask)(int, const sigset_t *, sigset_t *);
    __sighandler_t (*signal)(int, __sighandler_t);
    void *(*dlopen)(const char *, int);
    int (*dlclose)(void *);
    PA_EXEC_FUNCTIONS
};

/* The agent's versions of the interposed functions (the execl family is the stub's own, on
 * the vector forms; pyagent_labels_error reads the thread-local block), and its entry
 * points. */
struct pa_core {
    /* Switches the agent on in a process that is CPython at load (once), with the program's
     * arguments as the C library gave them to the stub's constructor. */
    void (*start)(int argc, char **argv);
    int (*sigaction)(int, const struct sigaction *, struct sigaction *);
    __sighandler_t (*signal)(int, __sighandler_t);
    int (*pthread_sigmask)(int, const sigset_t *, sigset_t *);
    int (*sigprocmask)(int, const sigset_t *, sigset_t *);
    PA_EXEC_FUNCTIONS
    int (*pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    /* After the C library's dlopen returned h for file (both not NULL); the first that is
     * libpython switches the agent on. */
    void (*dlopened)(const char *file, void *h);
    int (*dlclose)(void *);
    __attribute__((noreturn)) void (*exit)(int);
    int (*labels_bind)(uintptr_t, int64_t, uintptr_t, uintptr_t, uintptr_t);
    int (*labels_intern)(const char *, size_t);
    int (*span_bind)(uintptr_t, int64_t);
    int (*span_name)(const char *, size_t);
};

typedef const struct pa_core *(*pa_core_attach_fn)(const struct pa_next *next);

#endif
