/* registry.c: the program's threads and their timers.
 *
 * Normal context: everything here runs under pa_reg_lock, which no signal handler takes.
 * Every thread the program starts registers itself (pa_sampler_thread_begin, from the shim's
 * pthread_create trampoline; the main thread from the constructor) and gets its own CPU-time
 * timer, delivered to that very thread, so the handler (handler.c) walks the stack of the
 * thread that spent the time. A thread's own control of its timer while it changes its signal
 * mask is signal-side code (timerctl.c); starting, stopping, exec and fork are control.c. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "handler.h"
#include "registry.h"
#include "sampler.h"

pthread_mutex_t pa_reg_lock = PTHREAD_MUTEX_INITIALIZER;
struct pa_thread_rec *pa_reg_recs;
size_t pa_reg_n;
int pa_reg_wanted;
int pa_reg_timer_want;
_Atomic unsigned pa_reg_armed_kinds;

static size_t cap_recs;
static uint32_t next_serial = 1;
static uint64_t drains; /* pa_threads_prune calls */
static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

struct pa_thread_rec *pa_reg_by_serial(uint32_t serial) {
    size_t lo = 0, hi = pa_reg_n; /* serials are appended in increasing order */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (pa_reg_recs[mid].serial < serial)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < pa_reg_n && pa_reg_recs[lo].serial == serial ? &pa_reg_recs[lo] : NULL;
}

size_t pa_reg_alive(void) {
    size_t alive = 0;
    for (size_t i = 0; i < pa_reg_n; i++)
        alive += pa_reg_recs[i].alive;
    return alive;
}

int pa_reg_timer_kind(const struct pa_thread_rec *r) {
    return r->ctl && atomic_load(&r->ctl->armed) ? r->ctl->timer.kind : PA_TIMER_NONE;
}

/* ---- timers ------------------------------------------------------------------------------- */

int pa_reg_arm(struct pa_thread_rec *r) {
    struct pa_thread_ctl *c = r->ctl;
    if (!c || atomic_load(&c->armed))
        return c ? 0 : -1;
    const struct pa_handler_config *cfg = pa_handler_config();
    /* Wall mode too: a CPU-time timer samples the thread while it runs; the wall tick
     * thread counts its time off a CPU without signalling it (wall.c). */
    int kind = pa_timer_arm(&c->timer, r->tid, r->pthread, cfg->rate, pa_reg_timer_want,
                            !atomic_load(&c->blocked));
    if (kind == PA_TIMER_NONE)
        return -1;
    atomic_store(&c->armed, 1);
    pa_ctl_apply(c); /* the thread may have blocked SIGPROF meanwhile */
    atomic_fetch_or(&pa_reg_armed_kinds, 1u << kind);
    if (cfg->mode == PA_WALK_WALL) { /* wall.c counts its time off a CPU from now */
        struct timespec ts;
        r->has_clock = pthread_getcpuclockid(r->pthread, &r->cpu_clock) == 0 &&
                       clock_gettime(r->cpu_clock, &ts) == 0;
        r->last_cpu_ns = r->has_clock ? pa_ts_ns(&ts) : 0;
        r->off_ns = 0;
    }
    return 0;
}

void pa_reg_disarm(struct pa_thread_rec *r) {
    struct pa_thread_ctl *c = r->ctl;
    if (!c || !atomic_load(&c->armed))
        return;
    atomic_store(&c->armed, 0);
    /* Bounded: the user may be this very thread, interrupted by the signal that runs us. */
    for (int spins = 0; atomic_load(&c->users) && spins < 1000; spins++)
        sched_yield();
    pa_timer_disarm(&c->timer);
}

/* ---- the registry ------------------------------------------------------------------------- */

static void on_thread_exit(void *arg) {
    (void)arg;
    uint32_t serial = pa_handler_serial;
    pa_handler_serial = 0;
    pthread_mutex_lock(&pa_reg_lock);
    struct pa_thread_rec *r = pa_reg_by_serial(serial);
    pa_ctl_self = NULL;
    if (r) {
        pa_reg_disarm(r);
        r->alive = 0;
        r->died_at_drain = drains;
    }
    pthread_mutex_unlock(&pa_reg_lock);
}

