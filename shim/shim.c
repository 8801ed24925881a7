/* shim.c: the LD_PRELOAD entry of libpyagent.so.
 *
 * The constructor decides whether this process is CPython (by its exported symbols) and
 * otherwise does nothing at all: LD_PRELOAD reaches every child a program starts, and a
 * shell, a compiler or git must not notice us. In CPython it reads the configuration and
 * starts sampling on the main thread at once (the handler takes no sample until the
 * interpreter is initialized and its layout checked, pa_py_ready). No thread of ours exists
 * in a single-threaded program that writes a local file: the agent thread (periodic refresh,
 * wall mode's timers, uploads) starts with the program's second thread, or at once when
 * uploading; see docs/architecture.md, "Threads".
 *
 * Interposed functions (pthread_create, fork via pthread_atfork, _exit, _Exit; the signal
 * and exec functions in signals.c) are thin: when the agent is inactive they go straight to
 * the C library. */
#include <dlfcn.h>
#include <link.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../agent/chain.h"
#include "../agent/frames.h"
#include "../agent/guard.h"
#include "../agent/labels.h"
#include "../agent/native.h"
#include "../agent/pyversions.h"
#include "../agent/sampler.h"
#include "../base/bss.h"
#include "../base/clock.h"
#include "../base/config.h"
#include "../base/log.h"
#include "../base/realfns.h"
#include "../base/threads.h"
#include "../base/tls.h"
#include "../uploader/symbols.h"
#include "../uploader/uploader.h"
#include "dump.h"
#include "names.h"
#include "shim.h"

#define PA_EXPORT __attribute__((visibility("default")))

/* Page-aligned: its first page holds every number and the output path (config.h). */
static struct pa_config cfg __attribute__((aligned(4096))) PA_LARGE_BSS(shim_cfg);
static struct pa_python py;
static _Atomic int active;        /* this process is CPython and the agent is on */
static pid_t agent_pid;           /* the process the agent state belongs to */
static _Atomic int finished;      /* final flush done */
static _Atomic int agent_started; /* the agent thread was started in this process */
static _Atomic int threaded;      /* the program started a thread of its own */
static int forked;                /* this process is a fork child of the one that loaded us */

/* The agent thread's control block. */
static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ctl_cond = PTHREAD_COND_INITIALIZER;
static int ctl_stop;
/* Serializes drains and file writes (agent thread, exit, fork). */
static pthread_mutex_t flush_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the C library's own functions --------------------------------------------------------- */

const struct pa_next *pa_shim_next; /* the stub's (pa_core_attach) */

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

/* Drains, spools, writes the local file under flush_lock: memory and local disk only, so fork
 * and exit never wait long for it. Returns -1 when there is nothing to write: the first
 * handlers found the interpreter's layout wrong (said once, and sampling stops). */
static int save(int final) {
    pa_error err;
    if (pa_py_verdict(&py, &err) != 0) {
        pa_sampler_stop();
        pa_shim_set_owner(0);
        if (atomic_exchange(&active, 0))
            pa_log(PA_LOG_ERROR, "%s; not profiling", err.msg);
        return -1;
    }
    pthread_mutex_lock(&flush_lock);
    /* The final save is the last: the agent thread, which exit does not wait for, may come
     * here after it, and must not drain (again) or write. */
    int late = !final && atomic_load(&finished);
    if (!late) {
        pa_uploader_drain(final);
        pa_uploader_spool();
        pa_uploader_write_local(final);
    }
    pthread_mutex_unlock(&flush_lock);
    if (late)
        return -1;
    return 0;
}

/* Saves, then uploads with no lock of ours held. At exit the upload is bounded by
 * PYAGENT_EXIT_TIMEOUT_MS: what cannot be sent by then stays in the spool. The bound is the
 * whole exit's, so the upload stops a little earlier (5% of it, at most 50 ms), leaving time
 * for what follows it: spooling what was not sent and rewriting the local file, which took
 * 5 ms past the bound on a VM whose page faults cost 10-20 us. */
static void flush(int final) {
    double budget = cfg.exit_timeout_ms / 1000.0, reserve = budget / 20 < 0.05 ? budget / 20 : 0.05;
    double deadline = final ? mono_now() + budget - reserve : 0;
    if (save(final) == 0) {
        pa_uploader_send(deadline, final);
        /* The final upload may have had profiles refused: the header counts them too. */
        if (final) {
            pthread_mutex_lock(&flush_lock);
            pa_uploader_rewrite_local();
            pthread_mutex_unlock(&flush_lock);
        }
    }
}

