/* tasks.c: the running asyncio task of the sampled thread, and the names of task frames.
 *
 * SIGNAL-HANDLER SIDE: pa_task_running and pa_task_frame run inside the SIGPROF handler (and
 * in wall mode's tick thread): no malloc, no locks, no stdio; every interpreter pointer is
 * read under the fault guard and checked (alignment, ob_type) before use.
 *
 * The one idea: a task's name is copied once into a fixed, append-only table of names
 * (open addressing on a hash of the copied bytes, slots claimed by CAS and published with
 * release order, never changed after), so a sample carries only the name's index and the
 * agent thread names it whenever it likes, even after the task is gone. Default names
 * (Task-N, kept by CPython as the int N until asked) need no table: N rides in the frame. */
#include "tasks.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "../base/bss.h"
#include "codecache.h"
#include "guard.h"

/* 4096 names of up to 59 bytes: 256 KiB of zero pages, touched only as names arrive. A
 * service naming each request's task uniquely fills it; later names share task:<other>. */
enum { NAMES = 4096, NAME_BYTES = 60, NAME_CHARS = 56, MAX_PROBE = 32 };
enum { SLOT_EMPTY = 0, SLOT_FILLING = 1, SLOT_READY = 2 };

struct name_slot {
    _Atomic uint32_t state;
    char s[NAME_BYTES];
};

static struct name_slot names[NAMES] PA_LARGE_BSS(task_names);
static _Atomic unsigned long names_used, names_full;

/* A frame whose instr has this bit carries a task counter N (the task is named Task-N): bits
 * 0-30 of N in line, bits 31-61 in instr's low bits. */
#define COUNTER_FLAG 0x80000000u

static struct pa_asyncio_offsets offsets;
static _Atomic int claimed, known;

void pa_tasks_set_offsets(const struct pa_asyncio_offsets *o) {
    /* Two threads may load _asyncio at once (dlopen is not serialized for us): one writes. */
    if (atomic_exchange(&claimed, 1))
        return;
    offsets = *o;
    atomic_store_explicit(&known, 1, memory_order_release);
}

int pa_tasks_known(void) {
    return atomic_load(&known);
}

const struct pa_asyncio_offsets *pa_tasks_offsets(void) {
    return atomic_load_explicit(&known, memory_order_acquire) ? &offsets : NULL;
}

/* One task's candidate: its coroutine's frame and its name, or 0. */
static int candidate(const struct pa_python *py, uintptr_t task, struct pa_running_task *out) {
    if (!task || !pa_aligned(task, 8))
        return 0;
    uintptr_t coro = PA_READ(uintptr_t, task + offsets.task_coro);
    uintptr_t name = PA_READ(uintptr_t, task + offsets.task_name);
    if (!pa_aligned(coro, 8) || !pa_aligned(name, 8))
        return 0;
    out->frame = coro + py->layout.gen_iframe;
    out->name = name;
    return 1;
}

/* ---- 3.11-3.13: the _asyncio module's _current_tasks dict ------------------------------ *
 *
 * Those versions keep each event loop's running task in a dict, loop -> task, that the
 * module also exposes as _asyncio._current_tasks. The handler finds it once by reading
 * sys.modules and the module's dict, then reads its few entries each sample (no running
 * loop: one read of its size). The search costs a pass over sys.modules, so it is tried only
 * when sys.modules has grown or shrunk since the last try (an import happened: perhaps
 * asyncio's): a few times during a program's imports, then never. */

/* A dict keys object's entries (3.11+): where they start, how many slots, their size and
 * where key and value sit in one. Keys of the general kind are (hash, key, value), of the
 * str-only and split kinds (key, value); a split dict's values are elsewhere. */
struct entries {
    uintptr_t base;
    long n;
    unsigned size, key, value;
};

static int keys_entries(const struct pa_python *py, uintptr_t keys, struct entries *e) {
    const struct pa_layout *l = &py->layout;
    if (!pa_aligned(keys, 8))
        return 0;
    unsigned kind = PA_READ(uint8_t, keys + l->dk_kind);
    unsigned log2_index_bytes = PA_READ(uint8_t, keys + l->dk_log2_index_bytes);
    e->n = PA_READ(long, keys + l->dk_nentries);
    if (log2_index_bytes > 32 || e->n < 0 || e->n > (1L << 20) || kind > 2)
        return 0;
    e->base = keys + l->dk_indices + ((uintptr_t)1 << log2_index_bytes);
    e->size = kind == 0 ? 24 : 16;
    e->key = kind == 0 ? 8 : 0;
    e->value = e->key + 8;
    return 1;
}

