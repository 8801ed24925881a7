/* handler.c: the SIGPROF handler.
 *
 * SIGNAL-HANDLER SIDE: everything reachable from on_sigprof runs in signal context, on
 * whatever thread the timer interrupted, with no malloc, no lock, no stdio, and errno saved
 * and restored. tests/agent/check_handler.py proves it from the compiled code: every function
 * reachable from on_sigprof lives in a file marked as this one is, and calls only an
 * allow-list of async-signal-safe functions. pa_handler_setup and pa_handler_install run in
 * normal context, before the handler can run. */
#include "handler.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

#include "../base/clock.h"
#include "../base/realfns.h"
#include "chain.h"
#include "codecache.h"
#include "frames.h"
#include "native.h"
#include "timerctl.h"
#include "timers.h"

/* Handler time, two ways: a fine histogram for the percentiles (25 ns steps to 10 us, then
 * four steps per doubling), and quarter-octave buckets from 1 ns for the header's
 * handler_hist (docs/formats.md). */
enum { HIST_LINEAR = 400, HIST_STEP_NS = 25, HIST_LINEAR_NS = HIST_LINEAR * HIST_STEP_NS };
enum { HIST_N = HIST_LINEAR + 4 * 16, LOG_N = 4 * 40 };

static struct pa_python py;
static struct pa_handler_config cfg;
static struct pa_tables *tables;
static uint64_t time_base; /* bucket of the process's start, from the Unix epoch */

_Atomic int pa_handler_running;

static _Atomic uint64_t n_signals, n_unreadable, n_truncated, n_foreign;
/* Samples (weighted as counted) of Python threads holding the GIL, not holding it, waiting
 * for it, handling an exception and raising one (pa_handler_add_state). */
static _Atomic uint64_t n_state[PA_COUNT_N];
static _Atomic uint32_t hist[HIST_N], loghist[LOG_N];

/* What the program installed for SIGPROF while ours is the real handler. */
static struct sigaction app_prof;
static int installed;

/* ---- set-up (normal context) -------------------------------------------------------------- */

void pa_handler_setup(const struct pa_python *p, const struct pa_handler_config *c,
                      struct pa_tables *t) {
    py = *p;
    cfg = *c;
    if (cfg.max_depth < 2)
        cfg.max_depth = 2;
    if (cfg.max_depth > PA_MAX_DEPTH_LIMIT)
        cfg.max_depth = PA_MAX_DEPTH_LIMIT;
    tables = t;
    if (cfg.bucket_ms)
        time_base = pa_clock_ns(CLOCK_REALTIME) / 1000000u / cfg.bucket_ms;
}

uint64_t pa_handler_time_base(void) {
    return time_base;
}

void pa_handler_set_python(const struct pa_python *p) {
    py = *p;
}

void pa_handler_set_native(int on) {
    cfg.native = on;
}

const struct pa_handler_config *pa_handler_config(void) {
    return &cfg;
}

const struct pa_python *pa_handler_python(void) {
    return &py;
}

static void on_sigprof(int sig, siginfo_t *si, void *uc);

int pa_handler_install(pa_error *err) {
    if (installed)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigprof;
    /* SA_RESTART: interrupted system calls resume, as Python expects of SIGPROF.
     * SA_NODEFER and an empty sa_mask: the program's mask stays in force (on_sigprof). */
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (pa_real_sigaction(SIGPROF, &sa, &app_prof) != 0)
        return pa_fail(err, "cannot install the SIGPROF handler: %s", strerror(errno));
    installed = 1;
    return 0;
}

int pa_sampler_app_sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (sig != SIGPROF || !installed)
        return 0;
    if (old)
        *old = app_prof;
    if (act)
        app_prof = *act;
    return 1;
}

/* ---- statistics ---------------------------------------------------------------------------- */

/* Quarter-octave bucket of ns: 4 * floor(log2 ns) + the next two bits. */
static unsigned log_bucket(uint64_t ns) {
    if (ns < 4)
        return (unsigned)ns;
    unsigned o = 63u - (unsigned)__builtin_clzll(ns);
    unsigned b = 4 * o + (unsigned)((ns >> (o - 2)) & 3);
    return b < LOG_N ? b : LOG_N - 1;
}

