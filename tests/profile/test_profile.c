/* test_profile.c - the profile model: building, parsing every dialect, merging, encoding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "profile.h"

static pa_profile *parse(const char *text, pa_parse_stats *st) {
    pa_profile *p = pa_profile_new();
    pa_error err;
    int rc = pa_profile_parse_buffer(p, text, strlen(text), "test", st, &err);
    if (rc != 0)
        fail_msg("parse failed: %s", err.msg);
    return p;
}

/* The folded text of p as a string the test owns. */
static char *folded(const pa_profile *p) {
    pa_buf b = {0};
    pa_profile_encode_folded(p, &b);
    return b.data;
}

static void identical_stacks_are_aggregated(void **state) {
    (void)state;
    pa_profile *p = pa_profile_new();
    const char *a[] = {"thread:MainThread", "main (app.py:3)", "work (app.py:9)"};
    pa_profile_add_stack(p, a, 3, 5);
    pa_profile_add_stack(p, a, 3, 7);
    pa_profile_add_stack(p, a, 2, 1);
    assert_int_equal(pa_profile_stack_count(p), 2);
    assert_int_equal(pa_profile_total(p), 13);
    assert_int_equal(pa_profile_frame_count(p), 3);
    size_t n;
    uint64_t c;
    const uint32_t *ids = pa_profile_stack(p, 0, &n, &c);
    assert_int_equal(n, 3);
    assert_int_equal(c, 12);
    assert_string_equal(pa_profile_frame(p, ids[2], NULL), "work (app.py:9)");
    pa_profile_free(p);
}

static void pyagent_dialect_keeps_metadata_and_counts(void **state) {
    (void)state;
    pa_parse_stats st;
    pa_profile *p = parse("# pyagent 1 rate=250 mode=cpu pid=4242\n"
                          "thread:MainThread;<module> (app.py:40);main (app.py:31) 1830\n"
                          "thread:MainThread;<module> (app.py:40) 20\n",
                          &st);
    assert_int_equal(st.format, PA_FORMAT_PYAGENT);
    assert_int_equal(st.stacks, 2);
    assert_int_equal(st.samples, 1850);
    assert_string_equal(pa_profile_meta(p, "rate"), "250");
    assert_string_equal(pa_profile_meta(p, "mode"), "cpu");
    pa_profile_free(p);
}

static void malformed_lines_are_counted_with_the_first_line_number(void **state) {
    (void)state;
    pa_parse_stats st;
    pa_profile *p = parse("a;b 1\n\na;b;c nope\nno-count-here\na;c 2\r\n", &st);
    assert_int_equal(st.lines, 5);
    assert_int_equal(st.bad_lines, 2);
    assert_int_equal(st.first_bad_line, 3);
    assert_int_equal(pa_profile_total(p), 3);
    pa_profile_free(p);
}

static void empty_input_is_an_error(void **state) {
    (void)state;
    pa_profile *p = pa_profile_new();
    pa_error err;
    assert_int_equal(pa_profile_parse_buffer(p, "", 0, "x.folded", NULL, &err), -1);
    assert_non_null(strstr(err.msg, "empty"));
    assert_int_equal(pa_profile_parse_buffer(p, "garbage\n", 8, "x.folded", NULL, &err), -1);
    assert_non_null(strstr(err.msg, "line 1"));
    pa_profile_free(p);
}

static void austin_cpython_and_pyspy_frames_are_rewritten(void **state) {
    (void)state;
    pa_parse_stats st;
    pa_profile *p = parse("P42;T0:4243;/srv/app.py:<module>:40;/srv/app.py:main:31 100\n", &st);
    assert_int_equal(st.format, PA_FORMAT_AUSTIN);
    char *s = folded(p);
    assert_string_equal(s, "thread:4243;<module> (/srv/app.py:40);main (/srv/app.py:31) 100\n");
    free(s);
    pa_profile_free(p);

    p = parse("tid:77;app.py:<module>:3;app.py:f:9 4\n", &st);
    assert_int_equal(st.format, PA_FORMAT_CPYTHON);
    s = folded(p);
    assert_string_equal(s, "thread:77;<module> (app.py:3);f (app.py:9) 4\n");
    free(s);
    pa_profile_free(p);

    p = parse("process 12:\"python app.py\";thread (0x7F00);<module> (app.py:3) 2\n", &st);
    assert_int_equal(st.format, PA_FORMAT_PYSPY);
    s = folded(p);
    assert_string_equal(s, "thread:0x7F00;<module> (app.py:3) 2\n");
    free(s);
    pa_profile_free(p);
}

