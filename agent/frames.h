/* frames.h: walks the interrupted thread's own Python stack.
 *
 * SIGNAL-HANDLER SIDE. */
#ifndef PA_FRAMES_H
#define PA_FRAMES_H

#include <stdint.h>

#include "pyversions.h"
#include "../base/tls.h"

struct pa_frame {
    uint32_t id; /* code-cache id or a pa_synthetic value */
    int32_t line;
    /* PYAGENT_OPCODES (3.11+): the instruction executing, ((offset / 2 + 1) << 8) | opcode
     * (offset in bytes from co_code_adaptive); 0 when not recorded. pa_frame_instr decodes. */
    uint32_t instr;
};

static inline int pa_frame_instr(const struct pa_frame *f, long *offset, unsigned *opcode) {
    if (!f->instr)
        return 0;
    *offset = (long)((f->instr >> 8) - 1) * 2;
    *opcode = f->instr & 0xff;
    return 1;
}

struct pa_walk_counts {
    unsigned long unreadable; /* frames that faulted or failed validation */
    unsigned long truncated;  /* stacks cut at the depth limit */
    unsigned state;           /* the sampled thread's PA_THREAD_* bits */
};

/* What the sampled thread was doing, besides its stack (the header's gil_held, gil_released
 * and exception counts, docs/formats.md). */
enum pa_thread_state {
    PA_THREAD_PYTHON = 1,    /* it has a Python thread state (the bits below are read) */
    PA_THREAD_GIL = 2,       /* it holds the GIL of its interpreter */
    PA_THREAD_EXCEPTION = 4, /* it is handling an exception (an except or finally block) */
    PA_THREAD_GIL_WAIT = 8,  /* it waits for the GIL (take_gil), not holding it */
    PA_THREAD_RAISING = 16,  /* an exception is being raised on it, not yet caught */
};

/* What the header counts of each thread's samples (pa_thread_ctl.states, docs/formats.md):
 * with the GIL held, released (waiting included), waiting for it, handling an exception,
 * raising one. */
enum pa_state_count {
    PA_COUNT_HELD,
    PA_COUNT_RELEASED,
    PA_COUNT_GIL_WAIT,
    PA_COUNT_HANDLING,
    PA_COUNT_RAISING,
    PA_COUNT_N
};

/* The calling thread's kernel tid, set in normal context when it registers (0: unknown). The
 * walk compares it with the GIL mutex's owner. */
#define pa_walk_tid (pa_tls.walk_tid)

/* What a sample is of (PYAGENT_MODE). */
enum pa_walk_mode {
    PA_WALK_CPU = 0,  /* every thread with a timer: its Python stack, <no Python frames> if none */
    PA_WALK_WALL = 1, /* Python threads only, with their state as a leaf frame */
    PA_WALK_GIL = 2,  /* only the thread holding the GIL */
    /* Flag: end each run of Python frames executed by one C call of the evaluation loop with
     * a PA_SYN_ENTRY marker (native mode interleaves C frames there). */
    PA_WALK_MARK_ENTRIES = 8,
    /* Flag: record each Python frame's instruction (pa_frame.instr), 3.11+. */
    PA_WALK_OPCODES = 16,
    /* Flag, another thread's walk: the thread may be running while its chain is read (it
     * blocks SIGPROF, and nothing stops it). The chain is read raw, with no lookup between
     * two reads, again and again until three reads in a row agree (the same code objects, every
     * caller at the same instruction); a chain that changed under every read ends in one
     * <unknown> frame, never in a mixture of two moments. */
    PA_WALK_RUNNING = 32,
};

/* Fills out[] leaf first, at most max entries (the last may be <truncated> or <unknown>).
 * Returns the depth; 0 means "this sample is not recorded" (wall and GIL modes). uc is the
 * signal's ucontext (wall mode reads the interrupted registers). */
int pa_walk_this_thread(const struct pa_python *py, struct pa_frame *out, int max,
                        struct pa_walk_counts *counts, int mode, void *uc);

/* Wall mode, from the agent's side: the stack of another thread that is not running (its
 * frame chain is stable while it waits), with the state leaf given by what it waits in
 * (/proc/self/task/TID/syscall: the call number, -1 if not in a system call, and its first
 * argument). Reads are guarded as in the handler: the calling thread must not block
 * SIGSEGV and SIGBUS. */
struct pa_other_thread {
    unsigned long pthread;
    long syscall_nr;
    uintptr_t arg0;
};
int pa_walk_other_thread(const struct pa_python *py, struct pa_frame *out, int max,
                         struct pa_walk_counts *counts, int flags,
                         const struct pa_other_thread *other);
/* Whether the OS thread whose pthread_self is pthread has a thread state in any interpreter:
 * 1, 0, or -1 when a read faulted. Guarded as pa_walk_other_thread. */
int pa_thread_has_state(const struct pa_python *py, unsigned long pthread);

/* Under the caller's guard: the frame at f, a suspended generator's or coroutine's own frame
 * (in its object), into out: 1, or 0 when it is not a Python frame that can be read. */
int pa_walk_one_frame(const struct pa_python *py, uintptr_t f, struct pa_frame *out);

/* Normal context, any thread: does the thread whose pthread id is given have a Python
 * thread state in any interpreter? (Wall mode arms timers only for those.) */
int pa_thread_is_python(const struct pa_python *py, unsigned long pthread);

/* Test hook (PYAGENT_FAULT_INJECTION builds): every Nth walk reads a frame from an address
 * that faults, as a freed or corrupted frame would. 0 disables it. */
#ifdef PYAGENT_FAULT_INJECTION
extern unsigned pa_walk_inject_every;
#endif

#endif
