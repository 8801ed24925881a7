/* http.c: the response every handler builds, apart from libmicrohttpd (server.c sends it), so
 * handlers do not call back into the server that calls them. */
#include "http.h"

#include <stdarg.h>
#include <stdio.h>

#include "text.h"

void pa_coll_respond_text(struct pa_coll_response *r, int status, const char *fmt, ...) {
    va_list ap;
    char raw[4096], line[1023]; /* with its newline, a body is at most 1 KiB */
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    pa_buf_free(&r->body);
    r->status = status;
    r->content_type = "text/plain; charset=utf-8";
    pa_buf_puts(&r->body, pa_coll_one_line(line, sizeof line, raw));
    pa_buf_puts(&r->body, "\n");
}
