/* handler_floor.c: what a fixed amount of memory work costs inside a timer-driven signal
 * handler on this machine, the floor under any in-process sampler's handler time.
 *
 * The agent's handler reads a few hundred cache lines per sample (frames, code objects, its
 * code cache, the stack table). How long that takes depends on whether those lines are still
 * cached when the next sample comes, which the machine decides as much as the sampler. This
 * program does the same kind of work with no Python and no profiler: a dependent walk over
 * LINES cache lines scattered over SPAN KiB (a pointer chase, so each miss is paid in full),
 * timed with CLOCK_MONOTONIC as the agent times its handler, in four ways:
 *   signal   inside a SIGPROF handler driven by a perf task-clock event with a ring (what
 *            the agent uses) at RATE per CPU-second, while the main loop spins on registers
 *            and touches no memory (so only the machine can evict the walk's lines);
 *   again    the same walk done a second time in the same handler (warm: the lines were just
 *            read);
 *   inline   the walk done by the main loop itself every 1/RATE s, no signal, no timer;
 *   empty    the handler's two clock reads alone.
 * Prints "MODE p50_us=X p99_us=Y n=N" per mode, from the walks of SECONDS seconds.
 *   handler_floor [RATE [LINES [SECONDS [SPAN]]]]   (defaults: 250, 256, 4, 8192) */
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define REGION_MAX (64u << 20)
#define LINE 64u
#define MAX_SAMPLES 200000

enum { M_SIGNAL, M_AGAIN, M_INLINE, M_EMPTY, M_N };
static const char *const names[M_N] = {"signal", "again", "inline", "empty"};

static void *volatile start;
static uint32_t samples[M_N][MAX_SAMPLES];
static volatile uint32_t count[M_N];
static volatile int empty_only;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void record(int m, uint64_t ns) {
    uint32_t i = count[m];
    if (i < MAX_SAMPLES) {
        samples[m][i] = (uint32_t)(ns > UINT32_MAX ? UINT32_MAX : ns);
        count[m] = i + 1;
    }
}

static uintptr_t walk(void) {
    void *p = start;
    do
        p = *(void **)p;
    while (p != start);
    return (uintptr_t)p;
}

static volatile uintptr_t sink;

static void on_signal(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)si;
    (void)uc;
    uint64_t t0 = now_ns();
    if (empty_only) {
        record(M_EMPTY, now_ns() - t0);
        return;
    }
    sink += walk();
    uint64_t t1 = now_ns();
    sink += walk();
    uint64_t t2 = now_ns();
    record(M_SIGNAL, t1 - t0);
    record(M_AGAIN, t2 - t1);
}

static int arm(long rate, void **ring) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.type = PERF_TYPE_SOFTWARE;
    a.size = sizeof a;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.sample_period = (unsigned long long)(1000000000L / rate);
    a.wakeup_events = 1;
    a.disabled = 1;
    int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0)
        return -1;
    struct f_owner_ex owner = {F_OWNER_TID, (pid_t)syscall(SYS_gettid)};
    fcntl(fd, F_SETFL, O_ASYNC);
    fcntl(fd, F_SETSIG, SIGPROF);
    fcntl(fd, F_SETOWN_EX, &owner);
    *ring = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
    if (*ring == MAP_FAILED || ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Spins on registers for `seconds` of wall time; with `every_ns`, walks inline that often. */
static void spin(double seconds, uint64_t every_ns) {
    uint64_t end = now_ns() + (uint64_t)(seconds * 1e9), next = now_ns() + every_ns;
    uint64_t x = 1;
    for (;;) {
        for (int i = 0; i < 20000; i++)
            x = x * 6364136223846793005u + 1442695040888963407u;
        uint64_t t = now_ns();
        if (t >= end)
            break;
        if (every_ns && t >= next) {
            uint64_t t0 = now_ns();
            sink += walk();
            record(M_INLINE, now_ns() - t0);
            next = t + every_ns;
        }
    }
    sink += x;
}

static int cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    long rate = argc > 1 ? atol(argv[1]) : 250;
    long lines = argc > 2 ? atol(argv[2]) : 256;
    double seconds = argc > 3 ? atof(argv[3]) : 4;
    long span_kib = argc > 4 ? atol(argv[4]) : 8192;
    size_t region_bytes = (size_t)span_kib << 10;
    if (rate < 1 || rate > 100000 || span_kib < 4 || region_bytes > REGION_MAX || lines < 1 ||
        lines > (long)(region_bytes / LINE) || seconds <= 0) {
        fprintf(stderr, "usage: handler_floor [RATE [LINES [SECONDS [SPAN_KIB]]]] "
                        "(LINES at most SPAN_KIB * 16, SPAN_KIB 4 to 65536)\n");
        return 2;
    }
    char *region =
        mmap(NULL, region_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint32_t *order = malloc(sizeof *order * (region_bytes / LINE));
    if (region == MAP_FAILED || !order)
        return 1;
    memset(region, 0, region_bytes);
    /* LINES distinct lines in a random order over the whole region. */
    uint32_t n = (uint32_t)(region_bytes / LINE);
    for (uint32_t i = 0; i < n; i++)
        order[i] = i;
    srandom(1);
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)random() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (long i = 0; i < lines; i++)
        *(void **)(region + (size_t)order[i] * LINE) =
            region + (size_t)order[(i + 1) % lines] * LINE;
    start = region + (size_t)order[0] * LINE;
    free(order);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGPROF, &sa, NULL);
    void *ring = NULL;
    for (int pass = 0; pass < 2; pass++) {
        empty_only = pass;
        int fd = arm(rate, &ring);
        if (fd < 0) {
            perror("perf_event_open");
            return 1;
        }
        spin(seconds, 0);
        close(fd);
        munmap(ring, 8192);
    }
    spin(seconds, (uint64_t)(1e9 / (double)rate));

    printf("rate=%ld lines=%ld seconds=%.1f span_kib=%ld\n", rate, lines, seconds, span_kib);
    for (int m = 0; m < M_N; m++) {
        uint32_t c = count[m];
        if (!c) {
            printf("%s n=0\n", names[m]);
            continue;
        }
        qsort(samples[m], c, sizeof samples[m][0], cmp);
        printf("%s p50_us=%.2f p99_us=%.2f n=%u\n", names[m], samples[m][c / 2] / 1e3,
               samples[m][(uint32_t)((c - 1) * 0.99)] / 1e3, c);
    }
    return 0;
}
