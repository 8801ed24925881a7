/* altstack.c: a program's own small alternate signal stack, for the harmless case
 * small_signal_stack. faulthandler (which regrtest and many services enable) gives the main
 * thread a sigaltstack of a few tens of KiB from malloc, and CPython installs its signal
 * handlers with SA_ONSTACK: a signal that arrives while such a handler runs is delivered on
 * that same small stack, whatever its own flags say. The case makes that window long: a
 * SIGUSR1 handler with SA_ONSTACK that burns CPU time, so that the profiler's SIGPROF lands on
 * the alternate stack. The stack lies in a malloc'd block between two guard zones filled
 * with a pattern; a handler that needs more stack than is left writes into the lower zone,
 * as it would write into whatever malloc put below the program's own stack. */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "thread_cpu.h"

enum { GUARD = 256 * 1024, PATTERN = 0xA5 };

static unsigned char *block;
static size_t stack_size;
static long burn_ns;

static void burn(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)si;
    (void)uc;
    long end = thread_cpu_ns() + burn_ns;
    volatile unsigned long n = 0;
    while (thread_cpu_ns() < end)
        n++;
}

/* Gives the calling thread an alternate stack of size bytes and SIGUSR1 a handler on it that
 * burns ms milliseconds of CPU time. 0 on success. */
int altstack_setup(size_t size, long ms) {
    block = malloc(GUARD + size + GUARD);
    if (!block)
        return -1;
    memset(block, PATTERN, GUARD + size + GUARD);
    stack_size = size;
    burn_ns = ms * 1000000L;
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = block + GUARD;
    ss.ss_size = size;
    if (sigaltstack(&ss, NULL) != 0)
        return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = burn;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGUSR1, &sa, NULL);
}

/* Bytes of the two guard zones that no longer hold the pattern: written past the stack. */
long altstack_damage(void) {
    long n = 0;
    for (size_t i = 0; i < GUARD; i++)
        n += block[i] != PATTERN;
    for (size_t i = GUARD + stack_size; i < GUARD + stack_size + GUARD; i++)
        n += block[i] != PATTERN;
    return n;
}

/* How many bytes of the stack were ever used (the lowest byte written, counted from the top). */
long altstack_used(void) {
    size_t i = GUARD;
    while (i < GUARD + stack_size && block[i] == PATTERN)
        i++;
    return (long)(GUARD + stack_size - i);
}
