/* text.h: the one way a value from a request reaches a log line or an error body — escaped
 * to one line of printable ASCII and cut to a bounded length, so that no client can forge a
 * log line, send escape sequences to an operator's terminal, or grow a message without end. */
#ifndef PA_COLL_TEXT_H
#define PA_COLL_TEXT_H

#include <stddef.h>

/* Writes src into dst (dstlen >= 4) as one line: bytes 0x20-0x7e are kept, except '\',
 * which becomes "\\"; \n \r \t become "\n" "\r" "\t" and every other byte "\xNN". When the
 * result does not fit, it is cut at an escape boundary and ends in "...". Returns dst. */
char *pa_coll_one_line(char *dst, size_t dstlen, const char *src);

#endif
