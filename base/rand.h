/* rand.h: the agent's own pseudo-random numbers (jitter, spreading threads' first samples, an
 * id when getrandom is refused).
 *
 * Never the C library's random(), rand() or srandom(): they share one hidden state with the
 * program, so seeding it at start would replace the fixed sequence an unseeded program gets,
 * and each draw of ours would shift every later number of the program's (tests/harmless,
 * libc_random_sequence). Here: a counter stepped by the golden ratio, mixed with the monotonic
 * clock and finished by splitmix64's mixer. Not for secrets. Lock-free and async-signal-safe. */
#ifndef PA_RAND_H
#define PA_RAND_H

#include <stdatomic.h>
#include <stdint.h>

#include "clock.h"

static inline uint64_t pa_rand64(void) {
    static _Atomic uint64_t step;
    uint64_t z = pa_mono_ns() +
                 atomic_fetch_add_explicit(&step, 0x9e3779b97f4a7c15ULL, memory_order_relaxed);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

#endif
