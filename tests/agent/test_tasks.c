/* test_tasks.c: task:NAME frames from name objects (agent/tasks.c), on objects laid out as
 * CPython 3.14 lays out str and int objects: a name is named as Task.get_name() gives it,
 * equal names share a table entry, names are cut and escaped as frame names are, and a full
 * table gives task:<other>; ints are read as 3.11 and 3.12+ lay them out (pa_py_uint). The
 * walk itself is tested on real programs (test_agent.py). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../agent/codecache.h"
#include "../../agent/tasks.h"

/* Stand-ins for the type objects: only their addresses matter. */
static char str_type[64], int_type[64], other_type[64];

static struct pa_python py = {
    .minor = 14,
    .unicode_type = (uintptr_t)str_type,
    .long_type = (uintptr_t)int_type,
    /* 3.14's PyASCIIObject: length at 16, state at 32, ASCII data after 40 bytes; the data
     * of a compact non-ASCII string after the 56 bytes of PyCompactUnicodeObject. */
    .layout =
        {.ob_type = 8, .u_length = 16, .u_state = 32, .u_ascii_size = 40, .u_compact_size = 56},
};

/* One object: 8-aligned room for a header and up to 300 characters of 4 bytes. */
struct obj {
    _Alignas(8) unsigned char b[64 + 4 * 300];
};

static void put_word(struct obj *o, unsigned off, uint64_t v) {
    memcpy(o->b + off, &v, sizeof v);
}

/* A compact str of n characters of the given kind (1, 2 or 4 bytes each). */
static uintptr_t make_str(struct obj *o, const uint32_t *chars, unsigned n, unsigned kind) {
    memset(o, 0, sizeof *o);
    int ascii = kind == 1;
    for (unsigned i = 0; i < n; i++)
        ascii = ascii && chars[i] < 0x80;
    put_word(o, 8, (uintptr_t)str_type);
    put_word(o, 16, n);
    uint32_t state = kind << 2 | 1u << 5 /* compact */ | (ascii ? 1u << 6 : 0);
    memcpy(o->b + 32, &state, sizeof state);
    unsigned char *data = o->b + (ascii ? 40 : 56);
    for (unsigned i = 0; i < n; i++) {
        if (kind == 1)
            data[i] = (unsigned char)chars[i];
        else if (kind == 2) {
            uint16_t c = (uint16_t)chars[i];
            memcpy(data + 2 * i, &c, 2);
        } else
            memcpy(data + 4 * i, &chars[i], 4);
    }
    return (uintptr_t)o->b;
}

static uintptr_t make_ascii(struct obj *o, const char *s) {
    uint32_t chars[300];
    unsigned n = (unsigned)strlen(s);
    for (unsigned i = 0; i < n; i++)
        chars[i] = (unsigned char)s[i];
    return make_str(o, chars, n, 1);
}

/* A non-negative int as 3.12+ keeps it: lv_tag (digit count << 3, sign bits 0, or 1 for
 * zero), then 30-bit digits. */
static uintptr_t make_int(struct obj *o, uint64_t v) {
    memset(o, 0, sizeof *o);
    put_word(o, 8, (uintptr_t)int_type);
    unsigned n = 0;
    for (uint64_t x = v; x; x >>= 30) {
        uint32_t d = (uint32_t)(x & 0x3fffffff);
        memcpy(o->b + 24 + 4 * n, &d, 4);
        n++;
    }
    put_word(o, 16, v ? (uint64_t)n << 3 : 1);
    return (uintptr_t)o->b;
}

static const char *name_of(uintptr_t obj, char *buf, size_t cap) {
    struct pa_frame f = pa_task_frame(&py, obj);
    assert_int_equal(f.id, PA_SYN_TASK);
    pa_task_frame_name(&f, buf, cap);
    return buf;
}

static void str_names(void **state) {
    (void)state;
    struct obj a, b;
    char buf[128];
    assert_string_equal(name_of(make_ascii(&a, "fetch-users"), buf, sizeof buf),
                        "task:fetch-users");
    /* The same name in another object: the same entry of the table. */
    struct pa_frame f1 = pa_task_frame(&py, make_ascii(&a, "worker 1"));
    struct pa_frame f2 = pa_task_frame(&py, make_ascii(&b, "worker 1"));
    assert_int_equal(f1.line, f2.line);
    assert_true(f1.line > 0);
    struct pa_frame f3 = pa_task_frame(&py, make_ascii(&b, "worker 2"));
    assert_int_not_equal(f1.line, f3.line);
    /* ';' would split a folded line; control characters become '?'. */
    assert_string_equal(name_of(make_ascii(&a, "a;b\tc"), buf, sizeof buf), "task:a:b?c");
    assert_string_equal(name_of(make_ascii(&a, ""), buf, sizeof buf), "task:");
}

