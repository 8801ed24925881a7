/* pyversions.c: finds out which CPython this process runs and how its memory is laid out.
 *
 * Normal context (the constructor), except pa_py_ready, pa_py_initialized and
 * pa_py_finalizing, which the SIGPROF handler calls (SIGNAL-HANDLER SIDE: guarded reads and
 * atomics only). The layout comes from the table
 * generated from each version's headers; from 3.13 on, the interpreter publishes its own
 * offsets in _Py_DebugOffsets at the start of _PyRuntime, and those win where they differ
 * (a patch release or a distribution build may move a field the table does not know of). */
#include "pyversions.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/bss.h"
#include "guard.h"
#include "pydetect.h"

static const struct pa_layout layouts[] = {
#include "pylayouts.inc"
};

static void *py_handle; /* libpython loaded late, perhaps RTLD_LOCAL; else the global scope */
/* the file of that libpython */
static char py_path[4096] PA_LARGE_BSS(py_path);
/* A late-loaded libpython may be unloaded again (dlclose: Apache reads its configuration
 * twice at start, unloading its modules between): while py_gone is set, nothing of the
 * interpreter is read or called, from the handler or elsewhere. py_generation counts the
 * interpreters followed, so that cached function pointers (names.c) are looked up again. */
static _Atomic int py_gone;
static _Atomic unsigned py_generation;

void *pa_py_sym(const char *name) {
    return dlsym(py_handle ? py_handle : RTLD_DEFAULT, name);
}

#define sym pa_py_sym

int pa_py_present_in(void *handle) {
    if (!pa_py_exported_in(handle))
        return 0;
    py_handle = handle;
    Dl_info info;
    if (dladdr(dlsym(handle, "Py_GetVersion"), &info) && info.dli_fname &&
        strlen(info.dli_fname) < sizeof py_path)
        strcpy(py_path, info.dli_fname);
    return 1;
}

void *pa_py_handle(void) {
    return py_handle;
}

const char *pa_py_path(void) {
    return py_path;
}

void pa_py_set_handle(void *handle) {
    py_handle = handle;
}

int pa_py_gone(void) {
    return atomic_load_explicit(&py_gone, memory_order_acquire);
}

void pa_py_set_gone(int gone) {
    atomic_store_explicit(&py_gone, gone, memory_order_release);
}

unsigned pa_py_generation(void) {
    return atomic_load(&py_generation);
}

static const struct pa_layout *layout_for(unsigned minor, unsigned free_threaded) {
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        if (layouts[i].minor == minor && layouts[i].free_threaded == free_threaded)
            return &layouts[i];
    return NULL;
}

/* "3.13t, ..." from the table, for the message refusing another free-threaded build. */
static const char *free_threaded_versions(void) {
    static char list[64];
    size_t n = 0;
    list[0] = 0;
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        if (layouts[i].free_threaded && n + 16 < sizeof list)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s3.%ut", n ? ", " : "",
                                  layouts[i].minor);
    return n ? list : "none";
}

