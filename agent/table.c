/* table.c: the lock-free stack table (see table.h).
 *
 * SIGNAL-HANDLER SIDE for pa_table_add, pa_tables_enter and pa_tables_leave: atomics on
 * memory mapped at start-up, nothing else.
 *
 * A slot goes EMPTY -> BUSY (claimed by CAS) -> READY (release). Two threads inserting the
 * same new stack at once may both claim a slot: the second sees BUSY, moves on, and adds a
 * duplicate entry. Duplicates carry correct counts and are merged by content when the table
 * is drained, so the handler never waits for another thread. */
#include "table.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "../base/clock.h"

enum { SLOT_EMPTY = 0, SLOT_BUSY = 1, SLOT_READY = 2 };
enum { MAX_PROBE = 128 };
/* A new stack is placed in the table's first page if one of FIRST_PROBE slots there is free
 * (probed first), else in the rest of the table: a short program's few stacks then fault in
 * one page of slots from the signal handler, not one page each (a few microseconds each on a
 * VM). The probe order is fixed per hash, so a stack is found where it was placed. The rest
 * of the table never probes the first page: full, it would be a cluster of 128 slots that
 * stacks hashed near it could not probe past. */
enum { FIRST_SLOTS = 4096 / sizeof(struct pa_table_slot), FIRST_PROBE = 8 };

/* The table's four arrays are parts of one mapping, each on pages of its own: one system call
 * and one memory area, not four, at every start and in every forked child. The time log lies
 * under the slots and grows down, the claim list and the frame store over them grow up: a
 * short program's samples touch the first page of each, all in one 2 MiB area
 * (base/reserve.h; docs/architecture.md, "Start-up cost"). */
static size_t page_round(size_t bytes) {
    return (bytes + 4095) & ~(size_t)4095;
}

static size_t slots_bytes(const struct pa_table *t) {
    return page_round(((size_t)t->mask + 1) * sizeof *t->slots);
}

static size_t used_bytes(const struct pa_table *t) {
    return page_round(((size_t)t->mask + 1) * sizeof *t->used);
}

static size_t frames_bytes(const struct pa_table *t) {
    return page_round((size_t)t->frames_cap * sizeof *t->frames);
}

int pa_table_init(struct pa_table *t, unsigned slots_log2, uint32_t frames_cap,
                  uint32_t times_cap) {
    memset(t, 0, sizeof *t);
    t->mask = (uint32_t)(((size_t)1 << slots_log2) - 1);
    t->frames_cap = frames_cap;
    t->times_cap = times_cap;
    char *p = pa_reserve_around((size_t)times_cap * sizeof(struct pa_time_entry),
                                slots_bytes(t) + used_bytes(t) + frames_bytes(t), &t->map);
    if (!p) {
        memset(t, 0, sizeof *t);
        return -1;
    }
    char *used = p + slots_bytes(t), *frames = used + used_bytes(t);
    t->slots = (struct pa_table_slot *)p;
    t->used = (uint32_t *)used;
    t->frames = (struct pa_frame *)frames;
    t->times_end = times_cap ? (struct pa_time_entry *)p : NULL;
    return 0;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

static void populate(void *p, size_t bytes) {
    bytes = page_round(bytes);
    if (p && bytes)
        (void)madvise(p, bytes, MADV_POPULATE_WRITE);
}

void pa_table_prefault(struct pa_table *t, uint32_t frames, int slots) {
    populate(t->frames,
             (size_t)(frames < t->frames_cap ? frames : t->frames_cap) * sizeof *t->frames);
    if (slots) {
        populate(t->slots, ((size_t)t->mask + 1) * sizeof *t->slots);
        populate(t->used, ((size_t)t->mask + 1) * sizeof *t->used);
    }
}

void pa_table_destroy(struct pa_table *t) {
    pa_reserve_release(&t->map);
    memset(t, 0, sizeof *t);
}

static uint64_t hash_stack(uint32_t thread, const struct pa_frame *f, uint32_t depth) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ thread;
    for (uint32_t i = 0; i < depth; i++) {
        h ^= ((uint64_t)f[i].id << 32) | (uint32_t)f[i].line;
        h ^= (uint64_t)f[i].instr << 17;
        h *= 0x100000001b3ULL;
        h ^= h >> 29;
    }
    return h ? h : 1;
}

