/* table.h: the lock-free stack table the signal handler counts samples in.
 *
 * Fixed size, open addressing, atomics only. Two tables alternate: the handler counts into
 * the active one while the agent thread drains the other, so the handler never blocks and no
 * sample is lost in the swap. */
#ifndef PA_TABLE_H
#define PA_TABLE_H

#include <stdatomic.h>
#include <stdint.h>

#include "../base/reserve.h"
#include "frames.h"

struct pa_table_slot {
    _Atomic uint32_t state; /* 0 empty, 1 being written, 2 ready */
    uint32_t thread;        /* the sampled thread's serial number */
    uint32_t depth;
    uint32_t frames_off; /* index of frame 0 (the leaf) in the table's frame store */
    uint64_t hash;
    _Atomic uint64_t count;
};

/* When a sample was taken (PYAGENT_TIME_BUCKET_MS): one entry per sample, in the order they
 * came, next to the stack table (counting (stack, bucket) pairs in the table itself would
 * multiply its entries by the buckets of an interval). */
struct pa_time_entry {
    uint32_t slot;   /* the stack's slot in this table */
    uint32_t bucket; /* time bucket, counted from the process's first (pa_handler_time_base) */
    uint32_t weight; /* the sample's weight */
};

struct pa_table {
    struct pa_table_slot *slots;
    uint32_t mask;
    struct pa_frame *frames;
    uint32_t frames_cap;
    _Atomic uint32_t frames_used;
    _Atomic uint32_t writers;        /* handlers inside this table right now */
    _Atomic uint64_t samples;        /* counted */
    _Atomic uint64_t dropped;        /* table or frame store full */
    struct pa_time_entry *times_end; /* the log grows down from here (pa_table_time) */
    uint32_t times_cap;
    _Atomic uint32_t times_used;
    _Atomic uint64_t untimed; /* samples counted whose time did not fit in the log */
    /* The slots claimed since the last clear, in the order they were claimed (one entry per
     * slot at most, so it cannot overflow): the drain and the clear touch these slots only,
     * not the whole table, whose untouched pages a short program never faults in. */
    uint32_t *used;
    _Atomic uint32_t used_n;
    struct pa_reserve map; /* all of the above, around the slots (base/reserve.h) */
};

/* The time log's entry i (i < times_cap). Entries are stored downward from the slots, so the
 * first ones share the slots' 2 MiB area (base/reserve.h). */
static inline struct pa_time_entry *pa_table_time(const struct pa_table *t, uint32_t i) {
    return t->times_end - 1 - i;
}

/* Normal context. slots_log2: 2^n slots; frames_cap: frame store entries; times_cap: time
 * entries (0: no time log). 0 or -1. */
int pa_table_init(struct pa_table *t, unsigned slots_log2, uint32_t frames_cap, uint32_t times_cap);
void pa_table_destroy(struct pa_table *t);
/* Normal context, with handlers running: makes the frame store's first `frames` entries, and
 * with `slots` the whole slot array and its claim list, present and writable
 * (MADV_POPULATE_WRITE: contents untouched, so a handler writing there meanwhile loses
 * nothing), so that handlers do not take their first-touch page faults. Where the kernel
 * lacks it (before 5.14) nothing happens. */
void pa_table_prefault(struct pa_table *t, uint32_t frames, int slots);

/* Signal-safe, lock-free. Counts one sample of `frames` (leaf first) on `thread`; returns its
 * slot, or -1 when the sample had to be dropped (counted in t->dropped). */
int pa_table_add(struct pa_table *t, uint32_t thread, const struct pa_frame *frames, uint32_t depth,
                 uint64_t weight);

/* Signal-safe, lock-free: the sample just counted in slot was taken in bucket. A full log
 * counts it in t->untimed (the sample itself is counted). */
void pa_table_add_time(struct pa_table *t, uint32_t slot, uint32_t bucket, uint64_t weight);

/* Normal context, only on a table no handler can enter (see pa_tables_swap). */
void pa_table_clear(struct pa_table *t);
/* Normal context, as pa_table_clear: the claimed slots (READY, or BUSY when the frame store
 * was full), sorted by slot number, as a scan of the whole table would meet them; returns
 * how many, *slots points at them (valid until the table is cleared). */
uint32_t pa_table_used_slots(struct pa_table *t, const uint32_t **slots);
/* pa_table_clear for a forked child: a thread that did not survive the fork may have been
 * between claiming a slot and listing it, so every slot is cleared (if any was claimed). */
void pa_table_clear_all(struct pa_table *t);
/* No sample was added since the last clear (then there is nothing to read or clear). */
int pa_table_empty(const struct pa_table *t);

/* A pair of tables with an active pointer, as the sampler uses them. */
struct pa_tables {
    struct pa_table t[2];
    _Atomic(struct pa_table *) active;
};

/* Signal side: enter the active table (returns it) and leave it. */
struct pa_table *pa_tables_enter(struct pa_tables *ts);
void pa_tables_leave(struct pa_table *t);

/* Agent thread: makes the other table active and waits until no handler is still inside the
 * old one (at most 100 ms: a sample left by siglongjmp never leaves; counted in
 * pa_tables_abandoned), which it returns for draining (then pa_table_clear it). */
struct pa_table *pa_tables_swap(struct pa_tables *ts);
extern unsigned long pa_tables_abandoned;

#endif
