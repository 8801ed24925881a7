/* signals.c: the agent's versions of the interposed signal and exec functions (the stub
 * libpyagent.so hands them every call once the agent is loaded, shim/stub.h).
 *
 * What the program asks of signals goes to the C library as asked, with four exceptions:
 *   - SIGPROF, SIGSEGV, SIGBUS while our handlers own them: recorded, and chained to when a
 *     signal is not ours (agent/sampler.c, agent/guard.c, agent/chain.c);
 *   - other handlers run through a wrapper that counts the thread's handler depth, so that
 *     _exit knows it was called from a signal handler (which may have interrupted malloc or
 *     a lock of ours) and skips the flush; sigaction still reports the program's own action;
 *   - a thread that blocks SIGPROF has its timer stopped first (pthread_sigmask, sigprocmask);
 *   - exec stops every timer of the process and drops our pending SIGPROFs first, and
 *     resumes sampling if exec fails.
 *   - a signal whose default action ends the process (SIGTERM, SIGHUP, SIGINT, SIGQUIT,
 *     SIGUSR1/2, SIGALRM) gets our death handler while the program leaves it at SIG_DFL:
 *     the profile is written, then the process dies of that very signal (see "Deaths by
 *     signal" below and docs/architecture.md); sigaction reports SIG_DFL.
 * All of this only in the process that owns the agent state: a vfork child shares our
 * memory (CPython's resets signal handlers before exec) and must pass straight through.
 *
 * SIGNAL-HANDLER SIDE: the wrapper around the program's handlers, the interposed sigaction,
 * pthread_sigmask and sigprocmask (async-signal-safe in POSIX, so ours are too), and
 * pa_shim_owner run in signal context with async-signal-safe calls only
 * (tests/house/check_handler.py). The death handler is the one exception, by design: it runs
 * the exit's flush, but only at a safe point ("Deaths by signal" below). */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "../agent/chain.h"
#include "../agent/guard.h"
#include "../agent/sampler.h"
#include "../base/bss.h"
#include "../base/realfns.h"
#include "shim.h"

/* ---- whose process ------------------------------------------------------------------------ */

static _Atomic pid_t owner_pid;

int pa_shim_owner(void) {
    pid_t p = atomic_load_explicit(&owner_pid, memory_order_acquire);
    return p != 0 && p == getpid();
}

void pa_shim_set_owner(pid_t pid) {
    atomic_store_explicit(&owner_pid, pid, memory_order_release);
}

/* ---- handlers the program installs --------------------------------------------------------- */

typedef void (*handler3)(int, siginfo_t *, void *);
/* the program's action where the wrapper is installed */
static struct sigaction app_act[NSIG] PA_LARGE_BSS(app_act);
static _Atomic(handler3) app_fn[NSIG]; /* its handler, as the wrapper reads it */

static void wrapper(int sig, siginfo_t *si, void *uc) {
    handler3 fn = atomic_load_explicit(&app_fn[sig], memory_order_acquire);
    if ((uintptr_t)fn == (uintptr_t)SIG_DFL || (uintptr_t)fn == (uintptr_t)SIG_IGN)
        return; /* replaced while this signal was being delivered */
    pa_handler_depth++;
    fn(sig, si, uc); /* a one-argument handler ignores the other two (x86-64, arm64 ABIs) */
    pa_handler_depth--;
}

static int wrappable(int sig) {
    return sig > 0 && sig < NSIG && sig != SIGPROF && sig != SIGSEGV && sig != SIGBUS &&
           sig != SIGKILL && sig != SIGSTOP;
}

static void on_death(int sig, siginfo_t *si, void *uc);
static _Atomic int deaths_on; /* our death handler may be installed (the agent is on) */

/* A signal whose default action ends the process and whose SIG_DFL we replace by on_death. */
static int deadly(int sig) {
    switch (sig) {
    case SIGHUP:
    case SIGINT:
    case SIGQUIT:
    case SIGTERM:
    case SIGUSR1:
    case SIGUSR2:
    case SIGALRM:
        return 1;
    default:
        return 0;
    }
}

static int is_default(const struct sigaction *a) {
    return !(a->sa_flags & SA_SIGINFO) && a->sa_handler == SIG_DFL;
}

/* SIG_DFL or SIG_IGN: a disposition, no handler to wrap. */
static int is_disposition(const struct sigaction *a) {
    return !(a->sa_flags & SA_SIGINFO) && (a->sa_handler == SIG_DFL || a->sa_handler == SIG_IGN);
}

