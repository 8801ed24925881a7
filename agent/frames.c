/* frames.c: from the interrupted thread to its frames.
 *
 * SIGNAL-HANDLER SIDE: everything here runs inside the SIGPROF handler. No malloc, no locks,
 * no stdio; every interpreter pointer is read under the fault guard and validated (alignment,
 * ob_type) before use.
 *
 * Whose thread state: not the GIL holder's. Where the version has the GIL-state TSS key
 * (3.8-3.14), pthread_getspecific() gives this OS thread's own PyThreadState (glibc's
 * implementation is a lock-free array read). 3.15 keeps it only in a C thread-local we cannot
 * see, so every interpreter's thread list is searched for our pthread id, with the last
 * answer cached per thread.
 *
 * Sub-interpreters (3.12+): a thread running in one has a state there, and the walk starts
 * from it; a sample taken in any interpreter but the main one ends, at its root, in a
 * PA_SYN_INTERP frame that carries the interpreter's id. Interpreters are created and
 * destroyed while we read their lists: every pointer read from them is guarded and every
 * list walk bounded. */
#include "frames.h"

#include <errno.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <stdatomic.h>

#include "codecache.h"
#include "guard.h"
#include "labels.h"
#include "native.h"
#include "tasks.h"

#ifdef PYAGENT_FAULT_INJECTION
unsigned pa_walk_inject_every;
static _Atomic unsigned inject_counter;
#endif

#define cached_tstate (pa_tls.cached_tstate)

/* Bounds on the lists walked without their locks: an interpreter or thread state may be
 * unlinked and freed while we read, so a list can end early or loop. */
enum { MAX_INTERPRETERS = 256, MAX_THREAD_STATES = 4096 };

/* The newest interpreter: _PyRuntime.interpreters.head. Each one's next is older, and the
 * main interpreter, made first, is the last. */
static uintptr_t first_interp(const struct pa_python *py) {
    return PA_READ(uintptr_t, py->runtime + py->layout.rt_interpreters_head);
}

/* Is interp still in the runtime's list of interpreters? */
static int interp_listed(const struct pa_python *py, uintptr_t interp) {
    uintptr_t i = first_interp(py);
    for (int n = 0; i && n < MAX_INTERPRETERS; n++) {
        if (!pa_aligned(i, 8))
            return 0;
        if (i == interp)
            return 1;
        i = PA_READ(uintptr_t, i + py->layout.is_next);
    }
    return 0;
}

/* 3.12+: the state's OS thread uses it now (bound_gilstate). Without the bit field, any. */
static int bound_now(const struct pa_python *py, uintptr_t ts) {
    unsigned off = py->layout.ts_status;
    return !off || (PA_READ(uint32_t, ts + off) & PA_TS_BOUND_GILSTATE) != 0;
}

/* The id of the state's interpreter (0: the main one), or -1 when unreadable. */
static int64_t interp_id_of(const struct pa_python *py, uintptr_t ts) {
    uintptr_t interp = PA_READ(uintptr_t, ts + py->layout.ts_interp);
    if (!pa_aligned(interp, 8))
        return -1;
    return PA_READ(int64_t, interp + py->layout.is_id);
}

/* The thread state of the OS thread whose thread_id (pthread_self of that thread) is id, in
 * any interpreter, or 0. A thread that entered sub-interpreters has one state in each it is
 * in; the one marked bound_gilstate is the one it runs in now (else the first found). Two
 * marked states happen on 3.12 only: its run_string lends a sub-interpreter's first state,
 * whose thread_id is its creator's, to another thread, which marks it; the creator's own
 * state is then the older interpreter's, and the walk goes from the newest interpreter to the
 * main one, so the last marked state found wins. Under the caller's guard. */
static uintptr_t tstate_by_thread_id(const struct pa_python *py, uintptr_t id) {
    const struct pa_layout *l = &py->layout;
    uintptr_t found = 0, bound = 0;
    int steps = 0;
    uintptr_t interp = first_interp(py);
    for (int n = 0; interp && n < MAX_INTERPRETERS; n++) {
        if (!pa_aligned(interp, 8))
            break;
        uintptr_t ts = PA_READ(uintptr_t, interp + l->is_threads_head);
        for (; ts && steps < MAX_THREAD_STATES; steps++) {
            if (!pa_aligned(ts, 8))
                break;
            if (PA_READ(uintptr_t, ts + l->ts_thread_id) == id) {
                if (bound_now(py, ts))
                    bound = ts;
                if (!found)
                    found = ts;
            }
            ts = PA_READ(uintptr_t, ts + l->ts_next);
        }
        interp = PA_READ(uintptr_t, interp + l->is_next);
    }
    return bound ? bound : found;
}

