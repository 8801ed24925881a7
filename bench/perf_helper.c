/* perf_helper.c: what making a perf task-clock event through a helper process costs, against
 * making it in the process itself (docs/benchmarks.md, "the cost of the perf helper process").
 *
 *   build/release/bin/perf_helper [ROUNDS]      (built with the project)
 *
 * The agent makes each thread's event in a child made with clone(CLONE_VM | CLONE_VFORK) and
 * no CLONE_FILES (agent/timers.c), so that the descriptor never appears in the program's
 * table: the child opens the event for the calling thread, maps its ring into the shared
 * memory, closes the descriptor and exits. Here both ways are timed, ROUNDS times each
 * (default 200), the mapping undone after each round; prints microseconds per event. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <linux/perf_event.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { RING = 2 * 4096 };
static pid_t target;
static void *ring;
static char stack[64 * 1024] __attribute__((aligned(16)));

static int open_event(void) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.sample_period = 10000000;
    a.disabled = 1;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &a, target, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

static void map_ring(int fd) {
    ring = fd < 0 ? MAP_FAILED : mmap(NULL, RING, PROT_READ, MAP_SHARED, fd, 0);
    if (fd >= 0)
        close(fd);
}

static int helper(void *arg) {
    (void)arg;
    map_ring(open_event());
    syscall(SYS_exit, 0);
    return 0;
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 200;
    if (rounds <= 0) {
        fprintf(stderr, "perf_helper: ROUNDS must be a positive number\n");
        return 2;
    }
    target = (pid_t)syscall(SYS_gettid);
    double t0 = now_us();
    for (int i = 0; i < rounds; i++) {
        pid_t p = clone(helper, stack + sizeof stack, CLONE_VM | CLONE_VFORK, NULL);
        if (p < 0 || waitpid(p, NULL, __WCLONE) != p || ring == MAP_FAILED) {
            fprintf(stderr, "perf_helper: the helper could not make the event\n");
            return 1;
        }
        munmap(ring, RING);
    }
    double t1 = now_us();
    for (int i = 0; i < rounds; i++) {
        map_ring(open_event());
        if (ring == MAP_FAILED) {
            fprintf(stderr, "perf_helper: perf_event_open or mmap failed\n");
            return 1;
        }
        munmap(ring, RING);
    }
    double t2 = now_us();
    printf("through a helper process: %.1f us per event; in the process: %.1f us per event\n",
           (t1 - t0) / rounds, (t2 - t1) / rounds);
    return 0;
}
