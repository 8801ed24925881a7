/* Unit tests: the SQLite store — inserts from many threads, range semantics, label filters
 * through the query layer, retention. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
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

static pa_error e;
static char path[256];

static int setup(void **state) {
    snprintf(path, sizeof path, "/tmp/pa-coll-test-%d.db", (int)getpid());
    unlink(path);
    struct pa_coll_store *st;
    struct pa_coll_store_options o = {
        .sync = PA_SYNC_NORMAL, .retention = 3600, .retention_every = 3600};
    if (pa_coll_store_open(&st, path, &o, &e) != 0)
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
    assert_int_equal(pa_coll_store_insert(st, &u, &e), 0);
    free(gz);
}

static uint64_t total(struct pa_coll_store *st, const char *query, int64_t from, int64_t until) {
    pa_profile *p;
    assert_int_equal(pa_coll_query_profile(st, query, from, until, &p, NULL, &e), 0);
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

/* Uploads of one series over three hours, some straddling an hour, one of zero length. */
static const struct {
    int64_t from, until;
    uint64_t samples;
} hours_of_uploads[] = {
    {0, 10, 1},        {10, 20, 2},         {1795, 1805, 4},      {3590, 3610, 8},
    {3600, 3610, 16},  {5000, 5000, 32},    {7190, 7200, 64},     {7200, 7210, 128},
    {9000, 9010, 256}, {10790, 10800, 512}, {10800, 10810, 1024},
};
#define T_HOURS 1799996400 /* a multiple of 3600 */

/* What pa_coll_store_scan promises, computed from the list above. */
static uint64_t expected(int64_t from, int64_t until, int64_t dropped_before) {
    uint64_t t = 0;
    for (size_t i = 0; i < sizeof hours_of_uploads / sizeof hours_of_uploads[0]; i++) {
        int64_t f = T_HOURS + hours_of_uploads[i].from, u = T_HOURS + hours_of_uploads[i].until;
        if (u < dropped_before)
            continue;
        if (f < until && (u > from || f >= from))
            t += hours_of_uploads[i].samples;
    }
    return t;
}

static void insert_hours(struct pa_coll_store *st) {
    for (size_t i = 0; i < sizeof hours_of_uploads / sizeof hours_of_uploads[0]; i++) {
        char folded[64];
        snprintf(folded, sizeof folded, "u%zu;f %llu\n", i,
                 (unsigned long long)hours_of_uploads[i].samples);
        insert(st, "", T_HOURS + hours_of_uploads[i].from, T_HOURS + hours_of_uploads[i].until,
               folded);
    }
}

/* check_ranges, with one more upload of `extra` samples over [at, at + 10). */
static void check_ranges_with(struct pa_coll_store *st, int64_t dropped_before, int64_t at,
                              uint64_t extra) {
    static const int64_t edges[] = {0,    5,    10,   60,   600,  1200, 1740,  1800,  3540, 3599,
                                    3600, 3605, 3660, 3960, 4000, 4020, 4200,  4800,  4980, 5000,
                                    5001, 5040, 6600, 7140, 7200, 9000, 10800, 10805, 14400};
    for (size_t a = 0; a < sizeof edges / sizeof edges[0]; a++)
        for (size_t b = a + 1; b < sizeof edges / sizeof edges[0]; b++) {
            int64_t from = T_HOURS + edges[a], until = T_HOURS + edges[b];
            uint64_t want = expected(from, until, dropped_before);
            if (at < until && at + 10 > from)
                want += extra;
            assert_int_equal(total(st, "app.cpu", from, until), want);
        }
}

static void check_ranges(struct pa_coll_store *st, int64_t dropped_before) {
    check_ranges_with(st, dropped_before, 0, 0);
}

