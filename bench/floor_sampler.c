/* floor_sampler.c: the least an in-process CPU sampler can do, for bench/startup.py's floor
 * rows. Preloaded, it arms a perf task-clock event on the main thread at PYAGENT_RATE (100 Hz,
 * pyagent's default, when unset) whose overflow sends SIGPROF to that thread, as pyagent's CPU
 * mode does; its handler only counts; at exit it writes the count to FLOOR_OUT.PID.tmp and
 * renames that to FLOOR_OUT.PID, as pyagent writes its profile (one file per process). No frame is
 * read, nothing is symbolized, no table exists: what pyagent costs beyond this library is its own
 * work, and this library's cost is what loading, a timer, signals and a file cost on the machine.
 *
 *   cc -shared -fPIC -O2 -o floor_sampler.so bench/floor_sampler.c
 *   LD_PRELOAD=./floor_sampler.so FLOOR_OUT=/tmp/n python3 -c pass      # writes /tmp/n.PID */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile sig_atomic_t samples;
static int event = -1;

static void on_prof(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)si;
    (void)uc;
    samples++;
}

__attribute__((constructor)) static void floor_start(void) {
    const char *r = getenv("PYAGENT_RATE");
    long rate = r ? atol(r) : 100;
    if (rate <= 0)
        rate = 100;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_prof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, NULL) != 0)
        return;
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.sample_period = (unsigned long long)(1000000000L / rate);
    attr.wakeup_events = 1;
    attr.disabled = 1;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    event = (int)syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (event < 0)
        return;
    struct f_owner_ex owner = {F_OWNER_TID, tid};
    if (fcntl(event, F_SETOWN_EX, &owner) != 0 || fcntl(event, F_SETSIG, SIGPROF) != 0 ||
        fcntl(event, F_SETFL, O_ASYNC | O_NONBLOCK) != 0 ||
        ioctl(event, PERF_EVENT_IOC_ENABLE, 0) != 0) {
        close(event);
        event = -1;
    }
}

__attribute__((destructor)) static void floor_stop(void) {
    const char *out = getenv("FLOOR_OUT");
    if (event >= 0)
        ioctl(event, PERF_EVENT_IOC_DISABLE, 0);
    if (!out)
        return;
    char path[4096], tmp[4200];
    if (snprintf(path, sizeof path, "%s.%d", out, (int)getpid()) >= (int)sizeof path)
        return;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fprintf(f, "samples %d\n", (int)samples);
    if (fclose(f) == 0)
        rename(tmp, path);
}
