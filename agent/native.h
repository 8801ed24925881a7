/* native.h: the interrupted thread's C stack (libunwind) and its interleaving with the Python
 * frames, for PYAGENT_NATIVE=1.
 *
 * SIGNAL-HANDLER SIDE, except pa_native_init and pa_native_add_eval_range (normal context,
 * before sampling starts). The handler only collects return addresses and splices them with
 * the Python frames; names are resolved later by the uploader (uploader/symbols.h).
 *
 * The one idea: every C-level call of the interpreter's evaluation loop
 * (_PyEval_EvalFrameDefault) on the C stack stands for a run of Python frames on the Python
 * stack. The frame walker ends each run with a PA_SYN_ENTRY marker, so the n-th eval-loop
 * address on the C stack (leaf first) is replaced by the n-th run of Python frames. */
#ifndef PA_NATIVE_H
#define PA_NATIVE_H

#include <assert.h>
#include <stdint.h>

#include "codecache.h"
#include "frames.h"

/* Marker the walker puts after the last (outermost) Python frame run by one C call of the
 * evaluation loop: after every frame on 3.8-3.10, after each "entry" frame on 3.11+. */
#define PA_SYN_ENTRY 4u
static_assert(PA_SYN_ENTRY != (unsigned)PA_SYN_UNKNOWN &&
                  PA_SYN_ENTRY != (unsigned)PA_SYN_TRUNCATED &&
                  PA_SYN_ENTRY != (unsigned)PA_SYN_NO_PYTHON &&
                  PA_SYN_ENTRY != (unsigned)PA_SYN_GC && PA_SYN_ENTRY < (unsigned)PA_SYN_FIRST_CODE,
              "PA_SYN_ENTRY must be a free synthetic id");

/* Native frames live in the same struct pa_frame as Python frames: the top bit of id marks
 * them (code-cache ids are far below it), the other 31 bits of id hold bits 32-62 of the
 * address and line holds bits 0-31. User-space addresses on x86-64 and aarch64 fit in 48. */
#define PA_NATIVE_FLAG 0x80000000u

/* Upper bound on the C frames one sample unwinds (the cost of a sample grows with it). */
enum { PA_NATIVE_MAX_FRAMES = 128 };

static inline struct pa_frame pa_native_frame(uintptr_t ip) {
    struct pa_frame f;
    f.id = PA_NATIVE_FLAG | (uint32_t)((uint64_t)ip >> 32);
    f.line = (int32_t)(uint32_t)ip;
    f.instr = 0;
    return f;
}

static inline int pa_native_is_native(const struct pa_frame *f) {
    return (f->id & PA_NATIVE_FLAG) != 0;
}

static inline uintptr_t pa_native_ip(const struct pa_frame *f) {
    return (uintptr_t)(((uint64_t)(f->id & ~PA_NATIVE_FLAG) << 32) | (uint32_t)f->line);
}

/* Normal context, once, before sampling: finds where glibc keeps the owner of the loader's
 * write lock (without it native unwinding stays off: -1), primes libunwind (its one-time
 * initialization allocates and takes locks) so that the first unwind in a handler does not,
 * and finds the evaluation loop's address range (_PyEval_EvalFrameDefault, size from the
 * dynamic symbol table). Returns 0, or -1 (no loader lock found, or no evaluation loop:
 * native frames can then not be interleaved, pa_native_eval_ranges() is 0). */
int pa_native_init(void);

/* Normal context, best while the process has one thread (the constructor): sets libunwind up
 * (pa_native_init does it otherwise) with our fault-guarded memory reads in place of its
 * address validation, and closes the validation pipe it makes, which it then never uses: with
 * no other thread opening descriptors meanwhile, the pipe's two new descriptors are certain.
 * Once; 0 or -1. */
int pa_native_prime(void);

/* Normal context: declares [lo, hi) part of the evaluation loop (e.g. a compiler-split
 * "_PyEval_EvalFrameDefault.cold" found by pa_symbols_find). At most 8 ranges; 0 or -1. */
int pa_native_add_eval_range(uintptr_t lo, uintptr_t hi);
int pa_native_eval_ranges(void);

/* Signal-safe: is ip inside the evaluation loop? */
int pa_native_in_eval(uintptr_t ip);

/* Signal-safe. The interrupted thread's native frames, leaf first, starting at the
 * interrupted instruction of `ucontext` (the handler's third argument); at most
 * min(max, PA_NATIVE_MAX_FRAMES). Return addresses (all but the first) are stored minus one,
 * so that they fall inside the call instruction: right for symbols and for range checks.
 * Returns 0 while the thread holds the dynamic loader's lock (see native.c), or before
 * pa_native_init found it. The frames are libunwind's, whichever unwinder runs (below): the
 * step cache only replays rules libunwind gave. */
int pa_native_backtrace(void *ucontext, uintptr_t *ips, int max);

/* How pa_native_backtrace unwinds (PYAGENT_NATIVE_UNWIND): with the step cache, libunwind
 * only for addresses whose rule the cache cannot hold (the default); with libunwind for every
 * frame; or both, keeping libunwind's frames and counting the samples where the two differ
 * (a check for tests and benchmarks). */
enum pa_native_unwinder { PA_NATIVE_CACHED, PA_NATIVE_LIBUNWIND, PA_NATIVE_CHECK };
void pa_native_set_unwinder(int which);

/* Normal context, after a library may have been unmapped (dlclose): rules learned for its
 * addresses are forgotten, as are libunwind's own caches, since another object may be mapped
 * at the same addresses. */
void pa_native_code_unloaded(void);

struct pa_native_counts {
    uint64_t cached_steps;    /* frames unwound with a rule from the cache */
    uint64_t learned_steps;   /* rules learned (each with four probe steps of libunwind) */
    uint64_t libunwind_walks; /* samples unwound by libunwind: an address of its own on the stack */
    uint64_t checked;         /* PA_NATIVE_CHECK: samples unwound both ways */
    uint64_t mismatched;      /* ... where the two walks' frames differed */
};
void pa_native_get_counts(struct pa_native_counts *c);

/* Signal-safe, pure. Splices native addresses (leaf first) with the walker's Python frames
 * (leaf first, runs ended by PA_SYN_ENTRY) into out[] (leaf first): an address outside the
 * evaluation loop becomes a native frame; an address inside it becomes the next run of
 * Python frames. Python frames left when the addresses run out (unwinding stopped early)
 * follow as they are. Markers never reach out[]. When more than max frames result, the root
 * side is cut and out[max - 1] is <truncated>. Returns the number of frames written. */
int pa_native_interleave(const uintptr_t *ips, int nips, const struct pa_frame *py, int npy,
                         struct pa_frame *out, int max);

#endif
