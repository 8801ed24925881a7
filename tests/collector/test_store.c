/* Unit tests: the SQLite store — inserts from many threads, range semantics, label filters
 * through the query layer, retention. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "body.h"
#include "query.h"
#include "store.h"

static char msg[512];
static char path[256];

static int setup(void **state) {
    snprintf(path, sizeof path, "/tmp/pa-coll-test-%d.db", (int)getpid());
    unlink(path);
    struct pa_coll_store *st;
    struct pa_coll_store_options o = {
        .sync = PA_SYNC_NORMAL, .retention = 3600, .retention_every = 3600};
    if (pa_coll_store_open(&st, path, &o, msg, sizeof msg) != 0)
        return -1;
    *state = st;
    return 0;
}

static int teardown(void **state) {
    pa_coll_store_close(*state);
    char p[300];
    unlink(path);
    snprintf(p, sizeof p, "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", path);
    unlink(p);
    return 0;
}

static void insert(struct pa_coll_store *st, const char *labels, int64_t from, int64_t until,
                   const char *folded) {
    uint8_t *gz;
    size_t gzlen;
    assert_int_equal(pa_coll_gzip((const uint8_t *)folded, strlen(folded), &gz, &gzlen), 0);
    uint64_t samples = 0;
    for (const char *p = folded; (p = strchr(p, ' ')) != NULL; p++)
        samples += strtoull(p + 1, NULL, 10);
    struct pa_coll_upload u = {.app = "app.cpu",
                               .labels = labels,
                               .from = from,
                               .until = until,
                               .samples = samples,
                               .sample_rate = 100,
                               .spy_name = "test",
                               .profile = gz,
                               .profile_len = gzlen};
    assert_int_equal(pa_coll_store_insert(st, &u, msg, sizeof msg), 0);
    free(gz);
}

static uint64_t total(struct pa_coll_store *st, const char *query, int64_t from, int64_t until) {
    pa_profile *p;
    assert_int_equal(pa_coll_query_profile(st, query, from, until, &p, NULL, msg, sizeof msg), 0);
    uint64_t t = pa_profile_total(p);
    pa_profile_free(p);
    return t;
}

static void ranges_are_half_open_and_labels_filter(void **state) {
    struct pa_coll_store *st = *state;
    int64_t t0 = 1700000000;
    insert(st, "env=prod", t0, t0 + 10, "a;b 1\n");
    insert(st, "env=prod", t0 + 10, t0 + 20, "a;b 2\n");
    insert(st, "env=dev", t0 + 10, t0 + 20, "a;c 4\n");
    insert(st, "env=dev", t0 + 25, t0 + 25, "a;c 8\n"); /* zero-length */
    assert_int_equal(total(st, "app.cpu", t0, t0 + 30), 15);
    assert_int_equal(total(st, "app.cpu", t0, t0 + 10), 1);
    assert_int_equal(total(st, "app.cpu", t0 + 10, t0 + 20), 6);
    assert_int_equal(total(st, "app.cpu", t0 + 5, t0 + 15), 7);
    assert_int_equal(total(st, "app.cpu", t0 + 25, t0 + 26), 8);
    assert_int_equal(total(st, "app.cpu{env=prod}", t0, t0 + 30), 3);
    assert_int_equal(total(st, "app.cpu{env!=prod}", t0, t0 + 30), 12);
    assert_int_equal(total(st, "app.cpu{env=~\"d.*\"}", t0, t0 + 30), 12);
    assert_int_equal(total(st, "other.cpu", t0, t0 + 30), 0);
}

struct worker {
    struct pa_coll_store *st;
    int id;
};

static void *insert_many(void *arg) {
    struct worker *w = arg;
    char labels[32];
    snprintf(labels, sizeof labels, "w=%d", w->id);
    for (int i = 0; i < 50; i++)
        insert(w->st, labels, 1700000000 + i, 1700000001 + i, "x;y 1\n");
    return NULL;
}

static void concurrent_inserts_all_land(void **state) {
    struct pa_coll_store *st = *state;
    pthread_t t[8];
    struct worker w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (struct worker){st, i};
        pthread_create(&t[i], NULL, insert_many, &w[i]);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(total(st, "app.cpu", 1700000000, 1700000100), 400);
    assert_int_equal(total(st, "app.cpu{w=\"3\"}", 1700000000, 1700000100), 50);
}

static void retention_deletes_old_uploads(void **state) {
    struct pa_coll_store *st = *state;
    int64_t now = 1800000000;
    insert(st, "", now - 7200, now - 7190, "old 1\n");
    insert(st, "", now - 60, now - 50, "new 2\n");
    uint64_t deleted;
    assert_int_equal(pa_coll_store_retain(st, now, &deleted), 0);
    assert_int_equal(deleted, 1);
    assert_int_equal(total(st, "app.cpu", 0, now), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(ranges_are_half_open_and_labels_filter, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrent_inserts_all_land, setup, teardown),
        cmocka_unit_test_setup_teardown(retention_deletes_old_uploads, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