/* Before exec (shim/signals.c): no destructor runs in a replaced image, so what was sampled is
 * written now, the local file and the spool (which the next process sends); no upload, which
 * would be network I/O on the program's thread. If exec fails, sampling goes on. Not in a
 * forked child: one that execs at once (subprocess's does, on 3.8 with fork) may still have
 * caught a sample, and would leave a profile of a process that never ran Python code of its
 * own; a forked child that runs Python for long and then execs loses its profile. */
void pa_shim_before_exec(void) {
    if (pa_shim_owner() && !forked && !atomic_load(&finished) && pa_uploader_has_samples())
        save(0);
}

/* ctl_wait, answering `pyagent dump` meanwhile (listener >= 0; shim/dump.c): a request is
 * served at once, in bounded time, and a stop is seen within ms. */
static int agent_wait(int listener, long ms) {
    if (listener < 0)
        return ctl_wait(ms);
    double until = mono_now() + (double)ms / 1000;
    for (;;) {
        double left = until - mono_now();
        struct pollfd p = {listener, POLLIN, 0};
        if (left > 0 && poll(&p, 1, (int)(left * 1000) + 1) > 0)
            pa_dump_serve(listener, py.version, cfg.mode);
        pthread_mutex_lock(&ctl_lock);
        int stop = ctl_stop;
        pthread_mutex_unlock(&ctl_lock);
        if (stop || mono_now() >= until)
            return stop;
    }
}

static void *agent_main(void *arg) {
    (void)arg;
    int seen_initialized = 0, torn_down = 0;
    /* Only in a descriptor table of its own: the program must never see the socket. */
    int listener = cfg.dump != PA_DUMP_OFF && pa_thread_private_files() ? pa_dump_listen() : -1;
    for (;;) {
        /* Wake often enough to notice finalization promptly; flush every interval. */
        long waited = 0;
        int stop = 0;
        while (waited < (long)cfg.interval_s * 1000 && !(stop = agent_wait(listener, 100)) &&
               !pa_sampler_program_gone()) {
            waited += 100;
            /* Sampling may have started before the interpreter (it waits for it in the
             * handler); once the interpreter is torn down the handler counts <shutdown>
             * without reading it, and nothing here reads its thread states any more. */
            int up = pa_py_initialized();
            seen_initialized |= up;
            int was = torn_down;
            torn_down |= pa_py_finalizing(&py) || (seen_initialized && !up);
            if (!torn_down) {
                pa_sampler_reconcile();
                pthread_mutex_lock(&flush_lock);
                pa_uploader_find_columns();
                pthread_mutex_unlock(&flush_lock);
            } else if (!was && cfg.mode != PA_WALK_CPU)
                pa_sampler_stop(); /* wall and GIL modes end with the interpreter */
        }
        if (stop || pa_sampler_program_gone())
            break; /* the final flush runs at exit (the destructor), as for any exit */
        flush(0);
    }
    if (listener >= 0)
        close(listener); /* `pyagent dump` now says the process does not answer */
    return NULL;
}

/* The agent thread, once per process, when it is needed: uploads, or a program with threads
 * of its own (the local file is then refreshed every interval, and wall mode's timers follow
 * the threads that run Python). A single-threaded program writing a local file has none. */
static void need_agent_thread(void) {
    if (atomic_exchange(&agent_started, 1))
        return;
    ctl_stop = 0;
    if (pa_agent_thread_spawn(agent_main, PA_THREAD_PRIVATE_FILES) != 0)
        pa_log(PA_LOG_WARN, "cannot start the agent thread; the profile is written at exit only");
}

/* The program starts a thread of its own (from pthread_create, before it does): the agent
 * thread and the namer start now (docs/architecture.md, "Threads"). */
static void on_program_thread(void) {
    if (atomic_exchange(&threaded, 1))
        return;
    need_agent_thread();
    pa_names_start();
}

/* Starts sampling from the calling thread, in normal context, with no thread of ours:
 * the constructor (the main thread), or a forked child's atfork handler. */
