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

static struct name_slot names[NAMES];
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

int pa_task_running(const struct pa_python *py, uintptr_t ts, uintptr_t *coro_frame,
                    uintptr_t *name) {
    if (!atomic_load_explicit(&known, memory_order_acquire) || !py->layout.gen_iframe)
        return 0;
    sigjmp_buf env;
    sigjmp_buf *volatile prev = pa_guard_env;
    pa_guard_env = &env;
    if (sigsetjmp(env, 0)) {
        pa_guard_env = prev;
        return 0;
    }
    int found = 0;
    uintptr_t task = PA_READ(uintptr_t, ts + offsets.ts_running_task);
    if (task && pa_aligned(task, 8)) {
        uintptr_t coro = PA_READ(uintptr_t, task + offsets.task_coro);
        *name = PA_READ(uintptr_t, task + offsets.task_name);
        if (coro && pa_aligned(coro, 8) && pa_aligned(*name, 8)) {
            *coro_frame = coro + py->layout.gen_iframe;
            found = 1;
        }
    }
    pa_guard_env = prev;
    return found;
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

/* The value of a small non-negative int object (3.12+ layout: lv_tag, then 30-bit digits),
 * or -1. Task counters start at 1 and stay far below 2^60. */
static long long small_int(uintptr_t obj) {
    uintptr_t tag = PA_READ(uintptr_t, obj + 16);
    unsigned sign = tag & 3, ndigits = (unsigned)(tag >> 3);
    if (sign == 1)
        return 0;
    if (sign != 0 || ndigits == 0 || ndigits > 2)
        return -1;
    unsigned long long v = PA_READ(uint32_t, obj + 24) & 0x3fffffffu;
    if (ndigits == 2)
        v |= (unsigned long long)(PA_READ(uint32_t, obj + 28) & 0x3fffffffu) << 30;
    return (long long)v;
}

struct pa_frame pa_task_frame(const struct pa_python *py, uintptr_t name) {
    struct pa_frame f = {PA_SYN_TASK, 0, 0};
    char buf[NAME_BYTES];
    int n = pa_code_copy_str(py, name, NAME_CHARS, buf, sizeof buf);
    if (n >= 0) {
        f.line = intern_name(buf, (unsigned)n);
        return f;
    }
    if (py->long_type && py->minor >= 12 && pa_aligned(name, 8) &&
        PA_READ(uintptr_t, name + 8) == py->long_type) {
        long long v = small_int(name);
        if (v >= 0) {
            f.line = (int32_t)(v & 0x7fffffff);
            f.instr = COUNTER_FLAG | (uint32_t)((unsigned long long)v >> 31);
        }
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
