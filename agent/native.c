/* native.c: C stack unwinding (libunwind, local only, behind a cache of each instruction
 * address's unwind rule: "the step cache" below) and its interleaving with Python frames.
 *
 * SIGNAL-HANDLER SIDE: pa_native_backtrace, pa_native_in_eval and pa_native_interleave run
 * inside the SIGPROF handler. No malloc, no locks, no stdio. pa_native_init,
 * pa_native_add_eval_range and pa_native_code_unloaded run in normal context.
 *
 * Why libunwind is safe here: its local unwinder does not allocate once initialized (the
 * initialization is done by pa_native_init), reads the interrupted registers straight from
 * the signal's ucontext, and finds unwind tables with dl_iterate_phdr. That last call takes
 * the dynamic loader's (recursive) write lock: a thread interrupted while it holds that lock
 * (inside dlopen, dlclose or dl_iterate_phdr) must not be unwound, or it would wait for
 * itself. Interposing the loader's functions to count that would change what they do
 * (dlopen searches the *caller's* RUNPATH), so instead the handler reads the lock's owner:
 * pa_native_init finds where glibc keeps it by looking, from inside a dl_iterate_phdr
 * callback, for our own thread id in the loader's global state.
 *
 * No descriptor: libunwind (built with conservative checks, as Debian's is) validates every
 * address it reads by writing a byte of it into a pipe of its own, and re-opens that pipe,
 * closing both numbers, when a read from it fails. A program that closes every descriptor and
 * opens its own files gets those numbers back, and libunwind would then read from, write to or
 * close the program's files. So the local address space's memory accessor is replaced by ours
 * (a read under the fault guard, which needs no descriptor) and the pipe, which nothing uses
 * any more, is closed right after libunwind made it. */
#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "native.h"
#include "pyversions.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "../base/bss.h"
#include "../base/realfns.h"
#include "../base/tls.h"
#include "guard.h"

enum { MAX_EVAL_RANGES = 8 };

/* The owner (thread id) field of glibc's loader write lock, or NULL when it was not found
 * (then native unwinding stays off). */
static const volatile int *loader_owner;
#define my_tid (pa_tls.native_tid)

struct owner_search {
    const unsigned char *base;
    size_t size;
    pid_t tid;
    size_t found[4];
    int n;
};

/* Called with the write lock held by this thread: a recursive pthread mutex reads
 * {int lock; unsigned count; int owner; ...}, so owner == our tid, count >= 1, lock != 0. */
static int search_owner(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)info;
    (void)size;
    struct owner_search *os = arg;
    for (size_t off = 8; off + 4 <= os->size && os->n < 4; off += 4) {
        const int *w = (const int *)(os->base + off);
        if (w[0] == os->tid && w[-1] >= 1 && w[-2] != 0)
            os->found[os->n++] = off;
    }
    return 1; /* one call is enough */
}

