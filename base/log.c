/* log.c: one formatted line per message, written with a single write(2) so that lines from
 * several processes (fork, multiprocessing) do not interleave.
 *
 * The lines go to the program's standard error, as it is at the moment: descriptor 2 of the
 * program's table. A thread of ours with a table of its own (base/threads.h) has no
 * descriptor 2 and must not keep a copy of the program's (the program may close it, and a
 * pipe's reader must then see EOF): it borrows the program's for the one write, with
 * pidfd_getfd (Linux 5.6; allowed within one's own process), else by opening
 * /proc/self/fd/2 (the thread group's table; not for a socket), else the line is lost. */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "threads.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

/* The program's descriptor 2, in this thread's own table; -1 if it cannot be had. */
static int borrow_stderr(void) {
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (pidfd >= 0) {
        int fd = (int)syscall(SYS_pidfd_getfd, pidfd, STDERR_FILENO, 0);
        close(pidfd);
        if (fd >= 0)
            return fd;
    }
    return open("/proc/self/fd/2", O_WRONLY | O_APPEND | O_CLOEXEC | O_NOCTTY);
}

int pa_log_level = PA_LOG_WARN;

void pa_log(int level, const char *fmt, ...) {
    if (level > pa_log_level)
        return;
    int saved = errno;
    char line[1024];
    int n = snprintf(line, sizeof line, "pyagent[%d]: ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    size_t len =
        (size_t)n +
        ((size_t)m < sizeof line - (size_t)n - 1 ? (size_t)m : sizeof line - (size_t)n - 2);
    line[len++] = '\n';
    if (pa_thread_private_files()) {
        int fd = borrow_stderr();
        if (fd >= 0) {
            ssize_t w = write(fd, line, len);
            (void)w;
            close(fd);
        }
    } else {
        ssize_t w = write(STDERR_FILENO, line, len);
        (void)w;
    }
    errno = saved;
}
