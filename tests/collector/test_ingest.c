/* Unit tests: whole ingest requests, from parameters and body to the stored profile. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "body.h"
#include "ingest.h"
#include "profile.h"

static pa_error e;

static struct pa_coll_ingest_request req(const char *body) {
    return (struct pa_coll_ingest_request){
        .name = "app.cpu{env=prod}",
        .from = "1700000000",
        .until = "1700000010",
        .format = "folded",
        .body = (const uint8_t *)body,
        .body_len = strlen(body),
        .max_decompressed = 1 << 20,
        .now = 1700000100,
    };
}

static void folded_upload_becomes_a_stored_profile(void **state) {
    (void)state;
    struct pa_coll_ingest_request rq = req("a;b 3\na;c 4\na;b 1\n");
    struct pa_coll_ingest_result res;
    assert_int_equal(pa_coll_ingest_decode(&rq, &res, &e), 0);
    assert_string_equal(res.series.app, "app.cpu");
    assert_string_equal(res.labels, "env=prod");
    assert_int_equal(res.from, 1700000000);
    assert_int_equal(res.until, 1700000010);
    assert_int_equal(res.samples, 8);
    assert_int_equal(res.sample_rate, 100);
    /* The blob is gzip'd folded text holding the same samples. */
    pa_profile *p = pa_profile_new();
    pa_parse_stats st;
    pa_error err;
    assert_int_equal(pa_profile_parse_buffer(p, res.blob, res.blob_len, "blob", &st, &err), 0);
    assert_int_equal(pa_profile_total(p), 8);
    assert_int_equal(pa_profile_stack_count(p), 2);
    pa_profile_free(p);
    pa_coll_ingest_result_free(&res);
}

/* Labelled samples (pyagent's labels:TEXT frame, or pprof sample labels) are series of their
 * own: the upload's labels and the set's, the set's winning; the unlabelled samples stay in
 * the upload's series. Names Pyroscope would refuse are refused. */
static void labelled_samples_are_series_of_their_own(void **state) {
    (void)state;
    struct pa_coll_ingest_request rq = req("thread:M;labels:endpoint=/api;a;b 3\n"
                                           "thread:M;labels:endpoint=/x,env=dev;a;c 4\n"
                                           "thread:M;a;b 1\n");
    struct pa_coll_ingest_result res;
    assert_int_equal(pa_coll_ingest_decode(&rq, &res, &e), 0);
    assert_string_equal(res.labels, "env=prod");
    assert_int_equal(res.samples, 1);
    assert_int_equal(res.nparts, 2);
    assert_string_equal(res.parts[0].labels, "endpoint=/api,env=prod");
    assert_int_equal(res.parts[0].samples, 3);
    assert_string_equal(res.parts[1].labels, "endpoint=/x,env=dev");
    assert_int_equal(res.parts[1].samples, 4);
    pa_profile *p = pa_profile_new();
    pa_parse_stats st;
    pa_error err;
    assert_int_equal(
        pa_profile_parse_buffer(p, res.parts[0].blob, res.parts[0].blob_len, "blob", &st, &err), 0);
    size_t n;
    const uint32_t *ids = pa_profile_stack(p, 0, &n, NULL);
    assert_int_equal(n, 3); /* thread:M;a;b, the labels frame gone */
    size_t len;
    assert_memory_equal(pa_profile_frame(p, ids[1], &len), "a", 1);
    pa_profile_free(p);
    pa_coll_ingest_result_free(&res);

    const char *bad[] = {"thread:M;labels:9x=1;a 1\n", "thread:M;labels:a-b=1;a 1\n",
                         "thread:M;labels:service_name=x;a 1\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rq = req(bad[i]);
        assert_int_equal(pa_coll_ingest_decode(&rq, &res, &e), 400);
        assert_non_null(strstr(e.msg, "sample labels"));
        pa_coll_ingest_result_free(&res);
    }
}

static void pprof_upload_gzip_or_plain(void **state) {
    (void)state;
    pa_profile *src = pa_profile_new();
    const char *s1[] = {"main (app.py:3)", "work (app.py:9)"};
    pa_profile_add_stack(src, s1, 2, 7);
    pa_buf plain = {0}, gz = {0};
    pa_error err;
    assert_int_equal(pa_pprof_encode(src, 0, &plain, &err), 0);
    assert_int_equal(pa_pprof_encode(src, 1, &gz, &err), 0);
    for (int i = 0; i < 2; i++) {
        pa_buf *b = i ? &gz : &plain;
        struct pa_coll_ingest_request rq = req("");
        rq.format = "pprof";
        rq.body = (const uint8_t *)b->data;
        rq.body_len = b->len;
        struct pa_coll_ingest_result res;
        assert_int_equal(pa_coll_ingest_decode(&rq, &res, &e), 0);
        assert_int_equal(res.samples, 7);
        pa_coll_ingest_result_free(&res);
    }
    pa_buf_free(&plain);
    pa_buf_free(&gz);
    pa_profile_free(src);
}

/* The agent names pprof uploads "APP" (Pyroscope's service name) and says the mode in the
 * sample types; the store files them as "APP.MODE", like folded uploads. A name that already
 * ends in a mode (older agents) is kept. */