static int find_loader_owner(void) {
    void *g = dlsym(RTLD_DEFAULT, "_rtld_global");
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (!g || !dladdr1(g, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym || !sym->st_size)
        return -1;
    struct owner_search os = {g, sym->st_size, (pid_t)syscall(SYS_gettid), {0}, 0};
    dl_iterate_phdr(search_owner, &os);
    /* The candidate must let go of us once the lock is released. */
    for (int i = 0; i < os.n; i++) {
        const int *w = (const int *)(os.base + os.found[i]);
        if (*w != os.tid) {
            loader_owner = w;
            return 0;
        }
    }
    return -1;
}

/* Written in normal context before sampling (entries first, then the count with release), so
 * a handler that sees the count sees the entries. */
static struct { uintptr_t lo, hi; } eval_ranges[MAX_EVAL_RANGES];
static _Atomic int n_eval_ranges;

int pa_native_add_eval_range(uintptr_t lo, uintptr_t hi) {
    int n = atomic_load_explicit(&n_eval_ranges, memory_order_relaxed);
    if (lo >= hi || n >= MAX_EVAL_RANGES)
        return -1;
    for (int i = 0; i < n; i++)
        if (eval_ranges[i].lo == lo && eval_ranges[i].hi == hi)
            return 0;
    eval_ranges[n].lo = lo;
    eval_ranges[n].hi = hi;
    atomic_store_explicit(&n_eval_ranges, n + 1, memory_order_release);
    return 0;
}

int pa_native_eval_ranges(void) {
    return atomic_load_explicit(&n_eval_ranges, memory_order_acquire);
}

int pa_native_in_eval(uintptr_t ip) {
    int n = atomic_load_explicit(&n_eval_ranges, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (ip >= eval_ranges[i].lo && ip < eval_ranges[i].hi)
            return 1;
    return 0;
}

/* SIGNAL-HANDLER SIDE. libunwind's memory reads: one word under the fault guard (any guard
 * already armed on this thread is restored afterwards). Local unwinding never writes. */
static int guarded_access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write,
                              void *arg) {
    (void)as;
    (void)arg;
    if (write || addr < 4096)
        return -UNW_EINVAL;
    sigjmp_buf env;
    sigjmp_buf *volatile prev = pa_guard_env;
    pa_guard_env = &env;
    if (sigsetjmp(env, 0)) {
        pa_guard_env = prev;
        return -UNW_EINVAL;
    }
    *val = PA_READ(unw_word_t, addr);
    pa_guard_env = prev;
    return 0;
}

/* ---- the step cache ---------------------------------------------------------------------------
 *
 * Most frames of a stack unwind by a rule of one shape: the CFA (the caller's stack pointer) is
 * rsp or rbp plus a constant, the return address is the word just below the CFA, and rbp is
 * either unchanged or saved at a constant offset from the CFA. libunwind finds that rule by
 * searching the object's unwind table, decoding the FDE and running its CFI program: 1-2 µs
 * a frame. The rule depends only on the instruction address, so it is learned once per
 * address and kept here; a frame whose rule is known unwinds with two guarded reads.
 *
 * Learning a rule (classify) asks libunwind itself, on made-up registers: it steps from the
 * address twice, with rsp, rbp and every other register pointing into a scratch area whose
 * words all differ (each holds a value that names its own position), the second time with
 * each of the three moved by a different power of two, so that the CFA's move names the
 * register it follows. Where the CFA followed rsp (or rbp) exactly and nothing else, where the
 * return address came from CFA-8 and rbp from a fixed offset or from nowhere, the rule is
 * simple; anything else (a CFA from an expression or from another register, a signal frame,
 * code without unwind information, where libunwind guesses from values) is marked as
 * libunwind's, and a stack that meets such an address is unwound by libunwind as before.
 * No libunwind internals are read: only what unw_step returns.
 *
 * The table: open addressing, mapped before sampling (pages touched as entries land), written
 * by handlers of any thread with a claim-then-publish protocol, never locked. A tag holds the
 * address, whether it is a leaf (an interrupted instruction, looked up as itself) or a return
 * address (looked up as the call), and the generation it was learned in: unloading a library
 * (dlclose, shim.c) moves the generation on, so rules learned before no longer match and
 * their slots are taken again. */

/* 4,096 slots of 16 bytes: 64 KiB, 16 pages, mapped populated. Small on purpose: between two
 * samples of a thread (4 ms of its CPU time at 250 Hz, and other programs' time) the CPU's
 * caches and TLB forget the table, and each frame's lookup is a miss; with 1 MiB (65,536
 * slots) the lookups alone were most of the walk's time (perf: the slot's load), from TLB
 * misses over 256 pages. */
enum { STEP_BITS = 12, STEP_SLOTS = 1 << STEP_BITS, STEP_PROBES = 8 };
enum { RULE_SIMPLE = 1, RULE_STOP = 2, RULE_LIBUNWIND = 3 }; /* 0: no rule */
enum { RULE_CFA_RBP = 4, RULE_RBP_SAVED = 8 };
/* A leaf address seen once: the interrupted instruction differs from sample to sample, and
 * learning costs two steps, so a leaf's rule is learned the second time it is seen. */
enum { RULE_SEEN = 16 };
#define TAG_CLAIMED ((uint64_t)1)
#define TAG_IP_MASK ((((uint64_t)1) << 48) - 1)

struct step_slot {
    _Atomic uint64_t tag;
    _Atomic uint64_t rule; /* kind | flags | rbp offset << 16 | CFA offset << 32 */
};

static struct step_slot *step_table;
static _Atomic uint32_t step_generation = 1;
static _Atomic int unwinder = PA_NATIVE_CACHED;
static _Atomic uint64_t n_cached, n_learned, n_libunwind, n_checked, n_mismatched;

static uint64_t step_tag(uintptr_t ip, int leaf, uint32_t gen) {
    return ((uint64_t)ip & TAG_IP_MASK) | ((uint64_t)leaf << 48) | ((uint64_t)(gen & 0x7fff) << 49);
}

static uint64_t step_hash(uint64_t tag) {
    return ((tag & ~((uint64_t)0xffff << 48)) * 0x9e3779b97f4a7c15u) >> (64 - STEP_BITS);
}

/* SIGNAL-HANDLER SIDE. The rule kept for tag, or 0. A slot is read as a seqlock reads: the tag,
 * the rule, the tag again; a slot taken over in between (a stale generation's) is a miss. */
static uint64_t step_lookup(uint64_t tag) {
    uint64_t h = step_hash(tag);
    for (int i = 0; i < STEP_PROBES; i++) {
        struct step_slot *s = &step_table[(h + (uint64_t)i) & (STEP_SLOTS - 1)];
        uint64_t t = atomic_load_explicit(&s->tag, memory_order_acquire);
        if (t == 0)
            return 0;
        if (t != tag)
            continue;
        uint64_t rule = atomic_load_explicit(&s->rule, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        return atomic_load_explicit(&s->tag, memory_order_relaxed) == tag ? rule : 0;
    }
    return 0;
}

/* SIGNAL-HANDLER SIDE. Takes slot s, whose tag was t, for (tag, rule): claim, rule, tag (the
 * seqlock's writer). 0 when another thread changed the slot first. */
static int step_claim(struct step_slot *s, uint64_t t, uint64_t tag, uint64_t rule) {
    if (!atomic_compare_exchange_strong_explicit(&s->tag, &t, TAG_CLAIMED, memory_order_acq_rel,
                                                 memory_order_relaxed))
        return 0;
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&s->rule, rule, memory_order_relaxed);
    atomic_store_explicit(&s->tag, tag, memory_order_release);
    return 1;
}

/* SIGNAL-HANDLER SIDE. Keeps a rule: in tag's own slot when it holds a leaf's SEEN mark that
 * rule replaces, else in an empty slot or one of an older generation; when the probe window
 * holds none, a SEEN mark in it gives way, else the slot a rotating index names (the table
 * is bounded; a rule evicted is learned again when next seen). */
static _Atomic unsigned step_victim;

static void step_store(uint64_t tag, uint64_t rule, uint32_t gen) {
    uint64_t h = step_hash(tag);
    struct step_slot *seen = NULL;
    for (int i = 0; i < STEP_PROBES; i++) {
        struct step_slot *s = &step_table[(h + (uint64_t)i) & (STEP_SLOTS - 1)];
        uint64_t t = atomic_load_explicit(&s->tag, memory_order_relaxed);
        int is_seen = atomic_load_explicit(&s->rule, memory_order_relaxed) == RULE_SEEN;
        if (t == tag) {
            if (is_seen && rule != RULE_SEEN)
                step_claim(s, t, tag, rule);
            return; /* else another thread was first */
        }
        int stale = t != 0 && t != TAG_CLAIMED && (uint32_t)(t >> 49) != (gen & 0x7fff);
        if ((t == 0 || stale) && step_claim(s, t, tag, rule))
            return;
        if (is_seen && !seen && t != TAG_CLAIMED)
            seen = s;
    }
    if (!seen) {
        unsigned v = atomic_fetch_add_explicit(&step_victim, 1, memory_order_relaxed);
        seen = &step_table[(h + v % STEP_PROBES) & (STEP_SLOTS - 1)];
    }
    uint64_t t = atomic_load_explicit(&seen->tag, memory_order_relaxed);
    if (t != TAG_CLAIMED)
        step_claim(seen, t, tag, rule);
}

/* The scratch area the probes unwind through: word i holds scratch_value(i), a different
 * value for every i (an odd multiplier is invertible modulo 2^64) that is no plausible
 * address, so that a rule reading through a pointer (an expression) goes nowhere. */
enum { SCRATCH_WORDS = 32 * 1024 }; /* 256 KiB: a frame up to ~200 KiB learns on rsp */
enum { PROBE_SP = 2 * 1024, PROBE_BP = 16 * 1024, PROBE_OTHER = 24 * 1024, PROBE_SHIFT = 512 };
static const uint64_t SCRATCH_MUL = 0x9e3779b97f4a7c15u, SCRATCH_XOR = 0xa5c3000000000000u;
static uint64_t scratch_mul_inverse;
static uint64_t *scratch;

static uint64_t scratch_value(uint64_t i) {
    return (i * SCRATCH_MUL) ^ SCRATCH_XOR;
}

/* The scratch word v was read from, as a byte offset into the scratch area, or -1. */
static int64_t scratch_offset(uint64_t v) {
    uint64_t i = (v ^ SCRATCH_XOR) * scratch_mul_inverse;
    return i < SCRATCH_WORDS ? (int64_t)(i * 8) : -1;
}

struct probe {
    int ret;                 /* unw_step's result */
    uintptr_t sp, bp, other; /* registers given */
    uint64_t ip2, sp2, bp2;  /* registers after the step */
};

/* SIGNAL-HANDLER SIDE. One libunwind step from ip with made-up registers (word offsets into
 * the scratch area). Returns 0, or -1 where ip has no FDE (unw_get_proc_info then reports a
 * one-byte procedure of no format, and unw_step guesses from register values). */
static __attribute__((noinline)) int probe_step_unw(uintptr_t ip, int leaf, int sp_w, int bp_w,
                                                    int other_w, int first, struct probe *p) {
    ucontext_t uc;
    memset(&uc, 0, sizeof uc);
    p->sp = (uintptr_t)(scratch + sp_w);
    p->bp = (uintptr_t)(scratch + bp_w);
    p->other = (uintptr_t)(scratch + other_w);
    for (int r = 0; r < NGREG; r++)
        uc.uc_mcontext.gregs[r] = (greg_t)p->other;
    uc.uc_mcontext.gregs[REG_RIP] = (greg_t)ip;
    uc.uc_mcontext.gregs[REG_RSP] = (greg_t)p->sp;
    uc.uc_mcontext.gregs[REG_RBP] = (greg_t)p->bp;
    unw_cursor_t cursor;
    unw_proc_info_t pi;
    if (unw_init_local2(&cursor, (unw_context_t *)&uc, leaf ? UNW_INIT_SIGNAL_FRAME : 0) < 0 ||
        (first && (unw_get_proc_info(&cursor, &pi) < 0 || pi.format != UNW_INFO_FORMAT_TABLE)))
        return -1;
    unw_word_t v = 0;
    p->ret = unw_step(&cursor);
    p->ip2 = unw_get_reg(&cursor, UNW_REG_IP, &v) < 0 ? 0 : v;
    p->sp2 = unw_get_reg(&cursor, UNW_REG_SP, &v) < 0 ? 0 : v;
    p->bp2 = unw_get_reg(&cursor, UNW_X86_64_RBP, &v) < 0 ? 0 : v;
    return 0;
}

/* SIGNAL-HANDLER SIDE. libunwind's step takes a mutex (its register-state cache; our build
 * blocks no signal around it, scripts/libunwind.sh, and its per-thread cache is not built
 * in). A handler of the program's that came in meanwhile and left by siglongjmp (C libraries'
 * alarm() timeouts) left it locked for good, and the thread's next sample that needed
 * libunwind waited forever: the program hung (harmless.md, class 19). So every signal but
 * the synchronous ones (a guarded read's fault must still reach the guard) waits while
 * libunwind runs: microseconds, and only in the samples the step cache cannot unwind. */
static void hold_signals(sigset_t *old) {
    sigset_t all;
    sigfillset(&all);
    static const int sync_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS};
    for (size_t i = 0; i < sizeof sync_signals / sizeof sync_signals[0]; i++)
        sigdelset(&all, sync_signals[i]);
    pa_real_pthread_sigmask(SIG_SETMASK, &all, old);
}

