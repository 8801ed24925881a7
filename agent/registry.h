/* registry.h: the thread registry as registry.c and wall.c share it (agent-internal).
 *
 * Normal context only: everything here is read and written under pa_reg_lock, which no
 * signal handler ever takes. */
#ifndef PA_REGISTRY_H
#define PA_REGISTRY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "timerctl.h"

struct pa_thread_rec {
    uint32_t serial;
    pid_t tid;
    pthread_t pthread;
    struct pa_thread_ctl *ctl;
    int alive;
    uint64_t died_at_drain; /* drain count when it died */
    char name[64];
    /* Wall mode (wall.c): the thread's CPU clock, its reading at the last tick, and the time
     * it spent off a CPU not yet counted. */
    clockid_t cpu_clock;
    int has_clock;
    uint64_t last_cpu_ns, off_ns;
};

extern pthread_mutex_t pa_reg_lock;
extern struct pa_thread_rec *pa_reg_recs;
extern size_t pa_reg_n;
/* Sampling was started and not stopped. */
extern int pa_reg_wanted;

/* The program's threads still running. */
size_t pa_reg_alive(void);
/* The kind of timer the thread has armed (PA_TIMER_NONE: none). */
int pa_reg_timer_kind(const struct pa_thread_rec *r);

/* wall.c: the tick thread, started with sampling in wall mode (pa_reg_lock held); it ends by
 * itself when sampling stops or the program's last thread has gone. */
void pa_wall_start(void);
/* A thread's timer was armed: its off-CPU time is counted from now. */
void pa_wall_thread_armed(struct pa_thread_rec *r);
void pa_wall_fork_child(void);

#endif