/* Applies the live _Py_DebugOffsets over the table row. Returns 0, or -1 with err set. */
static int apply_debug_offsets(struct pa_python *py, pa_error *err) {
    const uint64_t *d = (const uint64_t *)py->runtime;
    struct pa_layout *l = &py->layout;
    if (memcmp(d, "xdebugpy", 8) != 0) {
        pa_fail(err, "Python %s has no _Py_DebugOffsets cookie; layout unknown", py->version);
        return -1;
    }
    uint64_t hex = d[l->dbg.version];
    if (((hex >> 24) & 0xff) != py->major || ((hex >> 16) & 0xff) != py->minor) {
        pa_fail(err, "Python %s: _Py_DebugOffsets says version %#llx; layout unknown", py->version,
                (unsigned long long)hex);
        return -1;
    }
    /* A free-threaded build has a row of its own; _Py_DebugOffsets says which build this
     * is (the cookie, version and flag open the struct in both). */
    if (d[l->dbg.free_threaded] && !l->free_threaded) {
        const struct pa_layout *ft = layout_for(py->minor, 1);
        if (!ft) {
            pa_fail(err,
                    "Python %s is a free-threaded build, which pyagent supports only for "
                    "the versions its table knows (%s)",
                    py->version, free_threaded_versions());
            return -1;
        }
        *l = *ft;
    }
    /* PyThreadState.exc_info is not published (3.15 publishes exc_state, the thread's own
     * item, not the pointer to the top one, a generator's while it runs), nor is state (a
     * free-threaded build's attachment): the table's offsets stand where the published thread-state
     * offsets agree with the table's, else the exception share is not measured (a build whose
     * thread state differs). current_exception is not published either: the same rule. */
    if (d[l->dbg.ts_frame] != l->ts_frame || d[l->dbg.ts_status] != l->ts_status)
        l->ts_exc_info = l->ts_raising = l->ts_context = l->ts_attached = 0; /* and labels' */
#define TAKE(field) l->field = (unsigned)d[l->dbg.field]
    TAKE(rt_finalizing);
    TAKE(rt_interpreters_head);
    TAKE(is_next);
    TAKE(is_threads_head);
    TAKE(ts_next);
    TAKE(ts_interp);
    TAKE(ts_frame);
    TAKE(ts_thread_id);
    TAKE(ts_native_thread_id);
    TAKE(fr_back);
    TAKE(fr_code);
    TAKE(fr_lasti_or_instr);
    TAKE(fr_owner);
    TAKE(co_filename);
    TAKE(co_name);
    TAKE(co_qualname);
    TAKE(co_linetable);
    TAKE(co_firstlineno);
    TAKE(co_code_adaptive);
    TAKE(u_state);
    TAKE(u_length);
    TAKE(u_ascii_size);
    TAKE(gil_off);
    TAKE(is_id);
    TAKE(ts_status);
    TAKE(is_modules);
    if (l->dbg.gen_iframe) /* 3.14+ */
        TAKE(gen_iframe);
    if (l->dbg.ts_gil_requested) /* 3.15+ */
        TAKE(ts_gil_requested);
    /* The GIL's fields are published relative to the interpreter's own embedded GIL. */
    unsigned locked = (unsigned)(d[l->dbg.gil_locked] - d[l->dbg.gil_struct]),
             holder = (unsigned)(d[l->dbg.gil_holder] - d[l->dbg.gil_struct]);
    /* The mutex is not published: the table's offset stands while the published fields of
     * the GIL's structure are where the table has them. */
    if (locked != l->gil_locked || holder != l->gil_holder)
        l->gil_mutex = 0;
    l->gil_locked = locked;
    l->gil_holder = holder;
    /* The collector's flag is published as its offset in struct _gc_runtime_state, which
     * sits at interpreter_state.gc. */
    l->gc_collecting = (unsigned)(d[l->dbg.is_gc] + d[l->dbg.gc_collecting]);
#undef TAKE
    py->debug_offsets = 1;
    return 0;
}

/* "3.11.2 (main, ...)": the major and minor numbers; 0, or -1 if v does not start so. Parsed
 * by hand: sscanf's code is pages of the C library that Python itself never runs, a few page
 * faults at every start (docs/architecture.md, "Start-up cost"). */
static int read_major_minor(const char *v, unsigned *major, unsigned *minor) {
    unsigned n[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        if (*v < '0' || *v > '9')
            return -1;
        while (*v >= '0' && *v <= '9' && n[k] < 100000)
            n[k] = n[k] * 10 + (unsigned)(*v++ - '0');
        if (k == 0 && *v++ != '.')
            return -1;
    }
    *major = n[0];
    *minor = n[1];
    return 0;
}

/* Does the interpreter (the object that holds _PyRuntime) define a debug build's symbol? Asked
 * of its own hash table: dlsym's failed look-up, the answer in every release build, goes
 * through the loader's error path, which allocates its message before the interpreter has run
 * (and searches every object in the scope, where the one that matters is the interpreter). */