static int dict_entries(const struct pa_python *py, uintptr_t dict, struct entries *e) {
    const struct pa_layout *l = &py->layout;
    if (!pa_is_type(py, dict, py->dict_type) || PA_READ(uintptr_t, dict + l->dict_values) != 0)
        return 0;
    return keys_entries(py, PA_READ(uintptr_t, dict + l->dict_keys), e);
}

/* Is s the ASCII str key[0..len)? */
static int str_is(const struct pa_python *py, uintptr_t s, const char *key, long len) {
    const struct pa_layout *l = &py->layout;
    if (!pa_is_type(py, s, py->unicode_type) || PA_READ(long, s + l->u_length) != len ||
        !((PA_READ(uint32_t, s + l->u_state) >> 6) & 1))
        return 0;
    for (long i = 0; i < len; i++)
        if (PA_READ(char, s + l->u_ascii_size + i) != key[i])
            return 0;
    return 1;
}

long pa_py_keys_index(const struct pa_python *py, uintptr_t keys, const char *key) {
    struct entries e;
    if (!keys_entries(py, keys, &e))
        return -1;
    long len = (long)strlen(key);
    for (long i = 0; i < e.n; i++)
        if (str_is(py, PA_READ(uintptr_t, e.base + (uintptr_t)i * e.size + e.key), key, len))
            return i;
    return -1;
}

uintptr_t pa_py_dict_get(const struct pa_python *py, uintptr_t dict, const char *key) {
    const struct pa_layout *l = &py->layout;
    if (!pa_is_type(py, dict, py->dict_type))
        return 0;
    uintptr_t keys = PA_READ(uintptr_t, dict + l->dict_keys);
    uintptr_t values = PA_READ(uintptr_t, dict + l->dict_values);
    long i = pa_py_keys_index(py, keys, key);
    if (i < 0)
        return 0;
    if (values) /* split: the values array's slot i (3.13+ after a small header) */
        return pa_aligned(values, 8) ? PA_READ(uintptr_t, values + l->dv_values + 8 * (uintptr_t)i)
                                     : 0;
    struct entries e;
    if (!keys_entries(py, keys, &e))
        return 0;
    return PA_READ(uintptr_t, e.base + (uintptr_t)i * e.size + e.value);
}

static _Atomic uintptr_t current_tasks, current_interp;
static _Atomic long searched_len = -1;

/* _asyncio._current_tasks of the main interpreter interp, once it is imported, or 0. */
static uintptr_t find_current_tasks(const struct pa_python *py, uintptr_t interp) {
    const struct pa_layout *l = &py->layout;
    if (PA_READ(int64_t, interp + l->is_id) != 0)
        return 0;
    uintptr_t modules = PA_READ(uintptr_t, interp + l->is_modules);
    if (!pa_is_type(py, modules, py->dict_type))
        return 0;
    long len = PA_READ(long, modules + l->dict_used);
    if (len == atomic_load_explicit(&searched_len, memory_order_relaxed))
        return 0;
    atomic_store_explicit(&searched_len, len, memory_order_relaxed);
    uintptr_t mod = pa_py_dict_get(py, modules, "_asyncio");
    if (!pa_is_type(py, mod, py->module_type))
        return 0;
    uintptr_t tasks = pa_py_dict_get(py, PA_READ(uintptr_t, mod + l->mod_dict), "_current_tasks");
    if (!pa_is_type(py, tasks, py->dict_type))
        return 0;
    atomic_store_explicit(&current_interp, interp, memory_order_relaxed);
    atomic_store_explicit(&current_tasks, tasks, memory_order_release);
    return tasks;
}

static int running_in_dict(const struct pa_python *py, uintptr_t ts, struct pa_running_task *out) {
    const struct pa_layout *l = &py->layout;
    uintptr_t interp = PA_READ(uintptr_t, ts + l->ts_interp);
    if (!pa_aligned(interp, 8))
        return 0;
    uintptr_t tasks = atomic_load_explicit(&current_tasks, memory_order_acquire);
    if (!tasks)
        tasks = find_current_tasks(py, interp);
    if (!tasks || atomic_load_explicit(&current_interp, memory_order_relaxed) != interp ||
        PA_READ(long, tasks + l->dict_used) <= 0)
        return 0;
    struct entries e;
    if (!dict_entries(py, tasks, &e))
        return 0;
    int n = 0;
    /* Deleted entries stay in the entries array until a resize: a few loops' worth. */
    for (long i = 0; i < e.n && i < 64 && n < PA_TASKS_MAX; i++)
        n += candidate(py, PA_READ(uintptr_t, e.base + (uintptr_t)i * e.size + e.value), &out[n]);
    return n;
}

