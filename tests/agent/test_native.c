/* test_native.c: native frames, unwound in a real signal handler and spliced with Python's.
 *
 * The interleaving on hand-made stacks (one Python frame per eval-loop call as on 3.8-3.10,
 * several as on 3.11+, unwinding that stopped early, the depth bound); then SIGPROF sent to
 * this very thread: the handler's backtrace holds the interrupted function, none while the
 * thread is "inside the loader", and a stand-in _PyEval_EvalFrameDefault on the real stack is
 * replaced by its Python frames. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <link.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../agent/native.h"
#include "../../uploader/symbols.h"

/* Fake addresses for the hand-made stacks: an eval range and native code outside it. */
enum { EVAL_LO = 0x1000, EVAL_HI = 0x2000 };
static const uintptr_t E1 = 0x1010, E2 = 0x1ff0, N1 = 0x3000, N2 = 0x3100, N3 = 0x3200;
static const struct pa_frame MARK = {PA_SYN_ENTRY, 0, 0}, TRUNC = {PA_SYN_TRUNCATED, 0, 0};

static struct pa_frame P(uint32_t id) {
    struct pa_frame f = {id, (int32_t)id * 10, 0};
    return f;
}

static void
expect(const struct pa_frame *got, int n, const struct pa_frame *want, int nwant) {
    assert_int_equal(n, nwant);
    for (int i = 0; i < n; i++) {
        if (got[i].id != want[i].id || got[i].line != want[i].line)
            fail_msg("frame %d: got {%#x, %d}, want {%#x, %d}", i, got[i].id, got[i].line,
                     want[i].id, want[i].line);
    }
}

/* Native unwinding stays off until pa_native_init has found the loader's lock, so every test
 * starts with it done (it also finds this binary's stand-in evaluation loop). */
static int setup(void **state) {
    (void)state;
    if (pa_native_init() != 0)
        return -1;
    return pa_native_add_eval_range(EVAL_LO, EVAL_HI);
}

static void test_native_frame_encoding_round_trips(void **state) {
    (void)state;
    uintptr_t ips[] = {0x7fffdeadbeef, 0x401000, 0x7ffff7a12345, 0x80000000};
    for (size_t i = 0; i < sizeof ips / sizeof *ips; i++) {
        struct pa_frame f = pa_native_frame(ips[i]);
        assert_true(pa_native_is_native(&f));
        assert_int_equal(pa_native_ip(&f), ips[i]);
    }
    struct pa_frame py = P(16);
    assert_false(pa_native_is_native(&py));
}

static void test_one_python_frame_per_eval_call(void **state) { /* 3.8-3.10 */
    (void)state;
    uintptr_t ips[] = {N1, E1, N2, E2, N3};
    struct pa_frame py[] = {P(20), MARK, P(21), MARK};
    struct pa_frame out[16];
    int n = pa_native_interleave(ips, 5, py, 4, out, 16);
    struct pa_frame want[] = {pa_native_frame(N1), P(20), pa_native_frame(N2), P(21),
                              pa_native_frame(N3)};
    expect(out, n, want, 5);
}

static void test_several_python_frames_per_eval_call(void **state) { /* 3.11+ */
    (void)state;
    uintptr_t ips[] = {N1, E1, N2, E2, N3};
    struct pa_frame py[] = {P(20), P(21), P(22), MARK, P(23), P(24), MARK};
    struct pa_frame out[16];
    int n = pa_native_interleave(ips, 5, py, 7, out, 16);
    struct pa_frame want[] = {pa_native_frame(N1), P(20), P(21), P(22),
                              pa_native_frame(N2), P(23), P(24), pa_native_frame(N3)};
    expect(out, n, want, 8);
}