static int same_stack(const struct pa_table *t, const struct pa_table_slot *s, uint32_t thread,
                      const struct pa_frame *f, uint32_t depth) {
    if (s->thread != thread || s->depth != depth)
        return 0;
    const struct pa_frame *g = &t->frames[s->frames_off];
    for (uint32_t i = 0; i < depth; i++)
        if (g[i].id != f[i].id || g[i].line != f[i].line || g[i].instr != f[i].instr)
            return 0;
    return 1;
}

int pa_table_add(struct pa_table *t, uint32_t thread, const struct pa_frame *frames, uint32_t depth,
                 uint64_t weight) {
    uint64_t h = hash_stack(thread, frames, depth);
    /* Only a table of 2 pages or more has a first page apart (the rest then has at least
     * MAX_PROBE slots, so a probe sequence wraps at most once). */
    int paged = t->mask + 1 >= 2 * FIRST_SLOTS;
    uint32_t first = paged ? FIRST_PROBE : 0, rest = t->mask + 1 - FIRST_SLOTS;
    uint32_t home = paged ? (uint32_t)(h % rest) : 0;
    for (uint32_t probe = 0; probe < first + MAX_PROBE; probe++) {
        uint32_t at;
        if (!paged) {
            at = (uint32_t)((h + probe) & t->mask);
        } else if (probe < first) {
            at = (uint32_t)((h + probe) % FIRST_SLOTS);
        } else {
            at = home + probe - first;
            at = FIRST_SLOTS + (at >= rest ? at - rest : at);
        }
        struct pa_table_slot *s = &t->slots[at];
        uint32_t st = atomic_load_explicit(&s->state, memory_order_acquire);
        if (st == SLOT_READY) {
            if (s->hash == h && same_stack(t, s, thread, frames, depth)) {
                atomic_fetch_add_explicit(&s->count, weight, memory_order_relaxed);
                atomic_fetch_add_explicit(&t->samples, weight, memory_order_relaxed);
                return (int)at;
            }
            continue;
        }
        if (st == SLOT_BUSY)
            continue;
        uint32_t expected = SLOT_EMPTY;
        if (!atomic_compare_exchange_strong_explicit(&s->state, &expected, SLOT_BUSY,
                                                     memory_order_acquire, memory_order_relaxed))
            continue;
        /* Each slot is claimed once between clears: the list has room for every slot. Read
         * only after the swap saw every writer leave (pa_tables_swap). */
        t->used[atomic_fetch_add_explicit(&t->used_n, 1, memory_order_relaxed)] = at;
        uint32_t off = atomic_fetch_add_explicit(&t->frames_used, depth, memory_order_relaxed);
        if ((uint64_t)off + depth > t->frames_cap) {
            /* The frame store is full. The slot stays BUSY (skipped by readers and writers)
             * until the table is cleared. */
            atomic_fetch_add_explicit(&t->dropped, weight, memory_order_relaxed);
            return -1;
        }
        memcpy(&t->frames[off], frames, depth * sizeof *frames);
        s->thread = thread;
        s->depth = depth;
        s->frames_off = off;
        s->hash = h;
        atomic_store_explicit(&s->count, weight, memory_order_relaxed);
        atomic_fetch_add_explicit(&t->samples, weight, memory_order_relaxed);
        atomic_store_explicit(&s->state, SLOT_READY, memory_order_release);
        return (int)at;
    }
    atomic_fetch_add_explicit(&t->dropped, weight, memory_order_relaxed);
    return -1;
}

