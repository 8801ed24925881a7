/* names.c: the namer thread (see names.h).
 *
 * Python API functions are looked up with dlsym: the agent links against no libpython, so
 * one libpyagent.so serves every version. Only long-stable API is used. */
#include "names.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "../agent/pyversions.h"
#include "../agent/sampler.h"
#include "../base/bss.h"
#include "../base/log.h"
#include "../base/realfns.h"
#include "../base/threads.h"

typedef void PyObject;
static struct {
    int (*gil_ensure)(void);
    void (*gil_release)(int);
    PyObject *(*import_get_module)(PyObject *);
    PyObject *(*unicode_from_string)(const char *);
    PyObject *(*getattr)(PyObject *, const char *);
    PyObject *(*dict_getitem)(PyObject *, PyObject *);
    PyObject *(*long_from_ulong)(unsigned long);
    const char *(*as_utf8)(PyObject *);
    void (*decref)(PyObject *);
    void (*err_clear)(void);
} api;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int wake, stopping, started;
static unsigned api_generation; /* pa_py_generation when api was looked up */

static int load_api(void) {
#define LOAD(field, name) *(void **)&api.field = pa_py_sym(name)
    LOAD(gil_ensure, "PyGILState_Ensure");
    LOAD(gil_release, "PyGILState_Release");
    LOAD(import_get_module, "PyImport_GetModule");
    LOAD(unicode_from_string, "PyUnicode_FromString");
    LOAD(getattr, "PyObject_GetAttrString");
    LOAD(dict_getitem, "PyDict_GetItem");
    LOAD(long_from_ulong, "PyLong_FromUnsignedLong");
    LOAD(as_utf8, "PyUnicode_AsUTF8");
    LOAD(decref, "Py_DecRef");
    LOAD(err_clear, "PyErr_Clear");
#undef LOAD
    void **p = (void **)&api;
    for (size_t i = 0; i < sizeof api / sizeof(void *); i++)
        if (!p[i])
            return -1;
    return 0;
}

/* How many times the namer took the GIL to look for a thread's name, per thread serial (a
 * small table: a collision only starts a count again). */
enum { ATTEMPT_SLOTS = 1024, MAX_ATTEMPTS = 40 };
static uint32_t attempt_serial[ATTEMPT_SLOTS] PA_LARGE_BSS(attempt_serial);
static uint8_t attempt_count[ATTEMPT_SLOTS] PA_LARGE_BSS(attempt_count);

static uint8_t *attempts_of(uint32_t serial) {
    unsigned i = serial % ATTEMPT_SLOTS;
    if (attempt_serial[i] != serial) {
        attempt_serial[i] = serial;
        attempt_count[i] = 0;
    }
    return &attempt_count[i];
}

/* threading._active[ident]._name for each unnamed live thread that has a Python thread state.
 * The GIL is taken only for those, and each at most MAX_ATTEMPTS times: PyGILState_Ensure
 * makes this thread a thread state of its own for the while, which the program can see (in
 * faulthandler's dumps of every thread, in sys._current_frames(), in a walk of the list).
 * A thread started in C that never runs Python (faulthandler's watchdog) has no state and no
 * Python name: it is never looked up. Neither is one that ran Python but is not in
 * threading._active after MAX_ATTEMPTS looks (_thread.start_new_thread). Returns how many
 * threads the namer should look at again. */
