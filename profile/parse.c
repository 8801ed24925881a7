/* parse.c - reading profiles: every text dialect, gzip and pprof, from any chunking of bytes.
 *
 * One incremental parser serves files, pipes and the collector's upload buffers. Bytes pass
 * through up to two stages: gunzip (when the first two bytes are gzip's magic) and then either
 * the line splitter (text) or an accumulator handed to the pprof or capture decoder at the end
 * (pprof is one protobuf message, a capture one compressed body: neither is read in pieces). Text
 * never needs more memory than its longest line plus the profile itself, which is what lets 500 MB
 * files stream.
 *
 * The dialects differ only in how a stack line spells its frames, so each line is split once
 * and frames that are not already in our "qualname (file:line)" spelling are rewritten. */
#include "profile_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

const char *pa_format_name(pa_format f) {
    switch (f) {
    case PA_FORMAT_PYAGENT:
        return "pyagent folded";
    case PA_FORMAT_FOLDED:
        return "folded";
    case PA_FORMAT_PYSPY:
        return "py-spy raw";
    case PA_FORMAT_AUSTIN:
        return "austin collapsed";
    case PA_FORMAT_CPYTHON:
        return "cpython collapsed";
    case PA_FORMAT_PPROF:
        return "pprof";
    case PA_FORMAT_CAPTURE:
        return "pyagent capture";
    default:
        return "unknown";
    }
}

enum { MODE_SNIFF, MODE_TEXT, MODE_PPROF, MODE_CAPTURE };

#define PA_MAX_COUNT 1000000000000000ull

struct pa_parser {
    pa_profile *p;
    char name[256];
    uint64_t bytes_in;
    int gz_decided, gzip, gz_done;
    unsigned char head[2];
    int nhead;
    z_stream zs;
    int mode;
    pa_buf pending; /* bytes held back: sniffing, a partial line, or the whole pprof */
    pa_parse_stats st;
    pa_text_state text;
    int failed;
};

pa_parser *pa_parser_new(pa_profile *into, const char *name) {
    pa_parser *ps = calloc(1, sizeof *ps);
    if (!ps)
        abort();
    ps->p = into;
    ps->text.last_stack = SIZE_MAX;
    snprintf(ps->name, sizeof ps->name, "%s", name ? name : "input");
    return ps;
}

void pa_parser_free(pa_parser *ps) {
    if (!ps)
        return;
    if (ps->gzip)
        inflateEnd(&ps->zs);
    pa_buf_free(&ps->pending);
    free(ps);
}

/* ---- text lines ---- */

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}

static int starts(const char *s, size_t len, const char *prefix) {
    size_t n = strlen(prefix);
    return len >= n && memcmp(s, prefix, n) == 0;
}

/* "#t B:C[,C...] ..." after a stack line: its samples per time bucket. Each run starts at
 * bucket B (counted from the header's t0_ms) and gives the counts of consecutive buckets.
 * The counts may not add up to more than the stack line's. Returns 0, or -1 if malformed
 * (then nothing of the line is kept). */
static int parse_time_line(pa_profile *p, const char *s, size_t len, pa_text_state *st) {
    uint32_t w = pa_profile_time_width(p);
    if (st->last_stack == SIZE_MAX || w == 0)
        return -1;
    /* Two passes: check everything first, so a bad line adds nothing. */
    for (int pass = 0; pass < 2; pass++) {
        uint64_t sum = 0;
        size_t i = 0;
        while (i < len) {
            while (i < len && s[i] == ' ')
                i++;
            if (i == len)
                break;
            uint64_t b = 0;
            size_t d = i;
            while (i < len && is_digit(s[i]) && i - d < 12)
                b = b * 10 + (uint64_t)(s[i++] - '0');
            if (i == d || i == len || s[i] != ':')
                return -1;
            for (uint64_t k = 0;; k++) {
                i++;
                uint64_t c = 0;
                d = i;
                while (i < len && is_digit(s[i]) && i - d < 15)
                    c = c * 10 + (uint64_t)(s[i++] - '0');
                if (i == d || (i < len && s[i] != ',' && s[i] != ' '))
                    return -1;
                sum += c;
                if (sum > st->last_count)
                    return -1;
                if (pass == 1)
                    pa_profile_add_time(p, st->last_stack, st->t0_ms + (int64_t)((b + k) * w), c);
                if (i == len || s[i] == ' ')
                    break;
            }
        }
    }
    return 0;
}