static void release_signals(const sigset_t *old) {
    pa_real_pthread_sigmask(SIG_SETMASK, old, NULL);
}

static int probe_step(uintptr_t ip, int leaf, int sp_w, int bp_w, int other_w, int first,
                      struct probe *p) {
    sigset_t old;
    hold_signals(&old);
    int r = probe_step_unw(ip, leaf, sp_w, bp_w, other_w, first, p);
    release_signals(&old);
    return r;
}

/* SIGNAL-HANDLER SIDE. The rule of the instruction at ip, learned from libunwind (above). Two
 * steps: one from the base registers, one with rsp, rbp and every other register moved by
 * different amounts (one, two and four times PROBE_SHIFT words), so that how far the CFA
 * moves between them names the one register it is computed from; any other distance (a sum:
 * an expression over several registers) is a rule for libunwind. */
static uint64_t classify(uintptr_t ip, int leaf) {
    struct probe p[2];
    if (probe_step(ip, leaf, PROBE_SP, PROBE_BP, PROBE_OTHER, 1, &p[0]) != 0 ||
        probe_step(ip, leaf, PROBE_SP + PROBE_SHIFT, PROBE_BP + 2 * PROBE_SHIFT,
                   PROBE_OTHER + 4 * PROBE_SHIFT, 0, &p[1]) != 0)
        return RULE_LIBUNWIND;
    if (p[0].ret == 0 && p[1].ret == 0)
        return RULE_STOP; /* the return address or rbp is undefined here: the outermost frame */
    uint64_t shift = PROBE_SHIFT * 8, moved = p[1].sp2 - p[0].sp2;
    int on_rbp;
    if (moved == shift)
        on_rbp = 0;
    else if (moved == 2 * shift)
        on_rbp = 1;
    else
        return RULE_LIBUNWIND;
    int64_t cfa_off = (int64_t)(p[0].sp2 - (on_rbp ? p[0].bp : p[0].sp));
    int64_t rbp_off = 0;
    int rbp_saved = -1;
    for (int i = 0; i < 2; i++) {
        uint64_t cfa = p[i].sp2;
        if (p[i].ret <= 0 || cfa != (on_rbp ? p[i].bp : p[i].sp) + (uint64_t)cfa_off ||
            cfa < (uintptr_t)scratch + 8 ||
            scratch_offset(p[i].ip2) != (int64_t)(cfa - 8 - (uintptr_t)scratch))
            return RULE_LIBUNWIND;
        int64_t at = scratch_offset(p[i].bp2);
        int saved = p[i].bp2 != p[i].bp;
        int64_t off = saved ? (int64_t)((uintptr_t)scratch + (uint64_t)at - cfa) : 0;
        if ((saved && at < 0) || (rbp_saved >= 0 && (saved != rbp_saved || off != rbp_off)))
            return RULE_LIBUNWIND;
        rbp_saved = saved;
        rbp_off = off;
    }
    if (cfa_off < INT32_MIN || cfa_off > INT32_MAX || rbp_off < INT16_MIN || rbp_off > INT16_MAX)
        return RULE_LIBUNWIND;
    return RULE_SIMPLE | (on_rbp ? RULE_CFA_RBP : 0) | (rbp_saved ? RULE_RBP_SAVED : 0) |
           ((uint64_t)(uint16_t)(int16_t)rbp_off << 16) |
           ((uint64_t)(uint32_t)(int32_t)cfa_off << 32);
}