static void test_python_frames_left_when_unwinding_stopped_early(void **state) {
    (void)state;
    uintptr_t ips[] = {N1, E1};
    struct pa_frame py[] = {P(20), MARK, P(21), P(22), MARK, P(23), MARK, P(PA_SYN_TRUNCATED)};
    struct pa_frame out[16];
    int n = pa_native_interleave(ips, 2, py, 8, out, 16);
    struct pa_frame want[] = {pa_native_frame(N1), P(20), P(21), P(22), P(23), P(PA_SYN_TRUNCATED)};
    expect(out, n, want, 6);
}

static void test_no_native_frames_gives_python_frames_without_markers(void **state) {
    (void)state;
    struct pa_frame py[] = {P(20), MARK, P(21), MARK};
    struct pa_frame out[16];
    int n = pa_native_interleave(NULL, 0, py, 4, out, 16);
    struct pa_frame want[] = {P(20), P(21)};
    expect(out, n, want, 2);
}

static void test_eval_call_without_python_frames_adds_nothing(void **state) {
    (void)state;
    uintptr_t ips[] = {N1, E1, N2, E2, N3};
    struct pa_frame py[] = {P(20), MARK};
    struct pa_frame out[16];
    int n = pa_native_interleave(ips, 5, py, 2, out, 16);
    struct pa_frame want[] = {pa_native_frame(N1), P(20), pa_native_frame(N2), pa_native_frame(N3)};
    expect(out, n, want, 4);
}

static void test_depth_bound_cuts_the_root_side(void **state) {
    (void)state;
    uintptr_t ips[] = {N1, E1, N2, E2, N3};
    struct pa_frame py[] = {P(20), P(21), P(22), MARK, P(23), P(24), MARK};
    struct pa_frame out[16];
    memset(out, 0xee, sizeof out);
    int n = pa_native_interleave(ips, 5, py, 7, out, 4);
    struct pa_frame want[] = {pa_native_frame(N1), P(20), P(21), TRUNC};
    expect(out, n, want, 4);
    assert_int_equal(out[4].id, 0xeeeeeeeeu); /* nothing written beyond max */
    struct pa_frame all[] = {pa_native_frame(N1), P(20), P(21), P(22),
                             pa_native_frame(N2), P(23), P(24), pa_native_frame(N3)};
    n = pa_native_interleave(ips, 5, py, 7, out, 8); /* exactly fits: nothing cut */
    expect(out, n, all, 8);
    n = pa_native_interleave(ips, 5, py, 7, out, 1);
    struct pa_frame cut[] = {TRUNC};
    expect(out, n, cut, 1);
    assert_int_equal(pa_native_interleave(ips, 5, py, 7, out, 0), 0);
}

/* ---- a real signal on this thread --------------------------------------------------------- */

static uintptr_t got_ips[2 * PA_NATIVE_MAX_FRAMES];
static volatile int got_n = -1;
static volatile int want_max = PA_NATIVE_MAX_FRAMES;
static volatile int sink;

static void on_prof(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)si;
    got_n = pa_native_backtrace(uc, got_ips, want_max);
}

static void send_prof_to_self(void) {
    syscall(SYS_tgkill, getpid(), (pid_t)syscall(SYS_gettid), SIGPROF);
}

/* The frame the signal interrupts (its return address is in the backtrace). The write after
 * the call keeps the call from becoming a tail jump. */
__attribute__((noinline)) void pa_test_interrupted_function(void) {
    send_prof_to_self();
    sink++;
}

/* A stand-in for the interpreter's evaluation loop: exported (ENABLE_EXPORTS), so that
 * pa_native_init finds it and its size with dlsym and dladdr1, as in a real python. */
__attribute__((noinline)) int _PyEval_EvalFrameDefault(void *tstate, void *frame, int throwflag);
__attribute__((noinline)) int _PyEval_EvalFrameDefault(void *tstate, void *frame, int throwflag) {
    (void)tstate;
    (void)frame;
    pa_test_interrupted_function();
    sink++;
    return throwflag;
}

static void install_handler(void (*fn)(int, siginfo_t *, void *)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = fn;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGPROF, &sa, NULL), 0);
}

