/* test_table.c: the stack table under concurrency.
 *
 * Several threads count stacks in the table from their own code and from a SIGPROF handler
 * driven by a per-thread CPU timer, while another thread keeps swapping and draining the
 * tables. Every count added must be found exactly once in the drained totals: none lost,
 * none doubled; and every count's time entry once, with its own stack's slot. Runs under TSan
 * too (label tsan). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../agent/table.h"

enum { THREADS = 6, ITERS = 200000, STACKS = 64, DEPTH_MAX = 24 };

static struct pa_tables tables;
static _Atomic int stop_drainer;
static uint64_t drained_per_thread[THREADS + 1];
static _Atomic uint64_t handler_adds[THREADS + 1];
static _Atomic uint64_t dropped_total;
static uint64_t timed_per_thread[THREADS + 1], untimed_total;
static __thread uint32_t my_thread;

static void make_stack(uint32_t seed, struct pa_frame *f, uint32_t *depth) {
    *depth = 1 + seed % DEPTH_MAX;
    for (uint32_t i = 0; i < *depth; i++) {
        f[i].id = 16 + (seed * 31 + i * 7) % 1000;
        f[i].line = (int32_t)(seed + i);
        f[i].instr = 0;
    }
}

static void add(uint32_t seed) {
    struct pa_frame f[DEPTH_MAX];
    uint32_t d;
    make_stack(seed, f, &d);
    struct pa_table *t = pa_tables_enter(&tables);
    int r = pa_table_add(t, my_thread, f, d, 1);
    if (r >= 0)
        pa_table_add_time(t, (uint32_t)r, seed % 7, 1);
    pa_tables_leave(t);
    if (r < 0)
        atomic_fetch_add(&dropped_total, 1);
}

static void on_prof(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)si;
    (void)uc;
    if (!my_thread)
        return;
    add(my_thread * 1000 + 7);
    atomic_fetch_add(&handler_adds[my_thread], 1);
}

/* The table's list of claimed slots (what the drain reads, pa_table_used_slots) is, sorted,
 * exactly the slots that are not empty. */
static void check_used_list(struct pa_table *t) {
    const uint32_t *used;
    uint32_t n = pa_table_used_slots(t, &used), k = 0;
    for (uint32_t i = 0; i <= t->mask; i++) {
        if (atomic_load(&t->slots[i].state) == 0)
            continue;
        assert_true(k < n);
        assert_int_equal(used[k++], i);
    }
    assert_int_equal(k, n);
}

static void drain_once(void) {
    struct pa_table *t = pa_tables_swap(&tables);
    check_used_list(t);
    for (uint32_t i = 0; i <= t->mask; i++) {
        struct pa_table_slot *s = &t->slots[i];
        if (atomic_load(&s->state) == 2)
            drained_per_thread[s->thread] += atomic_load(&s->count);
    }
    uint32_t n = atomic_load(&t->times_used);
    if (n > t->times_cap)
        n = t->times_cap;
    for (uint32_t i = 0; i < n; i++) {
        const struct pa_table_slot *s = &t->slots[pa_table_time(t, i)->slot];
        assert_int_equal(atomic_load(&s->state), 2); /* a time entry names a counted stack */
        timed_per_thread[s->thread] += pa_table_time(t, i)->weight;
    }
    untimed_total += atomic_load(&t->untimed);
    atomic_fetch_add(&dropped_total, 0);
    pa_table_clear(t);
}

static void *drainer(void *arg) {
    (void)arg;
    while (!atomic_load(&stop_drainer)) {
        drain_once();
        struct timespec ns = {0, 200000};
        nanosleep(&ns, NULL);
    }
    return NULL;
}

static void *worker(void *arg) {
    my_thread = (uint32_t)(uintptr_t)arg;
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    timer_t timer;
    int have_timer = timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &timer) == 0;
    if (have_timer) {
        struct itimerspec its = {{0, 1000000}, {0, 1000000}};
        timer_settime(timer, 0, &its, NULL);
    }
    for (uint32_t i = 0; i < ITERS; i++)
        add(my_thread * 100000 + i % STACKS);
    if (have_timer)
        timer_delete(timer);
    return NULL;
}