/* SIGNAL-HANDLER SIDE. One aligned word under the fault guard; 0 or -1. */
static int read_word(uintptr_t addr, uintptr_t *out) {
    if (!pa_aligned(addr, 8))
        return -1;
    sigjmp_buf env;
    sigjmp_buf *volatile prev = pa_guard_env;
    pa_guard_env = &env;
    if (sigsetjmp(env, 0)) {
        pa_guard_env = prev;
        return -1;
    }
    *out = PA_READ(uintptr_t, addr);
    pa_guard_env = prev;
    return 0;
}

/* The rules of this thread's previous walk, in stack order. Two samples of a thread share
 * most of their frames (the root side), so a walk finds its rules here, in a few consecutive
 * cache lines, before it probes the table (one line, often a miss, per frame). */
enum { MEMO = PA_TLS_MEMO };
#define memo (pa_tls.memo)
#define memo_n (pa_tls.memo_n)

/* SIGNAL-HANDLER SIDE. tag's rule from the previous walk, looked for from *j on; 0 if none. */
static uint64_t memo_lookup(uint64_t tag, int *j) {
    for (int k = *j; k < memo_n; k++)
        if (memo[k].tag == tag) {
            *j = k + 1;
            return memo[k].rule;
        }
    return 0;
}

/* SIGNAL-HANDLER SIDE. The interrupted frame's step by libunwind, from the signal's context:
 * the caller's ip, sp and rbp (bp_at 1 when rbp cannot be read, so that a rule needing it
 * stops, as libunwind would). Returns 1, or 0 where libunwind's walk ends after the leaf. */
