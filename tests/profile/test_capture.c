/* test_capture.c - the binary capture (profile/capture.c): what goes in comes back, and hostile
 * captures (truncated, flipped, lying counts, bad varints, bombs) are one-line errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "profile.h"

/* Every kind of frame the writer stores by parts, and spellings it must keep as text. */
static const char rich_text[] =
    "# pyagent 1 rate=250 mode=cpu pid=42 python=3.12.1 program=/srv/my%20app.py start=1763750000"
    " samples=64 dropped=1 truncated=2 bucket_ms=20 t0_ms=1763750000000\n"
    "thread:MainThread;<module> (/app/a.py:40);main (/app/a.py:31) @84 CALL;work (/app/a.py:12)"
    " @90:4-12 BINARY_OP 30\n"
    "#t 0:10,10 50:5\n"
    "thread:MainThread;<module> (/app/a.py:40);main (/app/a.py:31) @84 CALL 5\n"
    "#t 3:5\n"
    "thread:MainThread;<module> (/app/a.py:40);main (/app/a.py:31) 4\n"
    "thread:worker 1;run (/usr/lib/python3.12/threading.py:1010);f (a.py:012);g (b.py:0);"
    "h (c.py) @7;k (/x/site-packages/m.py:5) @12:3-9;memcpy [libc.so.6];<GC> 20\n"
    "#t 1:1 1000000:2\n"
    "thread:worker 1;<idle> 5\n";

static const unsigned char magic[8] = {0x89, 'P', 'Y', 'A', 'C', 'A', 'P', '\n'};

static pa_profile *parse(const void *data, size_t len, pa_parse_stats *st) {
    pa_profile *p = pa_profile_new();
    pa_error err;
    if (pa_profile_parse_buffer(p, data, len, "test", st, &err) != 0)
        fail_msg("parse failed: %s", err.msg);
    return p;
}

static pa_buf capture_of(const pa_profile *p) {
    pa_buf b = {0};
    pa_error err;
    if (pa_capture_encode(p, &b, &err) != 0)
        fail_msg("encode failed: %s", err.msg);
    return b;
}

struct entry {
    size_t stack;
    int64_t t;
    uint64_t count;
};

static int cmp_entry(const void *a, const void *b) {
    const struct entry *x = a, *y = b;
    if (x->stack != y->stack)
        return x->stack < y->stack ? -1 : 1;
    return x->t < y->t ? -1 : x->t > y->t;
}

static struct entry *entries(const pa_profile *p) {
    size_t n = pa_profile_time_count(p);
    struct entry *e = calloc(n + 1, sizeof *e);
    for (size_t i = 0; i < n; i++)
        pa_profile_time_at(p, i, &e[i].stack, &e[i].t, &e[i].count);
    qsort(e, n, sizeof *e, cmp_entry);
    return e;
}

/* Same frames (by id), stacks (in order, with counts), metadata (in order) and time. */
static void assert_same_profile(const pa_profile *a, const pa_profile *b) {
    assert_int_equal(pa_profile_frame_count(a), pa_profile_frame_count(b));
    for (uint32_t id = 0; id < pa_profile_frame_count(a); id++) {
        size_t la, lb;
        const char *fa = pa_profile_frame(a, id, &la), *fb = pa_profile_frame(b, id, &lb);
        assert_int_equal(la, lb);
        assert_memory_equal(fa, fb, la);
    }
    assert_int_equal(pa_profile_stack_count(a), pa_profile_stack_count(b));
    assert_int_equal(pa_profile_total(a), pa_profile_total(b));
    for (size_t s = 0; s < pa_profile_stack_count(a); s++) {
        size_t na, nb;
        uint64_t ca, cb;
        const uint32_t *ia = pa_profile_stack(a, s, &na, &ca);
        const uint32_t *ib = pa_profile_stack(b, s, &nb, &cb);
        assert_int_equal(na, nb);
        assert_int_equal(ca, cb);
        assert_memory_equal(ia, ib, na * sizeof *ia);
    }
    assert_int_equal(pa_profile_meta_count(a), pa_profile_meta_count(b));
    for (size_t i = 0; i < pa_profile_meta_count(a); i++) {
        const char *ka, *va, *kb, *vb;
        pa_profile_meta_at(a, i, &ka, &va);
        pa_profile_meta_at(b, i, &kb, &vb);
        assert_string_equal(ka, kb);
        assert_string_equal(va, vb);
    }
    assert_int_equal(pa_profile_bucket_ms(a), pa_profile_bucket_ms(b));
    assert_int_equal(pa_profile_time_count(a), pa_profile_time_count(b));
    struct entry *ea = entries(a), *eb = entries(b);
    assert_memory_equal(ea, eb, pa_profile_time_count(a) * sizeof *ea);
    free(ea);
    free(eb);
}