static uintptr_t find_tstate(const struct pa_python *py) {
    const struct pa_layout *l = &py->layout;
    uintptr_t self = (uintptr_t)pthread_self();
    if (l->rt_tss_key) {
        unsigned key = PA_READ(unsigned, py->runtime + l->rt_tss_key + sizeof(int));
        if (key >= 1024)
            return 0;
        uintptr_t ts = (uintptr_t)pthread_getspecific((pthread_key_t)key);
        if (!ts || !pa_aligned(ts, 8))
            return 0;
        if (PA_READ(uintptr_t, ts + l->ts_thread_id) == self)
            return ts;
        /* 3.12's low-level API (_xxsubinterpreters.run_string, gh-109860) runs any thread in
         * a sub-interpreter on that interpreter's first state, made by the thread that
         * created it, so its thread_id is another thread's. The key is this thread's all the
         * same (CPython bound it when the state was swapped in): a sub-interpreter's state
         * is taken as it is. */
        return interp_id_of(py, ts) > 0 ? ts : 0;
    }
    /* 3.15: the state cached for this thread, if it is still this thread's, still the one it
     * runs in (it may have entered or left a sub-interpreter since) and its interpreter is
     * still alive. */
    uintptr_t ts = cached_tstate;
    if (ts && PA_READ(uintptr_t, ts + l->ts_thread_id) == self && bound_now(py, ts) &&
        interp_listed(py, PA_READ(uintptr_t, ts + l->ts_interp)))
        return ts;
    return cached_tstate = tstate_by_thread_id(py, self);
}

/* The innermost frame of a thread state, per version. */
static uintptr_t top_frame(const struct pa_python *py, uintptr_t ts) {
    const struct pa_layout *l = &py->layout;
    uintptr_t f = PA_READ(uintptr_t, ts + l->ts_frame);
    if (l->frame_kind == PA_PYFRAME_INTERP && f) /* 3.11-3.12: through the C frame */
        f = pa_aligned(f, 8) ? PA_READ(uintptr_t, f + l->cframe_current_frame) : 0;
    return f;
}

/* Reads one frame: its code object and instruction offset in bytes. Returns 1 for a Python
 * frame to record, 0 for a frame to skip (shim, incomplete), -1 for garbage. *entry is set
 * when the frame ends the run of one C call of the evaluation loop: every frame on 3.8-3.10,
 * a frame marked is_entry on 3.11, the shim frame (skipped) from 3.12 on. */
static int read_frame(const struct pa_python *py, uintptr_t f, uintptr_t *code, long *offset,
                      int *entry) {
    const struct pa_layout *l = &py->layout;
    if (!pa_aligned(f, 8))
        return -1;
    if (l->frame_kind == PA_PYFRAME_OBJECT) {
        *code = PA_READ(uintptr_t, f + l->fr_code);
        int lasti = PA_READ(int, f + l->fr_lasti_or_instr);
        /* 3.10 counts code units, 3.8-3.9 bytes; -1 means "not started". */
        *offset = l->line_kind == PA_LINE_TABLE310 ? (long)lasti * 2 : (long)lasti;
        if (*offset < 0)
            *offset = 0;
        *entry = 1;
        return 1;
    }
    unsigned owner = PA_READ(uint8_t, f + l->fr_owner);
    if (owner >= l->owner_skip) {
        *entry = 1;
        return 0;
    }
    if (l->fr_is_entry)
        *entry = PA_READ(uint8_t, f + l->fr_is_entry) != 0;
    /* 3.14+ tags the low bits of f_executable (_PyStackRef); code objects are 8-aligned. */
    *code = PA_READ(uintptr_t, f + l->fr_code) & ~(uintptr_t)7;
    if (*code == 0)
        return 0;
    uintptr_t instr = PA_READ(uintptr_t, f + l->fr_lasti_or_instr);
    uintptr_t start = *code + l->co_code_adaptive;
    if (instr < start)
        return owner == 1 ? 1 : 0; /* incomplete frame (not yet at its first instruction) */
    *offset = (long)(instr - start);
    if (*offset > (1L << 24))
        return -1;
    int first_traceable = PA_READ(int, *code + l->co_firsttraceable);
    if (owner != 1 /* generator */ && *offset < (long)first_traceable * 2)
        return 0; /* incomplete: still in the frame's prologue */
    return 1;
}