static __attribute__((noinline)) int leaf_step_unw(void *ucontext, uintptr_t *ip, uintptr_t *sp,
                                                   uintptr_t *bp, uintptr_t *bp_at) {
    unw_cursor_t cursor;
    unw_word_t v;
    if (unw_init_local2(&cursor, (unw_context_t *)ucontext, UNW_INIT_SIGNAL_FRAME) < 0 ||
        unw_step(&cursor) <= 0 || unw_get_reg(&cursor, UNW_REG_IP, &v) < 0)
        return 0;
    *ip = v;
    if (unw_get_reg(&cursor, UNW_REG_SP, &v) < 0)
        return 0;
    *sp = v;
    *bp_at = unw_get_reg(&cursor, UNW_X86_64_RBP, &v) < 0 ? 1 : 0;
    *bp = v;
    return 1;
}

static int leaf_step(void *ucontext, uintptr_t *ip, uintptr_t *sp, uintptr_t *bp,
                     uintptr_t *bp_at) {
    sigset_t old;
    hold_signals(&old);
    int r = leaf_step_unw(ucontext, ip, sp, bp, bp_at);
    release_signals(&old);
    return r;
}

/* SIGNAL-HANDLER SIDE. The walk with learned rules: the same frames as walk_libunwind, or,
 * with *whole 0, the frames up to the first address whose rule is libunwind's only (that
 * frame included: the rest is libunwind's to find). Where unw_step stops (a read
 * fails, the outermost frame, a step that leaves ip and CFA unchanged) this stops too; rbp is
 * read only when a rule needs its value, as libunwind reads it. */
