/* body.c: gzip, multipart and line-length handling for ingest bodies. Every length is checked
 * against the buffer it indexes; nothing here trusts a header it has not bounded. */
#include "body.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <libdeflate.h>
#include <zlib.h>

static int fail(int status, pa_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pa_vfail(err, fmt, ap);
    va_end(ap);
    return status;
}

bool pa_coll_is_gzip(const uint8_t *p, size_t n) {
    return n >= 2 && p[0] == 0x1f && p[1] == 0x8b;
}

bool pa_coll_share_take(struct pa_coll_share *s, size_t n) {
    if (s == NULL || s->budget == NULL)
        return true;
    size_t before = atomic_fetch_add(&s->budget->used, n);
    if (before + n > s->budget->limit) {
        atomic_fetch_sub(&s->budget->used, n);
        return false;
    }
    s->taken += n;
    return true;
}

void pa_coll_share_release(struct pa_coll_share *s) {
    if (s->budget && s->taken)
        atomic_fetch_sub(&s->budget->used, s->taken);
    s->taken = 0;
}

static int budget_spent(struct pa_coll_share *share, pa_error *err) {
    return fail(503, err,
                "gzip: the memory for decompression (%zu bytes, shared by all uploads in flight) "
                "is in use; retry later",
                share->budget->limit);
}

int pa_coll_gunzip(const uint8_t *in, size_t n, size_t limit, struct pa_coll_share *share,
                   uint8_t **out, size_t *outlen, pa_error *err) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
        return fail(500, err, "gzip: cannot initialise zlib");
    size_t cap = n * 4 + 4096, len = 0;
    if (cap > limit + 1)
        cap = limit + 1;
    int status = 0;
    uint8_t *buf = NULL;
    /* The buffer may reach limit + 1 bytes (to see that the output is over the limit); the
     * budget is charged for at most limit, so one upload of exactly the limit fits in a
     * budget of the same size. */
    if (!pa_coll_share_take(share, cap > limit ? limit : cap)) {
        status = budget_spent(share, err);
        goto done;
    }
    buf = malloc(cap);
    if (buf == NULL) {
        status = fail(500, err, "out of memory");
        goto done;
    }
    z.next_in = (Bytef *)in;
    for (;;) {
        /* zlib's avail_in is 32-bit: feed huge inputs in slices. */
        if (z.avail_in == 0) {
            size_t left = n - (size_t)(z.next_in - in);
            z.avail_in = left > (1u << 30) ? (1u << 30) : (uInt)left;
        }
        if (len == cap) {
            if (cap > limit) {
                status = fail(413, err,
                              "gzip: the decompressed body exceeds the limit of %zu bytes", limit);
                goto done;
            }
            size_t ncap = cap * 2 > limit + 1 ? limit + 1 : cap * 2;
            if (!pa_coll_share_take(share, (ncap > limit ? limit : ncap) - cap)) {
                status = budget_spent(share, err);
                goto done;
            }
            uint8_t *nbuf = realloc(buf, ncap);
            if (nbuf == NULL) {
                status = fail(500, err, "out of memory");
                goto done;
            }
            buf = nbuf;
            cap = ncap;
        }
        size_t room = cap - len;
        z.next_out = buf + len;
        z.avail_out = room > (1u << 30) ? (1u << 30) : (uInt)room;
        uInt before = z.avail_out;
        int rc = inflate(&z, Z_NO_FLUSH);
        len += before - z.avail_out;
        if (len > limit) {
            status =
                fail(413, err, "gzip: the decompressed body exceeds the limit of %zu bytes", limit);
            goto done;
        }
        if (rc == Z_STREAM_END) {
            size_t left = n - (size_t)(z.next_in - in);
            /* Concatenated gzip members are one stream (RFC 1952); trailing zero padding
             * is tolerated, anything else after the end is corruption. */
            if (left >= 2 && pa_coll_is_gzip(z.next_in, left)) {
                inflateReset(&z);
                continue;
            }
            while (left > 0 && *z.next_in == 0)
                z.next_in++, left--;
            if (left != 0)
                status = fail(422, err, "gzip: %zu bytes of junk after the stream", left);
            goto done;
        }
        if (rc == Z_BUF_ERROR && z.avail_in == 0 && (size_t)(z.next_in - in) == n) {
            status = fail(422, err, "gzip: the stream is truncated");
            goto done;
        }
        if (rc != Z_OK && rc != Z_BUF_ERROR) {
            status = fail(422, err, "gzip: corrupt stream (%s)", z.msg ? z.msg : "inflate failed");
            goto done;
        }
        if (rc == Z_BUF_ERROR && z.avail_out != 0) {
            status = fail(422, err, "gzip: the stream is truncated");
            goto done;
        }
    }
done:
    inflateEnd(&z);
    if (status != 0) {
        free(buf);
        return status;
    }
    *out = buf;
    *outlen = len;
    return 0;
}

int pa_coll_gzip(const uint8_t *in, size_t n, uint8_t **out, size_t *outlen) {
    /* Gzip framing, so a stored blob is a valid .pb.gz for `go tool pprof`; level 1 because
     * compressing is most of the cost of an upload and higher levels gain little on pprof.
     * libdeflate, not zlib: it compresses whole buffers only, which is all a blob is, and
     * does so at level 1 in less than half of zlib's time for a smaller output
     * (docs/architecture.md, "The collector's ingest path"). */
    struct libdeflate_compressor *c = libdeflate_alloc_compressor(1);
    if (c == NULL)
        return -1;
    size_t cap = libdeflate_gzip_compress_bound(c, n);
    uint8_t *buf = malloc(cap);
    size_t len = buf ? libdeflate_gzip_compress(c, in, n, buf, cap) : 0;
    libdeflate_free_compressor(c);
    if (len == 0) {
        free(buf);
        return -1;
    }
    *out = buf;
    *outlen = len;
    return 0;
}