void pa_table_add_time(struct pa_table *t, uint32_t slot, uint32_t bucket, uint64_t weight) {
    uint32_t i =
        t->times_cap ? atomic_fetch_add_explicit(&t->times_used, 1, memory_order_relaxed) : 0;
    if (i >= t->times_cap) {
        atomic_fetch_add_explicit(&t->untimed, weight, memory_order_relaxed);
        return;
    }
    /* Read by the drain only after the swap saw every writer leave (pa_tables_swap). */
    struct pa_time_entry *e = pa_table_time(t, i);
    e->slot = slot;
    e->bucket = bucket;
    e->weight = (uint32_t)weight;
}

int pa_table_empty(const struct pa_table *t) {
    /* Every claimed slot reserved frames first, so no frames used means no slot claimed. */
    return atomic_load(&t->frames_used) == 0;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

uint32_t pa_table_used_slots(struct pa_table *t, const uint32_t **slots) {
    uint32_t n = atomic_load(&t->used_n);
    qsort(t->used, n, sizeof *t->used, cmp_u32);
    *slots = t->used;
    return n;
}

void pa_table_clear(struct pa_table *t) {
    /* Only the slots claimed are cleared: the rest of the megabyte of slots was never
     * written, and touching it would fault every page in (most of the exit cost of a short
     * program). */
    uint32_t n = atomic_load(&t->used_n);
    for (uint32_t i = 0; i < n; i++)
        memset(&t->slots[t->used[i]], 0, sizeof *t->slots);
    atomic_store(&t->used_n, 0);
    atomic_store(&t->frames_used, 0);
    atomic_store(&t->samples, 0);
    atomic_store(&t->dropped, 0);
    atomic_store(&t->times_used, 0);
    atomic_store(&t->untimed, 0);
}

void pa_table_clear_all(struct pa_table *t) {
    if (!pa_table_empty(t))
        memset(t->slots, 0, ((size_t)t->mask + 1) * sizeof *t->slots);
    pa_table_clear(t);
}

struct pa_table *pa_tables_enter(struct pa_tables *ts) {
    for (;;) {
        struct pa_table *t = atomic_load(&ts->active);
        atomic_fetch_add(&t->writers, 1);
        /* seq_cst: either the swapper sees our increment, or we see its new pointer. */
        if (atomic_load(&ts->active) == t)
            return t;
        atomic_fetch_sub(&t->writers, 1);
    }
}

void pa_tables_leave(struct pa_table *t) {
    atomic_fetch_sub(&t->writers, 1);
}

unsigned long pa_tables_abandoned;

/* How long the swap waits for the handlers still inside the old table. */
#define SWAP_WAIT_NS 100000000u

struct pa_table *pa_tables_swap(struct pa_tables *ts) {
    struct pa_table *old = atomic_load(&ts->active);
    struct pa_table *next = old == &ts->t[0] ? &ts->t[1] : &ts->t[0];
    atomic_store(&ts->active, next);
    /* A handler runs for microseconds; poll gently until the last one has left. One may
     * never leave: a program's handler that came during that sample and left by siglongjmp
     * (C libraries' alarm() timeouts) abandons it inside the table. Past SWAP_WAIT_NS the
     * table is taken anyway and its count of writers reset (a writer really still inside,
     * preempted that long, adds at most its one sample while the table is drained or to the
     * next round of it); counted in pa_tables_abandoned. Without the bound, every later drain,
     * the exit's included, would wait for good. */
    uint64_t t0 = pa_mono_ns();
    while (atomic_load(&old->writers) != 0) {
        struct timespec ns = {0, 20000};
        nanosleep(&ns, NULL);
        if (pa_mono_ns() - t0 > SWAP_WAIT_NS) {
            atomic_store(&old->writers, 0);
            pa_tables_abandoned++;
            break;
        }
    }
    return old;
}