static int walk_cached(void *ucontext, uintptr_t *ips, int max, int *whole) {
    const ucontext_t *uc = ucontext;
    uint32_t gen = atomic_load_explicit(&step_generation, memory_order_acquire);
    uintptr_t ip = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
    uintptr_t bp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP];
    uintptr_t bp_at = 0; /* where rbp is to be read from, when not read yet */
    int n = 0, leaf = 1, j = 0, nnew = 0;
    *whole = 1;
    uint64_t cached = 0;
    struct pa_tls_memo fresh[MEMO];
    while (ip != 0) {
        ips[n] = leaf ? ip : ip - 1;
        if (++n >= max)
            break;
        uint64_t tag = step_tag(ip, leaf, gen);
        uint64_t rule = memo_lookup(tag, &j);
        if (!rule)
            rule = step_lookup(tag);
        if ((rule & 3) && nnew < MEMO) {
            fresh[nnew].tag = tag;
            fresh[nnew++].rule = rule;
        }
        if (rule & 3) {
            cached++;
        } else if (leaf && rule != RULE_SEEN) {
            step_store(tag, RULE_SEEN, gen);
            if (!leaf_step(ucontext, &ip, &sp, &bp, &bp_at))
                break;
            leaf = 0;
            continue;
        } else {
            rule = classify(ip, leaf);
            step_store(tag, rule, gen);
            if (nnew < MEMO) {
                fresh[nnew].tag = tag;
                fresh[nnew++].rule = rule;
            }
            atomic_fetch_add_explicit(&n_learned, 1, memory_order_relaxed);
        }
        if ((rule & 3) == RULE_LIBUNWIND) {
            *whole = 0;
            break;
        }
        if ((rule & 3) == RULE_STOP)
            break;
        if ((rule & RULE_CFA_RBP) && bp_at) {
            if (read_word(bp_at, &bp) != 0)
                break;
            bp_at = 0;
        }
        uintptr_t cfa =
            ((rule & RULE_CFA_RBP) ? bp : sp) + (uintptr_t)(int64_t)(int32_t)(rule >> 32);
        uintptr_t ra;
        if (read_word(cfa - 8, &ra) != 0 || (ra == ip && cfa == sp))
            break;
        if (rule & RULE_RBP_SAVED)
            bp_at = cfa + (uintptr_t)(int64_t)(int16_t)(uint16_t)(rule >> 16);
        ip = ra;
        sp = cfa;
        leaf = 0;
    }
    atomic_fetch_add_explicit(&n_cached, cached, memory_order_relaxed);
    memcpy(memo, fresh, (size_t)nnew * sizeof *fresh);
    memo_n = nnew;
    return n;
}

/* The open descriptors (up to max), in out; returns how many. */
static int open_fds(int *out, int max) {
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0, self = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) && n < max)
        if (e->d_name[0] != '.' && atoi(e->d_name) != self)
            out[n++] = atoi(e->d_name);
    closedir(d);
    return n;
}

static int was_open(const int *fds, int n, int fd) {
    for (int i = 0; i < n; i++)
        if (fds[i] == fd)
            return 1;
    return 0;
}

/* Closes libunwind's validation pipe: the two descriptors that appeared while it set itself
 * up, both ends of one pipe, non-blocking and close-on-exec as libunwind makes them. Anything
 * less certain (another thread opened descriptors meanwhile) is left alone: unused, it is
 * harmless. */
static void close_validation_pipe(const int *before, int nbefore) {
    enum { MAX_FDS = 4096 };
    static int after[MAX_FDS] PA_LARGE_BSS(fds_after);
    int n = open_fds(after, MAX_FDS), fresh[2], nfresh = 0;
    for (int i = 0; i < n; i++)
        if (!was_open(before, nbefore, after[i]) && nfresh++ < 2)
            fresh[nfresh - 1] = after[i];
    if (nfresh != 2)
        return;
    struct stat a, b;
    int fa = fcntl(fresh[0], F_GETFL), fb = fcntl(fresh[1], F_GETFL);
    if (fstat(fresh[0], &a) != 0 || fstat(fresh[1], &b) != 0 || !S_ISFIFO(a.st_mode) ||
        a.st_ino != b.st_ino || a.st_dev != b.st_dev || fa < 0 || fb < 0 ||
        !(fa & fb & O_NONBLOCK) || (fa & O_ACCMODE) == (fb & O_ACCMODE) ||
        !(fcntl(fresh[0], F_GETFD) & fcntl(fresh[1], F_GETFD) & FD_CLOEXEC))
        return;
    close(fresh[0]);
    close(fresh[1]);
}