static int start_sampling(void) {
    pa_error err;
    if (pa_sampler_start(&err) != 0) {
        pa_log(PA_LOG_ERROR, "%s; not profiling", err.msg);
        atomic_store(&active, 0);
        pa_shim_set_owner(0);
        return -1;
    }
    pa_sampler_arm_self();
    /* Uploads, PYAGENT_DUMP=1 or PYAGENT_OPCODES=1 (it finds instructions' columns while the
     * interpreter runs: pa_uploader_find_columns): a single-threaded program gets the agent
     * thread too. */
    if (cfg.server[0] || cfg.dump == PA_DUMP_ON || cfg.opcodes)
        need_agent_thread();
    return 0;
}

static _Atomic pid_t flushing_tid; /* the thread in the final flush, 0 when none */
static _Atomic int death_pending;  /* a fatal signal that came during it (shim/signals.c) */

pid_t pa_shim_exit_flusher(void) {
    return atomic_load(&flushing_tid);
}

void pa_shim_die_after_flush(int sig) {
    atomic_store(&death_pending, sig);
}

static void final_flush_once(void);

/* The final flush; a default-fatal signal that arrived meanwhile (on_death) is taken when it
 * is done: the program was already ending, and the signal kills it as it would have. */
static void final_flush(void) {
    if (!atomic_load(&active) || getpid() != agent_pid)
        return;
    if (atomic_exchange(&finished, 1))
        return;
    atomic_store(&flushing_tid, (pid_t)syscall(SYS_gettid));
    final_flush_once();
    atomic_store(&flushing_tid, 0);
    int sig = atomic_exchange(&death_pending, 0);
    if (sig)
        pa_chain_default(sig);
}

/* Stops sampling, tells the agent thread to stop, writes the final profile. */
static void final_flush_once(void) {
    pa_sampler_stop();
    pa_names_stop();
    /* The agent thread is told to stop, not waited for: it may be in the middle of an upload,
     * which the final flush asks to end (see pa_send_flush). */
    pthread_mutex_lock(&ctl_lock);
    ctl_stop = 1;
    pthread_cond_broadcast(&ctl_cond);
    pthread_mutex_unlock(&ctl_lock);
    flush(1);
    pa_guard_uninstall();
}

/* The death handler (shim/signals.c) at a safe point: the final flush, as at exit. */
void pa_shim_death_flush(void) {
    final_flush();
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
    forked = 1;
    pthread_mutex_init(&flush_lock, NULL);
    pthread_mutex_init(&ctl_lock, NULL);
    pthread_cond_init(&ctl_cond, NULL);
    agent_pid = getpid();
    pa_shim_set_owner(agent_pid);
    atomic_store(&finished, 0);
    pa_sampler_fork_child();
    pa_uploader_fork_child();
    pa_names_fork_child();
    pa_signals_fork_child();
    /* The child has one thread, this one: no thread of ours unless it uploads. */
    atomic_store(&agent_started, 0);
    atomic_store(&threaded, 0);
    start_sampling();
}

/* ---- load and unload ----------------------------------------------------------------------- */

/* Native frames, set up in the constructor while this is the only thread (see native.h):
 * libunwind with our guarded reads, the loader's lock, the evaluation loop. */
static void set_up_native(void) {
    uintptr_t lo;
    size_t size;
    pa_native_set_unwinder(cfg.native_unwind == 1   ? PA_NATIVE_LIBUNWIND
                           : cfg.native_unwind == 2 ? PA_NATIVE_CHECK
                                                    : PA_NATIVE_CACHED);
    if (pa_native_prime() != 0 || pa_native_init() != 0) {
        pa_log(PA_LOG_ERROR, "PYAGENT_NATIVE=1: cannot set up native unwinding safely here "
                             "(loader lock or evaluation loop not found); Python frames only");
        pa_sampler_set_native(0);
    } else if (pa_symbols_find("_PyEval_EvalFrameDefault.cold", &lo, &size) == 0) {
        pa_native_add_eval_range(lo, lo + size); /* gcc splits the loop's cold path off */
    }
}

/* The executable segments a thread interrupted by a fatal signal may be in (realfns.h,
 * PA_TEXT_*): where it may or may not flush (shim/signals.c). */
struct text_search {
    uintptr_t addr[PA_TEXT_N]; /* an address inside each, or 0: found by name or load address */
    uintptr_t ld_base;         /* the loader's load address (AT_BASE) */
    uintptr_t range[2 * PA_TEXT_N];
};

