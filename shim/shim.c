/* shim.c: the LD_PRELOAD entry of libpyagent.so.
 *
 * The constructor decides whether this process is CPython (by its exported symbols) and
 * otherwise does nothing at all: LD_PRELOAD reaches every child a program starts, and a
 * shell, a compiler or git must not notice us. In CPython it reads the configuration and
 * starts the agent thread, which waits for the interpreter to be initialized before the
 * first timer is armed.
 *
 * Interposed functions (pthread_create, fork via pthread_atfork, sigaction, signal, _exit,
 * _Exit) are thin: when the agent is inactive they go straight to the C library. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../agent/frames.h"
#include "../agent/guard.h"
#include "../agent/native.h"
#include "../agent/pyversions.h"
#include "../agent/sampler.h"
#include "../uploader/symbols.h"
#include "../uploader/uploader.h"
#include "config.h"
#include "log.h"
#include "names.h"
#include "realfns.h"

#define PA_EXPORT __attribute__((visibility("default")))

static struct pa_config cfg;
static struct pa_python py;
static _Atomic int active;   /* this process is CPython and the agent is on */
static pid_t agent_pid;      /* the process the agent state belongs to */
static _Atomic int finished; /* final flush done */

/* The agent thread's control block. */
static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ctl_cond = PTHREAD_COND_INITIALIZER;
static int ctl_stop, ctl_done;
/* Serializes drains and file writes (agent thread, exit, fork). */
static pthread_mutex_t flush_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the C library's own functions --------------------------------------------------------- */

static int (*real_sigaction)(int, const struct sigaction *, struct sigaction *);
static __sighandler_t (*real_signal)(int, __sighandler_t);
static int (*real_pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
static void (*real__exit)(int);
static void (*real__Exit)(int);

static void *next_sym(const char *name) {
    return dlsym(RTLD_NEXT, name);
}

int pa_real_sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (!real_sigaction)
        *(void **)&real_sigaction = next_sym("sigaction");
    return real_sigaction(sig, act, old);
}

int pa_real_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
                           void *arg) {
    if (!real_pthread_create)
        *(void **)&real_pthread_create = next_sym("pthread_create");
    return real_pthread_create(t, attr, fn, arg);
}

void pa_real_exit(int status) {
    if (!real__exit)
        *(void **)&real__exit = next_sym("_exit");
    real__exit(status);
    __builtin_unreachable(); /* the C library's _exit does not return */
}

/* ---- the agent thread ---------------------------------------------------------------------- */

static int ctl_wait(long ms) { /* returns 1 when asked to stop */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&ctl_lock);
    while (!ctl_stop && pthread_cond_timedwait(&ctl_cond, &ctl_lock, &until) == 0)
        ;
    int stop = ctl_stop;
    pthread_mutex_unlock(&ctl_lock);
    return stop;
}

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Drains, writes the local file, uploads. At exit, everything is bounded by
 * PYAGENT_EXIT_TIMEOUT_MS: what cannot be sent by then stays in the spool. */
static void flush(int final) {
    pthread_mutex_lock(&flush_lock);
    pa_uploader_drain();
    pa_uploader_upload(final ? mono_now() + cfg.exit_timeout_ms / 1000.0 : 0, final);
    pa_uploader_write_local(final);
    pthread_mutex_unlock(&flush_lock);
}