/* Our death handler for sig, installed in place of the program's SIG_DFL action *app. */
static void death_action(int sig, struct sigaction *w) {
    memset(w, 0, sizeof *w);
    w->sa_sigaction = on_death;
    /* SA_NODEFER: the bound on the flush is a timer sending sig again (see on_death). */
    w->sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
    sigemptyset(&w->sa_mask);
    sigaddset(&w->sa_mask, SIGPROF);
    for (int s = 1; s < NSIG; s++)
        if (deadly(s) && s != sig)
            sigaddset(&w->sa_mask, s);
}

/* What the kernel holds, as the program should see it. */
static void unwrap(struct sigaction *sa, const struct sigaction *app) {
    if (sa->sa_sigaction == wrapper || sa->sa_sigaction == on_death)
        *sa = *app;
}

int pa_ix_sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    /* Straight to the kernel, unwrapped, in a vfork child (not the owner) and for a query of
     * a signal we never take over, which reads the same in the owner: CPython queries every
     * signal at start-up (64 calls), and the query skips the owner test's getpid. */
    if ((!act && wrappable(sig)) || !pa_shim_owner()) {
        int r = pa_real_sigaction(sig, act, old);
        if (r == 0 && old && sig > 0 && sig < NSIG)
            unwrap(old, &app_act[sig]);
        return r;
    }
    if (pa_sampler_app_sigaction(sig, act, old) || pa_guard_app_sigaction(sig, act, old))
        return 0;
    if (!wrappable(sig))
        return pa_real_sigaction(sig, act, old);
    struct sigaction before = app_act[sig], prev, w;
    const struct sigaction *install = act;
    if (act && is_default(act) && deadly(sig) && atomic_load(&deaths_on)) {
        death_action(sig, &w);
        install = &w;
        app_act[sig] = *act;
        atomic_store_explicit(&app_fn[sig], act->sa_sigaction, memory_order_release);
    } else if (act && !is_disposition(act)) {
        w = *act;
        w.sa_sigaction = wrapper;
        w.sa_flags |= SA_SIGINFO;
        install = &w;
        app_act[sig] = *act;
        atomic_store_explicit(&app_fn[sig], act->sa_sigaction, memory_order_release);
    }
    int r = pa_real_sigaction(sig, install, &prev);
    if (r != 0) {
        app_act[sig] = before;
        return r;
    }
    if (old) {
        *old = prev;
        unwrap(old, &before);
    }
    return 0;
}

__sighandler_t pa_ix_signal(int sig, __sighandler_t handler) {
    if (!pa_shim_owner())
        return pa_shim_next->signal(sig, handler);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, sig);
    sa.sa_flags = SA_RESTART; /* glibc's signal() has BSD semantics */
    if (pa_ix_sigaction(sig, &sa, &old) != 0)
        return SIG_ERR;
    return old.sa_handler;
}

/* ---- deaths by signal ---------------------------------------------------------------------- */

/* Without us a default-fatal signal ends the process at once and the samples in memory are
 * lost. on_death writes the profile first, then takes the default action (SIG_DFL, unblock,
 * tgkill to this thread), so the process dies of the same signal, its core flag as without
 * us. The flush (exit's: malloc, locks, files, the bounded upload) is not async-signal-safe,
 * so it runs only where the interrupted code cannot be inside the C library's or our own
 * state: the thread was running the interpreter's own code or another library's (zlib, an
 * extension), or stood at a system call that delivers signals (waiting, or kill /
 * unblocking, as os.kill and raise do). Elsewhere (memcpy, malloc, the loader, our code) it
 * looks again every millisecond for 100 ms (seek_tick) and dies without the flush after
 * that: a signal that is not the thread's own arrives when the program cannot know, so a
 * few milliseconds later look the same to it. Once the flush started, a one-shot timer sends
 * the signal again to this thread at the exit deadline plus one second; on_death, called
 * there (SA_NODEFER), takes the default action whatever the flush is doing.
 * docs/architecture.md, "Deaths by signal". */
static uintptr_t text_lo[PA_TEXT_N], text_hi[PA_TEXT_N]; /* set before install */
static unsigned death_grace_ms;                          /* the exit deadline */
static _Atomic int dying; /* the signal we die of, once one arrived */
static _Atomic uint64_t hard_deadline_ns;
static _Atomic int death_timer = -1; /* kernel timer id, -2 while being made */

