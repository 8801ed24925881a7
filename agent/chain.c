/* chain.c: passing a signal on to the program's action (see chain.h).
 *
 * SIGNAL-HANDLER SIDE: everything here runs in signal context and makes only async-signal-safe
 * calls (sigaction, pthread_sigmask, tgkill through the C library's own functions). */
#include "chain.h"

#include <errno.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "../base/realfns.h"

void pa_chain_default(int sig) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    pa_real_sigaction(sig, &dfl, NULL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pa_real_pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), sig);
}

void pa_chain(int sig, siginfo_t *si, void *uc, struct sigaction *app) {
    int saved = errno;
    struct sigaction a = *app;
    int fault = (sig == SIGSEGV || sig == SIGBUS) && si->si_code > 0;
    if (!(a.sa_flags & SA_SIGINFO) && a.sa_handler == SIG_IGN) {
        if (!fault) {
            errno = saved;
            return;
        }
        a.sa_handler = SIG_DFL; /* the kernel does not let a real fault be ignored */
    }
    if (!(a.sa_flags & SA_SIGINFO) && a.sa_handler == SIG_DFL) {
        pa_chain_default(sig);
        errno = saved;
        return;
    }
    if (a.sa_flags & SA_RESETHAND) {
        memset(app, 0, sizeof *app);
        app->sa_handler = SIG_DFL;
    }
    errno = saved;
    pa_chain_call(sig, si, uc, &a);
}

void pa_chain_call(int sig, siginfo_t *si, void *uc, const struct sigaction *a) {
    /* The mask the kernel would have set for the program's handler: the interrupted code's
     * (our sampling handler never changes the mask: on_sigprof), the handler's sa_mask, and
     * the signal itself unless SA_NODEFER. */
    sigset_t mask, old;
    memcpy(&mask, &((ucontext_t *)uc)->uc_sigmask, sizeof mask);
    sigorset(&mask, &mask, &a->sa_mask);
    if (!(a->sa_flags & SA_NODEFER))
        sigaddset(&mask, sig);
    int saved = errno;
    pa_real_pthread_sigmask(SIG_SETMASK, &mask, &old);
    pa_handler_depth++;
    errno = saved;
    if (a->sa_flags & SA_SIGINFO)
        a->sa_sigaction(sig, si, uc);
    else
        a->sa_handler(sig);
    saved = errno;
    pa_handler_depth--;
    pa_real_pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = saved;
}