static void gzip_input_is_detected_in_any_chunking(void **state) {
    (void)state;
    const char *text = "a;b 3\na;c 4\n";
    unsigned char gz[256];
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    zs.next_in = (unsigned char *)text;
    zs.avail_in = (uInt)strlen(text);
    zs.next_out = gz;
    zs.avail_out = sizeof gz;
    assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
    size_t len = sizeof gz - zs.avail_out;
    deflateEnd(&zs);
    pa_profile *p = pa_profile_new();
    pa_parser *ps = pa_parser_new(p, "gz");
    pa_error err;
    for (size_t i = 0; i < len; i++) /* one byte at a time */
        assert_int_equal(pa_parser_feed(ps, gz + i, 1, &err), 0);
    pa_parse_stats st;
    assert_int_equal(pa_parser_finish(ps, &st, &err), 0);
    assert_true(st.gzip);
    assert_int_equal(pa_profile_total(p), 7);
    pa_parser_free(ps);
    pa_profile_free(p);
}

static void pprof_round_trips_gzip_and_plain(void **state) {
    (void)state;
    pa_parse_stats st;
    pa_profile *p = parse("# pyagent 1 rate=100\n"
                          "thread:Main;main (app.py:3);work (app.py:9) 5\n"
                          "thread:Main;main (app.py:4);work (app.py:9) 2\n"
                          "thread:Main;PyObject_Call [libpython3.11.so] 1\n",
                          &st);
    for (int gz = 0; gz <= 1; gz++) {
        pa_buf b = {0};
        pa_error err;
        assert_int_equal(pa_pprof_encode(p, gz, &b, &err), 0);
        pa_profile *q = pa_profile_new();
        assert_int_equal(pa_profile_parse_buffer(q, b.data, b.len, "pb", &st, &err), 0);
        assert_int_equal(st.format, PA_FORMAT_PPROF);
        assert_int_equal(st.gzip, gz);
        assert_int_equal(pa_profile_total(q), 8);
        assert_string_equal(pa_profile_meta(q, "rate"), "100");
        char *a = folded(p), *c = folded(q);
        assert_string_equal(strchr(a, '\n') + 1, strchr(c, '\n') + 1);
        free(a);
        free(c);
        pa_profile_free(q);
        pa_buf_free(&b);
    }
    pa_profile_free(p);
}

/* A labels:TEXT frame (pyagent.labels) travels in pprof as the sample's string labels, not as
 * a location, and comes back as the same frame under the thread root; a pprof from another
 * tool whose samples have string labels (and no thread root) gets the frame at its root. */
static void pprof_carries_labels_as_sample_labels(void **state) {
    (void)state;
    pa_parse_stats st;
    pa_profile *p = parse("# pyagent 1 rate=100\n"
                          "thread:Main;labels:endpoint=/api,tenant=\"t,2\";work (app.py:9) 5\n"
                          "thread:Main;work (app.py:9) 2\n",
                          &st);
    pa_buf b = {0};
    pa_error err;
    assert_int_equal(pa_pprof_encode(p, 0, &b, &err), 0);
    assert_non_null(memmem(b.data, b.len, "tenant", 6));
    pa_profile *q = pa_profile_new();
    assert_int_equal(pa_profile_parse_buffer(q, b.data, b.len, "pb", &st, &err), 0);
    char *a = folded(p), *c = folded(q);
    assert_string_equal(strchr(a, '\n') + 1, strchr(c, '\n') + 1);
    free(a);
    free(c);
    uint32_t *sets;
    assert_int_equal(pa_profile_label_sets(q, &sets), 1);
    pa_profile *labelled = pa_profile_labelled(q, sets[0]),
               *rest = pa_profile_labelled(q, UINT32_MAX);
    assert_int_equal(pa_profile_total(labelled), 5);
    assert_int_equal(pa_profile_total(rest), 2);
    char *l = folded(labelled);
    assert_non_null(strstr(l, "thread:Main;work (app.py:9) 5"));
    assert_null(strstr(l, "labels:"));
    free(l);
    free(sets);
    pa_profile_free(labelled);
    pa_profile_free(rest);
    pa_profile_free(q);
    pa_profile_free(p);
    pa_buf_free(&b);

    /* Labels as another tool writes them, at the root, a name twice, an empty value: the last
     * value of a name is kept, an empty one is none, the names come in order. */
    pa_profile *other = pa_profile_new();
    const char *frames[] = {"labels:b=2,a=1,b=3,c=", "main (x.py:1)"};
    pa_profile_add_stack(other, frames, 2, 4); /* encoded as labels b=2, a=1, b=3, c="" */
    pa_buf ob = {0};
    assert_int_equal(pa_pprof_encode(other, 0, &ob, &err), 0);
    pa_profile *back = pa_profile_new();
    assert_int_equal(pa_profile_parse_buffer(back, ob.data, ob.len, "pb", &st, &err), 0);
    char *o = folded(back);
    assert_string_equal(o, "labels:a=1,b=3;main (x.py:1) 4\n");
    free(o);
    pa_profile_free(back);
    pa_profile_free(other);
    pa_buf_free(&ob);
}