/* The smallest time in quarter-octave bucket b. */
static uint64_t log_bucket_floor(unsigned b) {
    if (b < 4)
        return b;
    unsigned o = b / 4;
    return (uint64_t)(4 + b % 4) << (o - 2);
}

static void hist_add(uint64_t ns) {
    unsigned b;
    if (ns < HIST_LINEAR_NS) {
        b = (unsigned)(ns / HIST_STEP_NS);
    } else {
        unsigned o = 0;
        while (o < 15 && ns >= (uint64_t)HIST_LINEAR_NS << (o + 1))
            o++;
        uint64_t base = (uint64_t)HIST_LINEAR_NS << o;
        uint64_t q = (ns - base) * 4 / base;
        b = HIST_LINEAR + 4 * o + (unsigned)(q > 3 ? 3 : q);
    }
    atomic_fetch_add_explicit(&hist[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&loghist[log_bucket(ns)], 1, memory_order_relaxed);
}

/* The middle of fine bucket i. */
static uint64_t hist_mid(int i) {
    if (i < HIST_LINEAR)
        return (uint64_t)i * HIST_STEP_NS + HIST_STEP_NS / 2;
    int o = (i - HIST_LINEAR) / 4, q = (i - HIST_LINEAR) % 4;
    uint64_t base = (uint64_t)HIST_LINEAR_NS << o;
    return base + base * (uint64_t)(2 * q + 1) / 8;
}

static uint64_t hist_percentile(const uint32_t *h, double q) {
    uint64_t total = 0;
    for (int i = 0; i < HIST_N; i++)
        total += h[i];
    if (!total)
        return 0;
    uint64_t want = (uint64_t)(q * (double)total), seen = 0;
    for (int i = 0; i < HIST_N; i++) {
        seen += h[i];
        if (seen > want)
            return hist_mid(i);
    }
    return 0;
}

void pa_handler_get_counts(struct pa_handler_counts *c) {
    memset(c, 0, sizeof *c);
    c->signals = atomic_load(&n_signals);
    c->unreadable = atomic_load(&n_unreadable);
    c->truncated = atomic_load(&n_truncated);
    c->foreign = atomic_load(&n_foreign);
    c->gil_held = atomic_load(&n_state[PA_COUNT_HELD]);
    c->gil_released = atomic_load(&n_state[PA_COUNT_RELEASED]);
    c->gil_wait = atomic_load(&n_state[PA_COUNT_GIL_WAIT]);
    c->exception = atomic_load(&n_state[PA_COUNT_HANDLING]);
    c->raising = atomic_load(&n_state[PA_COUNT_RAISING]);
    uint32_t h[HIST_N];
    for (int i = 0; i < HIST_N; i++)
        h[i] = atomic_load_explicit(&hist[i], memory_order_relaxed);
    c->p50_ns = hist_percentile(h, 0.50);
    c->p99_ns = hist_percentile(h, 0.99);
    size_t n = 0;
    c->hist[0] = 0;
    for (unsigned b = 0; b < LOG_N; b++) {
        uint32_t k = atomic_load_explicit(&loghist[b], memory_order_relaxed);
        if (k && n < sizeof c->hist) {
            int w = snprintf(c->hist + n, sizeof c->hist - n, "%s%llu:%u", n ? "," : "",
                             (unsigned long long)log_bucket_floor(b), k);
            n = w > 0 ? n + (size_t)w : n;
        }
    }
}

void pa_handler_add_counts(unsigned long unreadable, unsigned long truncated) {
    if (unreadable)
        atomic_fetch_add_explicit(&n_unreadable, unreadable, memory_order_relaxed);
    if (truncated)
        atomic_fetch_add_explicit(&n_truncated, truncated, memory_order_relaxed);
}

void pa_handler_add_state(struct pa_thread_ctl *c, unsigned state, uint64_t weight) {
    if (!(state & PA_THREAD_PYTHON))
        return;
    const int which[PA_COUNT_N] = {
        [PA_COUNT_HELD] = (state & PA_THREAD_GIL) != 0,
        [PA_COUNT_RELEASED] = !(state & PA_THREAD_GIL),
        [PA_COUNT_GIL_WAIT] = (state & PA_THREAD_GIL_WAIT) != 0,
        [PA_COUNT_HANDLING] = (state & PA_THREAD_EXCEPTION) != 0,
        [PA_COUNT_RAISING] = (state & PA_THREAD_RAISING) != 0,
    };
    for (int k = 0; k < PA_COUNT_N; k++) {
        if (!which[k])
            continue;
        atomic_fetch_add_explicit(&n_state[k], weight, memory_order_relaxed);
        if (c)
            atomic_fetch_add_explicit(&c->states[k], weight, memory_order_relaxed);
    }
}

void pa_handler_fork_child(void) {
    atomic_store(&n_signals, 0);
    for (int k = 0; k < PA_COUNT_N; k++)
        atomic_store(&n_state[k], 0);
    atomic_store(&n_unreadable, 0);
    atomic_store(&n_truncated, 0);
    atomic_store(&n_foreign, 0);
    for (int i = 0; i < HIST_N; i++)
        atomic_store(&hist[i], 0);
    for (int i = 0; i < LOG_N; i++)
        atomic_store(&loghist[i], 0);
}

/* ---- weights ------------------------------------------------------------------------------- */

/* Perf-event weights (sample_weight): this thread's CPU clock at its last sample and the part
 * of a period carried over (pa_ctl_cpu_last, pa_ctl_cpu_rest: timerctl.c reads them when the
 * thread hands its time over), the perf event that gave the last sample its count then, and
 * where that event's ring was. */
#define tls_event (pa_tls.event)
#define tls_event_count (pa_tls.event_count)
#define tls_ring (pa_tls.ring)
/* The frame of the sample this thread is taking (on_sigprof's), 0 when none; that sample's
 * weight until it is counted; and the weight the thread's next sample carries: the POSIX
 * timer's periods of our signals that came during a sample, and the weight of a sample left
 * unfinished (on_sigprof). */
#define tls_sampling (pa_tls.sampling)
#define tls_pending (pa_tls.pending)
#define tls_carry (pa_tls.carry)

/* The thread's first sample stands for its CPU time from now on: from its registration, or
 * from the fork in a child, whose clock restarts at 0 while pa_ctl_cpu_last still holds the
 * parent's reading. Without this the first sample stood for one period, or for the child's
 * time less the parent's, and a child that spends its first CPU in the kernel (page faults
 * after fork, a large read), where a perf event raises no signal, lost all of it. */
void pa_handler_weigh_from_now(void) {
    uint64_t now = pa_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    pa_ctl_cpu_last = now ? now : 1; /* 0 means "no reading" */
    pa_ctl_cpu_rest = 0;
    tls_event = 0; /* the next sample reads the clock */
    tls_ring = NULL;
}

#define tls_stack_low (pa_tls.stack_low)
#define tls_stack_size (pa_tls.stack_size)

void pa_handler_set_stack(uintptr_t low, size_t size) {
    tls_stack_low = low;
    tls_stack_size = size;
}

/* The CPU time this thread used since its last sample, by its perf event's count: the count
 * at the latest overflow, from the event's ring (no system call). Only while the event is the
 * one that gave the last sample its count: an event ends whenever the thread blocks SIGPROF
 * through the library (timers.h), and CPU time between two events is on no event's count.
 * Then, and whenever the ring cannot be read, the thread's CPU clock (a system call) gives it.
 * pa_ctl_cpu_last moves with the count, so a later clock reading takes over where it stopped;
 * both are task clocks of the same thread, counted in and out at the same switches.
 *
 * The ring is looked for where the last sample found it (tls_ring): the thread's control
 * block, where the registry keeps it, is a cache line that nothing else in the handler
 * touches, a cold miss per sample. Ending an event unmaps its ring and a new one often lands
 * at the same address; either way the record's id, which the kernel never reuses, is not the
 * last sample's, and the control block is asked again. */
static uint64_t cpu_used(void) {
    uint64_t event = 0, count = 0;
    int same = pa_timer_perf_count(tls_ring, &event, &count) && event == tls_event;
    if (!same) {
        event = count = 0;
        tls_ring = pa_ctl_perf_ring();
        same = pa_timer_perf_count(tls_ring, &event, &count) && event == tls_event;
    }
    if (same && count >= tls_event_count) {
        uint64_t ran = count - tls_event_count;
        tls_event_count = count;
        pa_ctl_cpu_last += ran;
        return ran;
    }
    /* The first sample after the thread blocked SIGPROF (its event ended then, so it comes
     * here): the tick thread counted its time up to the mark it hands back, and the carried
     * part of a period went with it (timerctl.h, counted_to). */
    uint64_t mark = pa_ctl_take_back(pa_ctl_self);
    if (mark != PA_CTL_OWN) {
        pa_ctl_cpu_last = mark;
        pa_ctl_cpu_rest = 0;
    }
    uint64_t now = pa_clock_ns(CLOCK_THREAD_CPUTIME_ID), last = pa_ctl_cpu_last;
    tls_event = event;
    tls_event_count = count;
    pa_ctl_cpu_last = now;
    /* The clock is read in the handler, the count was taken at the overflow: the event's next
     * sample also counts what ran in between (the signal's delivery and this handler, or
     * more if the signal waited while the thread ran in the kernel), and the next clock
     * reading takes it back. A sample may take that from its neighbour; the samples' sum is
     * the clock's. */
    return now > last ? now - last : 0;
}

/* How many periods of this thread's CPU time the sample stands for. A POSIX timer's delayed
 * signal carries the periods that expired meanwhile (si_overrun). A perf event raises signals
 * in user time only (timers.c: a signal raised in the kernel would interrupt a system call),
 * and signals that wait while SIGPROF is blocked or pending merge into one; its count covers
 * all the thread's CPU time, kernel time included, and gives the weight (cpu_used): what the
 * thread used since its last sample, in whole periods, the rest carried to the next. 0: not
 * a whole period yet. */
static uint64_t sample_weight(const siginfo_t *si) {
    uint64_t w;
    if (si->si_code == SI_TIMER) {
        /* A POSIX timer stops while the thread blocks SIGPROF and counts from its restart: the
         * tick thread's time ends where this one's begins. */
        pa_ctl_take_back(pa_ctl_self);
        w = 1 + (uint64_t)(si->si_overrun > 0 ? si->si_overrun : 0);
    } else if (pa_ctl_cpu_last == 0) { /* a thread never registered */
        pa_ctl_cpu_last = pa_clock_ns(CLOCK_THREAD_CPUTIME_ID);
        pa_ctl_cpu_rest = 0;
        tls_event = 0;
        w = 1;
    } else {
        uint64_t period = 1000000000ULL / cfg.rate;
        uint64_t used = cpu_used() + pa_ctl_cpu_rest;
        w = used / period;
        pa_ctl_cpu_rest = used % period;
    }
    w += tls_carry; /* what earlier signals could not count (on_sigprof) */
    tls_carry = 0;
    return w > 1000 ? 1000 : w;
}

/* ---- the handler --------------------------------------------------------------------------- */

void pa_handler_count(uint32_t serial, const struct pa_frame *frames, uint32_t depth,
                      uint64_t weight) {
    struct pa_table *t = pa_tables_enter(tables);
    int slot = pa_table_add(t, serial, frames, depth, weight);
    if (slot >= 0 && cfg.bucket_ms) {
        uint64_t b = pa_clock_ns(CLOCK_REALTIME) / 1000000u / cfg.bucket_ms;
        /* A clock set back before the start counts in the first bucket. */
        pa_table_add_time(t, (uint32_t)slot, b > time_base ? (uint32_t)(b - time_base) : 0, weight);
    }
    pa_tables_leave(t);
    tls_pending = 0; /* counted: nothing to carry if the sample is left now */
}

/* Stack a sample needs below take_sample's frame when it runs on the program's alternate
 * signal stack (stack_room), measured with tests/harmless/cases/small_signal_stack.py as bytes
 * of a 64 KiB alternate stack used, the interrupted handler's 3,008 included: CPU mode 10,296
 * (the frame buffer at the default depth, the walk, the count and the kernel's ~3 KB signal
 * frame), native frames 22,744 (libunwind and the splice's buffers). SMALL_STACK_WALK is
 * what the walk needs besides its frame buffer, with room for a guarded read's fault (another
 * kernel frame); SMALL_STACK_COUNT a one-frame count; NATIVE_STACK native frames, with a
 * margin since libunwind's use varies with the code it reads. */
enum { SMALL_STACK_WALK = 8 * 1024, SMALL_STACK_COUNT = 2 * 1024, NATIVE_STACK = 48 * 1024 };
enum { MIN_FRAMES = 16 };

/* Native mode: the C stack spliced with the Python frames, back into frames[]. A function of
 * its own (never inlined) so that its buffers take stack space only when native frames are
 * on: the handler runs on whatever thread was interrupted, small stacks included. */
static __attribute__((noinline)) int splice_native(void *uc, struct pa_frame *frames, int depth) {
    struct pa_frame mixed[PA_MAX_DEPTH_LIMIT];
    uintptr_t ips[PA_NATIVE_MAX_FRAMES];
    int nips = pa_native_backtrace(uc, ips, PA_NATIVE_MAX_FRAMES);
    int n = pa_native_interleave(ips, nips, frames, depth, mixed, (int)cfg.max_depth);
    memcpy(frames, mixed, (size_t)n * sizeof *frames);
    return n;
}

/* A CPU sample while the interpreter cannot be walked: before it is initialized (<startup>),
 * or once it is finalizing or finalized (<shutdown>), so that the profile's total is the
 * process's CPU time. The interval between initialization and the layout's verdict (the
 * first handlers after it) is neither, and is not counted. No frame is read. CPU mode only
 * (wall and GIL modes keep to the interpreter's own life). */
static _Atomic int seen_ready; /* the interpreter was walkable once in this process */

uint32_t pa_handler_phase(int ready) {
    if (ready) {
        atomic_store_explicit(&seen_ready, 1, memory_order_relaxed);
        return 0;
    }
    if (cfg.mode != PA_WALK_CPU)
        return 0;
    int up = pa_py_initialized();
    return !atomic_load_explicit(&seen_ready, memory_order_relaxed)
               ? (up ? 0 : PA_SYN_STARTUP)
               : (!up || pa_py_finalizing(&py) ? PA_SYN_SHUTDOWN : 0);
}

static void count_outside_python(const siginfo_t *si) {
    uint32_t phase = pa_handler_phase(0);
    uint64_t weight = phase ? sample_weight(si) : 0;
    if (!weight)
        return;
    struct pa_frame f;
    memset(&f, 0, sizeof f);
    f.id = (uint32_t)phase;
    pa_handler_count(pa_handler_serial, &f, 1, weight);
}

/* The walk and the count, with a frame buffer of n (n <= PA_MAX_DEPTH_LIMIT; with native
 * frames n is PA_MAX_DEPTH_LIMIT). A function of its own so that the buffer is only on the
 * stack once stack_room said there is room for it. */
static __attribute__((noinline)) void walk_and_count(void *uc, uint64_t weight, uint64_t t0,
                                                     int native, int n) {
    struct pa_frame frames[n];
    struct pa_walk_counts counts = {0, 0, 0};
    /* With native frames the walker's output is raw material (markers included), bounded by
     * the buffer; the depth limit applies to the interleaved stack. */
    int flags =
        cfg.mode | (native ? PA_WALK_MARK_ENTRIES : 0) | (cfg.opcodes ? PA_WALK_OPCODES : 0);
    int depth = pa_walk_this_thread(&py, frames, n, &counts, flags, uc);
    if (depth == 0) { /* not a sample of this mode (no Python thread, not the GIL holder) */
        hist_add(pa_mono_ns() - t0);
        return;
    }
    if (native)
        depth = splice_native(uc, frames, depth);
    pa_handler_count(pa_handler_serial, frames, (uint32_t)depth, weight);
    pa_handler_add_counts(counts.unreadable, counts.truncated);
    pa_handler_add_state(pa_ctl_self, counts.state, weight);
    hist_add(pa_mono_ns() - t0);
}

/* The stack left below this frame. On the program's alternate signal stack: faulthandler
 * gives the main thread one of a few tens of KiB from malloc, and CPython installs its
 * handlers with SA_ONSTACK; a SIGPROF that comes while such a handler runs is delivered on that
 * stack too (the kernel stays on it once there, whatever our flags), and a walk that needs
 * more than is left writes below it, into whatever malloc put there (docs/harmless.md, class
 * 15). The kernel saves the thread's alternate stack (place and size) in uc_stack; whether this
 * frame lies on it says where the handler runs (its SS_ONSTACK flag is not set there, measured
 * on Linux 6.18, even when the interrupted code ran on that stack). On the thread's own stack:
 * its low end as the thread registered it, since a program may give its threads small stacks
 * (threading.stack_size) and run C code deep in them; past that end lies the guard page
 * (class 16). SIZE_MAX when neither is known (the main thread's own stack, or a stack the
 * program switched to). */
static size_t stack_room(const void *uc) {
    const stack_t *ss = &((const ucontext_t *)uc)->uc_stack;
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    if (!(ss->ss_flags & SS_DISABLE) && ss->ss_size != 0) {
        uintptr_t lo = (uintptr_t)ss->ss_sp;
        if (here >= lo && here - lo <= ss->ss_size)
            return here - lo;
    }
    uintptr_t low = tls_stack_low;
    if (here < low || here - low >= tls_stack_size)
        return SIZE_MAX; /* unknown, or a stack of the program's own (makecontext, a coroutine) */
    return here - low;
}

static void take_sample(int sig, siginfo_t *si, void *uc) {
    if (!pa_timer_is_ours(si)) {
        atomic_fetch_add_explicit(&n_foreign, 1, memory_order_relaxed);
        pa_chain(sig, si, uc, &app_prof);
        return;
    }
    if (!atomic_load_explicit(&pa_handler_running, memory_order_acquire))
        return;
    atomic_fetch_add_explicit(&n_signals, 1, memory_order_relaxed);
    if (!pa_py_ready(&py)) {
        count_outside_python(si);
        return;
    }
    pa_handler_phase(1);
    uint64_t t0 = pa_mono_ns();
    uint64_t weight = sample_weight(si);
    tls_pending = weight; /* until counted: on_sigprof clears it */
    if (weight == 0) {
        hist_add(pa_mono_ns() - t0);
        return;
    }
    size_t room = stack_room(uc);
    if (room < SMALL_STACK_WALK + MIN_FRAMES * sizeof(struct pa_frame)) {
        /* Too little stack even for a short walk: the sample is counted as a stack that
         * could not be read, so that the CPU time is still there. */
        if (room >= SMALL_STACK_COUNT) {
            struct pa_frame f = {PA_SYN_TRUNCATED, 0, 0};
            pa_handler_count(pa_handler_serial, &f, 1, weight);
        }
        pa_handler_add_counts(0, 1);
        hist_add(pa_mono_ns() - t0);
        return;
    }
    int native = cfg.native && room >= NATIVE_STACK;
    size_t fit = (room - SMALL_STACK_WALK) / sizeof(struct pa_frame);
    int limit = native ? PA_MAX_DEPTH_LIMIT : (int)cfg.max_depth;
    walk_and_count(uc, weight, t0, native, fit < (size_t)limit ? (int)fit : limit);
}

/* How far below a sample's frame a signal nested in that sample can interrupt: the sample's
 * own frames (tens of KiB with native frames) and a program's handler nested in it. */
#define SAMPLE_REACH ((uintptr_t)1 << 20)

/* The stack pointer of the code the signal whose context is uc interrupted. */
static uintptr_t interrupted_sp(const void *uc) {
#if defined(__x86_64__)
    return (uintptr_t)((const ucontext_t *)uc)->uc_mcontext.gregs[REG_RSP];
#elif defined(__aarch64__)
    return (uintptr_t)((const ucontext_t *)uc)->uc_mcontext.sp;
#else
    return (uintptr_t)uc; /* the signal frame lies just below it */
#endif
}

/* Did the signal whose context is uc interrupt the sample this thread is taking? Then it
 * interrupted code running below that sample's frame (on_sigprof's, in tls_sampling), on the
 * same stack. A sample that a program's handler nested in it left by siglongjmp (as C
 * libraries with alarm() timeouts do) never clears tls_sampling: the thread then runs above
 * that frame again (the sample's frame lies below the signal frame the kernel pushed below
 * the interrupted code), so its next signal is not taken for a nested one, and the stale
 * frame is forgotten (on_sigprof). */
static int nested_in_sample(const void *uc) {
    uintptr_t m = tls_sampling, sp = interrupted_sp(uc);
    return m != 0 && sp < m && m - sp < SAMPLE_REACH;
}

static void on_sigprof(int sig, siginfo_t *si, void *uc) {
    /* Installed with SA_NODEFER and an empty sa_mask, and never changing the mask itself: the
     * mask in force while it runs is the interrupted program's, so a signal of the program's
     * that comes in at any instruction of it is delivered as without us (with the mask the
     * kernel builds from the program's, never our SIGPROF blocked), with no system call per
     * sample. A signal of our timer that comes while this thread takes a sample is not a
     * sample of its own: its time counts in the thread's next sample (a perf event's weight is
     * the CPU time since the last one; a POSIX timer's periods are carried, tls_carry). One in
     * the few instructions before tls_sampling is set, or after it is restored, is a sample of
     * its own, as it should be. The program's own SIGPROF is chained to at any depth. A sample
     * left unfinished (a program's handler nested in it left by siglongjmp) is found at the
     * thread's next signal (nested_in_sample): its weight, if not yet counted, counts there. */
    int saved = errno;
    int nested = nested_in_sample(uc);
    if (nested && pa_timer_is_ours(si)) {
        atomic_fetch_add_explicit(&n_signals, 1, memory_order_relaxed);
        if (si->si_code == SI_TIMER)
            tls_carry += 1 + (uint64_t)(si->si_overrun > 0 ? si->si_overrun : 0);
        errno = saved;
        return;
    }
    if (stack_room(uc) < SMALL_STACK_COUNT && pa_timer_is_ours(si) &&
        atomic_load_explicit(&pa_handler_running, memory_order_acquire)) {
        /* Too little stack left even for a one-frame count (a thread's small stack near its
         * end, harmless.md class 16): counted as unreadable here, before anything else, so
         * that this handler is as short as it can be where another signal's frame pushed
         * below it would not fit (take_sample counts it the same way). */
        atomic_fetch_add_explicit(&n_signals, 1, memory_order_relaxed);
        pa_handler_add_counts(0, 1);
        errno = saved;
        return;
    }
    uintptr_t outer = tls_sampling;
    uint64_t outer_pending = tls_pending;
    if (!nested && outer) {
        /* That sample was left unfinished: its frame is forgotten, its weight carried. */
        tls_carry += outer_pending;
        outer = 0;
        outer_pending = 0;
    }
    pa_handler_depth++;
    tls_sampling = (uintptr_t)__builtin_frame_address(0);
    tls_pending = 0;
    atomic_signal_fence(memory_order_seq_cst);
    take_sample(sig, si, uc);
    atomic_signal_fence(memory_order_seq_cst);
    tls_pending = outer_pending;
    tls_sampling = outer;
    pa_handler_depth--;
    errno = saved;
}