static void pprof_upload_is_filed_by_its_mode(void **state) {
    (void)state;
    const struct {
        const char *name, *mode, *app;
    } cases[] = {{"app{env=prod}", "wall", "app.wall"},
                 {"pkg.mod{}", "cpu", "pkg.mod.cpu"},
                 {"app.cpu{}", "cpu", "app.cpu"},
                 {"app.wall", "cpu", "app.wall"},
                 {"app", "gil", "app.gil"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pa_profile *src = pa_profile_new();
        const char *s1[] = {"main (app.py:3)", "work (app.py:9)"};
        pa_profile_add_stack(src, s1, 2, 7);
        pa_profile_set_meta(src, "rate", "100");
        pa_profile_set_meta(src, "mode", cases[i].mode);
        pa_buf b = {0};
        pa_error err;
        assert_int_equal(pa_pprof_encode(src, 1, &b, &err), 0);
        struct pa_coll_ingest_request rq = req("");
        rq.name = cases[i].name;
        rq.format = "pprof";
        rq.body = (const uint8_t *)b.data;
        rq.body_len = b.len;
        struct pa_coll_ingest_result res;
        assert_int_equal(pa_coll_ingest_decode(&rq, &res, &e), 0);
        assert_string_equal(pa_coll_upload_of(&res, "pyagent").app, cases[i].app);
        pa_coll_ingest_result_free(&res);
        pa_buf_free(&b);
        pa_profile_free(src);
    }
}

static void content_encoding_gzip_folded(void **state) {
    (void)state;
    const char *text = "x;y 5\n";
    uint8_t *gz;
    size_t gzlen;
    assert_int_equal(pa_coll_gzip((const uint8_t *)text, strlen(text), &gz, &gzlen), 0);
    struct pa_coll_ingest_request rq = req("");
    rq.body = gz;
    rq.body_len = gzlen;
    struct pa_coll_ingest_result res;
    /* Without the header, like Pyroscope: a 422 that says why. */
    assert_int_equal(pa_coll_ingest_decode(&rq, &res, &e), 422);
    assert_non_null(strstr(e.msg, "Content-Encoding"));
    pa_coll_ingest_result_free(&res);
    rq.content_encoding = "gzip";
    assert_int_equal(pa_coll_ingest_decode(&rq, &res, &e), 0);
    assert_int_equal(res.samples, 5);
    pa_coll_ingest_result_free(&res);
    rq.content_encoding = "br";
    assert_int_equal(pa_coll_ingest_decode(&rq, &res, &e), 415);
    pa_coll_ingest_result_free(&res);
    free(gz);
}

static void bad_requests_get_their_status(void **state) {
    (void)state;
    struct {
        const char *name, *from, *until, *rate, *format, *body;
        int status;
    } cases[] = {
        {"bad name.cpu", "1", "2", NULL, NULL, "a 1\n", 400},
        {"a.cpu", "abc", "2", NULL, NULL, "a 1\n", 400},
        {"a.cpu", "5", "2", NULL, NULL, "a 1\n", 400},
        {"a.cpu", "1", "2", "0", NULL, "a 1\n", 400},
        {"a.cpu", "1", "2", "1e3", NULL, "a 1\n", 400},
        {"a.cpu", "1", "2", NULL, "jfr", "a 1\n", 415},
        {"a.cpu", "1", "2", NULL, NULL, "not a profile\n", 422},
        {"a.cpu", "1", "2", NULL, NULL, "a;b 1\ngarbage\n", 422},
        {"a.cpu", "1", "2", NULL, "pprof", "\xff\xff\xff\xff", 422},
        {"a.cpu", "1", "2", NULL, NULL, "", 0},
        {"a.cpu", "1", "2", NULL, "whatever", "a 1\n", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct pa_coll_ingest_request rq = req(cases[i].body);
        rq.name = cases[i].name;
        rq.from = cases[i].from;
        rq.until = cases[i].until;
        rq.sample_rate = cases[i].rate;
        rq.format = cases[i].format;
        struct pa_coll_ingest_result res;
        e.msg[0] = '\0';
        int status = pa_coll_ingest_decode(&rq, &res, &e);
        if (status != cases[i].status)
            fail_msg("case %zu: status %d (%s), expected %d", i, status, e.msg, cases[i].status);
        if (status)
            assert_true(strlen(e.msg) > 5);
        pa_coll_ingest_result_free(&res);
    }
}

/* A long line between two kept ones is dropped; the body is edited only when the caller
 * says it is scratch (the server's own buffer), and the result is the same either way. */
static void long_lines_are_dropped_not_fatal(void **state) {
    (void)state;
    size_t big = 70000;
    char *body = malloc(big + 32);
    strcpy(body, "ok;stack 2\n");
    size_t n = strlen(body);
    memset(body + n, 'f', big);
    strcpy(body + n + big, " 9\nok;other 5\n");
    char *before = strdup(body);
    uint8_t *blob[2];
    size_t blob_len[2];
    for (int scratch = 0; scratch < 2; scratch++) {
        struct pa_coll_ingest_request rq = req(body);
        rq.body_scratch = scratch;
        struct pa_coll_ingest_result res;
        assert_int_equal(pa_coll_ingest_decode(&rq, &res, &e), 0);
        assert_int_equal(res.samples, 7);
        assert_int_equal(res.stacks, 2);
        assert_int_equal(res.dropped_lines, 1);
        if (!scratch)
            assert_string_equal(body, before);
        blob[scratch] = res.blob;
        blob_len[scratch] = res.blob_len;
        res.blob = NULL;
        pa_coll_ingest_result_free(&res);
    }
    assert_int_equal(blob_len[0], blob_len[1]);
    assert_memory_equal(blob[0], blob[1], blob_len[0]);
    free(blob[0]);
    free(blob[1]);
    free(before);
    free(body);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(folded_upload_becomes_a_stored_profile),
        cmocka_unit_test(pprof_upload_gzip_or_plain),
        cmocka_unit_test(labelled_samples_are_series_of_their_own),
        cmocka_unit_test(pprof_upload_is_filed_by_its_mode),
        cmocka_unit_test(content_encoding_gzip_folded),
        cmocka_unit_test(bad_requests_get_their_status),
        cmocka_unit_test(long_lines_are_dropped_not_fatal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
