/* http.h: what a handler gives back — a status, a content type and a body — kept apart from
 * libmicrohttpd so the query handlers can be unit-tested without a socket. */
#ifndef PA_COLL_HTTP_H
#define PA_COLL_HTTP_H

#include <stdint.h>

#include "profile.h"

struct pa_coll_response {
    int status;
    const char *content_type; /* static string */
    const char *disposition;  /* Content-Disposition, static string or NULL */
    char *location;           /* Location (redirects), malloc'ed or NULL */
    pa_buf body;
};

/* A request's query parameters, looked up by name (NULL when absent). */
struct pa_coll_params {
    const char *(*get)(void *ctx, const char *key);
    void *ctx;
};

static inline const char *pa_coll_param(const struct pa_coll_params *p, const char *key) {
    return p->get(p->ctx, key);
}

/* Sets a plain-text "message\n" response. */
void pa_coll_respond_text(struct pa_coll_response *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
