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

static void install_handler(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_prof;
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
    install_handler();
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
    install_handler();
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
    install_handler();
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
    install_handler();
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
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