/* "file:func:line" (Austin, CPython) -> "func (file:line)"; 0 if the frame is not spelled so. */
static int rewrite_colon_frame(const char *s, size_t len, pa_buf *out) {
    size_t i = len;
    while (i > 0 && is_digit(s[i - 1]))
        i--;
    if (i == len || i < 2)
        return 0;
    size_t digits = i;
    if (s[i - 1] == 'L') /* Austin's "file:func:L12" spelling */
        i--;
    if (s[i - 1] != ':')
        return 0;
    size_t c2 = i - 1; /* the colon before the line */
    size_t c1 = c2;
    while (c1 > 0 && s[c1 - 1] != ':')
        c1--;
    if (c1 == 0) /* "func:line" has no file */
        return 0;
    out->len = 0;
    pa_buf_append(out, s + c1, c2 - c1);
    pa_buf_puts(out, " (");
    pa_buf_append(out, s, c1 - 1);
    pa_buf_puts(out, ":");
    pa_buf_append(out, s + digits, len - digits);
    pa_buf_puts(out, ")");
    return 1;
}

/* Reads the count at the end of a stack line. Austin's full mode writes "t,m+,m-"; the first
 * value is time. Returns the offset where the stack ends, or -1 if there is no count. */
static long split_count(const char *s, size_t len, uint64_t *count) {
    size_t end = len;
    while (end > 0 && (s[end - 1] == ' ' || s[end - 1] == '\t'))
        end--;
    size_t start = end;
    while (start > 0 && s[start - 1] != ' ' && s[start - 1] != '\t')
        start--;
    if (start == 0 || start == end)
        return -1;
    uint64_t c = 0;
    size_t i = start;
    if (!is_digit(s[i]))
        return -1;
    for (; i < end && is_digit(s[i]); i++) {
        if (c > PA_MAX_COUNT / 10) /* no real profile has 10^15 samples in one stack */
            return -1;
        c = c * 10 + (uint64_t)(s[i] - '0');
    }
    if (i < end && s[i] != ',')
        return -1;
    for (; i < end; i++)
        if (!is_digit(s[i]) && s[i] != ',' && s[i] != '-')
            return -1;
    while (start > 0 && (s[start - 1] == ' ' || s[start - 1] == '\t'))
        start--;
    *count = c;
    return (long)start;
}

static pa_format sniff_line(const char *s, size_t len) {
    if (len > 2 && s[0] == 'P' && is_digit(s[1])) {
        size_t i = 1;
        while (i < len && is_digit(s[i]))
            i++;
        if (i + 1 < len && s[i] == ';' && s[i + 1] == 'T')
            return PA_FORMAT_AUSTIN;
    }
    if (starts(s, len, "tid:") && len > 4 && is_digit(s[4]))
        return PA_FORMAT_CPYTHON;
    if (starts(s, len, "process ") || starts(s, len, "thread (0x"))
        return PA_FORMAT_PYSPY;
    return PA_FORMAT_FOLDED;
}

