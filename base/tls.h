/* tls.h: every thread-local variable of the agent, in one block that libpyagent.so holds.
 *
 * libpyagent.so, the library a process preloads, is a stub: it loads the agent
 * (libpyagent-core.so) only into a process that is CPython (shim/stub.c). A library loaded
 * that late gets initial-exec thread-local storage only from the small surplus that glibc
 * keeps for all such libraries, which others (extension modules) may need; and the
 * general-dynamic kind allocates on a thread's first access, which a signal handler must
 * never do. So the agent's thread-local variables are the fields of one initial-exec block
 * defined in the stub, which is loaded at start and so has its place in every thread's static
 * TLS; the agent reaches it through one TPOFF relocation, async-signal-safe (no allocation,
 * no lock). Executables that link the agent's objects directly (unit tests) define it
 * themselves (base/tls.c, in pabase).
 *
 * Each file names its fields through macros with the names the variables had, so that the
 * code reads as before. */
#ifndef PA_TLS_H
#define PA_TLS_H

#include <setjmp.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

struct pa_thread_ctl;

enum { PA_TLS_MEMO = 48 };
struct pa_tls_memo {
    uint64_t tag, rule;
};

struct pa_tls {
    /* agent/chain.c */
    int handler_depth;
    /* agent/guard.c */
    sigjmp_buf *guard_env;
    /* agent/frames.c */
    uintptr_t cached_tstate;
    int walk_tid;
    /* agent/handler.c */
    uint32_t handler_serial;
    uint64_t event, event_count;
    const void *ring;
    uintptr_t sampling;
    uint64_t pending, carry;
    uintptr_t stack_low, stack_size;
    /* agent/timerctl.c */
    struct pa_thread_ctl *ctl_self;
    uint64_t ctl_cpu_last, ctl_cpu_rest;
    /* agent/native.c: the rules of the thread's previous walk (tag, rule) */
    pid_t native_tid;
    int memo_n;
    struct pa_tls_memo memo[PA_TLS_MEMO];
    /* base/threads.c */
    int thread_slot, thread_private;
    /* shim/shim.c: the last refusal of pyagent.labels */
    pa_error labels_err;
};

extern __thread struct pa_tls pa_tls __attribute__((tls_model("initial-exec")));

#endif