static void table_counts_every_sample_exactly_once(void **state) {
    (void)state;
    assert_int_equal(pa_table_init(&tables.t[0], 12, 1u << 18, 1u << 16), 0);
    assert_int_equal(pa_table_init(&tables.t[1], 12, 1u << 18, 1u << 16), 0);
    atomic_store(&tables.active, &tables.t[0]);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_prof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGPROF, &sa, NULL);

    pthread_t d, w[THREADS];
    pthread_create(&d, NULL, drainer, NULL);
    for (uintptr_t i = 0; i < THREADS; i++)
        pthread_create(&w[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < THREADS; i++)
        pthread_join(w[i], NULL);
    atomic_store(&stop_drainer, 1);
    pthread_join(d, NULL);
    drain_once();
    drain_once();

    uint64_t signals = 0, counted = 0, timed = 0;
    for (int i = 1; i <= THREADS; i++) {
        uint64_t want = ITERS + atomic_load(&handler_adds[i]);
        signals += atomic_load(&handler_adds[i]);
        assert_int_equal(drained_per_thread[i], want);
        assert_true(timed_per_thread[i] <= want);
        counted += want;
        timed += timed_per_thread[i];
    }
    /* Every sample has a time entry, or was counted as untimed (a full log). */
    assert_int_equal(timed + untimed_total, counted);
    assert_int_equal(atomic_load(&dropped_total), 0);
    /* The test means nothing if no signal fired while threads were counting. */
    assert_true(signals > 0);
    pa_table_destroy(&tables.t[0]);
    pa_table_destroy(&tables.t[1]);
}

static void full_table_drops_and_counts(void **state) {
    (void)state;
    struct pa_table t;
    assert_int_equal(pa_table_init(&t, 4, 64, 0), 0); /* 16 slots, 64 frames */
    struct pa_frame f[DEPTH_MAX];
    uint32_t d;
    int ok = 0, dropped = 0;
    for (uint32_t i = 0; i < 100; i++) {
        make_stack(i * 13 + 1, f, &d);
        if (pa_table_add(&t, 1, f, d, 1) >= 0)
            ok++;
        else
            dropped++;
    }
    assert_true(dropped > 0);
    assert_int_equal((uint64_t)ok, atomic_load(&t.samples));
    assert_int_equal((uint64_t)dropped, atomic_load(&t.dropped));
    /* A stack already present still counts when the table is full. */
    make_stack(1, f, &d);
    uint64_t before = atomic_load(&t.samples);
    if (pa_table_add(&t, 1, f, d, 5) >= 0)
        assert_int_equal(atomic_load(&t.samples), before + 5);
    /* Slots left BUSY by a full frame store are listed too, and cleared with the rest. */
    check_used_list(&t);
    pa_table_clear(&t);
    for (uint32_t i = 0; i <= t.mask; i++)
        assert_int_equal(atomic_load(&t.slots[i].state), 0);
    pa_table_destroy(&t);
}

static void clear_empties_every_slot_claimed(void **state) {
    (void)state;
    struct pa_table t;
    assert_int_equal(pa_table_init(&t, 12, 1u << 16, 0), 0); /* past the first page */
    struct pa_frame f[DEPTH_MAX];
    uint32_t d;
    for (int round = 0; round < 3; round++) {
        for (uint32_t i = 0; i < 1500; i++) {
            make_stack(i * 7 + (uint32_t)round, f, &d);
            assert_true(pa_table_add(&t, 1 + i % 3, f, d, 1) >= 0);
        }
        check_used_list(&t);
        pa_table_clear(&t);
        for (uint32_t i = 0; i <= t.mask; i++)
            assert_int_equal(atomic_load(&t.slots[i].state), 0);
        assert_true(pa_table_empty(&t));
    }
    pa_table_destroy(&t);
}

static void same_stack_other_thread_is_another_entry(void **state) {
    (void)state;
    struct pa_table t;
    assert_int_equal(pa_table_init(&t, 8, 1024, 0), 0);
    struct pa_frame f[DEPTH_MAX];
    uint32_t d;
    make_stack(42, f, &d);
    int a = pa_table_add(&t, 1, f, d, 3), b = pa_table_add(&t, 2, f, d, 4);
    assert_true(a >= 0 && b >= 0 && a != b);
    assert_int_equal(pa_table_add(&t, 1, f, d, 1), a);
    uint64_t c1 = 0, c2 = 0;
    int entries = 0;
    for (uint32_t i = 0; i <= t.mask; i++)
        if (atomic_load(&t.slots[i].state) == 2) {
            entries++;
            if (t.slots[i].thread == 1)
                c1 += t.slots[i].count;
            else
                c2 += t.slots[i].count;
        }
    assert_int_equal(entries, 2);
    assert_int_equal(c1, 4);
    assert_int_equal(c2, 4);
    pa_table_destroy(&t);
}