/* Grafana Pyroscope files a pprof by its sample types: wall mode must say "wall" (else it is
 * filed as process_cpu), and the mode reads back from the types. */
static void pprof_sample_types_name_the_mode(void **state) {
    (void)state;
    const char *modes[] = {"cpu", "wall", "gil"};
    for (int m = 0; m < 3; m++) {
        pa_profile *p = pa_profile_new();
        const char *s1[] = {"thread:Main", "main (app.py:3)"};
        pa_profile_add_stack(p, s1, 2, 4);
        pa_profile_set_meta(p, "rate", "100");
        pa_profile_set_meta(p, "mode", modes[m]);
        pa_buf b = {0};
        pa_error err;
        assert_int_equal(pa_pprof_encode(p, 0, &b, &err), 0);
        char type[16];
        int n = snprintf(type, sizeof type, "%c%c%s", 0x32, (int)strlen(modes[m]), modes[m]);
        assert_non_null(memmem(b.data, b.len, type, (size_t)n)); /* string_table entry */
        if (m != 0)
            assert_null(memmem(b.data, b.len,
                               "\x32\x03"
                               "cpu",
                               5));
        pa_profile *q = pa_profile_new();
        pa_parse_stats st;
        assert_int_equal(pa_profile_parse_buffer(q, b.data, b.len, "pb", &st, &err), 0);
        assert_non_null(pa_profile_meta(q, "mode"));
        assert_string_equal(pa_profile_meta(q, "mode"), modes[m]);
        assert_int_equal(pa_profile_total(q), 4);
        pa_profile_free(q);
        pa_buf_free(&b);
        pa_profile_free(p);
    }
}

/* Invalid UTF-8 becomes U+FFFD, counted; valid text passes unchanged. */
static void utf8_is_repaired_visibly(void **state) {
    (void)state;
    const char ok[] = "caf\xc3\xa9 \xf0\x9f\x90\x8d";
    assert_true(pa_utf8_valid(ok, strlen(ok)));
    const char *bad[] = {"\xc3", "a\xff\x62", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80"};
    /* Past the eight-byte ASCII steps: a bad byte at every offset of a long ASCII run, a
     * sequence across a step's edge, and one cut at the end, are each found. */
    char run[40];
    for (size_t at = 0; at < sizeof run; at++) {
        memset(run, 'a', sizeof run);
        run[at] = '\xff';
        assert_false(pa_utf8_valid(run, sizeof run));
        assert_true(pa_utf8_valid(run, at));
    }
    const char across[] = "abcdefg\xc3\xa9hijklmnopqrstuvwxyz0123456789abcd";
    memcpy(run, across, sizeof run);
    assert_true(pa_utf8_valid(run, sizeof run));
    assert_false(pa_utf8_valid(run, 8)); /* "abcdefg\xc3": cut in the middle */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_false(pa_utf8_valid(bad[i], strlen(bad[i])));
        pa_buf b = {0};
        assert_true(pa_buf_utf8(&b, bad[i], strlen(bad[i])) > 0);
        assert_true(pa_utf8_valid(b.data, b.len));
        assert_non_null(memmem(b.data, b.len, "\xef\xbf\xbd", 3));
        pa_buf_free(&b);
    }
    pa_buf b = {0};
    assert_int_equal(pa_buf_utf8(&b,
                                 "a\xff"
                                 "b",
                                 3),
                     1);
    assert_int_equal(b.len, 5);
    assert_memory_equal(b.data,
                        "a\xef\xbf\xbd"
                        "b",
                        5);
    pa_buf_free(&b);
    b = (pa_buf){0};
    assert_int_equal(pa_buf_utf8(&b, ok, strlen(ok)), 0);
    assert_memory_equal(b.data, ok, strlen(ok));
    pa_buf_free(&b);
}

/* A profile split into parts by its stacks: the parts add up to the whole, each holds only the
 * frames its stacks use, and keeps the meta (an upload over a server's limits is sent so). */