static int name_threads(void) {
    enum { MAX = 4096 };
    static struct pa_thread_info list[MAX] PA_LARGE_BSS(thread_names);
    static unsigned char look[MAX] PA_LARGE_BSS(thread_names_look);
    size_t n = pa_threads_list(list, MAX);
    if (n > MAX)
        n = MAX;
    int again = 0, lookups = 0;
    for (size_t i = 0; i < n; i++) {
        look[i] = 0;
        if (!list[i].alive || list[i].name[0] || *attempts_of(list[i].serial) >= MAX_ATTEMPTS)
            continue;
        again++;
        /* -1 (not ready, or the list changed under the read): ask again later. */
        if (pa_py_initialized() && pa_sampler_has_python_state(list[i].pthread) == 1) {
            look[i] = 1;
            lookups++;
        }
    }
    if (!lookups)
        return again;
    int g = api.gil_ensure();
    PyObject *modname = api.unicode_from_string("threading");
    PyObject *mod = modname ? api.import_get_module(modname) : NULL;
    PyObject *active = mod ? api.getattr(mod, "_active") : NULL;
    for (size_t i = 0; active && i < n; i++) {
        if (!look[i])
            continue;
        (*attempts_of(list[i].serial))++;
        PyObject *key = api.long_from_ulong(list[i].pthread);
        PyObject *thread = key ? api.dict_getitem(active, key) : NULL; /* borrowed */
        PyObject *name = thread ? api.getattr(thread, "_name") : NULL;
        const char *s = name ? api.as_utf8(name) : NULL;
        if (s && *s) {
            pa_threads_set_name(list[i].pthread, s);
            again--;
        }
        if (name)
            api.decref(name);
        if (key)
            api.decref(key);
    }
    if (active)
        api.decref(active);
    if (mod)
        api.decref(mod);
    if (modname)
        api.decref(modname);
    api.err_clear();
    api.gil_release(g);
    return again;
}

static void *namer_main(void *arg) {
    (void)arg;
    /* Never touch the interpreter while it may still be setting itself up: after a fork the
     * child's main thread re-initializes the GIL and thread states (PyOS_AfterFork_Child)
     * right after fork() returns, while this thread already runs. */
    struct timespec settle = {0, 200 * 1000000L};
    nanosleep(&settle, NULL);
    int tries = 0;
    for (;;) {
        pthread_mutex_lock(&lock);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        /* Poll briefly while a new thread is unnamed (it enters threading._active a moment
         * after it starts), then look again each second (for a new thread, or for the program
         * gone). */
        long wait_ms = tries > 0 && tries < 20 ? 50 : 1000;
        until.tv_sec += wait_ms / 1000;
        until.tv_nsec += (wait_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!wake && !stopping && pthread_cond_timedwait(&cond, &lock, &until) == 0)
            ;
        if (wake)
            tries = 1;
        wake = 0;
        int stop = stopping;
        pthread_mutex_unlock(&lock);
        if (stop || pa_sampler_program_gone())
            return NULL;
        if (!pa_sampler_running())
            continue;
        /* After finalization starts, the GIL may never be ours again. */
        if (tries == 0 || pa_py_gone())
            continue;
        /* libpython was unloaded and loaded again (shim.c, dlclose): its functions moved. */
        if (api_generation != pa_py_generation()) {
            if (load_api() != 0)
                continue;
            api_generation = pa_py_generation();
        }
        tries = name_threads() ? tries + 1 : 0;
    }
}

int pa_names_start(void) {
    if (started)
        return 0;
    if (pa_py_gone() || load_api() != 0) {
        pa_log(PA_LOG_DEBUG, "the Python thread API is missing; threads keep their OS names");
        return -1;
    }
    api_generation = pa_py_generation();
    /* Not PA_THREAD_PRIVATE_FILES: it calls into Python, which may run the program's code. */
    if (pa_agent_thread_spawn(namer_main, 0) != 0)
        return -1;
    started = 1;
    pa_names_wake();
    return 0;
}

void pa_names_wake(void) {
    if (!started)
        return;
    pthread_mutex_lock(&lock);
    wake = 1;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&lock);
}

void pa_names_stop(void) {
    pthread_mutex_lock(&lock);
    stopping = 1;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&lock);
}

void pa_names_fork_child(void) {
    /* The namer did not survive the fork. */
    pthread_mutex_init(&lock, NULL);
    pthread_cond_init(&cond, NULL);
    wake = stopping = started = 0;
}
