/* error.c: formatting of pa_error messages (see error.h). */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

int pa_vfail(pa_error *err, const char *fmt, va_list ap) {
    if (err)
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    return -1;
}

int pa_fail(pa_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pa_vfail(err, fmt, ap);
    va_end(ap);
    return -1;
}
