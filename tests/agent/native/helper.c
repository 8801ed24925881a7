/* helper.c: a small C library for the native unwinding cases (test_agent.py native_unwind):
 * recursion through its own frames down to a spin loop or to a callback into Python.
 *
 * Built twice (tests/agent/CMakeLists.txt): variant A keeps frame pointers (each frame's CFA
 * is rbp + 16), variant B omits them and keeps a larger buffer on the stack (the CFA is rsp
 * plus an offset that moves through the prologue). The functions sit in the same order, so
 * when one variant is unloaded and the other loaded at the same address, the same
 * instruction addresses need other unwind rules: a rule kept from the first would unwind the
 * second wrongly. */
#include <string.h>

#ifdef HELPER_VARIANT_B
enum { BUF = 200 };
#else
enum { BUF = 24 };
#endif

volatile unsigned long helper_sink;

/* Spins for `iters` rounds: where the samples land. */
__attribute__((noinline)) unsigned long helper_spin(unsigned long iters) {
    volatile char buf[BUF];
    unsigned long x = 1;
    for (unsigned long i = 0; i < iters; i++) {
        buf[i % BUF] = (char)i;
        x = x * 6364136223846793005u + 1442695040888963407u + (unsigned long)buf[(i * 7) % BUF];
    }
    return x;
}

/* Recurses depth frames (each with a buffer of its own), then spins or calls back. */
__attribute__((noinline)) unsigned long helper_recurse(int depth, unsigned long iters,
                                                       unsigned long (*cb)(unsigned long)) {
    volatile char buf[BUF];
    memset((char *)buf, depth, sizeof buf);
    unsigned long r =
        depth <= 0 ? (cb ? cb(iters) : helper_spin(iters)) : helper_recurse(depth - 1, iters, cb);
    helper_sink += buf[depth % BUF];
    return r + 1;
}