static void a_capture_gives_back_every_frame_stack_weight_bucket_and_header_field(void **state) {
    (void)state;
    pa_profile *p = parse(rich_text, sizeof rich_text - 1, NULL);
    /* Names the folded text cannot hold: a NUL, a newline, a ';', invalid UTF-8. */
    const char odd[] = {'f', '\0', '\n', ';', (char)0xFF, ' ', '(', 'x', ':', '1', ')'};
    uint32_t ids[2] = {pa_profile_intern(p, "thread:odd", 10),
                       pa_profile_intern(p, odd, sizeof odd)};
    size_t s = pa_profile_add_stack_ids(p, ids, 2, 3);
    pa_profile_add_time(p, s, 1763750000000 - 40, 2); /* before the folded text's t0 */
    assert_true(pa_profile_time_count(p) > 0);

    pa_buf cap = capture_of(p);
    pa_parse_stats st;
    pa_profile *q = parse(cap.data, cap.len, &st);
    assert_int_equal(st.format, PA_FORMAT_CAPTURE);
    assert_string_equal(pa_format_name(st.format), "pyagent capture");
    assert_int_equal(st.stacks, pa_profile_stack_count(p));
    assert_int_equal(st.samples, pa_profile_total(p));
    assert_same_profile(p, q);
    assert_string_equal(pa_profile_meta(q, "program"), "/srv/my app.py");

    /* Written again, the same bytes: nothing depends on hash order. */
    pa_buf again = capture_of(q);
    assert_int_equal(cap.len, again.len);
    assert_memory_equal(cap.data, again.data, cap.len);
    pa_buf_free(&again);
    pa_buf_free(&cap);
    pa_profile_free(q);
    pa_profile_free(p);
}

static void a_capture_merges_with_other_inputs_as_its_folded_text_does(void **state) {
    (void)state;
    static const char other[] = "# pyagent 1 rate=250 mode=cpu pid=7 samples=3 bucket_ms=20 "
                                "t0_ms=1763750000000\nthread:MainThread;<module> (/app/a.py:40) "
                                "3\n#t 2:3\n";
    pa_profile *src = parse(rich_text, sizeof rich_text - 1, NULL);
    pa_buf cap = capture_of(src);
    pa_buf text = {0};
    pa_profile_encode_folded(src, &text);

    pa_profile *a = pa_profile_new(), *b = pa_profile_new();
    pa_error err;
    assert_int_equal(pa_profile_parse_buffer(a, other, sizeof other - 1, "o", NULL, &err), 0);
    assert_int_equal(pa_profile_parse_buffer(a, text.data, text.len, "t", NULL, &err), 0);
    assert_int_equal(pa_profile_parse_buffer(b, other, sizeof other - 1, "o", NULL, &err), 0);
    assert_int_equal(pa_profile_parse_buffer(b, cap.data, cap.len, "c", NULL, &err), 0);
    assert_same_profile(a, b);
    assert_string_equal(pa_profile_meta(b, "pid"), "7,42");
    pa_buf_free(&cap);
    pa_buf_free(&text);
    pa_profile_free(a);
    pa_profile_free(b);
    pa_profile_free(src);
}