static void merge_stacks_splits_into_parts(void **state) {
    (void)state;
    pa_profile *p = pa_profile_new();
    const char *s1[] = {"t", "a", "x"}, *s2[] = {"t", "b"}, *s3[] = {"t", "c", "y"};
    pa_profile_add_stack(p, s1, 3, 1);
    pa_profile_add_stack(p, s2, 2, 2);
    pa_profile_add_stack(p, s3, 3, 4);
    pa_profile_set_meta(p, "mode", "wall");
    pa_profile *first = pa_profile_new(), *second = pa_profile_new(), *whole = pa_profile_new();
    pa_profile_merge_stacks(first, p, 0, 2);
    pa_profile_merge_stacks(second, p, 2, 2); /* only one is left */
    assert_int_equal(pa_profile_total(first), 3);
    assert_int_equal(pa_profile_total(second), 4);
    assert_int_equal(pa_profile_frame_count(first), 4);  /* t a x b */
    assert_int_equal(pa_profile_frame_count(second), 3); /* t c y */
    assert_string_equal(pa_profile_meta(second, "mode"), "wall");
    pa_profile_merge(whole, first);
    pa_profile_merge(whole, second);
    char *a = folded(p), *b = folded(whole);
    assert_string_equal(a, b);
    free(a);
    free(b);
    pa_profile_free(whole);
    pa_profile_free(second);
    pa_profile_free(first);
    pa_profile_free(p);
}

/* Folded uploads carry no "# pyagent" header (Pyroscope's folded parser refuses it). */
static void folded_stacks_have_no_header(void **state) {
    (void)state;
    pa_profile *p = pa_profile_new();
    const char *s1[] = {"a", "b"};
    pa_profile_add_stack(p, s1, 2, 3);
    pa_profile_set_meta(p, "rate", "100");
    pa_buf b = {0};
    pa_profile_encode_folded_stacks(p, &b);
    pa_buf_append(&b, "", 1);
    assert_string_equal(b.data, "a;b 3\n");
    pa_buf_free(&b);
    pa_profile_free(p);
}

static void truncated_pprof_is_an_error(void **state) {
    (void)state;
    pa_parse_stats st;
    pa_profile *p = parse("a;b 5\n", &st);
    pa_buf b = {0};
    pa_error err;
    assert_int_equal(pa_pprof_encode(p, 0, &b, &err), 0);
    pa_profile *q = pa_profile_new();
    assert_int_equal(pa_profile_parse_buffer(q, b.data, b.len / 2, "pb", &st, &err), -1);
    assert_non_null(strstr(err.msg, "pprof"));
    pa_profile_free(q);
    pa_buf_free(&b);
    pa_profile_free(p);
}

static void merge_adds_totals_and_filter_selects_stacks(void **state) {
    (void)state;
    pa_parse_stats st;
    pa_profile *a = parse("x;y 3\nx;z 4\n", &st);
    pa_profile *b = parse("x;y 10\nq 1\n", &st);
    pa_profile_merge(a, b);
    assert_int_equal(pa_profile_total(a), 18);
    assert_int_equal(pa_profile_stack_count(a), 3);
    pa_error err;
    pa_profile *f = pa_profile_filter(a, "^y$", NULL, &err);
    assert_int_equal(pa_profile_total(f), 13);
    pa_profile_free(f);
    f = pa_profile_filter(a, NULL, "z|q", &err);
    assert_int_equal(pa_profile_total(f), 13);
    pa_profile_free(f);
    assert_null(pa_profile_filter(a, "(", NULL, &err));
    assert_non_null(strstr(err.msg, "regular expression"));
    pa_profile_free(a);
    pa_profile_free(b);
}

static void transform_merges_lines_threads_and_scales(void **state) {
    (void)state;
    pa_parse_stats st;
    pa_profile *a = parse("thread:A;f (a.py:1) 30\nthread:B;f (a.py:2) 10\n", &st);
    pa_transform t = {.strip_lines = 1, .drop_threads = 1, .scale_total = 4};
    pa_profile *b = pa_profile_transform(a, &t);
    char *s = folded(b);
    assert_string_equal(s, "f (a.py) 4\n");
    free(s);
    pa_profile_free(a);
    pa_profile_free(b);
}

static void transform_drops_a_label(void **state) {
    (void)state;
    pa_parse_stats st;
    /* span_id leaves every labels frame; stacks left alike merge; a frame left without
     * labels leaves its stack, which then merges with the unlabelled one. */
    pa_profile *a =
        parse("thread:A;labels:span_id=00000000000000a1,span_name=\"GET /x, y\";f (a.py:1) 3\n"
              "thread:A;labels:span_id=00000000000000a2,span_name=\"GET /x, y\";f (a.py:1) 2\n"
              "thread:A;labels:span_id=00000000000000a3;f (a.py:1) 4\n"
              "thread:A;f (a.py:1) 1\n",
              &st);
    pa_transform t = {.drop_label = "span_id"};
    pa_profile *b = pa_profile_transform(a, &t);
    char *s = folded(b);
    assert_string_equal(s, "thread:A;labels:span_name=\"GET /x, y\";f (a.py:1) 5\n"
                           "thread:A;f (a.py:1) 5\n");
    free(s);
    pa_profile_free(a);
    pa_profile_free(b);
}