static void non_ascii_names(void **state) {
    (void)state;
    struct obj a;
    char buf[128];
    const uint32_t latin[] = {'c', 0xe9, 'l', 0xe8, 'b', 'r', 'e'};
    assert_string_equal(name_of(make_str(&a, latin, 7, 1), buf, sizeof buf),
                        "task:c\xc3\xa9l\xc3\xa8"
                        "bre");
    const uint32_t cjk[] = {0x4efb, 0x52a1};
    assert_string_equal(name_of(make_str(&a, cjk, 2, 2), buf, sizeof buf),
                        "task:\xe4\xbb\xbb\xe5\x8a\xa1");
    const uint32_t emoji[] = {'x', 0x1f600};
    assert_string_equal(name_of(make_str(&a, emoji, 2, 4), buf, sizeof buf),
                        "task:x\xf0\x9f\x98\x80");
}

static void long_names_are_cut(void **state) {
    (void)state;
    struct obj a;
    char buf[256], s[201];
    memset(s, 'n', 200);
    s[200] = 0;
    name_of(make_ascii(&a, s), buf, sizeof buf);
    assert_int_equal(strlen(buf), strlen("task:") + 56);
    /* Cut between characters, never inside one: 30 two-byte characters fit in 59 bytes. */
    uint32_t wide[100];
    for (int i = 0; i < 100; i++)
        wide[i] = 0xe9;
    name_of(make_str(&a, wide, 100, 1), buf, sizeof buf);
    assert_int_equal(strlen(buf), strlen("task:") + 2 * 29);
}

static void default_names(void **state) {
    (void)state;
    struct obj a;
    char buf[128];
    assert_string_equal(name_of(make_int(&a, 1), buf, sizeof buf), "task:Task-1");
    assert_string_equal(name_of(make_int(&a, 1234567), buf, sizeof buf), "task:Task-1234567");
    /* Past 2^31 (two digits, and beyond the frame's line field). */
    assert_string_equal(name_of(make_int(&a, (1ull << 40) + 5), buf, sizeof buf),
                        "task:Task-1099511627781");
    /* Neither a str nor an int: no name to give. */
    memset(&a, 0, sizeof a);
    put_word(&a, 8, (uintptr_t)other_type);
    assert_string_equal(name_of((uintptr_t)a.b, buf, sizeof buf), "task:<other>");
}

/* pa_py_uint (a loop's _thread_id, a default name's counter): 3.12+'s lv_tag and 3.11's
 * ob_size, up to three 30-bit digits (a pthread id is a 64-bit address); beyond 2^64,
 * negative numbers and other types are refused. */
static void ints(void **state) {
    (void)state;
    struct obj a;
    unsigned long long v;
    const uint64_t values[] = {0, 7, (1ull << 30) + 1, 0x7f3d08cf8ec0ull, 0xffffffffffffffffull};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        assert_true(pa_py_uint(&py, make_int(&a, values[i]), &v));
        assert_true(v == values[i]);
    }
    /* 3.11: ob_size is the digit count, negative for a negative number. */
    struct pa_python py311 = py;
    py311.minor = 11;
    uintptr_t o = make_int(&a, 0x7f3d08cf8ec0ull);
    put_word(&a, 16, 2);
    assert_true(pa_py_uint(&py311, o, &v) && v == 0x7f3d08cf8ec0ull);
    put_word(&a, 16, (uint64_t)-2);
    assert_false(pa_py_uint(&py311, o, &v));
    /* 3.12+: a negative number (sign bits 2), 2^64 and beyond, not an int. */
    o = make_int(&a, 5);
    put_word(&a, 16, 1u << 3 | 2);
    assert_false(pa_py_uint(&py, o, &v));
    o = make_int(&a, 0);
    put_word(&a, 16, 3u << 3);
    uint32_t d = 16; /* the third digit holds bits 60-89: 2^64 */
    memcpy(a.b + 32, &d, 4);
    assert_false(pa_py_uint(&py, o, &v));
    put_word(&a, 8, (uintptr_t)other_type);
    assert_false(pa_py_uint(&py, o, &v));
}

/* Last: it fills the process's table. */
static void full_table(void **state) {
    (void)state;
    struct obj a;
    char buf[128], s[32];
    unsigned long before = pa_tasks_names_used();
    for (int i = 0; i < 5000; i++) {
        snprintf(s, sizeof s, "req-%d", i);
        pa_task_frame(&py, make_ascii(&a, s));
    }
    assert_true(pa_tasks_names_full() > 0);
    assert_true(pa_tasks_names_used() > before);
    assert_true(pa_tasks_names_used() <= 4096);
    /* Names already kept keep their names; a new one reads task:<other>. */
    assert_string_equal(name_of(make_ascii(&a, "fetch-users"), buf, sizeof buf),
                        "task:fetch-users");
    int others = 0;
    for (int i = 0; i < 100; i++) {
        snprintf(s, sizeof s, "late-%d", i);
        others += strcmp(name_of(make_ascii(&a, s), buf, sizeof buf), "task:<other>") == 0;
    }
    assert_true(others > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(str_names),
        cmocka_unit_test(non_ascii_names),
        cmocka_unit_test(long_names_are_cut),
        cmocka_unit_test(default_names),
        cmocka_unit_test(ints),
        cmocka_unit_test(full_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
