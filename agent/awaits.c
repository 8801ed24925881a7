/* awaits.c: every asyncio task and its await chain, read from outside the event loop's
 * thread (PYAGENT_ASYNC=1, wall mode's tick thread; pyagent dump --async).
 *
 * Normal context: never called by the signal handler. Every interpreter pointer is read under
 * the fault guard and checked (alignment, ob_type) before it is followed; every list and
 * chain is bounded, since the loops change them while we read.
 *
 * The one idea: a suspended task needs no thread to be read. Its coroutine's frame lives in
 * the coroutine object (gi_iframe), stays still until the task is resumed, and the object it
 * awaits is the top of that frame's value stack (what CPython's own _PyGen_yf answers). So
 * the chain task -> coroutine -> awaited coroutine -> ... -> future is a walk over objects,
 * and the last coroutine's code says what the task waits on (asyncio.sleep, a lock, another
 * future). Finding the tasks: 3.14+ links every task into its thread's list (published
 * offsets); 3.11-3.13 keep them in asyncio's WeakSet of scheduled tasks (and, 3.12+, a set
 * of eager ones), read here as the headers lay sets, weak references and instance
 * attributes out. */
#include "awaits.h"

#include <stdatomic.h>
#include <string.h>

#include "codecache.h"
#include "guard.h"
#include "tasks.h"

/* Links of a chain followed at most, and the bounds on the lists and sets read. */
enum { MAX_CHAIN = 256, MAX_LIST = 1 << 20, MAX_INTERPRETERS = 256, MAX_THREAD_STATES = 4096 };

const char *pa_await_name(int kind) {
    switch (kind) {
    case PA_AWAIT_SLEEP:
        return "<await sleep>";
    case PA_AWAIT_LOCK:
        return "<await lock>";
    case PA_AWAIT_READY:
        return "<ready>";
    default:
        return "<await Future>";
    }
}

/* The main interpreter: the last of the runtime's list (each one's next is older). */
static uintptr_t main_interp(const struct pa_python *py) {
    const struct pa_layout *l = &py->layout;
    uintptr_t i = PA_READ(uintptr_t, py->runtime + l->rt_interpreters_head);
    for (int n = 0; i && n < MAX_INTERPRETERS; n++) {
        if (!pa_aligned(i, 8))
            return 0;
        if (PA_READ(int64_t, i + l->is_id) == 0)
            return i;
        i = PA_READ(uintptr_t, i + l->is_next);
    }
    return 0;
}

/* ---- 3.14+: each thread state's list of tasks -------------------------------------------- */

static int list_threads(const struct pa_python *py, const struct pa_asyncio_offsets *o,
                        struct pa_task_ref *out, int max, unsigned long *over) {
    const struct pa_layout *l = &py->layout;
    uintptr_t interp = main_interp(py);
    if (!interp)
        return 0;
    int n = 0;
    long steps = 0;
    uintptr_t ts = PA_READ(uintptr_t, interp + l->is_threads_head);
    for (int t = 0; ts && t < MAX_THREAD_STATES && pa_aligned(ts, 8); t++) {
        unsigned long pthread = PA_READ(unsigned long, ts + l->ts_thread_id);
        uintptr_t head = ts + o->ts_tasks_head;
        uintptr_t node = PA_READ(uintptr_t, head); /* llist_node: next, then prev */
        while (node && node != head && pa_aligned(node, 8) && steps++ < MAX_LIST) {
            if (n < max)
                out[n++] = (struct pa_task_ref){node - o->task_node, pthread};
            else
                ++*over;
            node = PA_READ(uintptr_t, node);
        }
        ts = PA_READ(uintptr_t, ts + l->ts_next);
    }
    return n;
}

/* ---- 3.11-3.13: asyncio's sets of tasks ---------------------------------------------------- */