int pa_parse_text_line(pa_profile *p, const char *s, size_t len, pa_text_state *state) {
    pa_format *format = &state->format;
    if (len > 0 && s[len - 1] == '\r')
        len--;
    size_t lead = 0;
    while (lead < len && (s[lead] == ' ' || s[lead] == '\t'))
        lead++;
    if (lead == len)
        return 0;
    if (s[lead] == '#') {
        if (starts(s, len, "# pyagent ")) {
            pa_parse_header(p, s + 10, len - 10, state);
            if (*format == PA_FORMAT_UNKNOWN || *format == PA_FORMAT_FOLDED)
                *format = PA_FORMAT_PYAGENT;
        } else if (starts(s, len, "#t ")) {
            int rc = parse_time_line(p, s + 3, len - 3, state);
            state->last_stack = SIZE_MAX; /* one time line per stack line */
            return rc;
        }
        return 0;
    }
    state->last_stack = SIZE_MAX;
    uint64_t count;
    long end = split_count(s, len, &count);
    if (end <= 0)
        return -1;
    len = (size_t)end;
    pa_format lf = sniff_line(s, len);
    if (*format == PA_FORMAT_UNKNOWN)
        *format = lf;

    uint32_t small[256];
    uint32_t *ids = small;
    size_t cap = 256, n = 0;
    pa_buf tmp = {0};
    size_t i = 0;
    while (i <= len) {
        const char *f = s + i;
        const char *semi = memchr(f, ';', len - i);
        size_t flen = semi ? (size_t)(semi - f) : len - i;
        i += flen + 1;
        if (flen == 0)
            continue;
        const char *name = f;
        size_t nlen = flen;
        if (lf == PA_FORMAT_AUSTIN && n == 0 && f == s && f[0] == 'P') {
            continue; /* the process; threads are our roots */
        } else if (lf == PA_FORMAT_AUSTIN && n == 0 && f[0] == 'T' && flen > 1) {
            const char *colon = memchr(f, ':', flen);
            const char *tid = colon ? colon + 1 : f + 1;
            tmp.len = 0;
            pa_buf_puts(&tmp, "thread:");
            pa_buf_append(&tmp, tid, (size_t)(f + flen - tid));
            name = tmp.data;
            nlen = tmp.len;
        } else if (lf == PA_FORMAT_CPYTHON && n == 0 && starts(f, flen, "tid:")) {
            tmp.len = 0;
            pa_buf_puts(&tmp, "thread:");
            pa_buf_append(&tmp, f + 4, flen - 4);
            name = tmp.data;
            nlen = tmp.len;
        } else if (lf == PA_FORMAT_PYSPY && n == 0 && starts(f, flen, "process ")) {
            continue;
        } else if (lf == PA_FORMAT_PYSPY && n == 0 && starts(f, flen, "thread (")) {
            const char *close = memchr(f, ')', flen);
            tmp.len = 0;
            pa_buf_puts(&tmp, "thread:");
            if (close) {
                pa_buf_append(&tmp, f + 8, (size_t)(close - (f + 8)));
                const char *rest = close + 1;
                size_t rlen = (size_t)(f + flen - rest);
                while (rlen && (*rest == ' ' || *rest == '"')) {
                    rest++;
                    rlen--;
                }
                while (rlen && rest[rlen - 1] == '"')
                    rlen--;
                if (rlen) {
                    pa_buf_puts(&tmp, " ");
                    pa_buf_append(&tmp, rest, rlen);
                }
            } else {
                pa_buf_append(&tmp, f + 8, flen - 8);
            }
            name = tmp.data;
            nlen = tmp.len;
        } else if ((lf == PA_FORMAT_AUSTIN || lf == PA_FORMAT_CPYTHON) &&
                   rewrite_colon_frame(f, flen, &tmp)) {
            name = tmp.data;
            nlen = tmp.len;
        }
        if (n == cap) {
            cap *= 2;
            if (ids == small) {
                ids = pa_xrealloc(NULL, cap * sizeof *ids);
                memcpy(ids, small, sizeof small);
            } else {
                ids = pa_xrealloc(ids, cap * sizeof *ids);
            }
        }
        ids[n++] = pa_profile_intern(p, name, nlen);
    }
    pa_buf_free(&tmp);
    int rc = 1;
    if (n == 0) {
        rc = -1;
    } else {
        state->last_stack = pa_profile_add_stack_ids(p, ids, n, count);
        state->last_count = count;
    }
    if (ids != small)
        free(ids);
    if (rc == 1 && count == 0)
        return 0;
    return rc;
}

static void text_line(pa_parser *ps, const char *s, size_t len) {
    ps->st.lines++;
    uint64_t before = pa_profile_total(ps->p);
    ps->text.format = ps->st.format;
    int rc = pa_parse_text_line(ps->p, s, len, &ps->text);
    ps->st.format = ps->text.format;
    if (rc > 0) {
        ps->st.stacks++;
        ps->st.samples += pa_profile_total(ps->p) - before;
    } else if (rc < 0) {
        ps->st.bad_lines++;
        if (!ps->st.first_bad_line)
            ps->st.first_bad_line = ps->st.lines;
    }
}

