/* threads.c: starting the agent's own threads and keeping their CPU clocks (see threads.h). */
#include "threads.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "realfns.h"
#include "tls.h"

enum { AGENT_THREADS_MAX = 8 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static clockid_t live_clock[AGENT_THREADS_MAX];
static int live[AGENT_THREADS_MAX];
static uint64_t gone_ns;                    /* CPU of agent threads that ended (under lock) */
#define tls_slot (pa_tls.thread_slot)       /* this agent thread's slot + 1 */
#define tls_private (pa_tls.thread_private) /* this thread's descriptor table is its own */

static void begin(void) {
    clockid_t c;
    if (pthread_getcpuclockid(pthread_self(), &c) != 0)
        return;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < AGENT_THREADS_MAX && !tls_slot; i++)
        if (!live[i]) {
            live_clock[i] = c;
            live[i] = 1;
            tls_slot = i + 1;
        }
    pthread_mutex_unlock(&lock);
}

static void end(void) {
    if (!tls_slot)
        return;
    pthread_mutex_lock(&lock);
    gone_ns += pa_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    live[tls_slot - 1] = 0;
    pthread_mutex_unlock(&lock);
    tls_slot = 0;
}

/* A private copy of the descriptor table, emptied (PA_THREAD_PRIVATE_FILES). */
static void private_files(void) {
    if (unshare(CLONE_FILES) != 0)
        return; /* pa_thread_private_files says so to whoever must know */
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 0U, ~0U, 0U) != 0)
#endif
    {
        struct rlimit lim;
        long top = getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < 1048576
                       ? (long)lim.rlim_cur
                       : 1048576;
        for (long fd = 0; fd < top; fd++)
            close((int)fd);
    }
    tls_private = 1;
}

int pa_thread_private_files(void) {
    return tls_private;
}

struct start {
    void *(*fn)(void *);
    int flags;
};

static void *thread_main(void *arg) {
    struct start s = *(struct start *)arg;
    free(arg);
    if (s.flags & PA_THREAD_PRIVATE_FILES)
        private_files();
    begin();
    void *r = s.fn(NULL);
    end();
    return r;
}

int pa_agent_thread_spawn(void *(*fn)(void *), int flags) {
    struct start *s = malloc(sizeof *s);
    if (!s)
        return -1;
    s->fn = fn;
    s->flags = flags;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigset_t all, old;
    sigfillset(&all);
    pa_real_pthread_sigmask(SIG_SETMASK, &all, &old);
    int r = pa_real_pthread_create(&t, &attr, thread_main, s);
    pa_real_pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (r != 0)
        free(s);
    return r;
}

int pa_agent_thread_self(void) {
    return tls_slot != 0;
}

uint64_t pa_agent_threads_cpu_ns(void) {
    pthread_mutex_lock(&lock);
    uint64_t ns = gone_ns;
    for (int i = 0; i < AGENT_THREADS_MAX; i++)
        if (live[i])
            ns += pa_clock_ns(live_clock[i]);
    pthread_mutex_unlock(&lock);
    return ns;
}

void pa_agent_threads_fork_prepare(void) {
    pthread_mutex_lock(&lock);
}

void pa_agent_threads_fork_parent(void) {
    pthread_mutex_unlock(&lock);
}

void pa_agent_threads_fork_child(void) {
    /* The agent threads are the parent's; the child's CPU clock starts at zero. */
    for (int i = 0; i < AGENT_THREADS_MAX; i++)
        live[i] = 0;
    gone_ns = 0;
    tls_slot = 0;
    pthread_mutex_init(&lock, NULL);
}
