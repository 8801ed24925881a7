/* chain.h: handing a signal on to the program's handler, as the kernel would have.
 *
 * SIGNAL-HANDLER SIDE. While our handler owns SIGPROF, SIGSEGV or SIGBUS, the program's own
 * action for that signal is only recorded (sampler.c, guard.c); a signal that is not ours is
 * passed on here. The kernel's rules are applied by hand: the program's sa_mask (and the
 * signal itself unless SA_NODEFER) is blocked while its handler runs, SA_RESETHAND puts the
 * default back first, SA_SIGINFO handlers get siginfo and context, and the default action is
 * taken at once (the process dies of the signal, with a core where the signal dumps one). */
#ifndef PA_CHAIN_H
#define PA_CHAIN_H

#include <signal.h>

#include "../base/tls.h"

/* How deep the calling thread is in the program's signal handlers that we called (here or
 * through shim/signals.c's wrapper). _exit uses it: a handler may have interrupted malloc or
 * one of our locks, so no flush may run from there. */
#define pa_handler_depth (pa_tls.handler_depth)

/* Calls the program's handler a (not SIG_DFL or SIG_IGN) with the mask the kernel would have
 * given it, counting the handler depth. */
void pa_chain_call(int sig, siginfo_t *si, void *uc, const struct sigaction *a);

/* Runs the program's action *app for a signal our handler got: its handler, its default
 * action (does not return) or nothing (ignored). A synchronous fault (SIGSEGV/SIGBUS with
 * si_code > 0) that the program ignores takes the default action, as the kernel forces it. */
void pa_chain(int sig, siginfo_t *si, void *uc, struct sigaction *app);

/* Takes sig's default action now: restores SIG_DFL, unblocks sig and sends it to this thread.
 * For the signals we chain (all fatal by default) it does not return. */
void pa_chain_default(int sig);

#endif