static void text_feed(pa_parser *ps, const char *data, size_t len) {
    size_t i = 0;
    if (ps->pending.len) {
        const char *nl = memchr(data, '\n', len);
        if (!nl) {
            pa_buf_append(&ps->pending, data, len);
            return;
        }
        pa_buf_append(&ps->pending, data, (size_t)(nl - data));
        text_line(ps, ps->pending.data, ps->pending.len);
        ps->pending.len = 0;
        i = (size_t)(nl - data) + 1;
    }
    while (i < len) {
        const char *nl = memchr(data + i, '\n', len - i);
        if (!nl) {
            pa_buf_append(&ps->pending, data + i, len - i);
            return;
        }
        text_line(ps, data + i, (size_t)(nl - (data + i)));
        i = (size_t)(nl - data) + 1;
    }
}

/* pprof is binary protobuf: its first byte is a field tag of Profile with wire type 0 or 2,
 * and one of the next bytes is a small varint or length (a control byte). A text profile
 * starts with a printable frame name or '#'. */
static int looks_like_pprof(const unsigned char *s, size_t len) {
    if (len < 2)
        return 0;
    unsigned field = s[0] >> 3, wire = s[0] & 7;
    if (field < 1 || field > 14 || (wire != 0 && wire != 2))
        return 0;
    for (size_t i = 1; i < len && i < 16; i++)
        if (s[i] < 0x09)
            return 1;
    return 0;
}

/* Enough bytes are held to tell a capture or pprof from text: decide, and hand held text to its
 * parser. A capture's magic is checked first (its first byte is no pprof field tag anyway); a
 * short input that is the start of that magic is a truncated capture, not text. */
static void decide_mode(pa_parser *ps) {
    ps->mode = pa_capture_sniff(ps->pending.data, ps->pending.len) ? MODE_CAPTURE
               : looks_like_pprof((const unsigned char *)ps->pending.data, ps->pending.len)
                   ? MODE_PPROF
                   : MODE_TEXT;
    if (ps->mode == MODE_TEXT) {
        pa_buf held = ps->pending;
        memset(&ps->pending, 0, sizeof ps->pending);
        text_feed(ps, held.data, held.len);
        pa_buf_free(&held);
    }
}

static void plain_feed(pa_parser *ps, const char *data, size_t len) {
    if (ps->mode == MODE_SNIFF) {
        pa_buf_append(&ps->pending, data, len);
        if (ps->pending.len < 16)
            return;
        decide_mode(ps);
        return;
    }
    if (ps->mode == MODE_PPROF || ps->mode == MODE_CAPTURE)
        pa_buf_append(&ps->pending, data, len);
    else
        text_feed(ps, data, len);
}