/* The attribute name of an instance of a Python class (its instance dictionary: 3.11 keeps
 * the values array before the object, 3.12 a tagged values-or-dict word there, 3.13 the
 * values inline after the object header, valid while no dict was made), or 0. */
static uintptr_t attr_of(const struct pa_python *py, uintptr_t obj, const char *name) {
    const struct pa_layout *l = &py->layout;
    if (!pa_aligned(obj, 8))
        return 0;
    uintptr_t type = PA_READ(uintptr_t, obj + l->ob_type);
    uintptr_t values = 0, dict = 0;
    if (py->minor == 11) {
        values = PA_READ(uintptr_t, obj - 32);
        dict = PA_READ(uintptr_t, obj - 24);
    } else if (py->minor == 12) {
        uintptr_t w = PA_READ(uintptr_t, obj - 24);
        if (w & 1)
            values = w + 1;
        else
            dict = w;
    } else {
        dict = PA_READ(uintptr_t, obj - (l->free_threaded ? 8 : 24));
        uintptr_t inline_values = obj + l->ob_type + 8;
        if (!dict && PA_READ(uint8_t, inline_values + 3) /* valid */)
            values = inline_values;
    }
    if (dict)
        return pa_py_dict_get(py, dict, name);
    if (!values || !pa_aligned(type, 8))
        return 0;
    long i = pa_py_keys_index(py, PA_READ(uintptr_t, type + l->ht_cached_keys), name);
    return i < 0 ? 0 : PA_READ(uintptr_t, values + l->dv_values + 8 * (uintptr_t)i);
}

/* The last loop looked up in one listing, and its thread: most tasks share one loop. A loop
 * starts and stops running, so nothing is kept from one listing to the next. */
struct loop_seen {
    uintptr_t loop;
    unsigned long thread;
};

/* The pthread id of the thread running loop (BaseEventLoop._thread_id), 0 when it runs in
 * none. */
static unsigned long loop_thread(const struct pa_python *py, uintptr_t loop,
                                 struct loop_seen *seen) {
    if (loop == seen->loop)
        return seen->thread;
    unsigned long long id = 0;
    if (!pa_py_uint(py, attr_of(py, loop, "_thread_id"), &id))
        id = 0;
    seen->loop = loop;
    seen->thread = (unsigned long)id;
    return seen->thread;
}

/* Adds the tasks of set (its table's live keys; weak references to tasks when weak). */
static int list_set(const struct pa_python *py, uintptr_t set, int weak, struct pa_task_ref *out,
                    int n, int max, unsigned long *over, struct loop_seen *seen) {
    const struct pa_layout *l = &py->layout;
    if (!py->set_type || !pa_is_type(py, set, py->set_type))
        return n;
    long mask = PA_READ(long, set + l->set_mask);
    uintptr_t table = PA_READ(uintptr_t, set + l->set_table);
    if (mask < 0 || mask >= MAX_LIST || !pa_aligned(table, 8))
        return n;
    for (long i = 0; i <= mask; i++) {
        uintptr_t key = PA_READ(uintptr_t, table + 16 * (uintptr_t)i); /* setentry: key, hash */
        if (!key)
            continue;
        uintptr_t task = key;
        if (weak) {
            if (!pa_is_type(py, key, py->weakref_type))
                continue; /* the dummy of a removed key */
            task = PA_READ(uintptr_t, key + l->wr_object);
            if (task == py->none)
                continue; /* the task is gone */
        }
        if (!pa_aligned(task, 8))
            continue;
        if (n == max) {
            ++*over;
            continue;
        }
        /* FutureObj's first field is its loop. */
        uintptr_t loop = PA_READ(uintptr_t, task + l->ob_type + 8);
        out[n++] = (struct pa_task_ref){task, loop_thread(py, loop, seen)};
    }
    return n;
}

/* The _asyncio module, once found: a search of sys.modules (hundreds of entries, a string
 * compare each) is work a tick should not redo. A module stays while its interpreter lives;
 * the one kept is checked to be a module each time, and forgotten when it holds no set of
 * tasks (an embedder that finalizes and starts Python again gets a new one). */