/* When a death must take effect whatever a flush is doing: the exit deadline plus a second. */
static uint64_t death_deadline(uint64_t now) {
    return now + (uint64_t)death_grace_ms * 1000000u + 1000000000u;
}

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Sends sig to this thread after ns (raw system calls: async-signal-safe). */
static int death_timer_in(int sig, uint64_t ns) {
    int id = atomic_load(&death_timer), none = -1;
    if (id == -1 && atomic_compare_exchange_strong(&death_timer, &none, -2)) {
        struct sigevent sev;
        memset(&sev, 0, sizeof sev);
        sev.sigev_notify = SIGEV_THREAD_ID;
        sev.sigev_signo = sig;
        sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
        int kid;
        if (syscall(SYS_timer_create, CLOCK_MONOTONIC, &sev, &kid) != 0) {
            atomic_store(&death_timer, -1);
            return -1;
        }
        atomic_store(&death_timer, id = kid);
    }
    if (id < 0)
        return -1;
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    its.it_value.tv_sec = (time_t)(ns / 1000000000u);
    its.it_value.tv_nsec = (long)(ns % 1000000000u);
    return (int)syscall(SYS_timer_settime, id, 0, &its, NULL);
}

#if defined(__x86_64__)
/* The system calls that malloc makes while its heap is half-updated (signals never interrupt
 * them, but one arriving meanwhile is delivered at their return). */
static int heap_call(long nr) {
    switch (nr) {
    case SYS_brk:
    case SYS_mmap:
    case SYS_munmap:
    case SYS_mremap:
    case SYS_mprotect:
    case SYS_madvise:
        return 1;
    default:
        return 0;
    }
}
#endif

static int in_text(int k, uintptr_t pc) {
    return pc >= text_lo[k] && pc < text_hi[k];
}

/* May the flush run on the thread interrupted in context uc? */
static int safe_point(const ucontext_t *uc) {
    if (pa_handler_depth)
        return 0; /* a handler of the program's runs: it may have interrupted anything */
#if defined(__x86_64__)
    uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    long ax = (long)uc->uc_mcontext.gregs[REG_RAX];
#elif defined(__aarch64__)
    uintptr_t pc = (uintptr_t)uc->uc_mcontext.pc;
#else
    uintptr_t pc = 0;
#endif
    if (in_text(PA_TEXT_PY, pc))
        return 1;
    if (in_text(PA_TEXT_OWN, pc) || in_text(PA_TEXT_LD, pc) || in_text(PA_TEXT_MALLOC, pc))
        return 0; /* our code, the loader's (its lock may be held), a malloc of its own */
    if (!in_text(PA_TEXT_LIBC, pc) && !in_text(PA_TEXT_PTHREAD, pc))
        return pc != 0; /* another library (zlib, an extension) or generated code: the thread
                         * is inside nothing of the C library's; a library that libc called
                         * back (qsort, dl_iterate_phdr) holds no state the flush needs but
                         * the loader's lock, which only an upload's name lookup takes, and
                         * the death timer bounds that wait */
#if defined(__x86_64__)
    /* At a system call, where the C library's wrappers (read, kill, clock_gettime, ...) hold
     * no state of their own: the kernel restarts it (pc is back on `syscall`, 0f 05, and
     * rax holds its number), or it returned (rax holds the result) and its number is the
     * immediate of the `mov $nr, %eax` (b8 imm32) just before, as the wrappers load it; a
     * wait that ended with EINTR counts whatever loaded its number. pc is mapped and
     * executable; the bytes before it are on its page when its offset allows. */
    const unsigned char *at = (const unsigned char *)pc;
    size_t off = pc & 4095;
    if (off <= 4094 && at[0] == 0x0f && at[1] == 0x05)
        return !heap_call(ax);
    if (off < 2 || at[-2] != 0x0f || at[-1] != 0x05)
        return 0;
    if (ax == -EINTR)
        return 1;
    if (off >= 7 && at[-7] == 0xb8) {
        int32_t nr;
        memcpy(&nr, at - 6, sizeof nr);
        return !heap_call(nr);
    }
#endif
    return 0;
}

/* Starts the final flush on this thread (a safe point), bounded by the death timer. */
static void flush_then_die(int sig, uint64_t now) {
    uint64_t hard = death_deadline(now);
    atomic_store(&hard_deadline_ns, hard);
    if (death_timer_in(sig, hard - now) == 0)
        pa_shim_death_flush();
    pa_chain_default(sig);
}