static int debug_symbol(const void *runtime, const char *name) {
    int d = pa_py_defined_beside(runtime, name);
    return d < 0 ? sym(name) != NULL : d;
}

int pa_py_detect(struct pa_python *py, pa_error *err) {
    memset(py, 0, sizeof *py);
    const char *(*get_version)(void) = (const char *(*)(void))sym("Py_GetVersion");
    void *runtime = sym("_PyRuntime");
    if (!get_version) {
        pa_fail(err, "this process is not CPython");
        return -1;
    }
    /* Py_GetVersion only formats constants: safe before initialization. */
    const char *v = get_version();
    if (read_major_minor(v, &py->major, &py->minor) != 0) {
        pa_fail(err, "cannot read the Python version from \"%.40s\"", v);
        return -1;
    }
    size_t n = strcspn(v, " ");
    if (n >= sizeof py->version)
        n = sizeof py->version - 1;
    memcpy(py->version, v, n);
    py->version[n] = 0;
    if (py->major != 3 || py->minor < 8) {
        pa_fail(err, "Python %s is older than 3.8, which pyagent does not support", py->version);
        return -1;
    }
    if (!runtime) {
        pa_fail(err, "Python %s does not export _PyRuntime; layout unknown", py->version);
        return -1;
    }
    const struct pa_layout *l = layout_for(py->minor, 0);
    if (!l) {
        pa_fail(err, "Python %s is newer than pyagent knows (3.8 to 3.15)", py->version);
        return -1;
    }
    py->layout = *l;
    py->runtime = (uintptr_t)runtime;
    py->code_type = (uintptr_t)sym("PyCode_Type");
    py->unicode_type = (uintptr_t)sym("PyUnicode_Type");
    py->bytes_type = (uintptr_t)sym("PyBytes_Type");
    py->none = (uintptr_t)sym("_Py_NoneStruct");
    py->long_type = (uintptr_t)sym("PyLong_Type");
    py->dict_type = (uintptr_t)sym("PyDict_Type");
    py->module_type = (uintptr_t)sym("PyModule_Type");
    py->coro_type = (uintptr_t)sym("PyCoro_Type");
    py->gen_type = (uintptr_t)sym("PyGen_Type");
    py->set_type = (uintptr_t)sym("PySet_Type");
    py->weakref_type = (uintptr_t)sym("_PyWeakref_RefType");
    if (!py->code_type || !py->unicode_type || !py->bytes_type) {
        pa_fail(err, "Python %s does not export its type objects", py->version);
        return -1;
    }
    if (py->minor >= 13)
        return apply_debug_offsets(py, err);
    /* Before 3.13 there are no published offsets; the layout also changes in debug builds
     * (Py_DEBUG adds fields), which only those versions' exported ref-count total reveals. */
    if (debug_symbol(runtime, "_Py_RefTotal") || debug_symbol(runtime, "_Py_GetGlobalRefTotal")) {
        pa_fail(err, "Python %s is a debug build, whose layout pyagent does not know", py->version);
        return -1;
    }
    return 0;
}

int pa_py_gil_off(const struct pa_python *py) {
    const char *gil = getenv("PYTHON_GIL");
    return py->layout.free_threaded && !(gil && strcmp(gil, "1") == 0);
}

static int (*_Atomic is_init)(void);

void pa_py_find_initialized(void) {
    if (!atomic_load(&is_init))
        atomic_store(&is_init, (int (*)(void))sym("Py_IsInitialized"));
}

int pa_py_initialized(void) {
    if (pa_py_gone())
        return 0;
    int (*f)(void) = atomic_load(&is_init);
    return f && f();
}

int pa_py_finalizing(const struct pa_python *py) {
    /* A plain word read; _PyRuntime lives as long as its libpython, and the handler stops
     * reading it before that can be unloaded (py_gone): an unloaded interpreter counts as
     * finalized. */
    if (pa_py_gone())
        return 1;
    return *(volatile uintptr_t *)(py->runtime + py->layout.rt_finalizing) != 0;
}

