/* Unit tests: the escaping of values echoed into log lines and error bodies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "text.h"

static void printable_text_is_kept(void **state) {
    (void)state;
    char out[64];
    assert_string_equal(pa_coll_one_line(out, sizeof out, "labels: 'k' x=1"), "labels: 'k' x=1");
    assert_string_equal(pa_coll_one_line(out, sizeof out, ""), "");
}

static void controls_newlines_and_non_ascii_are_escaped(void **state) {
    (void)state;
    char out[64];
    assert_string_equal(pa_coll_one_line(out, sizeof out, "a\nb\r\tc\\d"), "a\\nb\\r\\tc\\\\d");
    assert_string_equal(pa_coll_one_line(out, sizeof out, "\x1b[2J\x7f\xc3\xa9"),
                        "\\x1b[2J\\x7f\\xc3\\xa9");
}

static void long_text_is_cut_with_a_marker(void **state) {
    (void)state;
    char out[16], in[100];
    memset(in, 'a', sizeof in - 1);
    in[sizeof in - 1] = '\0';
    assert_string_equal(pa_coll_one_line(out, sizeof out, in), "aaaaaaaaaaaa...");
    /* Exactly filling the buffer needs no marker. */
    in[15] = '\0';
    assert_string_equal(pa_coll_one_line(out, sizeof out, in), "aaaaaaaaaaaaaaa");
    /* An escape is never cut in half. */
    assert_string_equal(pa_coll_one_line(out, sizeof out, "aaaaaaaaaa\x01\x02"), "aaaaaaaaaa...");
    for (int c = 1; c < 256; c++) {
        memset(in, c, sizeof in - 1);
        in[sizeof in - 1] = '\0';
        pa_coll_one_line(out, sizeof out, in);
        assert_true(strlen(out) < sizeof out);
        for (const char *p = out; *p; p++)
            assert_true(*p >= 0x20 && *p <= 0x7e);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(printable_text_is_kept),
        cmocka_unit_test(controls_newlines_and_non_ascii_are_escaped),
        cmocka_unit_test(long_text_is_cut_with_a_marker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