/* A signal that found the thread away from a safe point looks again every SEEK_TICK_NS, for
 * at most SEEK_NS, on the same thread (the death timer sends it): the signal came from
 * another process or thread, so the program cannot tell a death taken a few milliseconds
 * later from a signal delivered later. Past SEEK_NS it dies without the flush. */
#define SEEK_TICK_NS 1000000u
#define SEEK_NS 100000000u
static _Atomic uint64_t seek_until_ns; /* nonzero while a thread looks for a safe point */
static _Atomic pid_t seek_tid;

/* The program is exiting and its final profile is being written: a kill now (as
 * multiprocessing's terminate() sends one to a worker that is just leaving) takes effect once
 * it is written, on this thread after the flush (returns 1), or here after waiting for
 * another thread's (bounded by the exit deadline plus a second). Returns 0 when no exit flush
 * runs. */
static int after_exit_flush(int sig, uint64_t now) {
    pid_t flusher = pa_shim_exit_flusher();
    if (!flusher)
        return 0;
    if (flusher == (pid_t)syscall(SYS_gettid)) {
        pa_shim_die_after_flush(sig);
        return 1;
    }
    uint64_t until = death_deadline(now);
    struct timespec ms = {0, 1000000};
    while (pa_shim_exit_flusher() && mono_ns() < until)
        nanosleep(&ms, NULL);
    pa_chain_default(sig);
    return 1;
}

/* One look of the seeking thread: flush and die at a safe point, die once the time is out,
 * else look again in a tick. */
static void seek_tick(int sig, const ucontext_t *uc, uint64_t now) {
    if (after_exit_flush(sig, now)) { /* it reached the program's own exit meanwhile */
        atomic_store(&seek_until_ns, 0);
        return;
    }
    if (safe_point(uc)) {
        atomic_store(&seek_until_ns, 0);
        flush_then_die(sig, now);
    }
    if (now >= atomic_load(&seek_until_ns) || death_timer_in(sig, SEEK_TICK_NS) != 0)
        pa_chain_default(sig);
}

static void on_death(int sig, siginfo_t *si, void *uc) {
    (void)si;
    int saved = errno;
    if (!pa_shim_owner())
        pa_chain_default(sig); /* a vfork child, or the agent is off: as without us */
    uint64_t now = mono_ns();
    int first = 0;
    if (!atomic_compare_exchange_strong(&dying, &first, sig)) {
        /* The seeking thread's tick (or a second signal on it) looks again. */
        if (atomic_load(&seek_until_ns) && seek_tid == (pid_t)syscall(SYS_gettid)) {
            seek_tick(first, uc, now);
            errno = saved;
            return;
        }
        /* A flush runs (on this thread or another): its bound, or a second signal. */
        uint64_t hard = atomic_load(&hard_deadline_ns);
        if (hard && now >= hard)
            pa_chain_default(first);
        errno = saved;
        return;
    }
    if (after_exit_flush(sig, now)) {
        errno = saved;
        return;
    }
    if (safe_point(uc))
        flush_then_die(sig, now);
    /* Elsewhere (malloc, memcpy, our code, the loader): look again shortly. */
    seek_tid = (pid_t)syscall(SYS_gettid);
    atomic_store(&seek_until_ns, now + SEEK_NS);
    if (death_timer_in(sig, SEEK_TICK_NS) != 0)
        pa_chain_default(sig);
    errno = saved;
}

/* Installs the death handler on every default-fatal signal the program leaves at SIG_DFL.
 * text: the code of the interpreter, of libpyagent.so and of the loader, as lo, hi pairs;
 * grace_ms: the exit deadline. Normal context. */
void pa_signals_watch_deaths(const uintptr_t text[2 * PA_TEXT_N], unsigned grace_ms) {
    for (int k = 0; k < PA_TEXT_N; k++) {
        text_lo[k] = text[2 * k];
        text_hi[k] = text[2 * k + 1];
    }
    death_grace_ms = grace_ms;
    atomic_store(&deaths_on, 1);
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction cur, w;
        if (!deadly(sig) || pa_real_sigaction(sig, NULL, &cur) != 0 || !is_default(&cur))
            continue;
        app_act[sig] = cur;
        death_action(sig, &w);
        pa_real_sigaction(sig, &w, NULL);
    }
}

/* In a forked child: the kernel timer was the parent's. */
void pa_signals_fork_child(void) {
    atomic_store(&death_timer, -1);
}