static void a_capture_is_recognised_in_any_chunking_and_inside_gzip(void **state) {
    (void)state;
    pa_profile *src = parse(rich_text, sizeof rich_text - 1, NULL);
    pa_buf cap = capture_of(src);
    pa_profile *p = pa_profile_new();
    pa_parser *ps = pa_parser_new(p, "bytes");
    pa_error err;
    for (size_t i = 0; i < cap.len; i++)
        assert_int_equal(pa_parser_feed(ps, cap.data + i, 1, &err), 0);
    pa_parse_stats st;
    assert_int_equal(pa_parser_finish(ps, &st, &err), 0);
    assert_int_equal(st.format, PA_FORMAT_CAPTURE);
    pa_parser_free(ps);
    assert_same_profile(src, p);

    /* gzip around it (a server's Content-Encoding, a user's gzip -k) changes nothing. */
    unsigned char gz[65536];
    z_stream zs = {0};
    assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
    zs.next_in = (unsigned char *)cap.data;
    zs.avail_in = (uInt)cap.len;
    zs.next_out = gz;
    zs.avail_out = sizeof gz;
    assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
    pa_profile *g = parse(gz, sizeof gz - zs.avail_out, &st);
    deflateEnd(&zs);
    assert_true(st.gzip);
    assert_int_equal(st.format, PA_FORMAT_CAPTURE);
    assert_same_profile(src, g);
    pa_profile_free(g);
    pa_profile_free(p);
    pa_buf_free(&cap);
    pa_profile_free(src);
}

/* Parses data; returns the parse's result with the message in err. */
static int try_parse(const void *data, size_t len, pa_error *err) {
    pa_profile *p = pa_profile_new();
    err->msg[0] = 0;
    int rc = pa_profile_parse_buffer(p, data, len, "x.pyacap", NULL, err);
    pa_profile_free(p);
    return rc;
}

static void assert_one_line_error(const void *data, size_t len, const char *want) {
    pa_error err;
    assert_int_equal(try_parse(data, len, &err), -1);
    assert_non_null(strstr(err.msg, "x.pyacap: "));
    assert_null(strchr(err.msg, '\n'));
    if (want && !strstr(err.msg, want))
        fail_msg("expected '%s' in: %s", want, err.msg);
}

static void every_truncation_is_an_error_and_flipped_bytes_never_crash(void **state) {
    (void)state;
    pa_profile *src = parse(rich_text, sizeof rich_text - 1, NULL);
    pa_buf cap = capture_of(src);
    for (size_t n = 2; n < cap.len; n++)
        assert_one_line_error(cap.data, n, "capture");
    /* A flipped bit in the body is caught by zlib's check value (or lies in the padding after
     * the last deflate block, and the profile is the same); in the header, by the checks of its
     * fields (only the minor version may be anything) or the input is no capture at all; never
     * a crash (run under ASan). */
    size_t header = sizeof magic + 3;
    while ((unsigned char)cap.data[header++] & 0x80)
        ;
    for (size_t i = 0; i < cap.len; i++) {
        for (unsigned mask = 1; mask < 256; mask <<= 1) {
            cap.data[i] ^= (char)mask;
            pa_error err;
            int rc = try_parse(cap.data, cap.len, &err);
            if (i >= header && rc == 0) {
                pa_profile *same = parse(cap.data, cap.len, NULL);
                assert_same_profile(src, same);
                pa_profile_free(same);
            }
            if (i == sizeof magic + 1)
                assert_int_equal(rc, 0);
            if (rc != 0)
                assert_null(strchr(err.msg, '\n'));
            cap.data[i] ^= (char)mask;
        }
    }
    pa_buf_free(&cap);
    pa_profile_free(src);
}

/* ---- hand-made captures: an uncompressed body (compression 0) of the sections given ---- */