static int name_is(const char *path, const char *soname) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return strncmp(base, soname, strlen(soname)) == 0;
}

static int find_text(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    struct text_search *t = arg;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        for (int k = 0; k < PA_TEXT_N; k++) {
            int hit;
            if (k == PA_TEXT_LD)
                hit = info->dlpi_addr == t->ld_base;
            else if (k == PA_TEXT_LIBC)
                hit = name_is(name, "libc.so");
            else if (k == PA_TEXT_PTHREAD)
                hit = name_is(name, "libpthread.so");
            else
                hit = t->addr[k] >= lo && t->addr[k] < hi;
            if (hit) {
                t->range[2 * k] = lo;
                t->range[2 * k + 1] = hi;
            }
        }
    }
    return 0;
}

static void watch_deaths(void) {
    struct text_search t;
    memset(&t, 0, sizeof t);
    t.addr[PA_TEXT_PY] = (uintptr_t)pa_py_sym("Py_GetVersion");
    t.addr[PA_TEXT_OWN] = (uintptr_t)&watch_deaths;
    t.addr[PA_TEXT_MALLOC] = (uintptr_t)dlsym(RTLD_DEFAULT, "malloc");
    t.ld_base = getauxval(AT_BASE);
    dl_iterate_phdr(find_text, &t);
    /* malloc in the C library (the usual case) or, oddly, in the interpreter: those ranges
     * have rules of their own. */
    uintptr_t *m = &t.range[2 * PA_TEXT_MALLOC];
    if (m[0] == t.range[2 * PA_TEXT_LIBC] || m[0] == t.range[2 * PA_TEXT_PY])
        m[0] = m[1] = 0;
    pa_signals_watch_deaths(t.range, cfg.exit_timeout_ms);
}

/* Switches the agent on in a process that is CPython: at load, or when libpython is loaded
 * later (dlopen below), in the thread that loaded it. Once per process. */
static _Atomic int agent_tried; /* start_agent ran (it runs once) */

/* GIL mode on a free-threaded build whose GIL is off has nothing to measure: 1 after saying
 * so (what the agent does then ends the line). */
static int gil_mode_refused(const struct pa_python *p, const char *then) {
    if (cfg.mode != PA_MODE_GIL || !pa_py_gil_off(p))
        return 0;
    pa_log(PA_LOG_ERROR,
           "Python %s is a free-threaded build whose GIL is off, so GIL mode has nothing to "
           "measure (PYTHON_GIL=1 turns the GIL on); %s",
           p->version, then);
    return 1;
}

static void start_agent(void) {
    if (atomic_exchange(&agent_tried, 1))
        return;
    pa_real_init(); /* before any handler of ours exists (base/realfns.h) */
    pa_config_read(&cfg);
    if (!cfg.enabled)
        return;
    pa_error err;
    if (pa_py_detect(&py, &err) != 0) {
        pa_log(PA_LOG_ERROR, "%s; not profiling", err.msg);
        return;
    }
    if (gil_mode_refused(&py, "not profiling"))
        return;
    struct pa_sampler_config sc = {cfg.rate,   cfg.max_depth, cfg.timer_want, cfg.mode,
                                   cfg.native, cfg.opcodes,   cfg.bucket_ms,  cfg.async_tasks};
#ifdef PYAGENT_FAULT_INJECTION
    pa_walk_inject_every = cfg.fault_every;
#endif
    if (pa_sampler_init(&py, &sc) != 0 || pa_uploader_init(&cfg, &py) != 0) {
        pa_log(PA_LOG_ERROR, "cannot allocate the sampler's tables; not profiling");
        return;
    }
    if (!pa_uploader_output_path()[0] && !cfg.server[0]) {
        /* PYAGENT_OUTPUT=/dev/null (or a path that is not a file) and no server: a profile
         * would go nowhere, so there is nothing to sample for. */
        pa_log(PA_LOG_INFO, "no local file and no server; not profiling");
        return;
    }
    if (cfg.native)
        set_up_native();
    pa_py_find_initialized(); /* for the handler (pa_py_ready) */
    agent_pid = getpid();
    pa_sampler_thread_begin(); /* the main thread */
    pa_threads_set_name((unsigned long)pthread_self(), "MainThread");
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atomic_store(&active, 1);
    pa_shim_set_owner(agent_pid);
    if (start_sampling() != 0)
        return;
    watch_deaths();
    struct pa_sampler_stats st;
    pa_sampler_get_stats(&st);
    static const char *const what[] = {"CPU time", "wall-clock time", "GIL-holding time"};
    pa_log(PA_LOG_INFO, "profiling Python %s at %u Hz of %s (%s)%s%s", py.version, cfg.rate,
           what[cfg.mode], st.timer, pa_uploader_output_path()[0] ? " into " : "",
           pa_uploader_output_path());
}