static void frames_are_classified(void **state) {
    (void)state;
    pa_frame_info fi;
    const char *s = "f.<locals>.g (x) (/srv/app/main.py:12)";
    pa_frame_parse(s, strlen(s), &fi);
    assert_int_equal(fi.kind, PA_FRAME_OWN);
    assert_int_equal(fi.line, 12);
    assert_int_equal(fi.name_len, strlen("f.<locals>.g (x)"));
    assert_memory_equal(fi.file, "/srv/app/main.py", fi.file_len);
    s = "get (/usr/lib/python3.11/site-packages/requests/api.py:70)";
    pa_frame_parse(s, strlen(s), &fi);
    assert_int_equal(fi.kind, PA_FRAME_SITE);
    s = "loads (/usr/lib/python3.11/json/__init__.py:346)";
    pa_frame_parse(s, strlen(s), &fi);
    assert_int_equal(fi.kind, PA_FRAME_STDLIB);
    s = "PyEval_EvalCode [libpython3.11.so.1.0]";
    pa_frame_parse(s, strlen(s), &fi);
    assert_int_equal(fi.kind, PA_FRAME_NATIVE);
    s = "<idle>";
    pa_frame_parse(s, strlen(s), &fi);
    assert_int_equal(fi.kind, PA_FRAME_SYNTHETIC);
    s = "thread:MainThread";
    pa_frame_parse(s, strlen(s), &fi);
    assert_int_equal(fi.kind, PA_FRAME_THREAD);
    assert_int_equal(fi.name_len, 10);
    /* Each marker of a library or the standard library, anywhere in the file name (first,
     * last, or nearly there); a near miss is the program's own. */
    const struct {
        const char *frame;
        pa_frame_kind kind;
    } kinds[] = {
        {"f (/opt/venv/lib/dist-packages/m.py:1)", PA_FRAME_SITE},
        {"f (site-packages/m.py:1)", PA_FRAME_SITE},
        {"f (/x/site-packages:1)", PA_FRAME_SITE},
        {"f (/x/site-package/m.py:1)", PA_FRAME_OWN},
        {"f (/x/sitesite-packagez/m.py:1)", PA_FRAME_OWN},
        {"f (C:\\Python311\\Lib\\json\\decoder.py:1)", PA_FRAME_STDLIB},
        {"f (<frozen importlib._bootstrap>:1)", PA_FRAME_STDLIB},
        {"f (/lib/python:1)", PA_FRAME_STDLIB},
        {"f (/lib/pytho:1)", PA_FRAME_OWN},
        {"f (s:1)", PA_FRAME_OWN},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        pa_frame_parse(kinds[i].frame, strlen(kinds[i].frame), &fi);
        assert_int_equal(fi.kind, kinds[i].kind);
    }
}

static void json_and_html_escaping_is_inert(void **state) {
    (void)state;
    const char evil[] = "</script><img src=x onerror=alert(1)>\"'&\x01\xff\xc3(\0end";
    pa_buf j = {0}, h = {0};
    pa_buf_json_str(&j, evil, sizeof evil - 1);
    pa_buf_html_str(&h, evil, sizeof evil - 1);
    assert_null(strchr(j.data, '<'));
    assert_null(strchr(j.data, '>'));
    assert_non_null(strstr(j.data, "\\u003c/script\\u003e"));
    assert_non_null(strstr(j.data, "\\u0000end"));
    assert_non_null(strstr(j.data, "\\ufffd"));
    assert_null(strchr(h.data, '<'));
    assert_null(strchr(h.data, '"'));
    assert_non_null(strstr(h.data, "&lt;/script&gt;"));
    assert_non_null(strstr(h.data, "\\x00end"));
    assert_non_null(strstr(h.data, "\xEF\xBF\xBD"));
    pa_buf_free(&j);
    pa_buf_free(&h);
}

static void report_json_carries_both_profiles(void **state) {
    (void)state;
    pa_parse_stats st;
    pa_profile *cur = parse("a;b 3\na;c 1\n", &st);
    pa_profile *base = parse("a;b 1\na;d 5\n", &st);
    pa_buf b = {0};
    pa_profile_encode_report_json(cur, base, "t</script>", &b);
    assert_non_null(strstr(b.data, "\"total\":4"));
    assert_non_null(strstr(b.data, "\"baseTotal\":6"));
    assert_non_null(strstr(b.data, "\"up\":[1,1,2,3]"));
    assert_non_null(strstr(b.data, "\"self\":[0,3,1,0]"));
    assert_non_null(strstr(b.data, "\"base\":[0,1,0,5]"));
    assert_null(strstr(b.data, "</script>"));
    pa_buf_free(&b);
    pa_profile_free(cur);
    pa_profile_free(base);
}