static int gunzip_feed(pa_parser *ps, const unsigned char *data, size_t len, pa_error *err) {
    unsigned char out[1 << 16];
    ps->zs.next_in = (unsigned char *)data;
    ps->zs.avail_in = (uInt)len;
    while (ps->zs.avail_in > 0) {
        if (ps->gz_done) {
            /* Another gzip member follows (concatenated files are valid gzip). */
            if (inflateReset(&ps->zs) != Z_OK)
                goto bad;
            ps->gz_done = 0;
        }
        ps->zs.next_out = out;
        ps->zs.avail_out = sizeof out;
        int rc = inflate(&ps->zs, Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
            goto bad;
        size_t got = sizeof out - ps->zs.avail_out;
        if (got)
            plain_feed(ps, (const char *)out, got);
        if (rc == Z_STREAM_END)
            ps->gz_done = 1;
        else if (rc == Z_BUF_ERROR && got == 0)
            break;
    }
    return 0;
bad:
    pa_fail(err, "%s: corrupt gzip data: %s", ps->name, ps->zs.msg ? ps->zs.msg : "inflate");
    ps->failed = 1;
    return -1;
}

int pa_parser_feed(pa_parser *ps, const void *data, size_t len, pa_error *err) {
    if (ps->failed)
        return -1;
    const unsigned char *s = data;
    ps->bytes_in += len;
    if (!ps->gz_decided) {
        /* gzip's magic is two bytes: hold the first ones until both are here. */
        while (ps->nhead < 2 && len > 0) {
            ps->head[ps->nhead++] = *s++;
            len--;
        }
        if (ps->nhead < 2)
            return 0;
        ps->gz_decided = 1;
        ps->gzip = ps->head[0] == 0x1F && ps->head[1] == 0x8B;
        ps->st.gzip = ps->gzip;
        if (ps->gzip) {
            if (inflateInit2(&ps->zs, 15 + 32) != Z_OK) {
                pa_fail(err, "%s: cannot initialise zlib", ps->name);
                ps->failed = 1;
                return -1;
            }
            if (gunzip_feed(ps, ps->head, 2, err) != 0)
                return -1;
        } else {
            plain_feed(ps, (const char *)ps->head, 2);
        }
    }
    if (len == 0)
        return 0;
    if (ps->gzip)
        return gunzip_feed(ps, s, len, err);
    plain_feed(ps, (const char *)s, len);
    return 0;
}

int pa_parser_finish(pa_parser *ps, pa_parse_stats *stats, pa_error *err) {
    if (ps->failed)
        return -1;
    if (ps->bytes_in == 0) {
        pa_fail(err, "%s: empty input", ps->name);
        return -1;
    }
    if (!ps->gz_decided && ps->nhead)
        plain_feed(ps, (const char *)ps->head, (size_t)ps->nhead);
    if (ps->gzip && !ps->gz_done) {
        pa_fail(err, "%s: truncated gzip data", ps->name);
        return -1;
    }
    if (ps->mode == MODE_SNIFF) {
        decide_mode(ps);
    }
    int rc = 0;
    if (ps->mode == MODE_PPROF || ps->mode == MODE_CAPTURE) {
        ps->st.format = ps->mode == MODE_PPROF ? PA_FORMAT_PPROF : PA_FORMAT_CAPTURE;
        pa_error perr;
        if ((ps->mode == MODE_PPROF
                 ? pa_pprof_decode(ps->p, ps->pending.data, ps->pending.len, &ps->st, &perr)
                 : pa_capture_decode(ps->p, ps->pending.data, ps->pending.len, &ps->st, &perr)) !=
            0) {
            pa_fail(err, "%s: %s", ps->name, perr.msg);
            rc = -1;
        }
    } else {
        if (ps->pending.len) {
            text_line(ps, ps->pending.data, ps->pending.len);
            ps->pending.len = 0;
        }
        if (ps->st.stacks == 0) {
            if (ps->st.bad_lines)
                pa_fail(err,
                        "%s: no valid stack in %llu lines (%llu malformed, first at line "
                        "%llu: expected 'frame;frame;... COUNT')",
                        ps->name, (unsigned long long)ps->st.lines,
                        (unsigned long long)ps->st.bad_lines,
                        (unsigned long long)ps->st.first_bad_line);
            else
                pa_fail(err, "%s: no samples in input", ps->name);
            rc = -1;
        }
    }
    if (ps->st.format == PA_FORMAT_UNKNOWN)
        ps->st.format = PA_FORMAT_FOLDED;
    if (stats)
        *stats = ps->st;
    return rc;
}

int pa_profile_parse_buffer(pa_profile *p, const void *data, size_t len, const char *name,
                            pa_parse_stats *stats, pa_error *err) {
    pa_parser *ps = pa_parser_new(p, name);
    int rc = pa_parser_feed(ps, data, len, err);
    if (rc == 0)
        rc = pa_parser_finish(ps, stats, err);
    pa_parser_free(ps);
    return rc;
}

int pa_profile_parse_stream(pa_profile *p, FILE *f, const char *name, pa_parse_stats *stats,
                            pa_error *err) {
    enum { CHUNK = 1 << 20 };
    char *chunk = pa_xrealloc(NULL, CHUNK);
    pa_parser *ps = pa_parser_new(p, name);
    int rc = 0;
    for (;;) {
        size_t n = fread(chunk, 1, CHUNK, f);
        if (n > 0 && pa_parser_feed(ps, chunk, n, err) != 0) {
            rc = -1;
            break;
        }
        if (n < CHUNK) {
            if (ferror(f)) {
                pa_fail(err, "%s: read error: %s", name, strerror(errno));
                rc = -1;
            }
            break;
        }
    }
    if (rc == 0)
        rc = pa_parser_finish(ps, stats, err);
    pa_parser_free(ps);
    free(chunk);
    return rc;
}

int pa_profile_parse_file(pa_profile *p, const char *path, pa_parse_stats *stats, pa_error *err) {
    if (strcmp(path, "-") == 0)
        return pa_profile_parse_stream(p, stdin, "<stdin>", stats, err);
    FILE *f = fopen(path, "rb");
    if (!f) {
        pa_fail(err, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    int rc = pa_profile_parse_stream(p, f, path, stats, err);
    fclose(f);
    return rc;
}
