/* realfns.c: the C library's own functions behind the interposed ones (see realfns.h).
 *
 * SIGNAL-HANDLER SIDE: pa_real_sigaction, pa_real_pthread_sigmask and pa_real_exit run in
 * signal context (chaining to the program's handlers, the handler's own mask); they call the
 * C library's async-signal-safe functions (through a pointer found before any handler of ours
 * is installed) or make the system call, nothing else. pa_real_init and
 * pa_real_pthread_create run in normal context. */
#include "realfns.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

/* glibc's exported name for its own sigaction (GLIBC_2.2.5): the one our interposed sigaction
 * hides. Calling it needs no dlsym, which is not async-signal-safe. */
extern int __sigaction(int sig, const struct sigaction *act, struct sigaction *old);

int pa_real_sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    return __sigaction(sig, act, old);
}

/* The C library's pthread_sigmask, found once by pa_real_init (normal context). Calling it
 * rather than the system call matters beyond the mask: a thread unblocking a pending fatal
 * signal is at a safe point for the death handler only where the C library's own wrapper made
 * the call (shim/signals.c, safe_point). */
static int (*_Atomic real_sigmask)(int, const sigset_t *, sigset_t *);
static int (*real_pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

void pa_real_set(int (*sigmask)(int, const sigset_t *, sigset_t *),
                 int (*create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *)) {
    atomic_store(&real_sigmask, sigmask);
    real_pthread_create = create;
}

void pa_real_init(void) {
    if (!atomic_load(&real_sigmask))
        atomic_store(&real_sigmask, (int (*)(int, const sigset_t *, sigset_t *))dlsym(
                                        RTLD_NEXT, "pthread_sigmask"));
    if (!real_pthread_create)
        *(void **)&real_pthread_create = dlsym(RTLD_NEXT, "pthread_create");
}

/* Before pa_real_init (another library's constructor running before ours), the system call
 * itself, with what glibc's pthread_sigmask adds: the first two real-time signals, which the C
 * library keeps for itself (SIGCANCEL, SIGSETXID), are never blocked. */
enum { GLIBC_SIGCANCEL = 32, GLIBC_SIGSETXID = 33, KERNEL_SIGSET_BYTES = 8 };

int pa_real_pthread_sigmask(int how, const sigset_t *set, sigset_t *old) {
    int (*f)(int, const sigset_t *, sigset_t *) = atomic_load(&real_sigmask);
    if (f)
        return f(how, set, old);
    sigset_t local;
    if (set && (sigismember(set, GLIBC_SIGCANCEL) == 1 || sigismember(set, GLIBC_SIGSETXID) == 1)) {
        local = *set;
        sigdelset(&local, GLIBC_SIGCANCEL);
        sigdelset(&local, GLIBC_SIGSETXID);
        set = &local;
    }
    int saved = errno;
    long r = syscall(SYS_rt_sigprocmask, how, set, old, KERNEL_SIGSET_BYTES);
    int e = r == 0 ? 0 : errno;
    errno = saved;
    return e;
}

void pa_real_exit(int status) {
    for (;;)
        syscall(SYS_exit_group, status);
}

int pa_real_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
                           void *arg) {
    pa_real_init();
    return real_pthread_create(t, attr, fn, arg);
}
