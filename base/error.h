/* error.h: the one way every part of pyagent reports a failure.
 *
 * A function that can fail returns 0 (or a valid pointer) on success and -1 (or NULL) on
 * failure, with a message a user can act on in the caller's pa_error: what failed, on what,
 * and why ("cannot open '/x/y.folded': Permission denied"), never a bare code. The caller
 * decides whether it is logged, sent as an HTTP answer or printed; nothing is lost silently.
 * A NULL pa_error is allowed where the caller only needs the verdict. */
#ifndef PA_ERROR_H
#define PA_ERROR_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pa_error {
    char msg[512];
} pa_error;

/* Formats the message into err (when err is not NULL); always returns -1, so that a failing
 * function can end with `return pa_fail(err, ...)`. */
int pa_fail(pa_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* pa_fail for a caller's own variadic helper (one that also picks an HTTP status, say). */
int pa_vfail(pa_error *err, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

#ifdef __cplusplus
}
#endif

#endif
