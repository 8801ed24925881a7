/* Unit tests: bounded gunzip, multipart extraction, the long-line rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "body.h"

static pa_error e;

static void gzip_round_trip_and_concatenated_members(void **state) {
    (void)state;
    const char *text = "a;b 1\n";
    uint8_t *gz, *out;
    size_t gzlen, outlen;
    assert_int_equal(pa_coll_gzip((const uint8_t *)text, strlen(text), &gz, &gzlen), 0);
    assert_true(pa_coll_is_gzip(gz, gzlen));
    assert_int_equal(pa_coll_gunzip(gz, gzlen, 1 << 20, NULL, &out, &outlen, &e), 0);
    assert_int_equal(outlen, strlen(text));
    assert_memory_equal(out, text, outlen);
    free(out);
    uint8_t *two = malloc(2 * gzlen);
    memcpy(two, gz, gzlen);
    memcpy(two + gzlen, gz, gzlen);
    assert_int_equal(pa_coll_gunzip(two, 2 * gzlen, 1 << 20, NULL, &out, &outlen, &e), 0);
    assert_int_equal(outlen, 2 * strlen(text));
    free(out);
    free(two);
    free(gz);
}

static void gzip_bombs_are_413(void **state) {
    (void)state;
    size_t n = 8 << 20;
    uint8_t *zeros = calloc(1, n), *gz, *out;
    size_t gzlen, outlen;
    assert_int_equal(pa_coll_gzip(zeros, n, &gz, &gzlen), 0);
    assert_true(gzlen < 64 * 1024);
    assert_int_equal(pa_coll_gunzip(gz, gzlen, 1 << 20, NULL, &out, &outlen, &e), 413);
    assert_non_null(strstr(e.msg, "limit"));
    free(gz);
    free(zeros);
}

static void gunzip_memory_is_one_budget_for_all_requests(void **state) {
    (void)state;
    size_t n = 4 << 20;
    uint8_t *zeros = calloc(1, n), *gz, *out, *out2;
    size_t gzlen, outlen;
    assert_int_equal(pa_coll_gzip(zeros, n, &gz, &gzlen), 0);
    struct pa_coll_budget budget = {.limit = 6 << 20};
    struct pa_coll_share a = {&budget, 0}, b = {&budget, 0};
    assert_int_equal(pa_coll_gunzip(gz, gzlen, 8 << 20, &a, &out, &outlen, &e), 0);
    assert_int_equal(outlen, n);
    assert_true(a.taken >= n && a.taken <= budget.limit);
    /* A second request in flight does not fit beside the first: 503, nothing kept. */
    assert_int_equal(pa_coll_gunzip(gz, gzlen, 8 << 20, &b, &out2, &outlen, &e), 503);
    assert_non_null(strstr(e.msg, "retry"));
    pa_coll_share_release(&b);
    assert_int_equal(atomic_load(&budget.used), a.taken);
    free(out);
    pa_coll_share_release(&a);
    assert_int_equal(atomic_load(&budget.used), 0);
    /* Once the first has finished, it fits. */
    assert_int_equal(pa_coll_gunzip(gz, gzlen, 8 << 20, &b, &out2, &outlen, &e), 0);
    free(out2);
    pa_coll_share_release(&b);
    free(gz);
    free(zeros);
}

static void truncated_and_corrupt_gzip_are_422(void **state) {
    (void)state;
    const char *text = "thread:main;f (a.py:1) 3\nthread:main;g (a.py:2) 4\n";
    uint8_t *gz, *out;
    size_t gzlen, outlen;
    assert_int_equal(pa_coll_gzip((const uint8_t *)text, strlen(text), &gz, &gzlen), 0);
    for (size_t cut = 0; cut < gzlen; cut++)
        assert_int_equal(pa_coll_gunzip(gz, cut, 1 << 20, NULL, &out, &outlen, &e), 422);
    gz[gzlen / 2] ^= 0xff;
    assert_int_equal(pa_coll_gunzip(gz, gzlen, 1 << 20, NULL, &out, &outlen, &e), 422);
    free(gz);
}

static void multipart_profile_field_is_found(void **state) {
    (void)state;
    const char *ct = "multipart/form-data; boundary=XyZ";
    const char *body = "--XyZ\r\n"
                       "Content-Disposition: form-data; name=\"sample_type_config\"\r\n\r\n"
                       "{}\r\n"
                       "--XyZ\r\n"
                       "Content-Disposition: form-data; name=\"profile\"; filename=\"p.pb\"\r\n"
                       "Content-Type: application/octet-stream\r\n\r\n"
                       "PROFILE\r\nBYTES\r\n"
                       "--XyZ--\r\n";
    const uint8_t *data;
    size_t len;
    assert_int_equal(pa_coll_multipart_field(ct, (const uint8_t *)body, strlen(body), "profile",
                                             &data, &len, &e),
                     0);
    assert_int_equal(len, strlen("PROFILE\r\nBYTES"));
    assert_memory_equal(data, "PROFILE\r\nBYTES", len);
    assert_int_equal(
        pa_coll_multipart_field(ct, (const uint8_t *)body, strlen(body), "nope", &data, &len, &e),
        422);
    assert_int_equal(pa_coll_multipart_field("multipart/form-data", (const uint8_t *)body,
                                             strlen(body), "profile", &data, &len, &e),
                     422);
    /* Every truncation is an error, never a read past the end. */
    for (size_t cut = 0; cut < strlen(body) - 10; cut++) {
        uint8_t *copy = malloc(cut + 1);
        memcpy(copy, body, cut);
        pa_coll_multipart_field(ct, copy, cut, "profile", &data, &len, &e);
        free(copy);
    }
}

static void long_lines_are_dropped_and_counted(void **state) {
    (void)state;
    size_t big = 70000;
    size_t n = big + 64;
    uint8_t *buf = malloc(n);
    size_t len = 0;
    memcpy(buf, "a;b 1\n", 6);
    len = 6;
    memset(buf + len, 'x', big);
    len += big;
    memcpy(buf + len, " 1\nc;d 2\n", 9);
    len += 9;
    assert_int_equal(pa_coll_drop_long_lines(buf, &len, PA_COLL_MAX_LINE), 1);
    assert_int_equal(len, 12);
    assert_memory_equal(buf, "a;b 1\nc;d 2\n", 12);
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gzip_round_trip_and_concatenated_members),
        cmocka_unit_test(gzip_bombs_are_413),
        cmocka_unit_test(truncated_and_corrupt_gzip_are_422),
        cmocka_unit_test(gunzip_memory_is_one_budget_for_all_requests),
        cmocka_unit_test(multipart_profile_field_is_found),
        cmocka_unit_test(long_lines_are_dropped_and_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
