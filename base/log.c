/* log.c: one formatted line per message, written with a single write(2) so that lines from
 * several processes (fork, multiprocessing) do not interleave. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

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
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
    errno = saved;
}
