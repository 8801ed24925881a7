/* timer_floor.c: what one timer-driven signal costs this machine, with an empty handler.
 *
 * An in-process sampler pays, per sample, the timer interrupt, the signal delivery and its
 * own handler. The first two do not depend on the sampler: this program measures them, for
 * each timer source the agent can use, as the extra CPU time of a fixed loop while the
 * source fires at RATE per second, divided by the signals received. Median of ROUNDS.
 *   timer_floor [RATE [ROUNDS]]    (defaults: 10000, 5)
 * Output, one line per source: "NAME signals_per_s=N us_per_signal=X". */
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { SRC_NONE, SRC_HRTIMER, SRC_CPU_TIMER, SRC_PERF_REFRESH, SRC_PERF_RING };
static const char *const names[] = {"none", "posix-monotonic", "posix-thread-cpu", "perf-refresh",
                                    "perf-ring"};

static volatile long hits;
static int perf_fd = -1, refresh;

static void on_signal(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)si;
    (void)uc;
    hits++;
    if (refresh)
        ioctl(perf_fd, PERF_EVENT_IOC_REFRESH, 1);
}

static double thread_cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static volatile long sink;

static double spin(long n) {
    double t0 = thread_cpu();
    for (long i = 0; i < n; i++)
        sink += i;
    return thread_cpu() - t0;
}

/* Arms the source; returns a cleanup token (timer or fd) in *out; 0 or -1. */
static int arm(int src, long rate, timer_t *timer, void **ring) {
    long period = 1000000000L / rate;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    if (src == SRC_HRTIMER || src == SRC_CPU_TIMER) {
        struct sigevent sev;
        memset(&sev, 0, sizeof sev);
        sev.sigev_notify = SIGEV_THREAD_ID;
        sev.sigev_signo = SIGPROF;
        sev._sigev_un._tid = tid;
        if (timer_create(src == SRC_HRTIMER ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &sev,
                         timer) != 0)
            return -1;
        struct itimerspec its = {{0, period}, {0, period}};
        return timer_settime(*timer, 0, &its, NULL);
    }
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.type = PERF_TYPE_SOFTWARE;
    a.size = sizeof a;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.sample_period = (unsigned long long)period;
    a.wakeup_events = 1;
    a.disabled = 1;
    perf_fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (perf_fd < 0)
        return -1;
    struct f_owner_ex owner = {F_OWNER_TID, tid};
    fcntl(perf_fd, F_SETFL, O_ASYNC);
    fcntl(perf_fd, F_SETSIG, SIGPROF);
    fcntl(perf_fd, F_SETOWN_EX, &owner);
    if (src == SRC_PERF_RING) {
        *ring = mmap(NULL, 8192, PROT_READ, MAP_SHARED, perf_fd, 0);
        if (*ring == MAP_FAILED)
            return -1;
        return ioctl(perf_fd, PERF_EVENT_IOC_ENABLE, 0);
    }
    refresh = 1;
    return ioctl(perf_fd, PERF_EVENT_IOC_REFRESH, 1);
}

static void disarm(int src, timer_t timer, void *ring) {
    if (src == SRC_HRTIMER || src == SRC_CPU_TIMER)
        timer_delete(timer);
    if (perf_fd >= 0)
        close(perf_fd);
    if (ring && ring != MAP_FAILED)
        munmap(ring, 8192);
    perf_fd = -1;
    refresh = 0;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    long rate = argc > 1 ? atol(argv[1]) : 10000;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    if (rate < 1 || rounds < 1 || rounds > 64)
        return 2;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGPROF, &sa, NULL);
    long n = 1000000000L; /* about half a second of CPU here */
    for (int src = SRC_HRTIMER; src <= SRC_PERF_RING; src++) {
        double cost[64], per_s[64];
        int ok = 1;
        for (int r = 0; r < rounds && ok; r++) {
            double base = spin(n);
            timer_t timer = 0;
            void *ring = NULL;
            hits = 0;
            if (arm(src, rate, &timer, &ring) != 0) {
                ok = 0;
                break;
            }
            double with = spin(n);
            disarm(src, timer, ring);
            long h = hits;
            cost[r] = h ? (with - base) / (double)h * 1e6 : 0;
            per_s[r] = (double)h / with;
        }
        if (!ok) {
            printf("%s unavailable\n", names[src]);
            continue;
        }
        qsort(cost, (size_t)rounds, sizeof cost[0], cmp);
        qsort(per_s, (size_t)rounds, sizeof per_s[0], cmp);
        printf("%s signals_per_s=%.0f us_per_signal=%.1f\n", names[src], per_s[rounds / 2],
               cost[rounds / 2]);
    }
    return 0;
}