static void rollups_keep_every_range_exact(void **state) {
    struct pa_coll_store *st = *state;
    insert_hours(st);
    check_ranges(st, 0);
    uint64_t built;
    /* Only what ended a grace period ago is due: at the end of hour 0, its minutes 0 and 29
     * and their 10 minutes, but not minute 59, its 10 minutes, nor the hour itself. */
    assert_int_equal(pa_coll_store_compact(st, T_HOURS + 3600, &built), 0);
    assert_int_equal(built, 4);
    check_ranges(st, 0);
    assert_int_equal(pa_coll_store_compact(st, T_HOURS + 4 * 3600 + PA_COLL_ROLLUP_GRACE, &built),
                     0);
    /* Hours 0-3, and the other 8 of the 10-minute spans and minutes that hold uploads. */
    assert_int_equal(built, 4 + 8 + 8);
    check_ranges(st, 0);
    /* A whole hour is read as one rollup row. */
    uint64_t uploads;
    pa_profile *p;
    assert_int_equal(
        pa_coll_query_profile(st, "app.cpu", T_HOURS + 3600, T_HOURS + 7200, &p, &uploads, &e), 0);
    assert_int_equal(pa_profile_total(p), 16 + 32 + 64 + 8); /* 8 straddles in from hour 0 */
    assert_int_equal(uploads, 4);
    pa_profile_free(p);

    /* A late upload for a compacted hour drops its rollup at once, and is counted. */
    insert(st, "", T_HOURS + 4000, T_HOURS + 4010, "late;f 2048\n");
    check_ranges_with(st, 0, T_HOURS + 4000, 2048);
    assert_int_equal(total(st, "app.cpu", T_HOURS + 3600, T_HOURS + 7200), 16 + 32 + 64 + 8 + 2048);
    assert_int_equal(pa_coll_store_compact(st, T_HOURS + 5 * 3600, &built), 0);
    assert_int_equal(built, 3); /* its hour, 10 minutes and minute */
    check_ranges_with(st, 0, T_HOURS + 4000, 2048);
    assert_int_equal(total(st, "app.cpu", T_HOURS + 3600, T_HOURS + 7200), 16 + 32 + 64 + 8 + 2048);
    assert_int_equal(total(st, "app.cpu", T_HOURS, T_HOURS + 14400),
                     expected(T_HOURS, T_HOURS + 14400, 0) + 2048);
}

static void retention_never_leaves_a_stale_rollup(void **state) {
    struct pa_coll_store *st = *state;
    insert_hours(st);
    uint64_t built, deleted;
    assert_int_equal(pa_coll_store_compact(st, T_HOURS + 4 * 3600 + PA_COLL_ROLLUP_GRACE, &built),
                     0);
    assert_int_equal(built, 4 + 10 + 10); /* hours, 10 minutes and minutes with uploads */
    /* Retention (1 h in this store) with its cutoff in the middle of the second hour. */
    int64_t cutoff = T_HOURS + 5000;
    assert_int_equal(pa_coll_store_retain(st, cutoff + 3600, &deleted), 0);
    assert_true(deleted > 0);
    check_ranges(st, cutoff);
    assert_int_equal(pa_coll_store_compact(st, T_HOURS + 9 * 3600, &built), 0);
    check_ranges(st, cutoff);
}

/* Series of one app with labels that the filters below tell apart; "" has none. */
static const char *const label_sets[] = {
    "",        "env=prod,region=eu", "env=prod,region=us", "env=dev,region=eu",
    "env=dev", "region=us,tier=web"};
#define N_LABEL_SETS (sizeof label_sets / sizeof label_sets[0])
#define UPLOADS_PER_SET 48

/* Every kind of matcher, alone and together, including ones a missing label satisfies. */
static const char *const filters[] = {
    "app.cpu",
    "app.cpu{env=\"prod\"}",
    "app.cpu{env!=\"prod\"}",
    "app.cpu{env=~\"d.*\"}",
    "app.cpu{env!~\"p.*\"}",
    "app.cpu{env=\"prod\",region=\"eu\"}",
    "app.cpu{region=~\"eu|us\",env!=\"dev\"}",
    "app.cpu{env=\"\"}",
    "app.cpu{tier=\"web\"}",
    "app.cpu{env=\"staging\"}",
};
#define N_FILTERS (sizeof filters / sizeof filters[0])

/* Range edges on hour, 10-minute and minute boundaries and between them, so that a query
 * reads rollups of every level plus raw rows at both ends. */
static const int64_t label_edges[] = {0,    7,    60,   600,  659,  1200, 1260, 3000,  3599,
                                      3600, 3660, 4200, 5400, 5437, 7200, 9000, 10800, 10830};
#define N_LABEL_EDGES (sizeof label_edges / sizeof label_edges[0])