static void put_varint(pa_buf *b, uint64_t v) {
    do {
        unsigned char c = (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        pa_buf_append(b, &c, 1);
        v >>= 7;
    } while (v);
}

static void section(pa_buf *body, unsigned id, const pa_buf *payload) {
    put_varint(body, id);
    put_varint(body, payload->len);
    pa_buf_append(body, payload->data ? payload->data : "", payload->len);
}

static pa_buf file_of(const pa_buf *body, unsigned major, unsigned compression) {
    pa_buf f = {0};
    pa_buf_append(&f, magic, sizeof magic);
    unsigned char head[3] = {(unsigned char)major, 0, (unsigned char)compression};
    pa_buf_append(&f, head, 3);
    put_varint(&f, body->len);
    pa_buf_append(&f, body->data, body->len);
    return f;
}

/* Varints as one section's payload. */
static void section_of(pa_buf *body, unsigned id, size_t n, const uint64_t *v) {
    pa_buf s = {0};
    for (size_t i = 0; i < n; i++)
        put_varint(&s, v[i]);
    section(body, id, &s);
    pa_buf_free(&s);
}

/* A string table of "f" and a frame table of one text frame on it. */
static void one_frame(pa_buf *body) {
    static const uint64_t strings[] = {1, 1, 'f'}, frames[] = {1, 0, 0};
    section_of(body, 2, 3, strings);
    section_of(body, 3, 3, frames);
}

/* One frame "f", one node, one stack of weight w: the smallest good body, then extra sections. */
static pa_buf small_body(uint64_t w) {
    pa_buf body = {0};
    one_frame(&body);
    const uint64_t nodes[] = {1, 0, 0}, stacks[] = {1, 0, w};
    section_of(&body, 4, 3, nodes);  /* one node: a root (0), frame 0 */
    section_of(&body, 5, 3, stacks); /* one stack: node delta 0, weight w */
    return body;
}

static void expect_body_error(const pa_buf *body, const char *want) {
    pa_buf f = file_of(body, 1, 0);
    assert_one_line_error(f.data, f.len, want);
    pa_buf_free(&f);
}

static void lying_counts_bad_varints_and_bad_references_are_errors(void **state) {
    (void)state;
    pa_buf body = small_body(5), f = file_of(&body, 1, 0);
    pa_error err;
    assert_int_equal(try_parse(f.data, f.len, &err), 0); /* the base case is good */
    pa_buf_free(&f);
    pa_buf_free(&body);

    pa_buf s = {0};
    /* A string table of 2^60 strings in 3 bytes. */
    body = (pa_buf){0};
    put_varint(&s, 1ull << 60);
    section(&body, 2, &s);
    expect_body_error(&body, "does not fit");
    /* A varint of 11 bytes. */
    body.len = s.len = 0;
    for (int i = 0; i < 11; i++)
        pa_buf_append(&s, "\xFF", 1);
    section(&body, 2, &s);
    expect_body_error(&body, "malformed capture");
    /* A section longer than the body. */
    body.len = 0;
    put_varint(&body, 2);
    put_varint(&body, 1000);
    expect_body_error(&body, "cut short");
    pa_buf_free(&body);
    /* A stack on a node that is not there, a weight of 0, one beyond 10^15. */
    body = small_body(5);
    body.data[body.len - 2] = 2; /* the stack's node delta: +1 */
    expect_body_error(&body, "node that is not in the tree");
    pa_buf_free(&body);
    body = small_body(0);
    expect_body_error(&body, "weight");
    pa_buf_free(&body);
    body = small_body(1000000000000001ull);
    expect_body_error(&body, "weight");
    pa_buf_free(&body);
    /* A node whose parent is itself. */
    body = small_body(5);
    pa_buf b2 = {0};
    one_frame(&b2);
    const uint64_t selfish[] = {1, 1, 0}; /* parent: node 0 - 1 */
    section_of(&b2, 4, 3, selfish);
    expect_body_error(&b2, "parent or frame");
    pa_buf_free(&b2);
    /* Time buckets holding more samples than their stack. */
    const uint64_t time[] = {20, 0, 1, 0, 6}; /* width, origin; stack 0: 1 entry of 6 */
    section_of(&body, 6, 5, time);
    expect_body_error(&body, "more samples than the stack");
    pa_buf_free(&body);
    /* An unknown required section is refused, an unknown optional one skipped. */
    body = small_body(5);
    s.len = 0;
    pa_buf_append(&s, "future", 6);
    section(&body, 63, &s);
    expect_body_error(&body, "section 63 is unknown and required");
    pa_buf_free(&body);
    body = small_body(5);
    section(&body, 64, &s);
    f = file_of(&body, 1, 0);
    assert_int_equal(try_parse(f.data, f.len, &err), 0);
    pa_buf_free(&f);
    /* Sections out of order, another major version, an unknown compression. */
    section(&body, 2, &s);
    expect_body_error(&body, "out of order");
    f = file_of(&body, 2, 0);
    assert_one_line_error(f.data, f.len, "version 2 is not supported");
    pa_buf_free(&f);
    f = file_of(&body, 1, 9);
    assert_one_line_error(f.data, f.len, "compression 9 is unknown");
    pa_buf_free(&f);
    /* Only a section for the future: no stacks. */
    body.len = 0;
    section(&body, 70, &s);
    expect_body_error(&body, "no stack table");
    pa_buf_free(&body);
    pa_buf_free(&s);
}

static void stacks_that_expand_beyond_the_limit_are_refused_before_they_are_built(void **state) {
    (void)state;
    /* A chain of 40,000 nodes and a stack on each: 800 million frame ids from 200 KB. */
    enum { N = 40000 };
    pa_buf body = {0}, s = {0};
    one_frame(&body);
    put_varint(&s, N);
    for (int i = 0; i < N; i++) {
        put_varint(&s, i ? 1 : 0);
        put_varint(&s, 0);
    }
    section(&body, 4, &s);
    s.len = 0;
    put_varint(&s, N);
    for (int i = 0; i < N; i++) {
        put_varint(&s, i ? 2 : 0); /* zigzag +1 */
        put_varint(&s, 1);
    }
    section(&body, 5, &s);
    expect_body_error(&body, "expand to more than");
    pa_buf_free(&body);
    pa_buf_free(&s);
}

static void a_compressed_body_may_not_inflate_beyond_its_declared_length(void **state) {
    (void)state;
    /* 64 MB of zeros compress to about 64 KB; the header says 1,000 bytes. */
    size_t big = 64u << 20;
    unsigned char *zeros = calloc(big, 1);
    pa_buf z = {0};
    pa_buf_reserve(&z, big / 500);
    uLongf zlen = (uLongf)(big / 500);
    assert_int_equal(compress2((Bytef *)z.data, &zlen, zeros, big, 9), Z_OK);
    free(zeros);
    pa_buf f = {0};
    pa_buf_append(&f, magic, sizeof magic);
    pa_buf_append(&f, "\x01\x00\x01", 3);
    put_varint(&f, 1000);
    pa_buf_append(&f, z.data, zlen);
    assert_one_line_error(f.data, f.len, "inflates beyond its declared 1000 bytes");
    /* Declaring the true length is no better: more than deflate's ratio allows, or 1 GiB. */
    f.len = 0;
    pa_buf_append(&f, magic, sizeof magic);
    pa_buf_append(&f, "\x01\x00\x01", 3);
    put_varint(&f, big);
    pa_buf_append(&f, z.data, 1000);
    assert_one_line_error(f.data, f.len, "1000 compressed bytes cannot hold");
    f.len = 0;
    pa_buf_append(&f, magic, sizeof magic);
    pa_buf_append(&f, "\x01\x00\x01", 3);
    put_varint(&f, 2ull << 30);
    pa_buf_append(&f, z.data, zlen);
    assert_one_line_error(f.data, f.len, "1 GiB");
    pa_buf_free(&f);
    pa_buf_free(&z);
}

static void the_registry_writes_captures_by_name_and_extension(void **state) {
    (void)state;
    const pa_output_format *f = pa_output_format_find("capture");
    assert_non_null(f);
    assert_ptr_equal(pa_output_format_for_path("app.pyacap"), f);
    assert_string_equal(f->mime, "application/octet-stream");
    pa_profile *p = parse(rich_text, sizeof rich_text - 1, NULL);
    pa_buf b = {0};
    pa_error err;
    assert_int_equal(f->encode(p, NULL, &b, &err), 0);
    assert_memory_equal(b.data, magic, sizeof magic);
    pa_buf_free(&b);
    pa_profile_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_capture_gives_back_every_frame_stack_weight_bucket_and_header_field),
        cmocka_unit_test(a_capture_merges_with_other_inputs_as_its_folded_text_does),
        cmocka_unit_test(a_capture_is_recognised_in_any_chunking_and_inside_gzip),
        cmocka_unit_test(every_truncation_is_an_error_and_flipped_bytes_never_crash),
        cmocka_unit_test(lying_counts_bad_varints_and_bad_references_are_errors),
        cmocka_unit_test(stacks_that_expand_beyond_the_limit_are_refused_before_they_are_built),
        cmocka_unit_test(a_compressed_body_may_not_inflate_beyond_its_declared_length),
        cmocka_unit_test(the_registry_writes_captures_by_name_and_extension),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
