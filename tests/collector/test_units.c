/* Unit tests: timestamps by digit count, query times, durations and sizes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "units.h"

static void timestamps_follow_pyroscope_digit_rule(void **state) {
    (void)state;
    int64_t t;
    assert_int_equal(pa_coll_parse_timestamp("1700000000", 0, 0, &t), 0);
    assert_int_equal(t, 1700000000);
    assert_int_equal(pa_coll_parse_timestamp("1700000000123", 0, 0, &t), 0); /* ms */
    assert_int_equal(t, 1700000000);
    assert_int_equal(pa_coll_parse_timestamp("1700000000123", 0, 1, &t), 0);
    assert_int_equal(t, 1700000001);
    assert_int_equal(pa_coll_parse_timestamp("1700000000123456", 0, 0, &t), 0); /* µs */
    assert_int_equal(t, 1700000000);
    assert_int_equal(pa_coll_parse_timestamp("1700000000123456789", 0, 0, &t), 0); /* ns */
    assert_int_equal(t, 1700000000);
    assert_int_equal(pa_coll_parse_timestamp("", 42, 0, &t), 0);
    assert_int_equal(t, 42);
    assert_int_equal(pa_coll_parse_timestamp("now", 42, 0, &t), 0);
    assert_int_equal(t, 42);
}

static void malformed_timestamps_are_rejected(void **state) {
    (void)state;
    int64_t t;
    assert_int_equal(pa_coll_parse_timestamp("12x", 0, 0, &t), -1);
    assert_int_equal(pa_coll_parse_timestamp("-5", 0, 0, &t), -1);
    assert_int_equal(pa_coll_parse_timestamp("99999999999999999999999", 0, 0, &t), -1);
}

static void query_times_accept_relative_now(void **state) {
    (void)state;
    int64_t t;
    assert_int_equal(pa_coll_parse_query_time("now-1h", 10000, 0, &t), 0);
    assert_int_equal(t, 10000 - 3600);
    assert_int_equal(pa_coll_parse_query_time("now-1h30m", 10000, 0, &t), 0);
    assert_int_equal(t, 10000 - 5400);
    assert_int_equal(pa_coll_parse_query_time("now", 10000, 1, &t), 0);
    assert_int_equal(t, 10001); /* an exclusive until covers the current second */
    assert_int_equal(pa_coll_parse_query_time("now-", 10000, 0, &t), -1);
    assert_int_equal(pa_coll_parse_query_time("now-1y", 10000, 0, &t), -1);
}

static void durations_and_sizes(void **state) {
    (void)state;
    int64_t d;
    uint64_t n;
    assert_int_equal(pa_coll_parse_duration("7d", &d), 0);
    assert_int_equal(d, 7 * 86400);
    assert_int_equal(pa_coll_parse_duration("90", &d), 0);
    assert_int_equal(d, 90);
    assert_int_equal(pa_coll_parse_duration("2w", &d), 0);
    assert_int_equal(d, 14 * 86400);
    assert_int_equal(pa_coll_parse_duration("0", &d), 0);
    assert_int_equal(d, 0);
    assert_int_equal(pa_coll_parse_duration("7 days", &d), -1);
    assert_int_equal(pa_coll_parse_duration("", &d), -1);
    assert_int_equal(pa_coll_parse_duration("999999999999d", &d), -1);
    assert_int_equal(pa_coll_parse_size("16M", &n), 0);
    assert_int_equal(n, 16u << 20);
    assert_int_equal(pa_coll_parse_size("512KiB", &n), 0);
    assert_int_equal(n, 512u << 10);
    assert_int_equal(pa_coll_parse_size("1000", &n), 0);
    assert_int_equal(n, 1000);
    assert_int_equal(pa_coll_parse_size("1T", &n), -1);
    assert_int_equal(pa_coll_parse_size("-1", &n), -1);
}

static void a_plus_decoded_to_a_space_still_means_later(void **state) {
    (void)state;
    int64_t t;
    /* "now+1h" typed into a URL unencoded arrives as "now 1h". */
    assert_int_equal(pa_coll_parse_query_time("now 1h", 1000000, 0, &t), 0);
    assert_int_equal(t, 1000000 + 3600);
    assert_int_equal(pa_coll_parse_query_time("now+1h", 1000000, 0, &t), 0);
    assert_int_equal(t, 1000000 + 3600);
    assert_int_equal(pa_coll_parse_query_time("now  1h", 1000000, 0, &t), -1);
    assert_int_equal(pa_coll_parse_query_time("now ", 1000000, 0, &t), -1);
    assert_int_equal(pa_coll_parse_query_time("NaN", 1000000, 0, &t), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_plus_decoded_to_a_space_still_means_later),
        cmocka_unit_test(timestamps_follow_pyroscope_digit_rule),
        cmocka_unit_test(malformed_timestamps_are_rejected),
        cmocka_unit_test(query_times_accept_relative_now),
        cmocka_unit_test(durations_and_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