/* The step cache's table (populated: no handler takes its first-touch faults) and the probes'
 * scratch area,
 * mapped before sampling so that no handler allocates. Without them libunwind unwinds every
 * frame, as before the cache. */
static void map_step_cache(void) {
    void *t = mmap(NULL, STEP_SLOTS * sizeof(struct step_slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    void *w =
        mmap(NULL, SCRATCH_WORDS * 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED || w == MAP_FAILED) {
        if (t != MAP_FAILED)
            munmap(t, STEP_SLOTS * sizeof(struct step_slot));
        if (w != MAP_FAILED)
            munmap(w, SCRATCH_WORDS * 8);
        return;
    }
    uint64_t inv = SCRATCH_MUL; /* Newton's iteration: each round doubles the correct bits */
    for (int i = 0; i < 6; i++)
        inv *= 2 - SCRATCH_MUL * inv;
    scratch_mul_inverse = inv;
    scratch = w;
    for (uint64_t i = 0; i < SCRATCH_WORDS; i++)
        scratch[i] = scratch_value(i);
    step_table = t;
}

/* The first unwind runs libunwind's one-time setup (tdep_init: locks, the address-validation
 * pipe, caches). Doing it here keeps it out of the handler. */
static __attribute__((noinline)) void prime_libunwind(void) {
    void *buf[16];
    unw_backtrace(buf, 16);
    unw_context_t ctx;
    unw_cursor_t cursor;
    if (unw_getcontext(&ctx) == 0 && unw_init_local(&cursor, &ctx) == 0)
        for (int i = 0; i < 16 && unw_step(&cursor) > 0; i++)
            ;
}

int pa_native_prime(void) {
    static int done;
    if (done)
        return 0;
    enum { MAX_FDS = 4096 };
    static int before[MAX_FDS] PA_LARGE_BSS(fds_before);
    int nbefore = open_fds(before, MAX_FDS);
    /* The first call sets libunwind up (its pipe included); nothing has unwound yet. */
    unw_accessors_t *acc = unw_get_accessors(unw_local_addr_space);
    if (!acc)
        return -1;
    acc->access_mem = guarded_access_mem;
    /* A cache per thread where this libunwind has one; its step still takes the register-state
     * cache's mutex (seen in gdb, 2026-11-27), and it is built without blocking signals around
     * it (scripts/libunwind.sh), so every call into it holds the signals (hold_signals). */
    unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
    if (nbefore >= 0 && nbefore < MAX_FDS)
        close_validation_pipe(before, nbefore);
    prime_libunwind();
    map_step_cache();
    done = 1;
    return 0;
}

int pa_native_init(void) {
    if (find_loader_owner() != 0)
        return -1; /* without it, unwinding could deadlock: stay off */
    if (pa_native_prime() != 0)
        return -1;
    /* The same symbol on every version from 3.8 on: one C call of it runs one Python frame
     * (3.8-3.10) or the frames up to an entry frame (3.11+). Its size comes from the dynamic
     * symbol table entry, which is there because the symbol is exported. */
    void *eval = pa_py_sym("_PyEval_EvalFrameDefault");
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (!eval || !dladdr1(eval, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym || !sym->st_size)
        return -1;
    return pa_native_add_eval_range((uintptr_t)eval, (uintptr_t)eval + sym->st_size);
}

/* SIGNAL-HANDLER SIDE. libunwind's walk, one unw_step per frame: the reference the step
 * cache must agree with, and the path for stacks the cache cannot take. */
static __attribute__((noinline)) int walk_libunwind_unw(void *ucontext, uintptr_t *ips, int max) {
    unw_cursor_t cursor;
    /* On x86-64 and aarch64 unw_context_t is ucontext_t, so the kernel's signal context is a
     * valid starting point; the flag says its PC is the interrupted instruction itself, not a
     * return address. */
    if (unw_init_local2(&cursor, (unw_context_t *)ucontext, UNW_INIT_SIGNAL_FRAME) < 0)
        return 0;
    int n = 0;
    for (;;) {
        unw_word_t ip = 0;
        if (unw_get_reg(&cursor, UNW_REG_IP, &ip) < 0 || ip == 0)
            break;
        ips[n] = n == 0 ? (uintptr_t)ip : (uintptr_t)ip - 1;
        n++;
        if (n >= max || unw_step(&cursor) <= 0)
            break;
    }
    return n;
}

static int walk_libunwind(void *ucontext, uintptr_t *ips, int max) {
    sigset_t old;
    hold_signals(&old);
    int n = walk_libunwind_unw(ucontext, ips, max);
    release_signals(&old);
    return n;
}

int pa_native_backtrace(void *ucontext, uintptr_t *ips, int max) {
    if (!loader_owner || !ucontext || max <= 0)
        return 0;
    if (!my_tid)
        my_tid = (pid_t)syscall(SYS_gettid);
    if (*loader_owner == my_tid)
        return 0; /* interrupted inside the loader: unwinding would wait for ourselves */
    if (max > PA_NATIVE_MAX_FRAMES)
        max = PA_NATIVE_MAX_FRAMES;
    int which = atomic_load_explicit(&unwinder, memory_order_relaxed);
    if (which == PA_NATIVE_LIBUNWIND || !step_table)
        return walk_libunwind(ucontext, ips, max);
    int whole, n = walk_cached(ucontext, ips, max, &whole);
    if (which == PA_NATIVE_CHECK) {
        /* A walk cut short by libunwind's address must agree up to it: a wrong rule before it
         * would have led there (a return address read from the wrong place has no FDE). */
        uintptr_t want[PA_NATIVE_MAX_FRAMES];
        int nwant = walk_libunwind(ucontext, want, max);
        atomic_fetch_add_explicit(&n_checked, 1, memory_order_relaxed);
        if ((whole ? nwant != n : nwant < n) || memcmp(want, ips, (size_t)n * sizeof *ips) != 0)
            atomic_fetch_add_explicit(&n_mismatched, 1, memory_order_relaxed);
        if (!whole)
            atomic_fetch_add_explicit(&n_libunwind, 1, memory_order_relaxed);
        memcpy(ips, want, (size_t)nwant * sizeof *ips);
        return nwant;
    }
    if (whole)
        return n;
    atomic_fetch_add_explicit(&n_libunwind, 1, memory_order_relaxed);
    return walk_libunwind(ucontext, ips, max);
}

void pa_native_set_unwinder(int which) {
    atomic_store(&unwinder, which);
}

void pa_native_code_unloaded(void) {
    uint32_t gen = atomic_fetch_add(&step_generation, 1) + 1;
    /* Tags keep 15 bits of the generation: before a number comes back, every slot is
     * emptied (a reader that meets a slot emptied under it reads a miss: the seqlock). */
    if ((gen & 0x7fff) == 0 && step_table)
        for (int i = 0; i < STEP_SLOTS; i++)
            atomic_store_explicit(&step_table[i].tag, 0, memory_order_release);
    unw_flush_cache(unw_local_addr_space, 0, 0); /* libunwind's own per-address caches */
}

void pa_native_get_counts(struct pa_native_counts *c) {
    c->cached_steps = atomic_load(&n_cached);
    c->learned_steps = atomic_load(&n_learned);
    c->libunwind_walks = atomic_load(&n_libunwind);
    c->checked = atomic_load(&n_checked);
    c->mismatched = atomic_load(&n_mismatched);
}

int pa_native_interleave(const uintptr_t *ips, int nips, const struct pa_frame *py, int npy,
                         struct pa_frame *out, int max) {
    int n = 0, p = 0;
    if (max <= 0)
        return 0;
        /* Emits one frame; one frame too many turns the last slot into <truncated> and ends. */
#define EMIT(frame)                                                                                \
    do {                                                                                           \
        if (n == max) {                                                                            \
            out[max - 1].id = PA_SYN_TRUNCATED;                                                    \
            out[max - 1].line = 0;                                                                 \
            out[max - 1].instr = 0;                                                                \
            return max;                                                                            \
        }                                                                                          \
        out[n++] = (frame);                                                                        \
    } while (0)
    for (int i = 0; i < nips; i++) {
        if (!pa_native_in_eval(ips[i])) {
            EMIT(pa_native_frame(ips[i]));
            continue;
        }
        while (p < npy && py[p].id != PA_SYN_ENTRY)
            EMIT(py[p++]);
        if (p < npy)
            p++; /* the marker that ends this run */
    }
    for (; p < npy; p++)
        if (py[p].id != PA_SYN_ENTRY)
            EMIT(py[p]);
#undef EMIT
    return n;
}