static _Atomic uintptr_t asyncio_module;

static int list_sets(const struct pa_python *py, struct pa_task_ref *out, int max,
                     unsigned long *over) {
    const struct pa_layout *l = &py->layout;
    uintptr_t mod = atomic_load_explicit(&asyncio_module, memory_order_relaxed);
    if (!pa_is_type(py, mod, py->module_type)) {
        uintptr_t interp = main_interp(py);
        if (!interp)
            return 0;
        mod = pa_py_dict_get(py, PA_READ(uintptr_t, interp + l->is_modules), "_asyncio");
        if (!pa_is_type(py, mod, py->module_type))
            return 0;
        atomic_store_explicit(&asyncio_module, mod, memory_order_relaxed);
    }
    uintptr_t dict = PA_READ(uintptr_t, mod + l->mod_dict);
    uintptr_t weakset =
        pa_py_dict_get(py, dict, py->minor == 11 ? "_all_tasks" : "_scheduled_tasks");
    if (!weakset) {
        atomic_store_explicit(&asyncio_module, 0, memory_order_relaxed);
        return 0;
    }
    struct loop_seen seen = {0, 0};
    int n = list_set(py, attr_of(py, weakset, "data"), 1, out, 0, max, over, &seen);
    if (py->minor >= 12)
        n = list_set(py, pa_py_dict_get(py, dict, "_eager_tasks"), 0, out, n, max, over, &seen);
    return n;
}

int pa_awaits_list(const struct pa_python *py, struct pa_task_ref *out, int max,
                   unsigned long *over) {
    const struct pa_asyncio_offsets *o = pa_tasks_offsets();
    if (!o || !py->layout.gen_iframe || !py->coro_type)
        return 0;
    sigjmp_buf env;
    sigjmp_buf *volatile prev = pa_guard_env;
    pa_guard_env = &env;
    volatile int n = 0;
    if (sigsetjmp(env, 0)) {
        pa_guard_env = prev;
        return 0;
    }
    n = o->ts_tasks_head ? list_threads(py, o, out, max, over) : list_sets(py, out, max, over);
    pa_guard_env = prev;
    return n;
}

/* ---- one task's chain ---------------------------------------------------------------------- */

/* A coroutine's or generator's frame state: 0 done (or not one), 1 created (not started),
 * 2 suspended, 3 running. */
static int gen_state(const struct pa_python *py, uintptr_t obj, int *raw) {
    const struct pa_layout *l = &py->layout;
    uintptr_t type = pa_aligned(obj, 8) ? PA_READ(uintptr_t, obj + l->ob_type) : 0;
    if (!type || (type != py->coro_type && type != py->gen_type))
        return 0;
    int s = PA_READ(int8_t, obj + l->gen_frame_state);
    *raw = s;
    if (s == l->fs_created)
        return 1;
    if (s > l->fs_created && s < l->fs_executing)
        return 2;
    return s == l->fs_executing ? 3 : 0;
}

/* What a suspended coroutine awaits (the top of its frame's value stack while it is inside
 * an await or yield from), or 0 (it stopped at a plain yield). */