static void speedscope_has_a_profile_per_thread(void **state) {
    (void)state;
    pa_parse_stats st;
    pa_profile *p = parse("thread:A;f 3\nthread:B;g 1\nthread:A;f;h 2\n", &st);
    pa_buf b = {0};
    pa_profile_encode_speedscope(p, "x", &b);
    assert_non_null(strstr(b.data, "\"name\":\"thread:A\",\"unit\":\"none\",\"startValue\":0,"
                                   "\"endValue\":5,\"samples\":[[1],[1,4]],\"weights\":[3,2]"));
    assert_non_null(strstr(b.data, "\"name\":\"thread:B\""));
    pa_buf_free(&b);
    pa_profile_free(p);
}

/* ---- time buckets, instructions, metadata, formats (docs/formats.md) ---- */

static const char timed_text[] =
    "# pyagent 1 rate=100 mode=cpu python=3.12.1 program=/srv/my%20app.py bucket_ms=20 "
    "t0_ms=1763750000000\n"
    "thread:Main;main (/srv/app.py:5);work (/srv/app.py:9) @84 LOAD_ATTR_INSTANCE_VALUE 30\n"
    "#t 0:10,10 50:10\n"
    "thread:Main;main (/srv/app.py:5);work (/srv/app.py:9) @90:4-12 BINARY_OP 20\n"
    "#t 2:5,5,5,5\n"
    "thread:Main;main (/srv/app.py:5) 5\n";

/* The samples of the stack whose leaf is `leaf`, per bucket start, into counts[t - t0]/20. */
static uint64_t bucket(const pa_profile *p, const char *leaf, int64_t t) {
    uint64_t sum = 0;
    for (size_t i = 0; i < pa_profile_time_count(p); i++) {
        size_t s, n;
        int64_t tt;
        uint64_t c;
        pa_profile_time_at(p, i, &s, &tt, &c);
        const uint32_t *ids = pa_profile_stack(p, s, &n, NULL);
        if (tt == t && strcmp(pa_profile_frame(p, ids[n - 1], NULL), leaf) == 0)
            sum += c;
    }
    return sum;
}

static void time_lines_give_each_stack_its_buckets(void **state) {
    (void)state;
    pa_parse_stats st;
    pa_profile *p = parse(timed_text, &st);
    assert_int_equal(st.bad_lines, 0);
    assert_int_equal(pa_profile_bucket_ms(p), 20);
    const char *a = "work (/srv/app.py:9) @84 LOAD_ATTR_INSTANCE_VALUE";
    assert_int_equal(bucket(p, a, 1763750000000), 10);
    assert_int_equal(bucket(p, a, 1763750000020), 10);
    assert_int_equal(bucket(p, a, 1763750001000), 10);
    assert_int_equal(bucket(p, "work (/srv/app.py:9) @90:4-12 BINARY_OP", 1763750000100), 5);
    assert_int_equal(pa_profile_time_count(p), 7);
    /* the header's values are percent-decoded; the time fields are not metadata */
    assert_string_equal(pa_profile_meta(p, "program"), "/srv/my app.py");
    assert_null(pa_profile_meta(p, "bucket_ms"));
    /* and it all writes back the same */
    char *text = folded(p);
    assert_string_equal(text, timed_text);
    free(text);
    pa_profile_free(p);
}

static void a_time_line_over_its_stack_count_is_malformed(void **state) {
    (void)state;
    pa_parse_stats st;
    pa_profile *p = parse("# pyagent 1 bucket_ms=10 t0_ms=0\na;b 5\n#t 0:3,3\na;c 2\n#t 0:x\n"
                          "#t 0:1\n",
                          &st);
    assert_int_equal(st.bad_lines, 3); /* 6 > 5, not a number, a second time line */
    assert_int_equal(pa_profile_time_count(p), 0);
    assert_int_equal(pa_profile_total(p), 7);
    pa_profile_free(p);
}

static void pprof_keeps_time_instructions_and_metadata(void **state) {
    (void)state;
    pa_profile *p = parse(timed_text, NULL);
    pa_buf pb = {0};
    pa_error err;
    assert_int_equal(pa_pprof_encode(p, 1, &pb, &err), 0);
    pa_profile *q = pa_profile_new();
    assert_int_equal(pa_profile_parse_buffer(q, pb.data, pb.len, "pb", NULL, &err), 0);
    char *a = folded(p), *b = folded(q);
    assert_string_equal(a, b);
    free(a);
    free(b);
    pa_buf_free(&pb);
    pa_profile_free(q);
    pa_profile_free(p);
}