int pa_task_running(const struct pa_python *py, uintptr_t ts, struct pa_running_task *out) {
    if (!atomic_load_explicit(&known, memory_order_acquire) || !py->layout.gen_iframe)
        return 0;
    sigjmp_buf env;
    sigjmp_buf *volatile prev = pa_guard_env;
    pa_guard_env = &env;
    if (sigsetjmp(env, 0)) {
        pa_guard_env = prev;
        return 0;
    }
    int n = offsets.ts_running_task
                ? candidate(py, PA_READ(uintptr_t, ts + offsets.ts_running_task), out)
                : running_in_dict(py, ts, out);
    pa_guard_env = prev;
    return n;
}

/* FNV-1a: names are short, and equal bytes must meet in the same probe run. */
static uint32_t hash_bytes(const char *s, unsigned n) {
    uint32_t h = 2166136261u;
    for (unsigned i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* The index + 1 of the name in the table (added if new), or 0 when the table is full. */
static int32_t intern_name(const char *s, unsigned n) {
    uint32_t h = hash_bytes(s, n);
    for (uint32_t probe = 0; probe < MAX_PROBE; probe++) {
        uint32_t i = (h + probe) & (NAMES - 1);
        struct name_slot *slot = &names[i];
        uint32_t st = atomic_load_explicit(&slot->state, memory_order_acquire);
        if (st == SLOT_READY) {
            if (memcmp(slot->s, s, n + 1) == 0)
                return (int32_t)i + 1;
            continue;
        }
        if (st == SLOT_FILLING)
            continue; /* another thread's: a second copy of one name is harmless */
        uint32_t expected = SLOT_EMPTY;
        if (!atomic_compare_exchange_strong_explicit(&slot->state, &expected, SLOT_FILLING,
                                                     memory_order_acquire, memory_order_relaxed))
            continue;
        memcpy(slot->s, s, n + 1);
        atomic_store_explicit(&slot->state, SLOT_READY, memory_order_release);
        atomic_fetch_add_explicit(&names_used, 1, memory_order_relaxed);
        return (int32_t)i + 1;
    }
    atomic_fetch_add_explicit(&names_full, 1, memory_order_relaxed);
    return 0;
}

int pa_py_uint(const struct pa_python *py, uintptr_t obj, unsigned long long *out) {
    if (!py->long_type || !pa_is_type(py, obj, py->long_type))
        return 0;
    uintptr_t head = py->layout.ob_type + 8; /* 16, or 32 in a free-threaded build */
    long size = PA_READ(long, obj + head);
    long ndigits = size;
    if (py->minor >= 12) { /* lv_tag: digits << 3 | sign (0 positive, 1 zero, 2 negative) */
        if ((size & 3) == 1) {
            *out = 0;
            return 1;
        }
        ndigits = (size & 3) == 0 ? (long)((unsigned long)size >> 3) : -1;
    }
    if (ndigits < 0 || ndigits > 3)
        return 0;
    unsigned long long v = 0;
    for (long i = ndigits - 1; i >= 0; i--) {
        unsigned long long d = PA_READ(uint32_t, obj + head + 8 + 4 * (uintptr_t)i) & 0x3fffffffu;
        if (i == 2 && d > 15)
            return 0; /* 2^64 or more */
        v = (v << 30) | d;
    }
    *out = v;
    return 1;
}

struct pa_frame pa_task_frame(const struct pa_python *py, uintptr_t name) {
    struct pa_frame f = {PA_SYN_TASK, 0, 0};
    char buf[NAME_BYTES];
    int n = pa_code_copy_str(py, name, NAME_CHARS, buf, sizeof buf);
    if (n >= 0) {
        f.line = intern_name(buf, (unsigned)n);
        return f;
    }
    unsigned long long v;
    if (py->minor >= 12 && pa_py_uint(py, name, &v) && v < (1ULL << 62)) {
        f.line = (int32_t)(v & 0x7fffffff);
        f.instr = COUNTER_FLAG | (uint32_t)(v >> 31);
    }
    return f;
}

int pa_task_frame_name(const struct pa_frame *f, char *buf, size_t cap) {
    if (f->instr & COUNTER_FLAG) {
        unsigned long long n =
            ((unsigned long long)(f->instr & ~COUNTER_FLAG) << 31) | (uint32_t)f->line;
        return snprintf(buf, cap, "task:Task-%llu", n);
    }
    if (f->line > 0 && f->line <= NAMES) {
        const struct name_slot *slot = &names[f->line - 1];
        if (atomic_load_explicit(&slot->state, memory_order_acquire) == SLOT_READY)
            return snprintf(buf, cap, "task:%s", slot->s);
    }
    return snprintf(buf, cap, "task:<other>");
}

unsigned long pa_tasks_names_used(void) {
    return atomic_load(&names_used);
}

unsigned long pa_tasks_names_full(void) {
    return atomic_load(&names_full);
}