static uintptr_t awaited(const struct pa_python *py, uintptr_t f, int state) {
    const struct pa_layout *l = &py->layout;
    if (l->fs_yield_from) {
        if (state < l->fs_yield_from || state >= l->fs_executing)
            return 0;
    } else {
        /* 3.11-3.12: the instruction after the last one run is RESUME, whose argument says
         * why the frame resumes there: 2 after a yield from, 3 after an await. */
        uintptr_t last = PA_READ(uintptr_t, f + l->fr_lasti_or_instr);
        unsigned arg = PA_READ(uint8_t, last + 3);
        if (arg < 2 || arg > 3)
            return 0;
    }
    uintptr_t top;
    if (l->fr_stack_ptr) {
        uintptr_t sp = PA_READ(uintptr_t, f + l->fr_stack);
        uintptr_t slot = sp - 8 * (uintptr_t)l->fr_stack_ptr;
        if (!pa_aligned(sp, 8) || slot < f + l->fr_localsplus)
            return 0;
        top = PA_READ(uintptr_t, slot) & ~(uintptr_t)7; /* a tagged _PyStackRef */
    } else {
        int depth = PA_READ(int, f + l->fr_stack);
        if (depth < 1 || depth > (1 << 20))
            return 0;
        top = PA_READ(uintptr_t, f + l->fr_localsplus + 8 * (uintptr_t)(depth - 1));
    }
    return pa_aligned(top, 8) ? top : 0;
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

/* Frames of asyncio's own waiting code that the leaf stands for: asyncio.sleep (and the
 * bare yield of sleep(0)), the lock primitives' waits. */
static int waiting_code(uint32_t id) {
    if (id < PA_SYN_FIRST_CODE)
        return 0;
    const char *file = pa_code_filename(id), *name = pa_code_qualname(id);
    if (ends_with(file, "asyncio/tasks.py") &&
        (!strcmp(name, "sleep") || !strcmp(name, "__sleep0")))
        return PA_AWAIT_SLEEP;
    if (ends_with(file, "asyncio/locks.py"))
        return PA_AWAIT_LOCK;
    return 0;
}

int pa_awaits_chain(const struct pa_python *py, uintptr_t task, struct pa_frame *out, int max,
                    int *running, unsigned long *unreadable) {
    const struct pa_asyncio_offsets *o = pa_tasks_offsets();
    *running = 0;
    if (!o || max < 3)
        return 0;
    sigjmp_buf env;
    sigjmp_buf *volatile prev = pa_guard_env;
    pa_guard_env = &env;
    if (sigsetjmp(env, 0)) {
        pa_guard_env = prev;
        ++*unreadable;
        return 0;
    }
    struct pa_frame chain[MAX_CHAIN]; /* outermost coroutine first */
    int n = 0, kind = PA_AWAIT_READY, raw = 0;
    uintptr_t obj = PA_READ(uintptr_t, task + o->task_coro);
    uintptr_t name = PA_READ(uintptr_t, task + o->task_name);
    int state = gen_state(py, obj, &raw);
    if (state == 0 || state == 3) {
        /* Done (or not a coroutine we can read), or its step runs now. */
        *running = state == 3;
        int depth = 0;
        if (state == 3)
            out[depth++] = pa_task_frame(py, name);
        pa_guard_env = prev;
        return depth;
    }
    while (n < MAX_CHAIN && n < max - 2) {
        uintptr_t f = obj + py->layout.gen_iframe;
        if (pa_walk_one_frame(py, f, &chain[n]))
            n++;
        if (state == 1)
            break; /* not started: its first step is scheduled */
        uintptr_t next = awaited(py, f, raw);
        if (!next)
            break; /* a bare yield: its next step is scheduled */
        obj = next;
        state = gen_state(py, obj, &raw);
        if (state != 2) {
            /* A future, a task, or an awaitable that is not a coroutine: the task waits on
             * it. (A coroutine that runs or is done here was read while it moved on.) */
            kind = PA_AWAIT_FUTURE;
            break;
        }
    }
    /* The code the task waits in names the leaf, and the leaf stands for it. */
    int waits = n > 0 ? waiting_code(chain[n - 1].id) : 0;
    if (waits) {
        kind = waits;
        while (n > 0 && waiting_code(chain[n - 1].id) == waits)
            n--;
    }
    int depth = 0;
    out[depth++] = (struct pa_frame){PA_SYN_AWAIT, kind, 0};
    for (int i = n - 1; i >= 0; i--)
        out[depth++] = chain[i];
    out[depth++] = pa_task_frame(py, name);
    pa_guard_env = prev;
    return depth;
}