/* The GIL of the thread state's interpreter: its address, or 0. */
static uintptr_t gil_of(const struct pa_python *py, uintptr_t ts) {
    const struct pa_layout *l = &py->layout;
    if (!l->gil_via_interp)
        return py->runtime + l->gil_off;
    uintptr_t interp = PA_READ(uintptr_t, ts + l->ts_interp);
    if (!pa_aligned(interp, 8))
        return 0;
    uintptr_t gil = PA_READ(uintptr_t, interp + l->gil_off);
    return pa_aligned(gil, 8) ? gil : 0;
}

/* Does the state's thread hold the GIL? In a free-threaded build: is it attached to the
 * interpreter, what holding the GIL amounts to there (running Python; detached in a blocking
 * call or C code that let the interpreter go, and while another thread's collection stops
 * the world), with or without a GIL (PYTHON_GIL=1 makes attaching take it). */
static int holds_gil(const struct pa_python *py, uintptr_t ts) {
    if (py->layout.ts_attached)
        return PA_READ(int, ts + py->layout.ts_attached) == 1;
    uintptr_t gil = gil_of(py, ts);
    return gil && PA_READ(int, gil + py->layout.gil_locked) &&
           PA_READ(uintptr_t, gil + py->layout.gil_holder) == ts;
}

/* Is the thread state's own thread running the cyclic collector? The flag is per interpreter
 * (the runtime's on 3.8) and says only that a collection is under way; the thread doing it
 * holds the GIL throughout (a collection runs under it from the allocation or the evaluation
 * loop's check that triggered it), so the flag counts for the GIL's holder alone. A finalizer
 * or gc.callbacks function that releases the GIL mid-collection lets another thread run while
 * the flag is still set: that thread's samples would read as <GC> too (docs/interpreters.md).
 * A free-threaded build has no holder: the attached thread stands for it (holds_gil), which
 * during the collection's stop-the-world phase is the collector alone, and after it (the
 * garbage is freed with the world running) any thread running Python meanwhile too.
 * Under the caller's guard. */
static int collecting(const struct pa_python *py, uintptr_t ts) {
    const struct pa_layout *l = &py->layout;
    if (!l->gc_collecting)
        return 0;
    uintptr_t base = py->runtime;
    if (l->gc_via_interp) {
        base = PA_READ(uintptr_t, ts + l->ts_interp);
        if (!pa_aligned(base, 8))
            return 0;
    }
    return PA_READ(int, base + l->gc_collecting) != 0 && holds_gil(py, ts);
}

/* Is the thread handling an exception, inside an except block (or a finally block or with
 * statement's exit run because of one)? What sys.exc_info() answers: the top item of the
 * thread's stack of handled exceptions (exc_info), or the first item below it that holds one
 * (a generator or coroutine pushes an empty item of its own while it runs, which
 * sys.exc_info() sees through). An item handles nothing when its exception is NULL or None
 * (3.11's POP_EXCEPT restores None). Bounded: a chain read while it changes, or a deep await
 * chain, ends the search (as "no"). Under the caller's guard. */
static int handling_exception(const struct pa_python *py, uintptr_t ts) {
    const struct pa_layout *l = &py->layout;
    if (!l->ts_exc_info)
        return 0;
    uintptr_t item = PA_READ(uintptr_t, ts + l->ts_exc_info);
    for (int i = 0; i < 16 && item && pa_aligned(item, 8); i++) {
        uintptr_t exc = PA_READ(uintptr_t, item + l->ei_value);
        if (exc && exc != py->none)
            return 1;
        item = PA_READ(uintptr_t, item + l->ei_previous);
    }
    return 0;
}

/* Is an exception being raised on the thread, not yet caught (PyErr_Occurred)? From the raise
 * (or the C call that set the error) to the except block that takes it, the unwinding of
 * every frame between them included. Under the caller's guard. */
static int raising_exception(const struct pa_python *py, uintptr_t ts) {
    unsigned off = py->layout.ts_raising;
    return off && PA_READ(uintptr_t, ts + off) != 0;
}