/* ---- the signal mask ------------------------------------------------------------------------ */

/* pthread_sigmask returns an error number, sigprocmask -1 with errno: the same system call
 * (base/realfns.c, async-signal-safe as both must be) behind either contract. */
static int mask_call(int posix_errno, int how, const sigset_t *set, sigset_t *old) {
    int r;
    /* Inside a signal handler the mask is temporary: sigreturn restores it behind our back. */
    if (pa_handler_depth || !pa_shim_owner()) {
        r = pa_real_pthread_sigmask(how, set, old);
    } else {
        /* Stop our timer before SIGPROF is blocked: a signal generated after could only
         * wait, pending, for a sigwait to take it. */
        if (set && how != SIG_UNBLOCK && sigismember(set, SIGPROF) == 1)
            pa_sampler_mask_will_block();
        r = pa_real_pthread_sigmask(how, set, old);
        int e = errno;
        pa_sampler_mask_changed();
        errno = e;
    }
    if (posix_errno || r == 0)
        return r;
    errno = r;
    return -1;
}

int pa_ix_pthread_sigmask(int how, const sigset_t *set, sigset_t *old) {
    return mask_call(1, how, set, old);
}

int pa_ix_sigprocmask(int how, const sigset_t *set, sigset_t *old) {
    return mask_call(0, how, set, old);
}

/* ---- exec ----------------------------------------------------------------------------------- */

/* The signals whose real handler is ours while the program's action is only recorded. */
static const int owned[] = {SIGPROF, SIGSEGV, SIGBUS};
enum { N_OWNED = sizeof owned / sizeof owned[0] };

/* Before exec: no timer of ours may run or be pending, and a signal the program ignores must
 * stay ignored in the new image (the kernel keeps SIG_IGN across exec, but it holds our
 * handler, which exec resets to the default). saved[i] is what to put back if exec fails. */
static void exec_prepare(struct sigaction *saved, int *changed) {
    if (!pa_handler_depth) /* from a signal handler: no lock, no malloc, no file */
        pa_shim_before_exec();
    pa_sampler_exec_prepare();
    for (int i = 0; i < N_OWNED; i++) {
        struct sigaction app, ign;
        changed[i] = 0;
        if (!pa_sampler_app_sigaction(owned[i], NULL, &app) &&
            !pa_guard_app_sigaction(owned[i], NULL, &app))
            continue;
        if ((app.sa_flags & SA_SIGINFO) || app.sa_handler != SIG_IGN)
            continue;
        memset(&ign, 0, sizeof ign);
        ign.sa_handler = SIG_IGN;
        changed[i] = pa_real_sigaction(owned[i], &ign, &saved[i]) == 0;
    }
}

static void exec_failed(const struct sigaction *saved, const int *changed) {
    int e = errno;
    for (int i = 0; i < N_OWNED; i++)
        if (changed[i])
            pa_real_sigaction(owned[i], &saved[i], NULL);
    pa_sampler_exec_failed();
    errno = e;
}

/* Runs an exec call with every timer of ours stopped; on failure sampling resumes. */
#define EXEC(call)                                                                                 \
    do {                                                                                           \
        struct sigaction saved_[N_OWNED];                                                          \
        int changed_[N_OWNED];                                                                     \
        int owner_ = pa_shim_owner();                                                              \
        if (owner_)                                                                                \
            exec_prepare(saved_, changed_);                                                        \
        int r_ = (call);                                                                           \
        if (owner_)                                                                                \
            exec_failed(saved_, changed_);                                                         \
        return r_;                                                                                 \
    } while (0)

int pa_ix_execve(const char *path, char *const argv[], char *const envp[]) {
    EXEC(pa_shim_next->execve(path, argv, envp));
}

int pa_ix_execv(const char *path, char *const argv[]) {
    EXEC(pa_shim_next->execv(path, argv));
}

int pa_ix_execvp(const char *file, char *const argv[]) {
    EXEC(pa_shim_next->execvp(file, argv));
}

int pa_ix_execvpe(const char *file, char *const argv[], char *const envp[]) {
    EXEC(pa_shim_next->execvpe(file, argv, envp));
}

int pa_ix_fexecve(int fd, char *const argv[], char *const envp[]) {
    EXEC(pa_shim_next->fexecve(fd, argv, envp));
}

int pa_ix_execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags) {
    EXEC(pa_shim_next->execveat(dirfd, path, argv, envp, flags));
}
