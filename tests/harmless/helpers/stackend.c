/* stackend.c: CPU time spent near the end of a thread's own stack, for the harmless case
 * small_thread_stack. Python lets a program give its threads small stacks
 * (threading.stack_size, 32 KiB at least before 3.15), and C code may run deep in them. A
 * signal handler runs on the interrupted thread's stack, below whatever the thread uses: a
 * profiler's handler that needs more than is left writes into the guard page below the stack
 * and the process dies of SIGSEGV. Here C frames of 512 bytes each go down until about LEFT
 * bytes of the stack are left, then burn CPU time there. */
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "thread_cpu.h"

/* The lowest address of this thread's stack (above its guard page), 0 if unknown. */
static uintptr_t stack_low(void) {
    pthread_attr_t a;
    void *addr = 0;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &a) != 0)
        return 0;
    pthread_attr_getstack(&a, &addr, &size);
    pthread_attr_destroy(&a);
    return (uintptr_t)addr;
}

static __attribute__((noinline)) long burn(uintptr_t low, long ns) {
    long left = (long)((uintptr_t)__builtin_frame_address(0) - low);
    long end = thread_cpu_ns() + ns;
    while (thread_cpu_ns() < end)
        ;
    return left;
}

static __attribute__((noinline)) long descend(uintptr_t low, long left, long ns) {
    volatile char pad[512];
    pad[0] = 0;
    long here = (long)((uintptr_t)__builtin_frame_address(0) - low);
    long r = here - (long)sizeof pad > left + 256 ? descend(low, left, ns) : burn(low, ns);
    return r + pad[0]; /* a use after the call: no tail call, the frame stays */
}

/* Burns NS of CPU time with about LEFT bytes of the stack left; returns the bytes that were
 * left at the burn, or -1 if the stack's bounds are unknown or LEFT bytes are not there. */
long stackend_burn(long left, long ns) {
    uintptr_t low = stack_low();
    if (!low || (long)((uintptr_t)__builtin_frame_address(0) - low) < left + 1024)
        return -1;
    return descend(low, left, ns);
}