/* Where the interrupted thread stands as to system calls (x86-64): PA_SC_AT a `syscall`
 * instruction to be restarted (rax holds the call number again, SA_RESTART), PA_SC_AFTER one
 * (rax its result, -EINTR for a wait the signal ended), else PA_SC_NONE. *arg0 is rdi, the
 * call's first argument, which the kernel keeps. */
enum { PA_SC_NONE, PA_SC_AT, PA_SC_AFTER };
static int syscall_site(const void *ucv, long *rax, uintptr_t *arg0) {
#if defined(__x86_64__)
    const ucontext_t *uc = ucv;
    uintptr_t ip = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    if (ip < 4096)
        return PA_SC_NONE;
    *rax = (long)uc->uc_mcontext.gregs[REG_RAX];
    *arg0 = (uintptr_t)uc->uc_mcontext.gregs[REG_RDI];
    if (PA_READ(uint16_t, ip) == 0x050f)
        return PA_SC_AT;
    return PA_READ(uint16_t, ip - 2) == 0x050f ? PA_SC_AFTER : PA_SC_NONE;
#else
    (void)ucv;
    (void)rax;
    (void)arg0;
    return PA_SC_NONE;
#endif
}

/* Is the thread, which does not hold the GIL, waiting for it? What take_gil does (every GIL
 * build): it locks the GIL's mutex, and while the GIL is locked waits on its condition
 * variable in 5 ms slices (the switch interval), asking the holder to drop it after the
 * first; a dropping holder may then wait on the structure's switch condition until another
 * thread took it. The waits are futex calls on words of the GIL's structure, and the mutex
 * is the thread's own between a wake-up and the GIL taken or the next wait. So, by the
 * version: 3.15's thread state says it (gil_requested, set across take_gil's wait, what
 * CPython's own profiler reads); on every version, the thread owns the GIL's mutex (its
 * owner tid, glibc's layout), or is in, interrupted in or just back from a futex call on the
 * GIL's structure (the signal's registers; uc NULL: another thread's walk, which has only the
 * flag). A free-threaded build has no GIL to wait for. Under the caller's guard. */
static int waiting_for_gil(const struct pa_python *py, uintptr_t ts, const void *uc) {
    const struct pa_layout *l = &py->layout;
    if (l->ts_attached)
        return 0;
    if (l->ts_gil_requested && PA_READ(int, ts + l->ts_gil_requested))
        return 1;
    uintptr_t gil = uc ? gil_of(py, ts) : 0;
    if (!gil)
        return 0;
    if (l->gil_mutex && pa_walk_tid &&
        PA_READ(int, gil + l->gil_mutex + 2 * sizeof(int)) == pa_walk_tid)
        return 1;
    long rax = 0;
    uintptr_t arg0 = 0;
    int site = syscall_site(uc, &rax, &arg0);
    return (site == PA_SC_AFTER || (site == PA_SC_AT && rax == SYS_futex)) && arg0 >= gil &&
           arg0 < gil + 512;
}

/* PA_THREAD_* bits of a Python thread's state, under a guard of its own: a read that faults
 * (a thread state being torn down, in a sub-interpreter's end say) loses only these bits, not
 * the walk's stack (the caller's guard is restored). uc: the signal's context when the walk is
 * of the interrupted thread itself, else NULL. */
static unsigned state_bits(const struct pa_python *py, uintptr_t ts, const void *uc) {
    sigjmp_buf env;
    sigjmp_buf *volatile prev = pa_guard_env;
    pa_guard_env = &env;
    if (sigsetjmp(env, 0)) {
        pa_guard_env = prev;
        return PA_THREAD_PYTHON;
    }
    int held = holds_gil(py, ts);
    unsigned bits = PA_THREAD_PYTHON | (held ? PA_THREAD_GIL : 0) |
                    (!held && waiting_for_gil(py, ts, uc) ? PA_THREAD_GIL_WAIT : 0) |
                    (handling_exception(py, ts) ? PA_THREAD_EXCEPTION : 0) |
                    (raising_exception(py, ts) ? PA_THREAD_RAISING : 0);
    pa_guard_env = prev;
    return bits;
}

/* Wall mode: what the interrupted thread was doing. A signal is delivered on the way back
 * from the kernel, so a thread that was *waiting* in a system call shows either a call to be
 * restarted (SA_RESTART: the instruction pointer is back on the `syscall` instruction and
 * rax holds the call number again) or a call that returns EINTR (pointer just after it, rax
 * -EINTR). A call that simply completed (rax its result) is a running thread. A futex wait
 * on a word inside the GIL's structure (its mutex or condition variable) is a wait for the
 * GIL. */
