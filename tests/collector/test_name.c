/* Unit tests: series names (ingest) and selectors (queries). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "name.h"

static pa_error e;

static int parse(const char *name, char **labels, char *app, size_t applen) {
    struct pa_coll_series s;
    int rc = pa_coll_series_parse(&s, name, &e);
    if (rc == 0) {
        *labels = pa_coll_series_labels(&s);
        snprintf(app, applen, "%s", s.app);
    }
    pa_coll_series_free(&s);
    return rc;
}

static void labels_are_sorted_and_trimmed(void **state) {
    (void)state;
    char *labels = NULL, app[300];
    assert_int_equal(parse("my-app.cpu{zone=eu, env = prod,host=a.b}", &labels, app, sizeof app),
                     0);
    assert_string_equal(app, "my-app.cpu");
    assert_string_equal(labels, "env=prod,host=a.b,zone=eu");
    free(labels);
    assert_int_equal(parse("svc/x.cpu", &labels, app, sizeof app), 0);
    assert_string_equal(labels, "");
    free(labels);
    assert_int_equal(parse("a.cpu{}", &labels, app, sizeof app), 0);
    assert_string_equal(labels, "");
    free(labels);
    assert_int_equal(parse("a.cpu{k=v,}", &labels, app, sizeof app), 0);
    assert_string_equal(labels, "k=v");
    free(labels);
}

static void bad_names_are_400_with_a_reason(void **state) {
    (void)state;
    char *labels = NULL, app[300];
    const char *bad[] = {
        "",
        "a b.cpu",
        "app.cpu{k=v",
        "app.cpu{kv}",
        "app.cpu{k-1=v}",
        "app.cpu{=v}",
        "app.cpu{k=v,k=w}",
        "app.cpu{k=\"open}",
        "app.cpu{k=\"v\"x}",
        "{k=v}",
        "app<script>.cpu",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e.msg[0] = '\0';
        assert_int_equal(parse(bad[i], &labels, app, sizeof app), 400);
        assert_true(strlen(e.msg) > 5);
    }
}

static void at_most_30_labels(void **state) {
    (void)state;
    char name[1024], *labels = NULL, app[300];
    int n = snprintf(name, sizeof name, "a.cpu{");
    for (int i = 0; i < 30; i++)
        n += snprintf(name + n, sizeof name - (size_t)n, "%sk%d=v", i ? "," : "", i);
    snprintf(name + n, sizeof name - (size_t)n, "}");
    assert_int_equal(parse(name, &labels, app, sizeof app), 0);
    free(labels);
    name[strlen(name) - 1] = '\0';
    strcat(name, ",k30=v}");
    assert_int_equal(parse(name, &labels, app, sizeof app), 400);
    assert_non_null(strstr(e.msg, "30"));
}

/* A value holds anything: quoted in the label text where a bare one would not read back. */
static void quoted_values_round_trip(void **state) {
    (void)state;
    char *labels = NULL, app[300];
    assert_int_equal(parse("a.cpu{k=\"x,y\", j=plain, q=a\"b, e=\"\\\\\\n\", s=\" sp \"}", &labels,
                           app, sizeof app),
                     0);
    assert_string_equal(labels, "e=\"\\\\\\n\",j=plain,k=\"x,y\",q=\"a\\\"b\",s=\" sp \"");
    struct pa_coll_selector sel;
    assert_int_equal(
        pa_coll_selector_parse(&sel, "a.cpu{k=\"x,y\",e=\"\\\\\\n\",q=\"a\\\"b\",s=\" sp \"}", &e),
        0);
    assert_true(pa_coll_selector_matches(&sel, labels));
    assert_false(pa_coll_selector_matches(&sel, "e=x,j=plain,k=\"x,y\",q=\"a\\\"b\""));
    pa_coll_selector_free(&sel);
    free(labels);
    /* Text stored before values were quoted is all bare, and reads as it did. */
    assert_int_equal(pa_coll_selector_parse(&sel, "a.cpu{p=\"c:\\\\dir\"}", &e), 0);
    assert_true(pa_coll_selector_matches(&sel, "p=c:\\dir"));
    pa_coll_selector_free(&sel);
}

static void selectors_match_labels(void **state) {
    (void)state;
    struct pa_coll_selector sel;
    assert_int_equal(pa_coll_selector_parse(&sel, "a.cpu{env=\"prod\", host=~\"web-.*\"}", &e), 0);
    assert_string_equal(sel.app, "a.cpu");
    assert_true(pa_coll_selector_matches(&sel, "env=prod,host=web-1"));
    assert_false(pa_coll_selector_matches(&sel, "env=prod,host=db-1"));
    assert_false(pa_coll_selector_matches(&sel, "env=dev,host=web-1"));
    assert_false(pa_coll_selector_matches(&sel, "host=web-1"));
    pa_coll_selector_free(&sel);

    assert_int_equal(pa_coll_selector_parse(&sel, "a.cpu{env!=prod,pid!~\"1.*\"}", &e), 0);
    assert_true(pa_coll_selector_matches(&sel, "env=dev,pid=22"));
    assert_true(pa_coll_selector_matches(&sel, "pid=22"));
    assert_false(pa_coll_selector_matches(&sel, "env=dev,pid=12"));
    pa_coll_selector_free(&sel);

    assert_int_equal(pa_coll_selector_parse(&sel, "a.cpu", &e), 0);
    assert_true(pa_coll_selector_matches(&sel, "anything=at,all=1"));
    pa_coll_selector_free(&sel);

    assert_int_equal(pa_coll_selector_parse(&sel, "a.cpu{k=\"open}", &e), 400);
    pa_coll_selector_free(&sel);
    assert_int_equal(pa_coll_selector_parse(&sel, "a.cpu{k=~\"(\"}", &e), 400);
    pa_coll_selector_free(&sel);
    assert_int_equal(pa_coll_selector_parse(&sel, "a.cpu{k>3}", &e), 400);
    pa_coll_selector_free(&sel);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(labels_are_sorted_and_trimmed),
        cmocka_unit_test(bad_names_are_400_with_a_reason),
        cmocka_unit_test(at_most_30_labels),
        cmocka_unit_test(quoted_values_round_trip),
        cmocka_unit_test(selectors_match_labels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