static int find_symbol(const char *name) {
    for (int i = 0; i < got_n; i++) {
        struct pa_symbol s;
        if (pa_symbols_resolve(got_ips[i], &s) == 0 && !strcmp(s.name, name))
            return i;
    }
    return -1;
}

static void test_backtrace_in_handler_holds_the_interrupted_function(void **state) {
    (void)state;
    install_handler(on_prof);
    got_n = -1;
    pa_test_interrupted_function();
    assert_true(got_n >= 3);
    int at = find_symbol("pa_test_interrupted_function");
    if (at < 0)
        fail_msg("pa_test_interrupted_function not in the %d frames", got_n);
    /* Its caller is this test function, further from the leaf. */
    int caller = find_symbol("test_backtrace_in_handler_holds_the_interrupted_function");
    assert_true(caller > at);
}

static __attribute__((noinline)) void recurse(int depth) {
    if (depth > 0)
        recurse(depth - 1);
    else
        pa_test_interrupted_function();
    sink++;
}

static void test_backtrace_is_bounded(void **state) {
    (void)state;
    uintptr_t ips[2];
    assert_int_equal(pa_native_backtrace(NULL, ips, 2), 0);
    install_handler(on_prof);
    want_max = 2;
    got_n = -1;
    pa_test_interrupted_function();
    assert_int_equal(got_n, 2);
    want_max = 2 * PA_NATIVE_MAX_FRAMES; /* more than the module allows */
    got_n = -1;
    recurse(PA_NATIVE_MAX_FRAMES + 50);
    want_max = PA_NATIVE_MAX_FRAMES;
    assert_int_equal(got_n, PA_NATIVE_MAX_FRAMES);
    assert_true(find_symbol("recurse") >= 0);
}

static int signal_inside_loader(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)info;
    (void)size;
    (void)arg;
    pa_test_interrupted_function(); /* the loader's write lock is held right now */
    return 1;
}

static void test_no_unwinding_inside_the_loader(void **state) {
    (void)state;
    install_handler(on_prof);
    got_n = -1;
    dl_iterate_phdr(signal_inside_loader, NULL);
    assert_int_equal(got_n, 0);
    got_n = -1;
    pa_test_interrupted_function();
    assert_true(got_n > 0);
}

static void test_eval_loop_on_the_real_stack_becomes_python_frames(void **state) {
    (void)state;
    assert_int_equal(pa_native_init(), 0);
    uintptr_t eval = (uintptr_t)_PyEval_EvalFrameDefault;
    assert_true(pa_native_in_eval(eval));
    assert_false(pa_native_in_eval((uintptr_t)pa_test_interrupted_function));
    install_handler(on_prof);
    got_n = -1;
    assert_int_equal(_PyEval_EvalFrameDefault(NULL, NULL, 5), 5);
    assert_true(got_n >= 3);
    /* One Python run for the stand-in's call, and one more that the C stack has no eval call
     * for (as when unwinding stops early): it ends up at the root. */
    struct pa_frame py[] = {P(40), P(41), MARK, P(50), MARK};
    struct pa_frame out[PA_NATIVE_MAX_FRAMES + 8];
    int n = pa_native_interleave(got_ips, got_n, py, 5, out, PA_NATIVE_MAX_FRAMES + 8);
    assert_int_equal(n, got_n - 1 + 3);
    int leaf = -1, p40 = -1;
    for (int i = 0; i < n; i++) {
        if (pa_native_is_native(&out[i])) {
            uintptr_t ip = pa_native_ip(&out[i]);
            assert_false(pa_native_in_eval(ip));
            struct pa_symbol s;
            if (pa_symbols_resolve(ip, &s) == 0 && !strcmp(s.name, "pa_test_interrupted_function"))
                leaf = i;
        } else if (out[i].id == 40) {
            p40 = i;
        }
    }
    assert_true(leaf >= 0);
    assert_int_equal(p40, leaf + 1); /* the Python frames sit where the eval call was */
    assert_int_equal(out[p40 + 1].id, 41);
    assert_int_equal(out[n - 1].id, 50);
}