static void *agent_main(void *arg) {
    (void)arg;
    /* Sampling starts once the interpreter is initialized: promptly for `python app.py`
     * (5 ms), cheaply for a program that embeds Python and may never start it (up to 1 s). */
    for (long wait = 5; !pa_py_initialized(); wait = wait < 1000 ? wait * 2 : 1000)
        if (ctl_wait(wait))
            goto out;
    /* The interpreter may be mid-way through re-initializing itself: after a fork its main
     * thread deletes and re-creates the GIL-state TSS key and the thread list right after
     * fork() returns, while this thread already runs. Only a layout that stays wrong for a
     * second is a verdict. */
    char err[256];
    for (int tries = 0; pa_py_verify(&py, err, sizeof err) != 0; tries++) {
        if (tries == 50) {
            pa_log(PA_LOG_ERROR, "%s; not profiling", err);
            atomic_store(&active, 0);
            goto out;
        }
        if (ctl_wait(20))
            goto out;
    }
    if (cfg.native) {
        /* Normal context, before the first signal: find the loader's lock and the
         * evaluation loop, prime libunwind. */
        uintptr_t lo;
        size_t size;
        if (pa_native_init() != 0) {
            pa_log(PA_LOG_ERROR, "PYAGENT_NATIVE=1: cannot set up native unwinding safely here "
                                 "(loader lock or evaluation loop not found); Python frames only");
            pa_sampler_set_native(0);
        } else if (pa_symbols_find("_PyEval_EvalFrameDefault.cold", &lo, &size) == 0) {
            pa_native_add_eval_range(lo, lo + size); /* gcc splits the loop's cold path off */
        }
    }
    if (pa_sampler_start(err, sizeof err) != 0) {
        pa_log(PA_LOG_ERROR, "%s; not profiling", err);
        atomic_store(&active, 0);
        goto out;
    }
    pa_names_start();
    struct pa_sampler_stats st;
    pa_sampler_get_stats(&st);
    static const char *const what[] = {"CPU time", "wall-clock time", "GIL-holding time"};
    pa_log(PA_LOG_INFO, "profiling Python %s at %u Hz of %s (%s)%s%s", py.version, cfg.rate,
           what[cfg.mode], st.timer, pa_uploader_output_path()[0] ? " into " : "",
           pa_uploader_output_path());
    for (;;) {
        /* Wake often enough to notice finalization promptly; flush every interval. */
        long waited = 0;
        int stop = 0;
        while (waited < (long)cfg.interval_s * 1000 && !(stop = ctl_wait(100))) {
            waited += 100;
            pa_sampler_reconcile();
            if (pa_py_finalizing(&py) || !pa_py_initialized()) {
                pa_sampler_stop(); /* sampling ends before the interpreter is torn down */
                break;
            }
        }
        if (stop)
            break;
        flush(0);
    }
out:
    pthread_mutex_lock(&ctl_lock);
    ctl_done = 1;
    pthread_cond_broadcast(&ctl_cond);
    pthread_mutex_unlock(&ctl_lock);
    return NULL;
}

int pa_spawn_agent_thread(void *(*fn)(void *)) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int r = pa_real_pthread_create(&t, &attr, fn, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return r;
}

static int start_agent_thread(void) {
    ctl_stop = ctl_done = 0;
    return pa_spawn_agent_thread(agent_main);
}

/* Stops sampling, waits (bounded) for the agent thread, writes the final profile. */
static void final_flush(void) {
    if (!atomic_load(&active) || getpid() != agent_pid)
        return;
    if (atomic_exchange(&finished, 1))
        return;
    pa_sampler_stop();
    pa_names_stop();
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    pthread_mutex_lock(&ctl_lock);
    ctl_stop = 1;
    pthread_cond_broadcast(&ctl_cond);
    while (!ctl_done && pthread_cond_timedwait(&ctl_cond, &ctl_lock, &until) == 0)
        ;
    pthread_mutex_unlock(&ctl_lock);
    flush(1);
    pa_guard_uninstall();
}

/* ---- fork ---------------------------------------------------------------------------------- */

static void fork_prepare(void) {
    if (!atomic_load(&active))
        return;
    pthread_mutex_lock(&flush_lock);
    pa_sampler_fork_prepare();
}

static void fork_parent(void) {
    if (!atomic_load(&active))
        return;
    pa_sampler_fork_parent();
    pthread_mutex_unlock(&flush_lock);
}