/* Uploads of each label set over three hours: spread unevenly, a quarter of zero length, some
 * straddling a minute, 10 minutes or hour, some starting exactly on one (k % 5 == 4: a minute,
 * k % 10 == 9: 10 minutes); each stack names its series so that a filter that picked the
 * wrong series would change the stacks as well as the total. */
static void insert_labelled_hours(struct pa_coll_store *st) {
    for (size_t s = 0; s < N_LABEL_SETS; s++)
        for (int k = 0; k < UPLOADS_PER_SET; k++) {
            int64_t at = (k * 227 + (int64_t)s * 53) % 10800;
            if (k % 5 == 4)
                at -= at % (k % 10 == 9 ? 600 : 60);
            int64_t from = T_HOURS + at;
            int64_t len = (k % 4) * 31;
            char folded[128];
            snprintf(folded, sizeof folded, "s%zu;f%d %d\ns%zu;g;h%d %d\n", s, k % 5,
                     k + 1 + (int)s, s, k % 3, 2 * k + 1);
            insert(st, label_sets[s], from, from + len, folded);
        }
}

/* Are a and b the same profile: the same total and every stack with the same count? */
static void assert_same_profile(const pa_profile *a, const pa_profile *b) {
    assert_int_equal(pa_profile_total(a), pa_profile_total(b));
    assert_int_equal(pa_profile_stack_count(a), pa_profile_stack_count(b));
    for (size_t i = 0; i < pa_profile_stack_count(a); i++) {
        size_t n;
        uint64_t count;
        const uint32_t *ids = pa_profile_stack(a, i, &n, &count);
        uint32_t theirs[16];
        assert_true(n <= 16);
        for (size_t j = 0; j < n; j++) {
            size_t len;
            const char *f = pa_profile_frame(a, ids[j], &len);
            assert_int_equal(pa_profile_find_frame(b, f, len, &theirs[j]), 0);
        }
        size_t at;
        assert_int_equal(pa_profile_find_stack(b, theirs, n, &at), 0);
        uint64_t their_count;
        pa_profile_stack(b, at, &n, &their_count);
        assert_int_equal(count, their_count);
    }
}

/* Label filters give the same profiles, and merge the same number of uploads, whether a range
 * is read from raw uploads, from some rollups (a partly compacted store) or from rollups of
 * every level. raw[] holds the answers of the first pass (all raw rows), which fills it. */
static void compare_with_raw(struct pa_coll_store *st, pa_profile **raw, uint64_t *raw_uploads,
                             bool count_uploads) {
    size_t i = 0;
    for (size_t q = 0; q < N_FILTERS; q++)
        for (size_t a = 0; a < N_LABEL_EDGES; a++)
            for (size_t b = a + 1; b < N_LABEL_EDGES; b++, i++) {
                pa_profile *p;
                uint64_t uploads;
                assert_int_equal(pa_coll_query_profile(st, filters[q], T_HOURS + label_edges[a],
                                                       T_HOURS + label_edges[b], &p, &uploads, &e),
                                 0);
                if (raw[i] == NULL) {
                    raw[i] = p;
                    raw_uploads[i] = uploads;
                    continue;
                }
                assert_same_profile(p, raw[i]);
                if (count_uploads)
                    assert_int_equal(uploads, raw_uploads[i]);
                pa_profile_free(p);
            }
}

static int count_row(void *ctx, const struct pa_coll_row *r) {
    (void)r;
    ++*(uint64_t *)ctx;
    return 0;
}

struct row_count {
    struct pa_coll_store *st;
    uint64_t rows;
};

static int scan_series(void *ctx, const struct pa_coll_series_info *s) {
    struct row_count *c = ctx;
    return pa_coll_store_scan(c->st, s, T_HOURS, T_HOURS + 10800, count_row, &c->rows, &e);
}

/* How many rows (uploads and rollups) a scan of the three hours reads over all series. */
static uint64_t rows_read(struct pa_coll_store *st) {
    struct row_count c = {st, 0};
    assert_int_equal(pa_coll_store_series(st, "app.cpu", scan_series, &c, &e), 0);
    return c.rows;
}