/* ---- the step cache against libunwind ------------------------------------------------------ */

/* Each signal is unwound by libunwind alone, then three times with the step cache: the first
 * learns the return addresses' rules (the leaf is only marked seen), the second the leaf's,
 * the third finds every rule learned. All four must give the same frames. */
enum { ROUNDS = 4 };
static uintptr_t cmp_ips[ROUNDS][PA_NATIVE_MAX_FRAMES];
static volatile int cmp_n[ROUNDS];

static void on_prof_compare(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)si;
    pa_native_set_unwinder(PA_NATIVE_LIBUNWIND);
    cmp_n[0] = pa_native_backtrace(uc, cmp_ips[0], PA_NATIVE_MAX_FRAMES);
    pa_native_set_unwinder(PA_NATIVE_CACHED);
    for (int r = 1; r < ROUNDS; r++)
        cmp_n[r] = pa_native_backtrace(uc, cmp_ips[r], PA_NATIVE_MAX_FRAMES);
}

static int symbol_count(const char *name) {
    int k = 0;
    for (int i = 0; i < cmp_n[0]; i++) {
        struct pa_symbol s;
        if (pa_symbols_resolve(cmp_ips[0][i], &s) == 0 && !strcmp(s.name, name))
            k++;
    }
    return k;
}

static void expect_same_walks(void) {
    assert_true(cmp_n[0] >= 3);
    for (int r = 1; r < ROUNDS; r++) {
        if (cmp_n[r] != cmp_n[0])
            fail_msg("walk %d: %d frames, libunwind %d", r, cmp_n[r], cmp_n[0]);
        for (int i = 0; i < cmp_n[0]; i++)
            if (cmp_ips[r][i] != cmp_ips[0][i])
                fail_msg("walk %d, frame %d: %#lx, libunwind %#lx", r, i,
                         (unsigned long)cmp_ips[r][i], (unsigned long)cmp_ips[0][i]);
    }
}

/* Frames of three shapes: a frame pointer (CFA from rbp; __builtin_frame_address asks for one),
 * none where the build omits them (CFA from rsp at an offset the prologue moves), and a
 * variable-size frame (alloca: rbp again, whatever the flags). */
static __attribute__((noinline)) void mixed_recursion(int depth);

static __attribute__((noinline)) void with_fp(int depth) {
    volatile char buf[40];
    sink += (int)((uintptr_t)__builtin_frame_address(0) & 1); /* makes the compiler set rbp up */
    buf[depth % 40] = (char)depth;
    mixed_recursion(depth - 1);
    sink += buf[depth % 40];
}

static __attribute__((noinline)) void without_fp(int depth) {
    volatile char buf[300];
    buf[depth % 300] = (char)depth;
    mixed_recursion(depth - 1);
    sink += buf[depth % 300];
}

static __attribute__((noinline)) void with_alloca(int depth) {
    volatile char *buf = __builtin_alloca((size_t)(16 + depth * 8));
    buf[0] = (char)depth;
    mixed_recursion(depth - 1);
    sink += buf[0];
}

static __attribute__((noinline)) void mixed_recursion(int depth) {
    if (depth <= 0)
        pa_test_interrupted_function();
    else if (depth % 3 == 0)
        with_fp(depth);
    else if (depth % 3 == 1)
        without_fp(depth);
    else
        with_alloca(depth);
    sink++;
}

static void test_step_cache_walks_as_libunwind_through_every_frame_shape(void **state) {
    (void)state;
    install_handler(on_prof_compare);
    struct pa_native_counts before, after;
    pa_native_get_counts(&before);
    mixed_recursion(60);
    expect_same_walks();
    assert_true(symbol_count("with_fp") == 20 && symbol_count("without_fp") == 20 &&
                symbol_count("with_alloca") == 20);
    pa_native_get_counts(&after);
    assert_true(after.learned_steps > before.learned_steps);
    assert_true(after.cached_steps - before.cached_steps >= 60); /* the third walk at least */
    assert_int_equal(after.libunwind_walks, before.libunwind_walks);
}

