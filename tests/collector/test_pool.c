/* Unit tests: the query pool's admission limits, time budget and stop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "pool.h"

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static atomic_int ran, cancelled_runs, saw_budget_spent;

/* Waits until the gate opens, so that admitted jobs stay admitted while the test looks. */
static void held(void *arg, bool cancelled) {
    (void)arg;
    pthread_mutex_lock(&gate_lock);
    while (!gate_open && !cancelled)
        pthread_cond_wait(&gate_cond, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
    atomic_fetch_add(cancelled ? &cancelled_runs : &ran, 1);
}

static void open_gate(void) {
    pthread_mutex_lock(&gate_lock);
    gate_open = true;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
}

static void limits_total_and_per_client(void **state) {
    (void)state;
    struct pa_coll_pool *p;
    struct pa_coll_pool_config cfg = {.threads = 1, .max_total = 3, .max_per_client = 2};
    assert_int_equal(pa_coll_pool_start(&p, &cfg), 0);
    pa_error e;
    gate_open = false;
    assert_int_equal(pa_coll_pool_submit(p, "10.0.0.1", held, NULL, &e), 0);
    assert_int_equal(pa_coll_pool_submit(p, "10.0.0.1", held, NULL, &e), 0);
    assert_int_equal(pa_coll_pool_submit(p, "10.0.0.1", held, NULL, &e), 503);
    assert_non_null(strstr(e.msg, "your address"));
    assert_int_equal(pa_coll_pool_submit(p, "10.0.0.2", held, NULL, &e), 0);
    assert_int_equal(pa_coll_pool_submit(p, "10.0.0.3", held, NULL, &e), 503);
    assert_non_null(strstr(e.msg, "retry"));
    open_gate();
    pa_coll_pool_stop(p);
    /* Each admitted job ran once: to the end, or as cancelled when stop came first. */
    assert_int_equal(atomic_load(&ran) + atomic_load(&cancelled_runs), 3);
    /* Stopped: every submit is refused, nothing is left to run. */
    assert_int_equal(pa_coll_pool_submit(p, "10.0.0.4", held, NULL, &e), 503);
    pa_coll_pool_free(p);
}

static void watch_budget(void *arg, bool cancelled) {
    (void)arg, (void)cancelled;
    struct timespec tick = {0, 5 * 1000 * 1000};
    for (int i = 0; i < 400 && !pa_coll_budget_spent(); i++)
        nanosleep(&tick, NULL);
    atomic_store(&saw_budget_spent, pa_coll_budget_spent());
}

static void the_budget_is_armed_on_the_worker_only(void **state) {
    (void)state;
    assert_false(pa_coll_budget_spent());
    struct pa_coll_pool *p;
    struct pa_coll_pool_config cfg = {
        .threads = 1, .max_total = 2, .max_per_client = 2, .budget_ms = 50};
    assert_int_equal(pa_coll_pool_start(&p, &cfg), 0);
    pa_error e;
    assert_int_equal(pa_coll_pool_submit(p, "a", watch_budget, NULL, &e), 0);
    pa_coll_pool_stop(p);
    pa_coll_pool_free(p);
    assert_true(atomic_load(&saw_budget_spent));
}

static void queued_jobs_are_cancelled_at_stop(void **state) {
    (void)state;
    struct pa_coll_pool *p;
    struct pa_coll_pool_config cfg = {.threads = 1, .max_total = 4, .max_per_client = 4};
    assert_int_equal(pa_coll_pool_start(&p, &cfg), 0);
    pa_error e;
    gate_open = false;
    atomic_store(&ran, 0);
    atomic_store(&cancelled_runs, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pa_coll_pool_submit(p, "a", held, NULL, &e), 0);
    /* The running one sees cancelled = false and waits on the gate; stop must not hang on it
     * once the gate opens, and the two queued ones run as cancelled. */
    open_gate();
    pa_coll_pool_stop(p);
    pa_coll_pool_free(p);
    assert_int_equal(atomic_load(&ran) + atomic_load(&cancelled_runs), 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(limits_total_and_per_client),
        cmocka_unit_test(the_budget_is_armed_on_the_worker_only),
        cmocka_unit_test(queued_jobs_are_cancelled_at_stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