static void merging_combines_metadata_and_rebuckets_time(void **state) {
    (void)state;
    pa_profile *a = parse("# pyagent 1 pid=1 samples=5 cpu_s=1.5 signals=150 achieved_rate=100 "
                          "start=100 bucket_ms=10 t0_ms=1000\nx;y 5\n#t 0:2 1:3\n",
                          NULL);
    pa_profile *b = parse("# pyagent 1 pid=2 samples=4 cpu_s=0.5 signals=50 achieved_rate=100 "
                          "start=90 bucket_ms=20 t0_ms=1000\nx;y 4\n#t 0:4\n",
                          NULL);
    pa_profile_merge(a, b);
    assert_string_equal(pa_profile_meta(a, "pid"), "1,2");
    assert_string_equal(pa_profile_meta(a, "samples"), "9");
    assert_string_equal(pa_profile_meta(a, "cpu_s"), "2.000");
    assert_string_equal(pa_profile_meta(a, "achieved_rate"), "100");
    assert_string_equal(pa_profile_meta(a, "start"), "90");
    /* 10 ms buckets joined 20 ms ones: both buckets of a now sit in 1000..1020 */
    assert_int_equal(pa_profile_bucket_ms(a), 20);
    assert_int_equal(pa_profile_time_count(a), 1);
    assert_int_equal(bucket(a, "y", 1000), 9);
    /* filtering and transforming keep the time of the stacks they keep */
    pa_transform t = {.strip_instructions = 1};
    pa_profile *c = pa_profile_transform(a, &t);
    assert_int_equal(pa_profile_time_count(c), 1);
    pa_profile_free(c);
    t.drop_time = 1;
    c = pa_profile_transform(a, &t);
    assert_int_equal(pa_profile_time_count(c), 0);
    pa_profile_free(c);
    pa_profile_free(a);
    pa_profile_free(b);
}

static void instruction_suffixes_are_parsed_and_stripped(void **state) {
    (void)state;
    pa_frame_info fi;
    const char *s = "work (/srv/app.py:9) @90:4-12 BINARY_OP";
    pa_frame_parse(s, strlen(s), &fi);
    assert_int_equal(fi.kind, PA_FRAME_OWN);
    assert_int_equal(fi.line, 9);
    assert_int_equal(fi.offset, 90);
    assert_int_equal(fi.col, 4);
    assert_int_equal(fi.end_col, 12);
    assert_int_equal(fi.op_len, 9);
    assert_memory_equal(fi.op, "BINARY_OP", 9);
    assert_int_equal(fi.base_len, strlen("work (/srv/app.py:9)"));
    s = "work (/srv/app.py:9) @7";
    pa_frame_parse(s, strlen(s), &fi);
    assert_int_equal(fi.offset, 7);
    assert_null(fi.op);
    /* not an instruction: stays part of the name */
    s = "f @3 (/srv/app.py:9)";
    pa_frame_parse(s, strlen(s), &fi);
    assert_int_equal(fi.offset, -1);
    assert_int_equal(fi.line, 9);
    s = "work (/srv/app.py:9) @84 load_attr";
    pa_frame_parse(s, strlen(s), &fi);
    assert_int_equal(fi.offset, -1);
    /* The last " @" counts; an '@' without a space before it is part of the frame. */
    s = "a @1 (/srv/a@b.py:9)x@2 @5";
    pa_frame_parse(s, strlen(s), &fi);
    assert_int_equal(fi.offset, -1); /* the last " @" does not follow ')' */
    s = "a@b @1 (/srv/a@b @c.py:9) @5 CALL";
    pa_frame_parse(s, strlen(s), &fi);
    assert_int_equal(fi.offset, 5);
    assert_int_equal(fi.line, 9);
    assert_int_equal(fi.base_len, strlen("a@b @1 (/srv/a@b @c.py:9)"));
    assert_memory_equal(fi.file, "/srv/a@b @c.py", fi.file_len);
    s = "w (/srv/a.py:9)@5";
    pa_frame_parse(s, strlen(s), &fi);
    assert_int_equal(fi.offset, -1);
    s = "@";
    pa_frame_parse(s, strlen(s), &fi);
    assert_int_equal(fi.offset, -1);
    s = " @";
    pa_frame_parse(s, strlen(s), &fi);
    assert_int_equal(fi.offset, -1);
    pa_profile *p =
        parse("m (a.py:1);w (a.py:2) @4 CALL 3\nm (a.py:1);w (a.py:2) @8 CALL 2\n", NULL);
    pa_transform t = {.strip_instructions = 1};
    pa_profile *q = pa_profile_transform(p, &t);
    assert_int_equal(pa_profile_stack_count(q), 1);
    assert_int_equal(pa_profile_total(q), 5);
    pa_profile_free(q);
    pa_profile_free(p);
}

