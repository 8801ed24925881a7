/* registry.h: the thread registry as registry.c and wall.c share it (agent-internal).
 *
 * Normal context only: everything here is read and written under pa_reg_lock, which no
 * signal handler ever takes. */
#ifndef PA_REGISTRY_H
#define PA_REGISTRY_H

#include <pthread.h>
#include <stdatomic.h>
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
/* Sampling was started and not stopped (control.c). */
extern int pa_reg_wanted;
/* The timer kind the configuration asks for (enum pa_timer_want). */
extern int pa_reg_timer_want;
/* Bit per pa_timer_kind armed so far. */
extern _Atomic unsigned pa_reg_armed_kinds;

struct pa_thread_rec *pa_reg_by_serial(uint32_t serial);
/* The program's threads still running. */
size_t pa_reg_alive(void);
/* Makes and starts the thread's timer (wall mode: its off-CPU time counts from now); 0 or -1
 * with errno. Releasing waits for the thread's own signal-side use of it to end. */
int pa_reg_arm(struct pa_thread_rec *r);
void pa_reg_disarm(struct pa_thread_rec *r);
/* The kind of timer the thread has armed (PA_TIMER_NONE: none). */
int pa_reg_timer_kind(const struct pa_thread_rec *r);
/* In a forked child: only the forking thread is left, with no timer. */
void pa_reg_fork_child(void);

/* wall.c: the tick thread, started with sampling in wall mode (pa_reg_lock held); it ends by
 * itself when sampling stops or the program's last thread has gone. */
void pa_wall_start(void);
void pa_wall_fork_child(void);
/* PYAGENT_ASYNC: task samples not taken because a tick met more than PA_AWAITS_MAX_TASKS. */
uint64_t pa_wall_tasks_over(void);

#endif
