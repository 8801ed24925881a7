/* jumpout.c: a program's signal handler that leaves by siglongjmp, for the agent case
 * own_handler_longjmp. C libraries that bound a blocking call with alarm() jump out of their
 * SIGALRM handler to where they set the jump; such a signal may come while the agent takes a
 * sample, and the sample is then never finished. Here a second thread sends SIGUSR1 to the
 * calling thread every PERIOD_US (an interrupt that lands wherever the thread is, our handler
 * included), and the handler jumps back into a loop that burns CPU until the thread has used
 * NS of it. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "thread_cpu.h"

static sigjmp_buf env;
static volatile sig_atomic_t armed;
static volatile long jumps;
static volatile int stop;
static pid_t target;

static void on_usr1(int sig) {
    (void)sig;
    if (armed) {
        armed = 0;
        jumps++;
        siglongjmp(env, 1);
    }
}

static long mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Sends SIGUSR1 every period_ns, waiting by spinning on the clock (a sleep that short would
 * last tens of microseconds more). */
static void *sender(void *arg) {
    long period_ns = (long)(intptr_t)arg, next = mono_ns();
    while (!stop) {
        syscall(SYS_tgkill, getpid(), target, SIGUSR1);
        next += period_ns;
        while (mono_ns() < next && !stop)
            ;
    }
    return NULL;
}

/* The jumps taken, or -1 if the handler or the sender could not be set up. */
long jumpout_burn(long ns, long period_us) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGUSR1, &sa, NULL) != 0)
        return -1;
    target = (pid_t)syscall(SYS_gettid);
    stop = 0;
    pthread_t t;
    long end = thread_cpu_ns() + ns;
    if (pthread_create(&t, NULL, sender, (void *)(intptr_t)(period_us * 1000)) != 0)
        return -1;
    (void)sigsetjmp(env, 1); /* each jump lands here */
    armed = 1;
    while (thread_cpu_ns() < end)
        ;
    armed = 0;
    stop = 1;
    pthread_join(t, NULL);
    return jumps;
}
