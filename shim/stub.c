/* stub.c: libpyagent.so, the library a process preloads.
 *
 * LD_PRELOAD reaches every process a program starts: the shell, the compiler, git. The
 * stub is what they load: it exports the functions the agent interposes and passes each
 * straight to the C library, and nothing else happens in a process that is not Python (no
 * allocation, no file, no thread). In a process that is CPython, at load (the constructor) or
 * when libpython is loaded later (dlopen: uWSGI, mod_wsgi, embedders), it loads the agent,
 * libpyagent-core.so from its own directory, hands it the C library's functions and from then
 * on passes every interposed call to the agent's version (shim/stub.h). The agent's
 * thread-local variables live here (base/tls.h): this library is loaded at start, so they
 * have their place in every thread's static TLS. docs/architecture.md, "Start-up cost".
 *
 * SIGNAL-HANDLER SIDE: sigaction, pthread_sigmask, sigprocmask, the exec functions, _exit and
 * _Exit may be called from a signal handler (they are async-signal-safe in POSIX); before the
 * agent is loaded they make the C library's call or the system call itself, without any look
 * up (base/realfns.c), and after it they call the agent's, which are signal-safe too. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../agent/pydetect.h"
#include "../base/beside.h"
#include "../base/realfns.h"
#include "../base/tls.h"
#include "stub.h"

#define PA_EXPORT __attribute__((visibility("default")))

static const struct pa_core *_Atomic core; /* the agent, once loaded */
static _Atomic int core_tried;             /* load_core ran (it runs once) */
/* The C library's functions: all looked up before the agent is loaded, else each at its first
 * call (normal context only: dlsym is not async-signal-safe; the signal functions never need
 * it). */
static struct pa_next next;

#define NEXT(name)                                                                                 \
    (next.name ? next.name : (*(void **)&next.name = dlsym(RTLD_NEXT, #name), next.name))

static const struct pa_core *agent(void) {
    return atomic_load_explicit(&core, memory_order_acquire);
}

/* One line on standard error, as the agent's log writes them (base/log.c). */
static void say(const char *a, const char *b, const char *c) {
    char line[1024];
    int n = snprintf(line, sizeof line, "pyagent[%d]: %s%s%s\n", (int)getpid(), a, b, c);
    if (n > (int)sizeof line - 1)
        n = (int)sizeof line - 1;
    ssize_t w = write(2, line, (size_t)n);
    (void)w;
}

/* Loads the agent from the stub's directory and attaches it: 1 when it is ready to start. */
static int load_core(void) {
    if (atomic_exchange(&core_tried, 1))
        return 0;
    char path[PATH_MAX];
    int where = pa_path_beside((void *)&load_core, PA_CORE_FILE, path, sizeof path);
    if (where == -1) {
        say("cannot find where libpyagent.so is, so not its agent ", PA_CORE_FILE,
            "; not profiling");
        return 0;
    }
    if (where == -2) {
        say("the path of libpyagent.so is too long: ", path, "; not profiling");
        return 0;
    }
    (void)NEXT(pthread_create);
    (void)NEXT(pthread_sigmask);
    (void)NEXT(signal);
    (void)NEXT(dlopen);
    (void)NEXT(dlclose);
    (void)NEXT(execve);
    (void)NEXT(execv);
    (void)NEXT(execvp);
    (void)NEXT(execvpe);
    (void)NEXT(fexecve);
    (void)NEXT(execveat);
    /* RTLD_LOCAL: none of its symbols is seen by the program; NODELETE: never unloaded. */
    void *h = next.dlopen(path, RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        const char *why = dlerror();
        say("cannot load the agent: ", why ? why : path, "; not profiling");
        return 0;
    }
    pa_core_attach_fn attach;
    *(void **)&attach = dlsym(h, PA_CORE_ATTACH);
    if (!attach) {
        say(path, " is not pyagent's agent (no " PA_CORE_ATTACH ")", "; not profiling");
        return 0;
    }
    atomic_store_explicit(&core, attach(&next), memory_order_release);
    return 1;
}

/* glibc calls the constructors of the objects loaded at start with main's arguments. */
__attribute__((constructor)) static void stub_load(int argc, char **argv, char **envp) {
    (void)envp;
    if (pa_py_exported() && load_core())
        agent()->start(argc, argv); /* else not CPython (yet: see dlopen): nothing at all */
}

/* ---- the interposed functions ------------------------------------------------------------- */

PA_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    const struct pa_core *c = agent();
    return c ? c->sigaction(sig, act, old) : pa_real_sigaction(sig, act, old);
}

PA_EXPORT __sighandler_t signal(int sig, __sighandler_t handler) {
    const struct pa_core *c = agent();
    return c ? c->signal(sig, handler) : NEXT(signal)(sig, handler);
}

PA_EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old) {
    const struct pa_core *c = agent();
    return c ? c->pthread_sigmask(how, set, old) : pa_real_pthread_sigmask(how, set, old);
}

PA_EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old) {
    const struct pa_core *c = agent();
    if (c)
        return c->sigprocmask(how, set, old);
    int r = pa_real_pthread_sigmask(how, set, old);
    if (r == 0)
        return 0;
    errno = r;
    return -1;
}

