/* signal_floor.c: what one signal costs on this machine with an empty handler, the floor
 * under any in-process sampler's per-sample cost. Sends N SIGPROFs to the calling thread with
 * tgkill and divides the elapsed time. Then the same with a handler that blocks SIGPROF at
 * its entry and sets the interrupted mask back before it returns, two rt_sigprocmask calls (what
 * the agent's handler did until 2026-11-27; architecture.md, "Where the handler's time goes").
 * Prints "delivery_ns MEDIAN" and "masked_delivery_ns MEDIAN" over several rounds, measured
 * alternately. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <pthread.h>
#include <unistd.h>

static volatile unsigned long hits;

static void on_sig(int sig) {
    (void)sig;
    hits++;
}

static void on_sig_masked(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)si;
    sigset_t prof;
    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    pthread_sigmask(SIG_BLOCK, &prof, NULL);
    hits++;
    pthread_sigmask(SIG_SETMASK, &((ucontext_t *)uc)->uc_sigmask, NULL);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median over rounds of one delivery's cost with handler h. */
static double measure(void (*h)(int, siginfo_t *, void *), int n, int rounds, double *per) {
    pid_t pid = getpid(), tid = (pid_t)syscall(SYS_gettid);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    if (h) {
        sa.sa_sigaction = h;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    } else {
        sa.sa_handler = on_sig;
    }
    sigaction(SIGPROF, &sa, NULL);
    for (int r = 0; r < rounds; r++) {
        double t0 = now();
        for (int i = 0; i < n; i++)
            syscall(SYS_tgkill, pid, tid, SIGPROF);
        per[r] = (now() - t0) / n * 1e9;
    }
    qsort(per, rounds, sizeof per[0], cmp);
    return per[rounds / 2];
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 200000, rounds = 7;
    double per[16], plain[8], masked[8];
    for (int k = 0; k < 8; k++) { /* alternately: drift falls on both alike */
        plain[k] = measure(NULL, n / 8, rounds, per);
        masked[k] = measure(on_sig_masked, n / 8, rounds, per);
    }
    qsort(plain, 8, sizeof plain[0], cmp);
    qsort(masked, 8, sizeof masked[0], cmp);
    printf("delivery_ns %.0f\n", (plain[3] + plain[4]) / 2);
    printf("masked_delivery_ns %.0f\n", (masked[3] + masked[4]) / 2);
    return hits == 2UL * 8 * (unsigned long)(n / 8) * rounds ? 0 : 1;
}