/* A waiting thread's leaf: <waiting for the GIL> for a futex wait on a word of the GIL's own
 * structure, <idle> for any other system call. */
static uint32_t waiting_state(const struct pa_python *py, uintptr_t ts, long nr, uintptr_t arg0) {
    if (nr == SYS_futex || nr == -1) {
        uintptr_t gil = gil_of(py, ts);
        if (gil && arg0 >= gil && arg0 < gil + 512)
            return PA_SYN_GIL_WAIT;
    }
    return PA_SYN_IDLE;
}

static uint32_t thread_state(const struct pa_python *py, uintptr_t ts, void *uc) {
    long rax = 0;
    uintptr_t arg0 = 0;
    int site = syscall_site(uc, &rax, &arg0);
    if (site == PA_SC_NONE || (site == PA_SC_AFTER && rax != -EINTR))
        return 0; /* running */
    /* A timed futex wait (the GIL's, every 5 ms interval) is not restarted but returns
     * EINTR: the call number is gone then (-1: unknown), but rdi, its first argument, is
     * kept. */
    return waiting_state(py, ts, site == PA_SC_AT ? rax : -1, arg0);
}

int pa_thread_is_python(const struct pa_python *py, unsigned long pthread) {
    sigjmp_buf env;
    pa_guard_env = &env;
    if (sigsetjmp(env, 0))
        return 0;
    int found = tstate_by_thread_id(py, pthread) != 0;
    pa_guard_env = 0;
    return found;
}

/* Ends a sample of a sub-interpreter (id > 0) with its PA_SYN_INTERP root; walk() kept the
 * slot. */
static int add_interp(struct pa_frame *out, int depth, int64_t id) {
    if (id <= 0 || depth == 0)
        return depth;
    out[depth].id = PA_SYN_INTERP;
    out[depth].line = id > INT32_MAX ? INT32_MAX : (int32_t)id;
    out[depth].instr = 0;
    return depth + 1;
}

/* Ends a labelled sample with its PA_SYN_LABELS root (outside any interp:ID), and a sample
 * taken in a root span with its PA_SYN_SPAN_NAME and PA_SYN_SPAN frames; walk() kept the
 * slots. The span's frames are part of the stack's key, so each span's samples count apart. */
static int add_labels(struct pa_frame *out, int depth, uint32_t labels,
                      const struct pa_span *span) {
    if (depth == 0)
        return depth;
    if (span->id) {
        out[depth].id = PA_SYN_SPAN;
        out[depth].line = (int32_t)(uint32_t)span->id;
        out[depth].instr = (uint32_t)(span->id >> 32);
        out[depth + 1].id = PA_SYN_SPAN_NAME;
        out[depth + 1].line = (int32_t)span->name;
        out[depth + 1].instr = 0;
        depth += 2;
    }
    if (!labels)
        return depth;
    out[depth].id = PA_SYN_LABELS;
    out[depth].line = (int32_t)labels;
    out[depth].instr = 0;
    return depth + 1;
}

/* Records the frame of code at offset (bytes) into o: its code-cache id, line and, when
 * opcodes, its instruction (one more guarded read, 3.11+). */
static void put_code(const struct pa_python *py, struct pa_frame *o, uintptr_t code, long offset,
                     int opcodes, struct pa_walk_counts *counts) {
    uint32_t id = pa_code_lookup(py, code);
    o->id = id;
    o->line = id == PA_SYN_UNKNOWN ? 0 : pa_code_line_cached(py, id, code, offset);
    o->instr = opcodes && id != PA_SYN_UNKNOWN
                   ? ((uint32_t)(offset / 2 + 1) << 8) |
                         PA_READ(uint8_t, code + py->layout.co_code_adaptive + offset)
                   : 0;
    if (id == PA_SYN_UNKNOWN)
        counts->unreadable++;
}

int pa_walk_one_frame(const struct pa_python *py, uintptr_t f, struct pa_frame *out) {
    uintptr_t code = 0;
    long offset = 0;
    int entry = 0;
    struct pa_walk_counts counts = {0, 0, 0};
    if (read_frame(py, f, &code, &offset, &entry) <= 0)
        return 0;
    put_code(py, out, code, offset, 0, &counts);
    return out->id != PA_SYN_UNKNOWN;
}

