/* buf.c - growable byte buffers, the two escapers every report goes through, and the binary
 * helpers the binary formats share (varints, a bounded reader, zlib compression).
 *
 * Frame and file names come from programs we do not control, so nothing reaches HTML, SVG or
 * JSON output without passing pa_buf_json_str or pa_buf_html_str. Both validate UTF-8 on the
 * way (a stray byte becomes U+FFFD) so browsers and JSON parsers never see malformed text. */
#include "profile_int.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

void pa_buf_free(pa_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void pa_buf_reserve(pa_buf *b, size_t extra) {
    if (b->cap - b->len > extra)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len <= extra)
        cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
        fputs("pyagent: out of memory\n", stderr);
        abort();
    }
    b->data = d;
    b->cap = cap;
}

void pa_buf_append(pa_buf *b, const void *data, size_t len) {
    if (b->cap - b->len <= len)
        pa_buf_reserve(b, len);
    if (len) /* data may be NULL when len is 0 */
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

int pa_buf_read_stream(pa_buf *b, FILE *f) {
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        pa_buf_append(b, chunk, n);
    return ferror(f) ? -1 : 0;
}

void pa_buf_puts(pa_buf *b, const char *s) {
    pa_buf_append(b, s, strlen(s));
}

void pa_buf_printf(pa_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    pa_buf_reserve(b, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if the bytes there are not one
 * (overlong forms, surrogates and code points above U+10FFFF are rejected). */
static size_t utf8_len(const unsigned char *s, size_t avail) {
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t n;
    unsigned cp;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (avail < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    if (cp >= 0xD800 && cp <= 0xDFFF)
        return 0;
    return n;
}

static const char hexdig[] = "0123456789abcdef";

void pa_buf_json_str(pa_buf *b, const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    pa_buf_reserve(b, len + 16);
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        /* Fast path: a run of plain printable ASCII. */
        if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&') {
            size_t j = i + 1;
            while (j < len && s[j] >= 0x20 && s[j] < 0x7F && s[j] != '"' && s[j] != '\\' &&
                   s[j] != '<' && s[j] != '>' && s[j] != '&')
                j++;
            pa_buf_append(b, s + i, j - i);
            i = j;
            continue;
        }
        if (c < 0x80) {
            char esc[7] = {'\\', 'u', '0', '0', hexdig[c >> 4], hexdig[c & 15], 0};
            if (c == '"')
                pa_buf_append(b, "\\\"", 2);
            else if (c == '\\')
                pa_buf_append(b, "\\\\", 2);
            else if (c == '\n')
                pa_buf_append(b, "\\n", 2);
            else if (c == '\t')
                pa_buf_append(b, "\\t", 2);
            else
                pa_buf_append(b, esc, 6);
            i++;
            continue;
        }
        size_t n = utf8_len(s + i, len - i);
        if (n == 0) {
            pa_buf_append(b, "\\ufffd", 6);
            i++;
            continue;
        }
        /* U+2028/U+2029 end lines in older JavaScript parsers. */
        if (n == 3 && s[i] == 0xE2 && s[i + 1] == 0x80 && (s[i + 2] == 0xA8 || s[i + 2] == 0xA9))
            pa_buf_append(b, s[i + 2] == 0xA8 ? "\\u2028" : "\\u2029", 6);
        else
            pa_buf_append(b, s + i, n);
        i += n;
    }
}

void pa_buf_html_str(pa_buf *b, const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    pa_buf_reserve(b, len + 16);
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        switch (c) {
        case '&':
            pa_buf_append(b, "&amp;", 5);
            i++;
            continue;
        case '<':
            pa_buf_append(b, "&lt;", 4);
            i++;
            continue;
        case '>':
            pa_buf_append(b, "&gt;", 4);
            i++;
            continue;
        case '"':
            pa_buf_append(b, "&quot;", 6);
            i++;
            continue;
        case '\'':
            pa_buf_append(b, "&#39;", 5);
            i++;
            continue;
        default:
            break;
        }
        if (c < 0x20 || c == 0x7F) {
            if (c == '\t') {
                pa_buf_append(b, "\t", 1);
            } else {
                /* Shown, not interpreted: NUL and friends are invalid in XML. */
                char esc[4] = {'\\', 'x', hexdig[c >> 4], hexdig[c & 15]};
                pa_buf_append(b, esc, 4);
            }
            i++;
            continue;
        }
        if (c < 0x80) {
            pa_buf_append(b, s + i, 1);
            i++;
            continue;
        }
        size_t n = utf8_len(s + i, len - i);
        if (n == 0) {
            pa_buf_append(b, "\xEF\xBF\xBD", 3);
            i++;
            continue;
        }
        pa_buf_append(b, s + i, n);
        i += n;
    }
}

int pa_utf8_valid(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < len;) {
        /* Eight ASCII bytes at a time: uploads are nearly all ASCII, and the collector checks
         * every byte of every folded upload. */
        uint64_t w;
        if (i + 8 <= len && (memcpy(&w, s + i, 8), (w & 0x8080808080808080ull) == 0)) {
            i += 8;
            continue;
        }
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t n = utf8_len(s + i, len - i);
        if (n == 0)
            return 0;
        i += n;
    }
    return 1;
}

size_t pa_buf_utf8(pa_buf *b, const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t replaced = 0;
    pa_buf_reserve(b, len + 16);
    for (size_t i = 0; i < len;) {
        size_t n = s[i] < 0x80 ? 1 : utf8_len(s + i, len - i);
        if (n == 0) {
            pa_buf_append(b, "\xEF\xBF\xBD", 3);
            replaced++;
            i++;
            continue;
        }
        pa_buf_append(b, s + i, n);
        i += n;
    }
    return replaced;
}

/* ---- binary helpers (pprof.c, capture.c) ---- */

uint64_t pa_get_varint(pa_reader *r) {
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) {
            r->bad = 1;
            return 0;
        }
        unsigned char c = *r->p++;
        v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80))
            return v;
    }
    r->bad = 1;
    return 0;
}

int pa_deflate(const void *data, size_t len, int gzip, pa_buf *out, pa_error *err) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, 6, Z_DEFLATED, gzip ? 15 + 16 : 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return pa_fail(err, "cannot initialise zlib");
    size_t bound = deflateBound(&zs, len);
    pa_buf_reserve(out, bound + 1);
    zs.next_in = (unsigned char *)(len ? data : "");
    zs.avail_in = (uInt)len;
    zs.next_out = (unsigned char *)out->data + out->len;
    zs.avail_out = (uInt)bound;
    int rc = 0;
    if (deflate(&zs, Z_FINISH) != Z_STREAM_END) {
        rc = pa_fail(err, "%s compression failed", gzip ? "gzip" : "zlib");
    } else {
        out->len += bound - zs.avail_out;
        out->data[out->len] = '\0';
    }
    deflateEnd(&zs);
    return rc;
}
