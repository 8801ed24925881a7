/* guard.h: fault-tolerant reads of interpreter memory.
 *
 * SIGNAL-HANDLER SIDE. The sampler reads PyThreadState, frames and code objects that another
 * thread may be freeing at that very moment. Rather than pay a system call per read
 * (process_vm_readv), a whole stack walk runs under one sigsetjmp guard: a SIGSEGV or SIGBUS
 * raised while the guard is armed on this thread jumps back to the guard, and the walk ends
 * with an <unknown> frame. Faults that are not ours go to the handler the application (or
 * Python's faulthandler) installed, exactly as if we were not there. */
#ifndef PA_GUARD_H
#define PA_GUARD_H

#include <setjmp.h>
#include <signal.h>
#include <stdint.h>

#include "../base/tls.h"

/* The armed guard of the current thread, or NULL. Initial-exec TLS: no allocation, no lock on
 * first access from a signal handler. */
#define pa_guard_env (pa_tls.guard_env)

/* Installs the SIGSEGV/SIGBUS handler (once), remembering the previous ones to chain to. */
int pa_guard_install(void);
/* Puts the application's handlers back (at stop). */
void pa_guard_uninstall(void);
/* Whether the handler is installed: a guarded read outside the signal handler (the uploader's)
 * checks it first, since after pa_guard_uninstall a fault would be fatal. */
int pa_guard_installed(void);

/* Records what the application asks for SIGSEGV/SIGBUS while we own the real handler; returns
 * 1 if the signal is one the guard virtualizes (then *old gets the app's previous action). */
int pa_guard_app_sigaction(int sig, const struct sigaction *act, struct sigaction *old);

/* Arming: `pa_guard_env = &buf; if (sigsetjmp(buf, 0)) { faulted: pa_guard_env is NULL again }
 * ... reads ...; pa_guard_env = 0;` (sigsetjmp may only stand alone in a condition, so no
 * macro wraps it). savemask=0 avoids a sigprocmask system call: the fault handler runs with
 * SA_NODEFER, so the mask is unchanged when it jumps back. Locals written after sigsetjmp and
 * read after a fault must be volatile. */

/* Plain reads, only valid while the guard is armed. Alignment is checked because a misaligned
 * pointer is the most common sign of garbage. */
static inline int pa_aligned(uintptr_t p, uintptr_t a) {
    return p >= 4096 && (p & (a - 1)) == 0;
}
#define PA_READ(type, addr) (*(const volatile type *)(uintptr_t)(addr))

#endif
