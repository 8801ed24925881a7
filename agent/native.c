/* native.c: C stack unwinding (libunwind, local only) and its interleaving with Python frames.
 *
 * SIGNAL-HANDLER SIDE: pa_native_backtrace, pa_native_in_eval and pa_native_interleave run
 * inside the SIGPROF handler. No malloc, no locks, no stdio. pa_native_init and
 * pa_native_add_eval_range run in normal context before sampling starts.
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
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "guard.h"

enum { MAX_EVAL_RANGES = 8 };

/* The owner (thread id) field of glibc's loader write lock, or NULL when it was not found
 * (then native unwinding stays off). */
static const volatile int *loader_owner;
static __thread pid_t my_tid __attribute__((tls_model("initial-exec")));

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
    static int after[MAX_FDS];
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
    static int before[MAX_FDS];
    int nbefore = open_fds(before, MAX_FDS);
    /* The first call sets libunwind up (its pipe included); nothing has unwound yet. */
    unw_accessors_t *acc = unw_get_accessors(unw_local_addr_space);
    if (!acc)
        return -1;
    acc->access_mem = guarded_access_mem;
    /* A cache per thread: the global one takes a mutex, which a handler must not (libunwind is
     * built without blocking signals around it, scripts/libunwind.sh). */
    unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
    if (nbefore >= 0 && nbefore < MAX_FDS)
        close_validation_pipe(before, nbefore);
    prime_libunwind();
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

int pa_native_backtrace(void *ucontext, uintptr_t *ips, int max) {
    if (!loader_owner || !ucontext || max <= 0)
        return 0;
    if (!my_tid)
        my_tid = (pid_t)syscall(SYS_gettid);
    if (*loader_owner == my_tid)
        return 0; /* interrupted inside the loader: unwinding would wait for ourselves */
    if (max > PA_NATIVE_MAX_FRAMES)
        max = PA_NATIVE_MAX_FRAMES;
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