/* libc's qsort calling back into this program: frames of another object, learned alike. */
static int cmp_calls;

static int compare_and_signal(const void *a, const void *b) {
    if (++cmp_calls == 50)
        pa_test_interrupted_function();
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

static void test_step_cache_walks_as_libunwind_through_a_library_callback(void **state) {
    (void)state;
    install_handler(on_prof_compare);
    int v[200];
    for (int i = 0; i < 200; i++)
        v[i] = (i * 7919) % 200;
    cmp_calls = 0;
    cmp_n[0] = -1;
    qsort(v, 200, sizeof *v, compare_and_signal);
    expect_same_walks();
    assert_true(symbol_count("compare_and_signal") == 1);
}

/* After a library was unloaded, rules are learned again (another object may be mapped at the
 * same addresses) and the walks still agree. One call site, so that a second call's frames
 * are all known. */
static __attribute__((noinline)) void recurse_30(void) {
    mixed_recursion(30);
    sink++;
}

static void test_step_cache_learns_again_after_code_was_unloaded(void **state) {
    (void)state;
    install_handler(on_prof_compare);
    struct pa_native_counts c[4];
    for (int i = 0; i < 3; i++) {
        pa_native_get_counts(&c[i]);
        if (i == 2)
            pa_native_code_unloaded();
        recurse_30();
        expect_same_walks();
    }
    pa_native_get_counts(&c[3]);
    /* Known the second time: all but, where the compiler unrolled the loop, its call site. */
    assert_true(c[2].learned_steps - c[1].learned_steps <= 1);
    /* After the unload, every distinct address again: the three frame shapes' call sites,
     * the recursion's, this test's and cmocka's (17 here). */
    assert_true(c[3].learned_steps - c[2].learned_steps >= 10);
}

/* Tags hold 15 bits of the generation: 32,768 unloads later the numbers come back, and the
 * table must hold nothing from before by then. */
static void test_step_cache_forgets_everything_when_the_generation_wraps(void **state) {
    (void)state;
    install_handler(on_prof_compare);
    recurse_30();
    struct pa_native_counts before, after;
    pa_native_get_counts(&before);
    for (int i = 0; i < 0x8000; i++)
        pa_native_code_unloaded();
    recurse_30();
    expect_same_walks();
    pa_native_get_counts(&after);
    assert_true(after.learned_steps - before.learned_steps >= 10);
}

static int teardown(void **state) {
    (void)state;
    signal(SIGPROF, SIG_IGN);
    pa_symbols_free();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_native_frame_encoding_round_trips),
        cmocka_unit_test(test_one_python_frame_per_eval_call),
        cmocka_unit_test(test_several_python_frames_per_eval_call),
        cmocka_unit_test(test_python_frames_left_when_unwinding_stopped_early),
        cmocka_unit_test(test_no_native_frames_gives_python_frames_without_markers),
        cmocka_unit_test(test_eval_call_without_python_frames_adds_nothing),
        cmocka_unit_test(test_depth_bound_cuts_the_root_side),
        cmocka_unit_test(test_backtrace_in_handler_holds_the_interrupted_function),
        cmocka_unit_test(test_backtrace_is_bounded),
        cmocka_unit_test(test_no_unwinding_inside_the_loader),
        cmocka_unit_test(test_eval_loop_on_the_real_stack_becomes_python_frames),
        cmocka_unit_test(test_step_cache_walks_as_libunwind_through_every_frame_shape),
        cmocka_unit_test(test_step_cache_walks_as_libunwind_through_a_library_callback),
        cmocka_unit_test(test_step_cache_learns_again_after_code_was_unloaded),
        cmocka_unit_test(test_step_cache_forgets_everything_when_the_generation_wraps),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