static void fork_child(void) {
    if (!atomic_load(&active))
        return;
    /* Only this thread survived; our locks are re-made, not unlocked by a dead owner. */
    pthread_mutex_init(&flush_lock, NULL);
    pthread_mutex_init(&ctl_lock, NULL);
    pthread_cond_init(&ctl_cond, NULL);
    agent_pid = getpid();
    atomic_store(&finished, 0);
    pa_sampler_fork_child();
    pa_uploader_fork_child();
    pa_names_fork_child();
    if (start_agent_thread() != 0)
        atomic_store(&active, 0);
}

/* ---- load and unload ----------------------------------------------------------------------- */

__attribute__((constructor)) static void pa_load(void) {
    if (!pa_py_present())
        return; /* not CPython: nothing at all */
    pa_config_read(&cfg);
    if (!cfg.enabled)
        return;
    char err[256];
    if (pa_py_detect(&py, err, sizeof err) != 0) {
        pa_log(PA_LOG_ERROR, "%s; not profiling", err);
        return;
    }
    struct pa_sampler_config sc = {cfg.rate, cfg.max_depth, cfg.timer_want, cfg.mode, cfg.native};
#ifdef PYAGENT_FAULT_INJECTION
    pa_walk_inject_every = cfg.fault_every;
#endif
    if (pa_sampler_init(&py, &sc) != 0 || pa_uploader_init(&cfg, &py) != 0) {
        pa_log(PA_LOG_ERROR, "cannot allocate the sampler's tables; not profiling");
        return;
    }
    agent_pid = getpid();
    pa_sampler_thread_begin(); /* the main thread */
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atomic_store(&active, 1);
    if (start_agent_thread() != 0) {
        atomic_store(&active, 0);
        pa_log(PA_LOG_ERROR, "cannot start the agent thread; not profiling");
    }
}

__attribute__((destructor)) static void pa_unload(void) {
    final_flush();
}

/* ---- interposed functions ------------------------------------------------------------------ */

struct start {
    void *(*fn)(void *);
    void *arg;
};

static void *trampoline(void *p) {
    struct start s = *(struct start *)p;
    free(p);
    pa_sampler_thread_begin();
    pa_names_wake();
    return s.fn(s.arg);
}

PA_EXPORT int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
                             void *arg) {
    if (!atomic_load(&active))
        return pa_real_pthread_create(t, attr, fn, arg);
    struct start *s = malloc(sizeof *s);
    if (!s)
        return pa_real_pthread_create(t, attr, fn, arg);
    s->fn = fn;
    s->arg = arg;
    int r = pa_real_pthread_create(t, attr, trampoline, s);
    if (r != 0)
        free(s);
    return r;
}

PA_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (atomic_load(&active) &&
        (pa_sampler_app_sigaction(sig, act, old) || pa_guard_app_sigaction(sig, act, old)))
        return 0;
    return pa_real_sigaction(sig, act, old);
}

PA_EXPORT __sighandler_t signal(int sig, __sighandler_t handler) {
    if (atomic_load(&active) && (sig == SIGPROF || sig == SIGSEGV || sig == SIGBUS)) {
        struct sigaction sa, old;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = handler;
        sa.sa_flags = SA_RESTART; /* glibc's signal() has BSD semantics */
        sigemptyset(&sa.sa_mask);
        if (sigaction(sig, &sa, &old) != 0)
            return SIG_ERR;
        return old.sa_handler;
    }
    if (!real_signal)
        *(void **)&real_signal = next_sym("signal");
    return real_signal(sig, handler);
}

/* os._exit() skips atexit and destructors: a multiprocessing child ends this way, and its
 * profile must still be written. */
PA_EXPORT void _exit(int status) {
    final_flush();
    pa_real_exit(status);
}

PA_EXPORT void _Exit(int status) {
    final_flush();
    if (!real__Exit)
        *(void **)&real__Exit = next_sym("_Exit");
    real__Exit(status);
    __builtin_unreachable();
}