static void make_key(void) {
    pthread_key_create(&exit_key, on_thread_exit);
}

/* The calling thread's own stack, for the handler (pa_handler_set_stack).
 * Not for the main thread: glibc reads /proc/self/maps for it (a descriptor the program could
 * see), and its stack grows on demand up to the rlimit. */
static void note_stack_low(void) {
    if (syscall(SYS_gettid) == getpid())
        return;
    pthread_attr_t a;
    void *addr = NULL;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &a) != 0)
        return;
    if (pthread_attr_getstack(&a, &addr, &size) == 0 && size)
        pa_handler_set_stack((uintptr_t)addr, size);
    pthread_attr_destroy(&a);
}

void pa_sampler_thread_begin(void) {
    pthread_once(&key_once, make_key);
    pa_handler_weigh_from_now();
    note_stack_low();
    pthread_mutex_lock(&pa_reg_lock);
    if (pa_reg_n == cap_recs) {
        size_t cap = cap_recs ? cap_recs * 2 : 64;
        struct pa_thread_rec *n = realloc(pa_reg_recs, cap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&pa_reg_lock);
            return; /* this thread goes unsampled; the program is unaffected */
        }
        pa_reg_recs = n;
        cap_recs = cap;
    }
    struct pa_thread_ctl *c = calloc(1, sizeof *c);
    if (!c) {
        pthread_mutex_unlock(&pa_reg_lock);
        return;
    }
    atomic_store(&c->blocked, pa_ctl_prof_blocked());
    pa_ctl_thread_start(c);
    struct pa_thread_rec *r = &pa_reg_recs[pa_reg_n++];
    memset(r, 0, sizeof *r);
    r->ctl = pa_ctl_self = c;
    r->serial = next_serial++;
    r->tid = (pid_t)syscall(SYS_gettid);
    r->pthread = pthread_self();
    r->has_clock = pthread_getcpuclockid(r->pthread, &r->cpu_clock) == 0;
    r->alive = 1;
    pa_handler_serial = r->serial;
    pa_walk_tid = r->tid;
    /* In wall mode a thread gets a timer once it has a Python thread state (reconcile). */
    if (atomic_load(&pa_handler_running) && pa_handler_config()->mode != PA_WALK_WALL &&
        pa_reg_arm(r) != 0)
        pa_log(PA_LOG_DEBUG, "cannot arm a timer for thread %d: %s", (int)r->tid, strerror(errno));
    pthread_mutex_unlock(&pa_reg_lock);
    pthread_setspecific(exit_key, (void *)1);
}

size_t pa_threads_list(struct pa_thread_info *out, size_t max) {
    pthread_mutex_lock(&pa_reg_lock);
    size_t n = pa_reg_n;
    for (size_t i = 0; i < n && i < max; i++) {
        out[i].serial = pa_reg_recs[i].serial;
        out[i].tid = pa_reg_recs[i].tid;
        out[i].pthread = (unsigned long)pa_reg_recs[i].pthread;
        out[i].alive = pa_reg_recs[i].alive;
        memcpy(out[i].name, pa_reg_recs[i].name, sizeof out[i].name);
    }
    pthread_mutex_unlock(&pa_reg_lock);
    return n;
}

void pa_threads_set_name(unsigned long pthread, const char *name) {
    pthread_mutex_lock(&pa_reg_lock);
    for (size_t i = 0; i < pa_reg_n; i++)
        if (pa_reg_recs[i].alive && (unsigned long)pa_reg_recs[i].pthread == pthread) {
            snprintf(pa_reg_recs[i].name, sizeof pa_reg_recs[i].name, "%s", name);
            break;
        }
    pthread_mutex_unlock(&pa_reg_lock);
}

/* The OS's name of thread tid, from /proc/self/task/TID/comm (empty on failure). */
static void os_thread_name(pid_t tid, char *buf, size_t len) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)tid);
    buf[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    buf[strcspn(buf, "\n")] = 0;
}

