/* units.c: parsing timestamps, durations and sizes. Every parser rejects trailing junk and
 * overflow rather than guessing, because a silently misread retention or time range is worse
 * than an error message. */
#include "units.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Parses a non-negative decimal integer; *ndigits gets its length. */
static int parse_digits(const char *s, int64_t *out, size_t *ndigits) {
    size_t n = 0;
    int64_t v = 0;
    for (; isdigit((unsigned char)s[n]); n++) {
        int d = s[n] - '0';
        if (v > (INT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (n == 0)
        return -1;
    *out = v;
    *ndigits = n;
    return 0;
}

static int64_t div_round(int64_t v, int64_t by, int round_up) {
    return round_up ? (v + by - 1) / by : v / by;
}

int pa_coll_parse_timestamp(const char *s, int64_t now, int round_up, int64_t *out) {
    if (s == NULL || s[0] == '\0' || strcmp(s, "now") == 0) {
        *out = now;
        return 0;
    }
    int64_t v;
    size_t n;
    if (parse_digits(s, &v, &n) != 0 || s[n] != '\0')
        return -1;
    /* Pyroscope's rule, so that agents written for it mean the same instant here. */
    switch (n) {
    case 13:
        v = div_round(v, 1000, round_up);
        break;
    case 16:
        v = div_round(v, 1000000, round_up);
        break;
    case 19:
        v = div_round(v, 1000000000, round_up);
        break;
    default:
        break;
    }
    *out = v;
    return 0;
}

int pa_coll_parse_query_time(const char *s, int64_t now, int round_up, int64_t *out) {
    /* A '+' typed unencoded in a URL arrives as a space (form encoding): "now 1h". */
    if (s != NULL && strncmp(s, "now", 3) == 0 && (s[3] == '-' || s[3] == '+' || s[3] == ' ')) {
        int64_t d;
        if (pa_coll_parse_duration(s + 4, &d) != 0)
            return -1;
        *out = s[3] == '-' ? now - d : now + d;
        /* As an exclusive upper bound, "now" must still cover the second we are in. */
        *out += round_up;
        return 0;
    }
    if (s == NULL || *s == '\0' || strcmp(s, "now") == 0) {
        *out = now + round_up;
        return 0;
    }
    return pa_coll_parse_timestamp(s, now, round_up, out);
}

int pa_coll_parse_duration(const char *s, int64_t *out) {
    if (s == NULL || *s == '\0')
        return -1;
    int64_t total = 0;
    while (*s) {
        int64_t v;
        size_t n;
        if (parse_digits(s, &v, &n) != 0)
            return -1;
        s += n;
        int64_t unit = 1;
        switch (*s) {
        case 's':
            s++;
            break;
        case 'm':
            unit = 60;
            s++;
            break;
        case 'h':
            unit = 3600;
            s++;
            break;
        case 'd':
            unit = 86400;
            s++;
            break;
        case 'w':
            unit = 7 * 86400;
            s++;
            break;
        case '\0':
            break;
        default:
            return -1;
        }
        /* A hundred years is far beyond any retention; larger values are typos. */
        if (v > 100LL * 366 * 86400 / unit || total + v * unit > 100LL * 366 * 86400)
            return -1;
        total += v * unit;
    }
    *out = total;
    return 0;
}

int pa_coll_parse_size(const char *s, uint64_t *out) {
    if (s == NULL || !isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    case '\0':
        break;
    default:
        return -1;
    }
    if (shift) {
        end++;
        if (*end == 'i')
            end++;
        if (*end == 'B' || *end == 'b')
            end++;
    }
    if (*end != '\0' || v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}