PA_EXPORT int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
                             void *arg) {
    const struct pa_core *c = agent();
    return c ? c->pthread_create(t, attr, fn, arg) : NEXT(pthread_create)(t, attr, fn, arg);
}

PA_EXPORT void *dlopen(const char *file, int mode) {
    void *h = NEXT(dlopen)(file, mode);
    if (!h || !file)
        return h;
    const struct pa_core *c = agent();
    if (c)
        c->dlopened(file, h);
    else if (!atomic_load(&core_tried) && pa_py_exported_in(h) && load_core())
        agent()->dlopened(file, h); /* libpython: the agent starts here */
    return h;
}

PA_EXPORT int dlclose(void *h) {
    const struct pa_core *c = agent();
    return c ? c->dlclose(h) : NEXT(dlclose)(h);
}

/* os._exit() skips atexit and destructors: the agent writes the profile first. */
PA_EXPORT void _exit(int status) {
    const struct pa_core *c = agent();
    if (c)
        c->exit(status);
    pa_real_exit(status);
}

PA_EXPORT void _Exit(int status) {
    _exit(status); /* the C library's _Exit is its _exit */
}

PA_EXPORT int execve(const char *path, char *const argv[], char *const envp[]) {
    const struct pa_core *c = agent();
    return c ? c->execve(path, argv, envp) : NEXT(execve)(path, argv, envp);
}

PA_EXPORT int execv(const char *path, char *const argv[]) {
    const struct pa_core *c = agent();
    return c ? c->execv(path, argv) : NEXT(execv)(path, argv);
}

PA_EXPORT int execvp(const char *file, char *const argv[]) {
    const struct pa_core *c = agent();
    return c ? c->execvp(file, argv) : NEXT(execvp)(file, argv);
}

PA_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[]) {
    const struct pa_core *c = agent();
    return c ? c->execvpe(file, argv, envp) : NEXT(execvpe)(file, argv, envp);
}

PA_EXPORT int fexecve(int fd, char *const argv[], char *const envp[]) {
    const struct pa_core *c = agent();
    return c ? c->fexecve(fd, argv, envp) : NEXT(fexecve)(fd, argv, envp);
}

PA_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
                       int flags) {
    const struct pa_core *c = agent();
    return c ? c->execveat(dirfd, path, argv, envp, flags)
             : NEXT(execveat)(dirfd, path, argv, envp, flags);
}

/* The execl family: glibc's own call its internal execve, out of our reach, so they are
 * rebuilt here on the vector forms. The argument vector lives on the stack. */
static size_t count_args(const char *arg0, va_list ap) {
    size_t n = 1;
    va_list c;
    va_copy(c, ap);
    if (arg0)
        while (va_arg(c, const char *))
            n++;
    va_end(c);
    return n;
}

#define COLLECT_ARGS(argv, arg0, ap)                                                               \
    const char *first_ = (arg0); /* declared non-null, yet a program may pass NULL */              \
    size_t n_ = count_args(first_, ap);                                                            \
    char *argv[n_ + 1];                                                                            \
    argv[0] = (char *)first_;                                                                      \
    for (size_t i_ = 1; i_ <= n_; i_++)                                                            \
        argv[i_] = first_ ? va_arg(ap, char *) : NULL;

PA_EXPORT int execl(const char *path, const char *arg0, ...) {
    va_list ap;
    va_start(ap, arg0);
    COLLECT_ARGS(argv, arg0, ap);
    va_end(ap);
    return execv(path, argv);
}

PA_EXPORT int execlp(const char *file, const char *arg0, ...) {
    va_list ap;
    va_start(ap, arg0);
    COLLECT_ARGS(argv, arg0, ap);
    va_end(ap);
    return execvp(file, argv);
}

PA_EXPORT int execle(const char *path, const char *arg0, ...) {
    va_list ap;
    va_start(ap, arg0);
    COLLECT_ARGS(argv, arg0, ap);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, argv, envp);
}

/* ---- pyagent.labels (python/pyagent.py, through ctypes, with the GIL held) ----------------- */

static int not_sampling(void) {
    static const char msg[] = "the agent is not sampling this process";
    memcpy(pa_tls.labels_err.msg, msg, sizeof msg);
    return -1;
}

PA_EXPORT int pyagent_labels_bind(uintptr_t var, int64_t hash, uintptr_t hamt_type,
                                  uintptr_t bitmap_type, uintptr_t array_type) {
    const struct pa_core *c = agent();
    return c ? c->labels_bind(var, hash, hamt_type, bitmap_type, array_type) : not_sampling();
}

PA_EXPORT int pyagent_labels_intern(const char *pairs, size_t len) {
    const struct pa_core *c = agent();
    return c ? c->labels_intern(pairs, len) : not_sampling();
}

PA_EXPORT int pyagent_span_bind(uintptr_t var, int64_t hash) {
    const struct pa_core *c = agent();
    return c ? c->span_bind(var, hash) : not_sampling();
}

PA_EXPORT int pyagent_span_name(const char *name, size_t len) {
    const struct pa_core *c = agent();
    return c ? c->span_name(name, len) : not_sampling();
}

/* The last refusal's message (the agent writes it in the same thread-local block). */
PA_EXPORT const char *pyagent_labels_error(void) {
    return pa_tls.labels_err.msg;
}