bool pa_coll_is_multipart(const char *ct) {
    return ct != NULL && strncasecmp(ct, "multipart/form-data", 19) == 0;
}

/* The boundary parameter of a multipart Content-Type, bare or quoted. */
static int boundary_of(const char *ct, char *b, size_t blen) {
    const char *p = ct;
    while ((p = strchr(p, ';')) != NULL) {
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncasecmp(p, "boundary=", 9) != 0)
            continue;
        p += 9;
        size_t n = 0;
        if (*p == '"') {
            p++;
            while (p[n] && p[n] != '"')
                n++;
        } else {
            while (p[n] && p[n] != ';' && p[n] != ' ' && p[n] != '\t')
                n++;
        }
        if (n == 0 || n > 70 || n + 1 > blen) /* RFC 2046: 1 to 70 characters */
            return -1;
        memcpy(b, p, n);
        b[n] = '\0';
        return 0;
    }
    return -1;
}

static const uint8_t *find(const uint8_t *hay, size_t n, const char *needle, size_t k) {
    if (k == 0 || n < k)
        return NULL;
    for (size_t i = 0; i + k <= n; i++) {
        const uint8_t *p = memchr(hay + i, needle[0], n - k + 1 - i);
        if (p == NULL)
            return NULL;
        if (memcmp(p, needle, k) == 0)
            return p;
        i = (size_t)(p - hay);
    }
    return NULL;
}

/* Does the part's header block declare Content-Disposition name="field"? */
static bool part_is_field(const uint8_t *h, size_t n, const char *field) {
    char want[96];
    int k = snprintf(want, sizeof want, "name=\"%s\"", field);
    const uint8_t *p = h;
    size_t left = n;
    while (left > 0) {
        const uint8_t *eol = find(p, left, "\r\n", 2);
        size_t linelen = eol ? (size_t)(eol - p) : left;
        if (linelen > 20 && strncasecmp((const char *)p, "content-disposition:", 20) == 0) {
            const uint8_t *q = find(p, linelen, want, (size_t)k);
            /* "name=" must not be the tail of "filename=". */
            if (q && (q == p || (q[-1] == ' ' || q[-1] == ';' || q[-1] == '\t')))
                return true;
        }
        if (eol == NULL)
            break;
        left -= linelen + 2;
        p = eol + 2;
    }
    return false;
}

int pa_coll_multipart_field(const char *content_type, const uint8_t *body, size_t n,
                            const char *field, const uint8_t **data, size_t *datalen,
                            pa_error *err) {
    char b[80], delim[84];
    if (boundary_of(content_type, b, sizeof b) != 0)
        return fail(422, err, "multipart: missing or invalid boundary in Content-Type");
    int dlen = snprintf(delim, sizeof delim, "--%s", b);
    const uint8_t *p = find(body, n, delim, (size_t)dlen);
    while (p != NULL) {
        p += dlen;
        size_t left = n - (size_t)(p - body);
        if (left >= 2 && p[0] == '-' && p[1] == '-')
            break; /* the closing delimiter */
        const uint8_t *eol = find(p, left, "\r\n", 2);
        if (eol == NULL)
            break;
        const uint8_t *hdr = eol + 2;
        left = n - (size_t)(hdr - body);
        const uint8_t *hend = find(hdr, left, "\r\n\r\n", 4);
        const uint8_t *content;
        if (hend == NULL) {
            if (left >= 2 && hdr[0] == '\r' && hdr[1] == '\n')
                hend = hdr - 2; /* no headers at all */
            else
                break;
        }
        content = hend + 4;
        size_t cleft = n - (size_t)(content - body);
        /* The part ends at CRLF followed by the next delimiter. */
        char end[88];
        int elen = snprintf(end, sizeof end, "\r\n%s", delim);
        const uint8_t *next = find(content, cleft, end, (size_t)elen);
        if (next == NULL)
            return fail(422, err, "multipart: a part is not terminated by its boundary");
        if (hend >= hdr && part_is_field(hdr, (size_t)(hend - hdr), field)) {
            *data = content;
            *datalen = (size_t)(next - content);
            return 0;
        }
        p = next + 2;
    }
    return fail(422, err, "multipart: no form field named '%s'", field);
}

size_t pa_coll_drop_long_lines(uint8_t *buf, size_t *n, size_t maxline) {
    size_t r = 0, w = 0, dropped = 0, len = *n;
    while (r < len) {
        uint8_t *nl = memchr(buf + r, '\n', len - r);
        size_t end = nl ? (size_t)(nl - buf) : len;
        size_t linelen = end - r;
        if (linelen > 0 && buf[end - 1] == '\r')
            linelen--;
        size_t take = (nl ? end + 1 : end) - r;
        if (linelen > maxline) {
            dropped++;
        } else {
            if (w != r) /* only once a line was dropped: most uploads drop none */
                memmove(buf + w, buf + r, take);
            w += take;
        }
        r += take;
    }
    *n = w;
    return dropped;
}