static void label_filters_over_rollups_match_raw_rows(void **state) {
    struct pa_coll_store *st = *state;
    insert_labelled_hours(st);
    size_t n = N_FILTERS * N_LABEL_EDGES * (N_LABEL_EDGES - 1) / 2;
    pa_profile **raw = calloc(n, sizeof *raw);
    uint64_t *raw_uploads = calloc(n, sizeof *raw_uploads);
    assert_true(raw != NULL && raw_uploads != NULL);
    uint64_t built;
    assert_int_equal(rows_read(st), N_LABEL_SETS * UPLOADS_PER_SET); /* nothing compacted */
    compare_with_raw(st, raw, raw_uploads, true);
    /* Every level's rollups of the first two hours and the first minutes of the third. */
    assert_int_equal(pa_coll_store_compact(st, T_HOURS + 7200 + PA_COLL_ROLLUP_GRACE, &built), 0);
    assert_true(built > 0);
    uint64_t partly = rows_read(st);
    assert_true(partly < N_LABEL_SETS * UPLOADS_PER_SET);
    compare_with_raw(st, raw, raw_uploads, true);
    assert_int_equal(pa_coll_store_compact(st, T_HOURS + 4 * 3600, &built), 0);
    assert_true(built > 0);
    /* The three hours of every series are now three rollup rows. */
    assert_int_equal(rows_read(st), 3 * N_LABEL_SETS);
    compare_with_raw(st, raw, raw_uploads, true);
    /* An idle upload arriving late for one series drops that series' rollups of its hour, 10
     * minutes and minute, and only those: the series' other uploads there are read raw, every
     * other series still from rollups, and the profiles do not change. */
    insert(st, label_sets[1], T_HOURS + 3605, T_HOURS + 3615, "");
    assert_true(rows_read(st) > 3 * N_LABEL_SETS);
    compare_with_raw(st, raw, raw_uploads, false);
    for (size_t i = 0; i < n; i++)
        pa_profile_free(raw[i]);
    free(raw);
    free(raw_uploads);
}

static int setup_quiet(void **state) {
    snprintf(path, sizeof path, "/tmp/pa-coll-test-%d.db", (int)getpid());
    unlink(path);
    struct pa_coll_store *st;
    struct pa_coll_store_options o = {.sync = PA_SYNC_NORMAL, .rollup_quiet = PA_COLL_ROLLUP_QUIET};
    if (pa_coll_store_open(&st, path, &o, &e) != 0)
        return -1;
    *state = st;
    return 0;
}

/* A span that ended long ago but still receives uploads (a load of history, spools replayed
 * after an outage) is not merged while it fills: its rollups are built once it has been
 * quiet for PA_COLL_ROLLUP_QUIET seconds, and then hold every upload. */
static void rollups_wait_until_a_span_is_quiet(void **state) {
    struct pa_coll_store *st = *state;
    int64_t now = (int64_t)time(NULL), hour = now - now % 3600 - 3 * 3600;
    insert(st, "", hour + 10, hour + 20, "a;f 1\n");
    insert(st, "", hour + 1210, hour + 1220, "b;f 2\n");
    uint64_t built;
    /* Received just now: every span is past the grace but none is quiet. */
    assert_int_equal(pa_coll_store_compact(st, now, &built), 0);
    assert_int_equal(built, 0);
    assert_int_equal(total(st, "app.cpu", hour, hour + 3600), 3);
    /* Quiet since: the hour, both 10-minute spans and both minutes. */
    assert_int_equal(pa_coll_store_compact(st, now + PA_COLL_ROLLUP_QUIET, &built), 0);
    assert_int_equal(built, 5);
    assert_int_equal(total(st, "app.cpu", hour, hour + 3600), 3);
    uint64_t uploads;
    pa_profile *p;
    assert_int_equal(pa_coll_query_profile(st, "app.cpu", hour, hour + 3600, &p, &uploads, &e), 0);
    assert_int_equal(pa_profile_total(p), 3);
    assert_int_equal(uploads, 2);
    pa_profile_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(rollups_wait_until_a_span_is_quiet, setup_quiet, teardown),
        cmocka_unit_test_setup_teardown(ranges_are_half_open_and_labels_filter, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrent_inserts_all_land, setup, teardown),
        cmocka_unit_test_setup_teardown(retention_deletes_old_uploads, setup, teardown),
        cmocka_unit_test_setup_teardown(rollups_keep_every_range_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(retention_never_leaves_a_stale_rollup, setup, teardown),
        cmocka_unit_test_setup_teardown(label_filters_over_rollups_match_raw_rows, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
