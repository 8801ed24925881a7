/* test_symbols.c: native addresses of this very process get their real names.
 *
 * A function of the test binary (from .symtab), deflate from libz and printf from libc (from
 * .dynsym), a library loaded with dlopen after the first lookup, addresses that no symbol or
 * no object covers, and which interpreter frames count as plumbing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#include "../../uploader/symbols.h"

/* Static: only .symtab names it. */
static __attribute__((noinline)) int local_marker_function(int x) {
    return x * 7 + (int)zlibVersion()[0];
}

static uintptr_t sym_in(const char *lib, const char *name) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    void *p = dlsym(h, name); /* the library's own, not a sanitizer's interceptor */
    assert_non_null(p);
    dlclose(h);
    return (uintptr_t)p;
}

static void lookup_is(uintptr_t ip, const char *want) {
    char buf[512];
    int n = pa_symbols_lookup(ip, buf, sizeof buf);
    assert_string_equal(buf, want);
    assert_int_equal(n, (int)strlen(want));
}

static void test_function_of_the_program_from_symtab(void **state) {
    (void)state;
    assert_int_equal(local_marker_function(1), 7 + '1');
    lookup_is((uintptr_t)local_marker_function + 1, "local_marker_function [test_symbols]");
    struct pa_symbol s;
    assert_int_equal(pa_symbols_resolve((uintptr_t)local_marker_function + 3, &s), 0);
    assert_int_equal(s.offset, 3);
    assert_int_equal(s.in_interpreter, 0);
}

static void test_library_functions_from_dynsym(void **state) {
    (void)state;
    lookup_is(sym_in("libz.so.1", "deflate") + 4, "deflate [libz.so.1]");
    lookup_is(sym_in("libc.so.6", "printf") + 1, "printf [libc.so.6]");
}

static void test_address_without_symbol_names_object_and_offset(void **state) {
    (void)state;
    /* The ELF header of libz: mapped, inside no function. */
    Dl_info info;
    assert_true(dladdr((void *)sym_in("libz.so.1", "deflate"), &info));
    lookup_is((uintptr_t)info.dli_fbase + 2, "[libz.so.1+0x2]");
}

static void test_unmapped_address_is_unknown(void **state) {
    (void)state;
    lookup_is(0x10, "[unknown+0x10]");
    struct pa_symbol s;
    assert_int_equal(pa_symbols_resolve(0x10, &s), -1);
    assert_null(s.name);
    assert_null(s.object);
}

static void test_library_loaded_after_first_lookup(void **state) {
    (void)state;
    lookup_is(sym_in("libz.so.1", "deflate"), "deflate [libz.so.1]"); /* caches the list */
    void *h = dlopen(PA_LATE_LIB, RTLD_NOW);
    assert_non_null(h);
    int (*fn)(int) = (int (*)(int))dlsym(h, "pa_late_function");
    assert_non_null(fn);
    assert_int_equal(fn(2), 7);
    lookup_is((uintptr_t)fn + 1, "pa_late_function [libpa_late.so]");
    uintptr_t start = 0;
    size_t size = 0;
    assert_int_equal(pa_symbols_find("pa_late_function", &start, &size), 0);
    assert_int_equal(start, (uintptr_t)fn);
    assert_true(size > 0);
    dlclose(h);
}

static void test_find_by_name(void **state) {
    (void)state;
    uintptr_t start = 0;
    size_t size = 0;
    assert_int_equal(pa_symbols_find("deflate", &start, &size), 0);
    assert_int_equal(start, sym_in("libz.so.1", "deflate"));
    assert_true(size > 16);
    assert_int_equal(pa_symbols_find("no_such_function_anywhere", &start, &size), -1);
}

static void test_output_is_truncated_not_overrun(void **state) {
    (void)state;
    char buf[8];
    memset(buf, 'x', sizeof buf);
    int n = pa_symbols_lookup(sym_in("libz.so.1", "deflate"), buf, 6);
    assert_int_equal(n, 5);
    assert_string_equal(buf, "defla");
    assert_int_equal(buf[6], 'x');
}

static void test_plumbing_is_dropped_and_real_work_kept(void **state) {
    (void)state;
    static const char *const plumbing[] = {
        "_PyEval_EvalFrameDefault",
        "_PyEval_Vector",
        "_PyEvalFramePushAndInit",
        "_PyObject_VectorcallTstate",
        "PyObject_Vectorcall",
        "_PyObject_Call",
        "_PyObject_MakeTpCall",
        "PyObject_Call",
        "PyObject_CallOneArg",
        "_PyFunction_Vectorcall",
        "cfunction_vectorcall_O",
        "cfunction_call",
        "method_vectorcall_NOARGS",
        "vectorcall_method",
        "slot_tp_call",
        "slot_tp_init",
        "type_call",
        "_Py_CheckFunctionResult",
        "PyEval_EvalCode",
        "run_mod",
        "run_eval_code_obj",
        "pyrun_file",
        "_PyRun_SimpleFileObject",
        "PyRun_AnyFileExFlags",
        "pymain_run_python",
        "Py_RunMain",
        "Py_BytesMain",
        "main",
        "__libc_start_main",
        "__libc_start_call_main",
        "_start",
        "clone",
        "clone3",
        "start_thread",
        "thread_run",
        "pythread_wrapper",
        "call_function",
        "gen_send_ex2",
    };
    static const char *const kept[] = {
        "zlib_compress",
        "zlib_compress_impl",
        "deflate",
        "deflate_slow",
        "_hashlib_HASH_update",
        "sha256_update",
        "EVP_DigestUpdate",
        "time_sleep",
        "printf",
        "PyObject_Hash",
        "_PyDict_Lookup",
        "list_sort_impl",
        "maintain",
        "mainloop",
        "_started",
        "clone_object",
        "PyNumber_Add",
        "memcpy",
        "",
    };
    for (size_t i = 0; i < sizeof plumbing / sizeof *plumbing; i++)
        if (!pa_symbols_is_plumbing(plumbing[i]))
            fail_msg("%s should be plumbing", plumbing[i]);
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++)
        if (pa_symbols_is_plumbing(kept[i]))
            fail_msg("%s should be kept", kept[i]);
    assert_int_equal(pa_symbols_is_plumbing(NULL), 0);
}

static int teardown(void **state) {
    (void)state;
    pa_symbols_free();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_function_of_the_program_from_symtab),
        cmocka_unit_test(test_library_functions_from_dynsym),
        cmocka_unit_test(test_address_without_symbol_names_object_and_offset),
        cmocka_unit_test(test_unmapped_address_is_unknown),
        cmocka_unit_test(test_library_loaded_after_first_lookup),
        cmocka_unit_test(test_find_by_name),
        cmocka_unit_test(test_output_is_truncated_not_overrun),
        cmocka_unit_test(test_plumbing_is_dropped_and_real_work_kept),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