void pa_threads_name(uint32_t serial, char *buf, size_t len) {
    pthread_mutex_lock(&pa_reg_lock);
    struct pa_thread_rec *r = pa_reg_by_serial(serial);
    char name[64] = "";
    pid_t tid = 0;
    int alive = 0;
    if (r) {
        memcpy(name, r->name, sizeof name);
        tid = r->tid;
        alive = r->alive;
    }
    pthread_mutex_unlock(&pa_reg_lock);
    if (name[0]) {
        snprintf(buf, len, "%s", name);
        return;
    }
    /* Not a thread Python named: the OS name, unless it is only the program's name. */
    char comm[32] = "", self[32] = "";
    if (alive && tid != getpid()) {
        os_thread_name(tid, comm, sizeof comm);
        os_thread_name(getpid(), self, sizeof self);
    }
    if (comm[0] && strcmp(comm, self) != 0)
        snprintf(buf, len, "%s", comm);
    else if (tid == getpid())
        snprintf(buf, len, "MainThread");
    else if (tid)
        snprintf(buf, len, "tid %d", (int)tid);
    else
        snprintf(buf, len, "unknown thread");
}

size_t pa_threads_take_states(struct pa_thread_states *out, size_t max) {
    pthread_mutex_lock(&pa_reg_lock);
    size_t n = pa_reg_n;
    for (size_t i = 0; i < n && i < max; i++) {
        struct pa_thread_ctl *c = pa_reg_recs[i].ctl;
        out[i].serial = pa_reg_recs[i].serial;
        for (int k = 0; k < PA_COUNT_N; k++)
            out[i].n[k] = c ? atomic_exchange(&c->states[k], 0) : 0;
    }
    pthread_mutex_unlock(&pa_reg_lock);
    return n;
}

void pa_threads_prune(void) {
    pthread_mutex_lock(&pa_reg_lock);
    size_t w = 0;
    for (size_t i = 0; i < pa_reg_n; i++) {
        if (pa_reg_recs[i].alive || pa_reg_recs[i].died_at_drain >= drains)
            pa_reg_recs[w++] = pa_reg_recs[i];
        else
            free(pa_reg_recs[i].ctl);
    }
    pa_reg_n = w;
    drains++;
    pthread_mutex_unlock(&pa_reg_lock);
}

int pa_sampler_program_gone(void) {
    pthread_mutex_lock(&pa_reg_lock);
    int gone = pa_reg_n > 0 && pa_reg_alive() == 0;
    pthread_mutex_unlock(&pa_reg_lock);
    return gone;
}

void pa_reg_fork_child(void) {
    /* Timers are not inherited; only the forking thread exists. Its record is the one whose
     * control block it uses (pa_ctl_self), not the first with its pthread_t: a thread that
     * ended and is not yet pruned may have left the same handle (glibc reuses a dead thread's
     * descriptor), and keeping that one would free the control block this thread still uses. */
    size_t keep = 0;
    pthread_t self = pthread_self();
    for (size_t i = 0; i < pa_reg_n; i++) {
        struct pa_thread_ctl *c = pa_reg_recs[i].ctl;
        if (c) {
            if (atomic_load(&c->armed))
                pa_timer_forget(&c->timer);
            atomic_store(&c->armed, 0);
            atomic_store(&c->users, 0);
            for (int k = 0; k < PA_COUNT_N; k++) /* the parent's samples, not the child's */
                atomic_store(&c->states[k], 0);
        }
        if (!keep && c && c == pa_ctl_self) {
            struct pa_thread_rec mine = pa_reg_recs[i];
            pa_reg_recs[i] = pa_reg_recs[0];
            pa_reg_recs[0] = mine;
            pa_reg_recs[0].tid = pa_walk_tid = (pid_t)syscall(SYS_gettid);
            pa_reg_recs[0].has_clock =
                pthread_getcpuclockid(self, &pa_reg_recs[0].cpu_clock) == 0; /* by tid */
            keep = 1;
        }
    }
    for (size_t i = keep; i < pa_reg_n; i++)
        free(pa_reg_recs[i].ctl); /* the other threads do not exist here */
    pa_reg_n = keep;
}
