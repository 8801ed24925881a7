/* log.h: the agent's few lines on stderr ("pyagent: ..."). Never from a signal handler. */
#ifndef PA_LOG_H
#define PA_LOG_H

enum pa_log_level { PA_LOG_ERROR = 0, PA_LOG_WARN = 1, PA_LOG_INFO = 2, PA_LOG_DEBUG = 3 };

extern int pa_log_level;
void pa_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