/* ---- a running thread's chain (PA_WALK_RUNNING) -------------------------------------------- */

/* Reads of the chain, at most, looking for RUNNING_AGREE + 1 in a row that agree. */
enum { RUNNING_READS = 6, RUNNING_AGREE = 2, RUNNING_MAX = 512 };

/* A frame to record as read, before its name or line is looked up. */
struct raw_frame {
    uintptr_t code;
    long offset;
};

/* How a raw read of a chain ended. */
enum { CHAIN_ROOT, CHAIN_UNREADABLE, CHAIN_LOOPS, CHAIN_LONGER, CHAIN_MOVED };

/* Reads the chain of thread state ts raw into out[max]: only the frames to record, shims and
 * incomplete frames skipped, and nothing looked up between two frames, so that the read spans
 * as little of the thread's running as it can. Returns the frames read; *end says how the
 * chain ended. Under the caller's guard. */
static int read_chain(const struct pa_python *py, uintptr_t ts, struct raw_frame *out, int max,
                      int *end) {
    uintptr_t f = top_frame(py, ts), top = f, top_code = 0;
    int n = 0;
    *end = CHAIN_ROOT;
    for (int steps = 0; f; steps++) {
        if (steps == 4 * (max + 1)) {
            *end = CHAIN_LOOPS;
            break;
        }
        struct raw_frame raw = {0, 0};
        int entry, r = read_frame(py, f, &raw.code, &raw.offset, &entry);
        if (r < 0 || (r > 0 && n == max)) {
            *end = r < 0 ? CHAIN_UNREADABLE : CHAIN_LONGER;
            break;
        }
        if (steps == 0)
            top_code = raw.code;
        if (r > 0)
            out[n++] = raw;
        f = PA_READ(uintptr_t, f + py->layout.fr_back);
    }
    /* The newest frame read first, its callers after: had it returned meanwhile (and another
     * call perhaps taken its place), its callers' positions are of a later moment than it
     * (a callee under its caller's next call). Such a read ends CHAIN_MOVED, which agrees
     * with no other read. */
    uintptr_t again = 0;
    long offset;
    int entry;
    if (top && (top_frame(py, ts) != top || read_frame(py, top, &again, &offset, &entry) < 0 ||
                again != top_code))
        *end = CHAIN_MOVED;
    return n;
}

/* Two reads agree when they end alike and hold the same code objects with every caller at the
 * same instruction; the innermost frame alone may have moved on. A read made while the thread
 * returned and called again mixes two moments (the callee of one call under its caller's
 * position at the next), and the next read, made moments later, differs from it. */
static int same_chain(const struct raw_frame *a, int na, int ea, const struct raw_frame *b, int nb,
                      int eb) {
    if (na != nb || ea != eb || ea == CHAIN_MOVED)
        return 0;
    for (int i = 0; i < na; i++)
        if (a[i].code != b[i].code || (i > 0 && a[i].offset != b[i].offset))
            return 0;
    return 1;
}

/* The frames of a thread that may be running, after the depth leading ones already in out:
 * the newest of the first three reads in a row that agree, or one <unknown> frame when none
 * do (two that agree were not enough: a thread whose loop matched the read's pace tore two
 * reads alike, 0.9% of churn.py's samples once at a load of 12 on 2 CPUs).
 * A function of its own, never inlined, so that its buffers take stack space only here (the
 * tick thread), never in the handler, which shares walk(). Returns the new depth. */
static __attribute__((noinline)) int walk_running(const struct pa_python *py, uintptr_t ts,
                                                  struct pa_frame *out, int depth, int room,
                                                  int opcodes, struct pa_walk_counts *counts) {
    struct raw_frame reads[2][RUNNING_MAX];
    int max = room - 1 - depth;
    max = max < 0 ? 0 : max > RUNNING_MAX ? RUNNING_MAX : max;
    int end[2], n[2], cur = 0, agreed = 0;
    n[0] = read_chain(py, ts, reads[0], max, &end[0]);
    for (int i = 1; i < RUNNING_READS && agreed < RUNNING_AGREE; i++) {
        cur = i & 1;
        n[cur] = read_chain(py, ts, reads[cur], max, &end[cur]);
        if (same_chain(reads[!cur], n[!cur], end[!cur], reads[cur], n[cur], end[cur]))
            agreed++;
        else
            agreed = 0;
    }
    if (agreed < RUNNING_AGREE) {
        counts->unreadable++;
        out[depth] = (struct pa_frame){PA_SYN_UNKNOWN, 0, 0};
        return depth + 1;
    }
    for (int i = 0; i < n[cur]; i++)
        put_code(py, &out[depth++], reads[cur][i].code, reads[cur][i].offset, opcodes, counts);
    if (end[cur] == CHAIN_UNREADABLE || end[cur] == CHAIN_LOOPS) {
        counts->unreadable++;
        out[depth++] = (struct pa_frame){PA_SYN_UNKNOWN, 0, 0};
    } else if (end[cur] == CHAIN_LONGER) {
        counts->truncated++;
        out[depth++] = (struct pa_frame){PA_SYN_TRUNCATED, 0, 0};
    }
    return depth;
}

