/* guard.c: the SIGSEGV/SIGBUS side of fault-tolerant reads (see guard.h).
 *
 * SIGNAL-HANDLER SIDE: pa_guard_fault runs in signal context. The install/uninstall functions
 * run in normal context, under the shim's signal lock. */
#include "guard.h"

#include <string.h>
#include <unistd.h>

#include "../base/realfns.h"
#include "chain.h"

static struct sigaction app_segv, app_bus; /* what the application believes is installed */
static volatile int installed;

static struct sigaction *app_action(int sig) {
    return sig == SIGSEGV ? &app_segv : &app_bus;
}

static void pa_guard_fault(int sig, siginfo_t *info, void *uc) {
    sigjmp_buf *env = pa_guard_env;
    /* Only a fault the kernel raised (si_code > 0) can be our read's; a SIGSEGV sent with
     * kill() while a walk runs on this thread is the program's. */
    if (env && info->si_code > 0) {
        pa_guard_env = 0;
        siglongjmp(*env, 1);
    }
    /* Not our read: behave as if we were not installed. */
    pa_chain(sig, info, uc, app_action(sig));
}

int pa_guard_install(void) {
    if (installed)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = pa_guard_fault;
    /* SA_NODEFER: the mask is unchanged inside the handler, so siglongjmp needs no mask
     * restore. SA_ONSTACK: use the thread's alternate stack if the app set one up. */
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (pa_real_sigaction(SIGSEGV, &sa, &app_segv) != 0)
        return -1;
    if (pa_real_sigaction(SIGBUS, &sa, &app_bus) != 0) {
        pa_real_sigaction(SIGSEGV, &app_segv, 0);
        return -1;
    }
    installed = 1;
    return 0;
}

void pa_guard_uninstall(void) {
    if (!installed)
        return;
    installed = 0;
    pa_real_sigaction(SIGSEGV, &app_segv, 0);
    pa_real_sigaction(SIGBUS, &app_bus, 0);
}

int pa_guard_installed(void) {
    return installed;
}

int pa_guard_app_sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (!installed || (sig != SIGSEGV && sig != SIGBUS))
        return 0;
    struct sigaction *app = app_action(sig);
    if (old)
        *old = *app;
    if (act)
        *app = *act;
    return 1;
}
