/* threads.h: the agent's own threads: how they start, and the CPU time they use.
 *
 * Every thread of ours starts here, with every signal blocked (a signal meant for the program
 * must reach the program's threads, as without us), detached, and registered so that its CPU
 * time is known to be the agent's: the profile header's cpu_s is the program's CPU time, the
 * process's less ours (docs/formats.md). */
#ifndef PA_THREADS_H
#define PA_THREADS_H

#include <stdint.h>

/* Normal context. Starts fn on a new detached thread of ours. Returns pthread_create's result. */
int pa_agent_thread_spawn(void *(*fn)(void *));

/* Is the calling thread one of ours? */
int pa_agent_thread_self(void);

/* The CPU time all agent threads of this process have used so far (live and ended). */
uint64_t pa_agent_threads_cpu_ns(void);

/* fork: the registry's lock is held across it; the child starts with no agent thread. */
void pa_agent_threads_fork_prepare(void);
void pa_agent_threads_fork_parent(void);
void pa_agent_threads_fork_child(void);

#endif
