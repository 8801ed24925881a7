/* threads.h: the agent's own threads: how they start, and the CPU time they use.
 *
 * Every thread of ours starts here, with every signal blocked (a signal meant for the program
 * must reach the program's threads, as without us), detached, and registered so that its CPU
 * time is known to be the agent's: the profile header's cpu_s is the program's CPU time, the
 * process's less ours (docs/formats.md). */
#ifndef PA_THREADS_H
#define PA_THREADS_H

#include <stdint.h>

/* How a thread of ours starts. */
enum pa_thread_flags {
    /* A descriptor table of its own (unshare(CLONE_FILES)), emptied at once: the files, sockets
     * and /proc reads of this thread never take a number in the program's table (where open()
     * takes the lowest free number, one the program may have just closed to take it back), and
     * the copy keeps none of the program's files open (a pipe's reader would never see EOF).
     * Only for threads that never run the program's code (not the namer, whose Python calls
     * may run finalizers). Where unshare is refused (a seccomp filter) the thread works in the
     * program's table, and pa_thread_private_files says so. */
    PA_THREAD_PRIVATE_FILES = 1,
};

/* Normal context. Starts fn on a new detached thread of ours. Returns pthread_create's result. */
int pa_agent_thread_spawn(void *(*fn)(void *), int flags);

/* Does the calling thread have a descriptor table of its own (PA_THREAD_PRIVATE_FILES, and the
 * kernel allowed it)? */
int pa_thread_private_files(void);

/* The CPU time all agent threads of this process have used so far (live and ended). */
uint64_t pa_agent_threads_cpu_ns(void);

/* fork: the registry's lock is held across it; the child starts with no agent thread. */
void pa_agent_threads_fork_prepare(void);
void pa_agent_threads_fork_parent(void);
void pa_agent_threads_fork_child(void);

#endif
