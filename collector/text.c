/* text.c: escaping for log lines and error bodies (see text.h). */
#include "text.h"

#include <stdbool.h>
#include <string.h>

/* The escaped form of byte c into esc (at most 4 bytes); returns its length. */
static size_t escape_byte(unsigned char c, char *esc) {
    static const char hex[] = "0123456789abcdef";
    if (c == '\\' || c == '\n' || c == '\r' || c == '\t') {
        esc[0] = '\\';
        esc[1] = c == '\\' ? '\\' : c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        return 2;
    }
    if (c < 0x20 || c > 0x7e) {
        esc[0] = '\\';
        esc[1] = 'x';
        esc[2] = hex[c >> 4];
        esc[3] = hex[c & 15];
        return 4;
    }
    esc[0] = (char)c;
    return 1;
}

char *pa_coll_one_line(char *dst, size_t dstlen, const char *src) {
    char esc[4];
    size_t total = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p; p++)
        total += escape_byte(*p, esc);
    bool cut = total > dstlen - 1;
    size_t limit = cut ? dstlen - 4 : dstlen - 1, n = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
        size_t k = escape_byte(*p, esc);
        if (n + k > limit)
            break;
        memcpy(dst + n, esc, k);
        n += k;
    }
    if (cut) {
        memcpy(dst + n, "...", 3);
        n += 3;
    }
    dst[n] = '\0';
    return dst;
}