/* SIGNAL-HANDLER SIDE. Walks the thread list as the layout says; returns 0 when it holds, else
 * the step that failed (negative: a read faulted there). Restores any guard already armed. */
static int check_layout(const struct pa_python *py) {
    const struct pa_layout *l = &py->layout;
    sigjmp_buf env;
    sigjmp_buf *volatile prev = pa_guard_env;
    volatile int step = 0;
    pa_guard_env = &env;
    if (sigsetjmp(env, 0)) {
        pa_guard_env = prev;
        return -1 - step;
    }
    /* The main interpreter: the list's last (the head is the newest, and a sub-interpreter
     * from 3.13 on may have no thread state while it runs nothing). */
    uintptr_t interp = PA_READ(uintptr_t, py->runtime + l->rt_interpreters_head);
    step = 1;
    for (int k = 0; pa_aligned(interp, 8) && k < 256; k++) {
        uintptr_t next = PA_READ(uintptr_t, interp + l->is_next);
        if (!next)
            break;
        interp = next;
    }
    if (!pa_aligned(interp, 8))
        goto bad;
    uintptr_t ts = PA_READ(uintptr_t, interp + l->is_threads_head);
    step = 2;
    int n = 0;
    for (; ts && n < 100000; n++) {
        if (!pa_aligned(ts, 8) || PA_READ(uintptr_t, ts + l->ts_interp) != interp)
            goto bad;
        ts = PA_READ(uintptr_t, ts + l->ts_next);
    }
    step = 3;
    if (n == 0)
        goto bad;
    if (l->rt_tss_key) {
        int inited = PA_READ(int, py->runtime + l->rt_tss_key);
        unsigned key = PA_READ(unsigned, py->runtime + l->rt_tss_key + sizeof(int));
        step = 4;
        if (inited != 1 || key >= 1024)
            goto bad;
    }
    pa_guard_env = prev;
    return 0;
bad:
    pa_guard_env = prev;
    return step;
}

static void verify_message(const struct pa_python *py, int step, pa_error *err) {
    if (step < 0)
        pa_fail(err, "Python %s: reading its thread list faulted (step %d); layout unknown",
                py->version, -1 - step);
    else
        pa_fail(err, "Python %s: its thread list does not match the expected layout (step %d)",
                py->version, step);
}

int pa_py_verify(const struct pa_python *py, pa_error *err) {
    int step = check_layout(py);
    if (step != 0)
        verify_message(py, step, err);
    return step != 0 ? -1 : 0;
}

/* The layout's verdict, reached by the first handlers that run after initialization: 1 good,
 * -1 wrong (for a second: a forked child's main thread re-makes the thread list right after
 * fork() returns, and a check may catch it half-way), 0 not yet. */
static _Atomic int verdict, last_step;
static _Atomic int64_t first_failure_ns;

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int pa_py_ready(const struct pa_python *py) {
    if (pa_py_gone())
        return 0;
    int (*f)(void) = atomic_load_explicit(&is_init, memory_order_acquire);
    if (!f || !f() || pa_py_finalizing(py))
        return 0;
    int v = atomic_load_explicit(&verdict, memory_order_acquire);
    if (v)
        return v > 0;
    int step = check_layout(py);
    if (step == 0) {
        atomic_store(&verdict, 1);
        return 1;
    }
    atomic_store(&last_step, step);
    int64_t now = mono_ns(), first = 0;
    if (!atomic_compare_exchange_strong(&first_failure_ns, &first, now) && now - first > 1000000000)
        atomic_store(&verdict, -1);
    return 0;
}

void pa_py_forget(void) {
    atomic_store(&is_init, NULL);
    py_handle = NULL;
    py_path[0] = 0;
    atomic_store(&verdict, 0);
    atomic_store(&last_step, 0);
    atomic_store(&first_failure_ns, 0);
    atomic_fetch_add(&py_generation, 1);
}

int pa_py_verdict(const struct pa_python *py, pa_error *err) {
    if (atomic_load(&verdict) >= 0)
        return 0;
    verify_message(py, atomic_load(&last_step), err);
    return -1;
}