static void same_line_other_instruction_is_another_entry(void **state) {
    (void)state;
    struct pa_table t;
    assert_int_equal(pa_table_init(&t, 8, 1024, 0), 0);
    struct pa_frame f[DEPTH_MAX];
    uint32_t d;
    make_stack(7, f, &d);
    int a = pa_table_add(&t, 1, f, d, 1);
    f[0].instr = (5u << 8) | 0x64; /* the same frame at another instruction */
    int b = pa_table_add(&t, 1, f, d, 1);
    assert_true(a >= 0 && b >= 0 && a != b);
    long off;
    unsigned op;
    assert_true(pa_frame_instr(&f[0], &off, &op));
    assert_int_equal(off, 8);
    assert_int_equal(op, 0x64);
    pa_table_destroy(&t);
}

static void time_log_names_slots_and_counts_overflow(void **state) {
    (void)state;
    struct pa_table t;
    assert_int_equal(pa_table_init(&t, 8, 1024, 3), 0); /* three time entries */
    struct pa_frame f[DEPTH_MAX];
    uint32_t d;
    make_stack(9, f, &d);
    int slot = pa_table_add(&t, 1, f, d, 2);
    assert_true(slot >= 0);
    pa_table_add_time(&t, (uint32_t)slot, 10, 2);
    pa_table_add_time(&t, (uint32_t)slot, 11, 1);
    pa_table_add_time(&t, (uint32_t)slot, 11, 1);
    pa_table_add_time(&t, (uint32_t)slot, 12, 4); /* no room: untimed */
    assert_int_equal(pa_table_time(&t, 0)->slot, (uint32_t)slot);
    assert_int_equal(pa_table_time(&t, 0)->bucket, 10);
    assert_int_equal(pa_table_time(&t, 0)->weight, 2);
    assert_int_equal(pa_table_time(&t, 2)->bucket, 11);
    assert_int_equal(atomic_load(&t.untimed), 4);
    pa_table_clear(&t);
    assert_int_equal(atomic_load(&t.times_used), 0);
    assert_int_equal(atomic_load(&t.untimed), 0);
    pa_table_destroy(&t);
}

/* A handler that entered a table and never left it (a program's handler nested in the sample
 * jumped out with siglongjmp): the swap takes the table after its bound and resets the count,
 * and the next swaps of that table do not wait again (harmless.md, class 19). */
static void swap_takes_a_table_a_writer_never_left(void **state) {
    (void)state;
    struct pa_tables ts;
    memset(&ts, 0, sizeof ts);
    assert_int_equal(pa_table_init(&ts.t[0], 10, 1u << 12, 0), 0);
    assert_int_equal(pa_table_init(&ts.t[1], 10, 1u << 12, 0), 0);
    atomic_store(&ts.active, &ts.t[0]);
    unsigned long before = pa_tables_abandoned;
    struct pa_table *left = pa_tables_enter(&ts); /* never left */
    /* Before the bound, this swap never returned. */
    assert_ptr_equal(pa_tables_swap(&ts), left);
    assert_int_equal(pa_tables_abandoned, before + 1);
    assert_int_equal(atomic_load(&left->writers), 0);
    /* Both tables swap again without waiting for anyone. */
    assert_ptr_equal(pa_tables_swap(&ts), &ts.t[1]);
    assert_ptr_equal(pa_tables_swap(&ts), &ts.t[0]);
    assert_int_equal(pa_tables_abandoned, before + 1);
    pa_table_destroy(&ts.t[0]);
    pa_table_destroy(&ts.t[1]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(table_counts_every_sample_exactly_once),
        cmocka_unit_test(full_table_drops_and_counts),
        cmocka_unit_test(clear_empties_every_slot_claimed),
        cmocka_unit_test(same_stack_other_thread_is_another_entry),
        cmocka_unit_test(same_line_other_instruction_is_another_entry),
        cmocka_unit_test(time_log_names_slots_and_counts_overflow),
        cmocka_unit_test(swap_takes_a_table_a_writer_never_left),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