/* The walk of this thread (other == NULL: state from the signal's context uc) or of another
 * one, stopped (its state from what it waits in) or running (PA_WALK_RUNNING). */
static int walk(const struct pa_python *py, struct pa_frame *out, int max,
                struct pa_walk_counts *counts, int flags, void *uc,
                const struct pa_other_thread *other) {
    const struct pa_layout *l = &py->layout;
    int mode = flags & ~(PA_WALK_MARK_ENTRIES | PA_WALK_OPCODES | PA_WALK_RUNNING),
        marks = flags & PA_WALK_MARK_ENTRIES;
    int opcodes = (flags & PA_WALK_OPCODES) && l->frame_kind != PA_PYFRAME_OBJECT;
    volatile int depth = 0;
    sigjmp_buf env;
    pa_guard_env = &env;
    volatile int64_t interp_id = 0;
    volatile uint32_t labels = 0;
    /* Volatile, as labels: a fault's longjmp must find what was read before it. */
    volatile uint64_t span_id = 0;
    volatile uint32_t span_name = 0;
    if (sigsetjmp(env, 0)) {
        /* A read faulted: the frame being read (or the chain beyond it) is gone. */
        counts->unreadable++;
        out[depth].id = PA_SYN_UNKNOWN;
        out[depth].line = 0;
        out[depth].instr = 0;
        struct pa_span span = {span_id, span_name};
        return add_labels(out, add_interp(out, depth + 1, interp_id), labels, &span);
    }
    uintptr_t ts = other ? tstate_by_thread_id(py, other->pthread) : find_tstate(py);
    /* A sub-interpreter's sample keeps one slot for its PA_SYN_INTERP root, a labelled one
     * one for its PA_SYN_LABELS root and one taken in a root span two for its span's frames
     * (pyagent.labels and pyagent.SpanProcessor: the thread's current context says). */
    interp_id = ts ? interp_id_of(py, ts) : 0;
    struct pa_span span = {0, 0};
    labels = ts && max > 2 ? pa_labels_of(py, ts, &span) : 0;
    if (max <= 4) /* no room for a span's two frames beside a stack */
        span.id = 0;
    span_id = span.id;
    span_name = span.name;
    const int room = max - (interp_id > 0 && max > 1) - (labels != 0) - (span.id ? 2 : 0);
    if (mode != PA_WALK_CPU && (!ts || (mode == PA_WALK_GIL && !holds_gil(py, ts)))) {
        pa_guard_env = 0;
        return 0;
    }
    /* The thread's state, for the header's counts (the registers say more of the interrupted
     * thread itself in CPU mode; wall mode's leaf says it there). */
    if (ts)
        counts->state = state_bits(py, ts, mode == PA_WALK_CPU && !other ? uc : NULL);
    uint32_t state = 0;
    if (mode == PA_WALK_WALL)
        state = !other                   ? thread_state(py, ts, uc)
                : other->syscall_nr >= 0 ? waiting_state(py, ts, other->syscall_nr, other->arg0)
                                         : 0;
    /* Waiting for the GIL is the leaf in CPU mode too: the CPU time of taking it over
     * (docs/modes.md). A wall-mode leaf counts as waiting only for a thread off the GIL (its
     * holder may wait for the structure's mutex on its way to drop it), so that gil_wait
     * stays part of gil_released. */
    if (state == PA_SYN_GIL_WAIT && !(counts->state & PA_THREAD_GIL))
        counts->state |= PA_THREAD_GIL_WAIT;
    else if (counts->state & PA_THREAD_GIL_WAIT)
        state = PA_SYN_GIL_WAIT;
    if (state) {
        out[depth].id = state;
        out[depth].line = 0;
        out[depth].instr = 0;
        depth++;
    }
    /* A running thread inside a collection: <GC> is the leaf, under the frame whose
     * allocation (or evaluation-loop check) started it. A waiting thread keeps its state; a
     * stack of one slot keeps it for <truncated>. */
    if (depth == 0 && room > 1 && ts && collecting(py, ts)) {
        out[depth].id = PA_SYN_GC;
        out[depth].line = 0;
        out[depth].instr = 0;
        depth++;
    }
    /* The running asyncio task (3.11+): its frame goes right above its coroutine's frame,
     * the one frame of the chain that lives inside the coroutine object. A running thread
     * read from outside (PA_WALK_RUNNING) gets none. */
    struct pa_running_task tasks[PA_TASKS_MAX];
    int ntasks = 0;
    uintptr_t f = 0;
    if (ts && other && (flags & PA_WALK_RUNNING)) {
        depth = walk_running(py, ts, out, depth, room, opcodes, counts);
    } else if (ts) {
        ntasks = pa_task_running(py, ts, tasks);
        f = top_frame(py, ts);
    }
#ifdef PYAGENT_FAULT_INJECTION
    if (pa_walk_inject_every &&
        atomic_fetch_add_explicit(&inject_counter, 1, memory_order_relaxed) %
                pa_walk_inject_every ==
            0 &&
        f)
        f = 0x10; /* the first page is never mapped */
#endif
    /* Skipped frames (shims, incomplete ones) add no depth: the steps are bounded too, or a
     * chain that loops (another thread's, read while it changes) would never end. */
    for (int steps = 0; f; steps++) {
        if (steps == 4 * room) {
            counts->unreadable++;
            out[depth].id = PA_SYN_UNKNOWN;
            out[depth].line = 0;
            out[depth].instr = 0;
            depth++;
            break;
        }
        if (depth == room - 1) {
            counts->truncated++;
            out[depth].id = PA_SYN_TRUNCATED;
            out[depth].line = 0;
            out[depth].instr = 0;
            depth++;
            break;
        }
        uintptr_t code = 0;
        long offset = 0;
        int entry = 0;
        int r = read_frame(py, f, &code, &offset, &entry);
        if (r < 0) {
            counts->unreadable++;
            out[depth].id = PA_SYN_UNKNOWN;
            out[depth].line = 0;
            out[depth].instr = 0;
            depth++;
            break;
        }
        if (r > 0)
            put_code(py, &out[depth++], code, offset, opcodes, counts);
        for (int k = 0; k < ntasks && depth < room - 1; k++)
            if (f == tasks[k].frame) {
                out[depth] = pa_task_frame(py, tasks[k].name);
                depth++;
                tasks[k].frame = 0; /* once */
                break;
            }
        if (marks && entry && depth < room - 1) {
            out[depth].id = PA_SYN_ENTRY;
            out[depth].line = 0;
            out[depth].instr = 0;
            depth++;
        }
        f = PA_READ(uintptr_t, f + l->fr_back);
    }
    pa_guard_env = 0;
    if (depth == 0 || (depth == 1 && ((out[0].id >= PA_SYN_IDLE && out[0].id <= PA_SYN_GIL_WAIT) ||
                                      out[0].id == PA_SYN_GC))) {
        out[depth].id = PA_SYN_NO_PYTHON;
        out[depth].line = 0;
        out[depth].instr = 0;
        depth++;
    }
    return add_labels(out, add_interp(out, depth, interp_id), labels, &span);
}

int pa_walk_this_thread(const struct pa_python *py, struct pa_frame *out, int max,
                        struct pa_walk_counts *counts, int flags, void *uc) {
    return walk(py, out, max, counts, flags, uc, NULL);
}

int pa_walk_other_thread(const struct pa_python *py, struct pa_frame *out, int max,
                         struct pa_walk_counts *counts, int flags,
                         const struct pa_other_thread *other) {
    return walk(py, out, max, counts, flags, NULL, other);
}

int pa_thread_has_state(const struct pa_python *py, unsigned long pthread) {
    volatile int has = -1;
    sigjmp_buf env;
    pa_guard_env = &env;
    if (sigsetjmp(env, 0))
        return -1; /* the list changed under the walk: unknown */
    has = tstate_by_thread_id(py, pthread) != 0;
    pa_guard_env = 0;
    return has;
}
