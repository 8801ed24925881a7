/* header.c: the "# pyagent 1 k=v ..." header line, both ways.
 *
 * The metadata pairs of a profile (rate, mode, pid, the time buckets' width and origin...) as
 * the folded dialect writes them, and read back from a folded file or from a pprof's comment.
 * Values are one token each: what would end it, or the line, is percent-encoded. One file, so
 * that the writer and the readers (parse.c, pprof.c) agree and depend on it, not on each
 * other. */
#include <stdlib.h>
#include <string.h>

#include "profile_int.h"

void pa_put_meta_pairs(const pa_profile *p, pa_buf *out) {
    size_t nmeta = pa_profile_meta_count(p);
    for (size_t i = 0; i < nmeta; i++) {
        const char *k, *v;
        pa_profile_meta_at(p, i, &k, &v);
        if (strcmp(k, "bucket_ms") == 0 || strcmp(k, "t0_ms") == 0)
            continue; /* the time fields below are the true ones */
        pa_buf_printf(out, " %s=", k);
        /* Values are one token: what would end it, or end the line, is percent-encoded. */
        for (const unsigned char *c = (const unsigned char *)v; *c; c++) {
            if (*c <= ' ' || *c == '%' || *c == 0x7F)
                pa_buf_printf(out, "%%%02X", *c);
            else
                pa_buf_append(out, c, 1);
        }
    }
    if (pa_profile_bucket_ms(p))
        pa_buf_printf(out, " bucket_ms=%u t0_ms=%lld", pa_profile_bucket_ms(p),
                      (long long)pa_profile_time_first(p));
}

static int hexval(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* "# pyagent 1 rate=250 mode=cpu ..." -> metadata. A header may follow stacks already read
 * (several inputs parsed into one profile): values then combine as merged profiles' do. */
void pa_parse_header(pa_profile *p, const char *s, size_t len, pa_text_state *state) {
    size_t i = 0;
    pa_buf value = {0};
    while (i < len) {
        while (i < len && s[i] == ' ')
            i++;
        size_t start = i;
        while (i < len && s[i] != ' ')
            i++;
        const char *eq = memchr(s + start, '=', i - start);
        if (!eq || eq == s + start)
            continue;
        char *key = pa_xstrndup(s + start, (size_t)(eq - (s + start)));
        value.len = 0;
        for (const char *v = eq + 1; v < s + i; v++) {
            if (*v == '%' && v + 2 < s + i && hexval(v[1]) >= 0 && hexval(v[2]) >= 0) {
                char c = (char)(hexval(v[1]) * 16 + hexval(v[2]));
                pa_buf_append(&value, &c, 1);
                v += 2;
            } else {
                pa_buf_append(&value, v, 1);
            }
        }
        pa_buf_append(&value, "", 1);
        if (strcmp(key, "bucket_ms") == 0) {
            long w = strtol(value.data, NULL, 10);
            if (w > 0 && w <= 3600000)
                pa_profile_set_bucket_ms(p, (uint32_t)w);
        } else if (strcmp(key, "t0_ms") == 0) {
            if (state)
                state->t0_ms = strtoll(value.data, NULL, 10);
        } else {
            pa_profile_combine_meta(p, key, value.data);
        }
        free(key);
    }
    pa_buf_free(&value);
}