/* The stub's constructor: the program's arguments name the application by default. */
static void start_at_load(int argc, char **argv) {
    pa_config_set_args(argc, argv);
    start_agent();
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

static int ix_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
                             void *arg) {
    if (!atomic_load(&active))
        return pa_real_pthread_create(t, attr, fn, arg);
    on_program_thread();
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

/* uWSGI, mod_wsgi and other embedders load libpython with dlopen after start, so the stub's
 * constructor found no CPython. The stub's dlopen loads the agent when the object it opened
 * is CPython and hands every later dlopen here: the first CPython switches the agent on
 * (once; sampling waits in the handler for Py_Initialize, as at load). The cost for other
 * programs is the stub's: two dlsym per dlopen until one is CPython (shim/stub.c). */
static _Atomic int late;     /* the agent follows a libpython loaded by dlopen */
static _Atomic int unloaded; /* that libpython was unloaded: follow the next one */

/* A libpython loaded again after it was unloaded (Apache: see dlclose), most likely at
 * another address: detected afresh; sampling of Python resumes when it is initialized. */
static void follow_again(void) {
    pa_error err;
    struct pa_python again;
    if (pa_py_detect(&again, &err) != 0) {
        pa_log(PA_LOG_ERROR, "%s; not profiling Python any more", err.msg);
        return; /* stays gone: the handler reads nothing */
    }
    if (gil_mode_refused(&again, "not profiling Python any more"))
        return;
    py = again;
    pa_sampler_set_python(&py);
    if (cfg.native) {
        /* libunwind's setup and the evaluation loop's range belong to the first copy. */
        pa_log(PA_LOG_WARN, "libpython was loaded again; native frames are off from now on");
        pa_sampler_set_native(0);
    }
    pa_py_find_initialized();
    watch_deaths(); /* the interpreter's text moved */
    atomic_store(&unloaded, 0);
    pa_py_set_gone(0);
    pa_log(PA_LOG_INFO, "following Python %s loaded again", py.version);
}

/* After the C library's dlopen returned h for file (the stub's dlopen). */
static void ix_dlopened(const char *file, void *h) {
    if (!atomic_load(&agent_tried) && pa_py_present_in(h)) {
        start_agent();
        atomic_store(&late, atomic_load(&active));
    } else if (atomic_load(&unloaded) && pa_py_present_in(h)) {
        follow_again();
    } else if (atomic_load(&active)) {
        pa_sampler_object_loaded(file);
    }
}

/* Is h the handle the late-loaded libpython was found through, or one to libpython itself?
 * Only closing one of those can unload it (a library the program loaded on its own has no
 * reference to it that the program's handles do not account for). */
static int may_unload_python(void *h) {
    if (h == pa_py_handle())
        return 1;
    struct link_map *lm;
    return dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm->l_name && pa_py_path()[0] &&
           strcmp(lm->l_name, pa_py_path()) == 0;
}

/* Apache loads its modules (mod_wsgi, which links libpython) when it reads its configuration,
 * unloads them all and loads them again for the second reading: the interpreter the agent
 * found at the first dlopen is unmapped, and the second lands elsewhere. Closing a handle
 * that may unload it first tells the handler to leave the interpreter alone; after the real
 * dlclose, a libpython still loaded (another handle holds it) is followed through a handle
 * of its own (its link map, valid while it stays loaded; the extra reference is dropped at
 * once, so it never keeps libpython loaded), else it is forgotten until the next dlopen of a
 * CPython (follow_again). */
static int ix_dlclose(void *h) {
    int (*real_dlclose)(void *) = pa_shim_next->dlclose;
    if (!atomic_load(&late) || atomic_load(&unloaded) || !may_unload_python(h)) {
        int r = real_dlclose(h);
        if (cfg.native && atomic_load(&active))
            pa_native_code_unloaded(); /* another object may come at the same addresses */
        return r;
    }
    pa_py_set_gone(1);
    pa_sampler_wait_readers(); /* the tick thread may be reading it (threads blocking SIGPROF) */
    int r = real_dlclose(h);
    void *still = pa_shim_next->dlopen(pa_py_path(), RTLD_LAZY | RTLD_NOLOAD);
    if (still) {
        pa_py_set_handle(still);
        real_dlclose(still);
        pa_py_set_gone(0);
    } else {
        pa_py_forget();
        atomic_store(&unloaded, 1);
        pa_log(PA_LOG_DEBUG, "libpython was unloaded; waiting for it to be loaded again");
    }
    return r;
}

/* os._exit() skips atexit and destructors: a multiprocessing child ends this way, and its
 * profile must still be written. */
__attribute__((noreturn)) static void ix_exit(int status) {
    if (!pa_handler_depth) /* from a signal handler: no lock, no malloc, no flush */
        final_flush();
    pa_real_exit(status); /* the C library's _Exit is its _exit */
}

/* ---- pyagent.labels (python/pyagent.py, through ctypes, with the GIL held) ----------------- */

/* The last refusal's message, for the module to raise with. */
#define labels_err (pa_tls.labels_err)

/* Tells the agent which ContextVar holds the label set, and the contextvars types its lookup
 * checks (agent/labels.h). 0, or -1 when labels cannot be read here: the agent is not
 * sampling this process, or the interpreter's layout has no context to read. */
static int ix_labels_bind(uintptr_t var, int64_t hash, uintptr_t hamt_type, uintptr_t bitmap_type,
                          uintptr_t array_type) {
    if (!atomic_load(&active) || getpid() != agent_pid)
        return pa_fail(&labels_err, "the agent is not sampling this process");
    return pa_labels_bind(&py, var, hash, hamt_type, bitmap_type, array_type, &labels_err);
}

/* Interns a label set (NUL-terminated name and value strings, alternating, names in order):
 * its id, or -1 (pyagent_labels_error says why). */
static int ix_labels_intern(const char *pairs, size_t len) {
    if (!atomic_load(&active))
        return pa_fail(&labels_err, "the agent is not sampling this process");
    return pa_labels_intern(pairs, len, &labels_err);
}

/* Tells the agent which ContextVar holds the root span (pyagent.SpanProcessor), after
 * pyagent_labels_bind. 0 or -1. */
static int ix_span_bind(uintptr_t var, int64_t hash) {
    if (!atomic_load(&active) || getpid() != agent_pid)
        return pa_fail(&labels_err, "the agent is not sampling this process");
    return pa_labels_bind_span(var, hash, &labels_err);
}

/* Interns a root span's name (len bytes of UTF-8): its id, or -1 (pyagent_labels_error). */
static int ix_span_name(const char *name, size_t len) {
    if (!atomic_load(&active))
        return pa_fail(&labels_err, "the agent is not sampling this process");
    return pa_labels_span_name(name, len, &labels_err);
}

/* ---- what the stub calls (shim/stub.h) ----------------------------------------------------- */

static const struct pa_core core = {
    .start = start_at_load,
    .sigaction = pa_ix_sigaction,
    .signal = pa_ix_signal,
    .pthread_sigmask = pa_ix_pthread_sigmask,
    .sigprocmask = pa_ix_sigprocmask,
    .execve = pa_ix_execve,
    .execv = pa_ix_execv,
    .execvp = pa_ix_execvp,
    .execvpe = pa_ix_execvpe,
    .fexecve = pa_ix_fexecve,
    .execveat = pa_ix_execveat,
    .pthread_create = ix_pthread_create,
    .dlopened = ix_dlopened,
    .dlclose = ix_dlclose,
    .exit = ix_exit,
    .labels_bind = ix_labels_bind,
    .labels_intern = ix_labels_intern,
    .span_bind = ix_span_bind,
    .span_name = ix_span_name,
};

/* The agent's one export: the stub gives the C library's functions and takes the agent's
 * versions of the interposed ones; then it calls start (a process that is CPython at load) or
 * dlopened (libpython loaded later), and hands every interposed call to the agent. */
PA_EXPORT const struct pa_core *pa_core_attach(const struct pa_next *next) {
    pa_shim_next = next;
    pa_real_set(next->pthread_sigmask, next->pthread_create);
    return &core;
}