static void opcode_names_come_from_the_generated_table(void **state) {
    (void)state;
    assert_string_equal(pa_opcode_name(3, 8, 1), "POP_TOP");
    assert_non_null(pa_opcode_name(3, 12, 0));
    assert_null(pa_opcode_name(2, 7, 1));
    assert_string_equal(pa_opcode_base("LOAD_ATTR_INSTANCE_VALUE", 24), "LOAD_ATTR");
    assert_null(pa_opcode_base("LOAD_ATTR", 9));
}

static void the_format_registry_names_extensions_and_encoders(void **state) {
    (void)state;
    assert_string_equal(pa_output_format_for_path("a.pb.gz")->name, "pprof");
    assert_string_equal(pa_output_format_for_path("a.pprof")->name, "pprof");
    assert_string_equal(pa_output_format_for_path("a.speedscope.json")->name, "speedscope");
    assert_string_equal(pa_output_format_for_path("a.json")->name, "speedscope");
    assert_string_equal(pa_output_format_for_path("a.firefox.json")->name, "firefox");
    assert_string_equal(pa_output_format_for_path("a.report.json")->name, "json");
    assert_null(pa_output_format_for_path("a.html"));
    pa_profile *p = parse(timed_text, NULL);
    for (size_t i = 0; pa_output_formats[i]; i++) {
        const pa_output_format *f = pa_output_formats[i];
        assert_ptr_equal(pa_output_format_find(f->name), f);
        pa_buf b = {0};
        pa_error err;
        assert_int_equal(f->encode(p, NULL, &b, &err), 0);
        assert_true(b.len > 0);
        pa_buf_free(&b);
    }
    assert_null(pa_output_format_find("gecko"));
    pa_profile_free(p);
}

static void speedscope_follows_time_order(void **state) {
    (void)state;
    pa_profile *p = parse(timed_text, NULL);
    pa_buf b = {0};
    pa_profile_encode_speedscope(p, "t", &b);
    /* buckets 0,1 (10 each) of @84, 2..5 (5 each) of @90, 50 of @84, then the untimed 5 */
    assert_non_null(strstr(b.data, "\"weights\":[10,10,5,5,5,5,10,5]"));
    pa_buf_free(&b);
    pa_profile_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(identical_stacks_are_aggregated),
        cmocka_unit_test(pyagent_dialect_keeps_metadata_and_counts),
        cmocka_unit_test(malformed_lines_are_counted_with_the_first_line_number),
        cmocka_unit_test(empty_input_is_an_error),
        cmocka_unit_test(austin_cpython_and_pyspy_frames_are_rewritten),
        cmocka_unit_test(gzip_input_is_detected_in_any_chunking),
        cmocka_unit_test(pprof_round_trips_gzip_and_plain),
        cmocka_unit_test(truncated_pprof_is_an_error),
        cmocka_unit_test(pprof_sample_types_name_the_mode),
        cmocka_unit_test(pprof_carries_labels_as_sample_labels),
        cmocka_unit_test(utf8_is_repaired_visibly),
        cmocka_unit_test(folded_stacks_have_no_header),
        cmocka_unit_test(merge_stacks_splits_into_parts),
        cmocka_unit_test(merge_adds_totals_and_filter_selects_stacks),
        cmocka_unit_test(transform_merges_lines_threads_and_scales),
        cmocka_unit_test(transform_drops_a_label),
        cmocka_unit_test(frames_are_classified),
        cmocka_unit_test(json_and_html_escaping_is_inert),
        cmocka_unit_test(report_json_carries_both_profiles),
        cmocka_unit_test(speedscope_has_a_profile_per_thread),
        cmocka_unit_test(time_lines_give_each_stack_its_buckets),
        cmocka_unit_test(a_time_line_over_its_stack_count_is_malformed),
        cmocka_unit_test(pprof_keeps_time_instructions_and_metadata),
        cmocka_unit_test(merging_combines_metadata_and_rebuckets_time),
        cmocka_unit_test(instruction_suffixes_are_parsed_and_stripped),
        cmocka_unit_test(opcode_names_come_from_the_generated_table),
        cmocka_unit_test(the_format_registry_names_extensions_and_encoders),
        cmocka_unit_test(speedscope_follows_time_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
