/* fuzz_parse.c - libFuzzer target: the whole input path (gzip, dialect detection, text lines,
 * pprof), then every encoder on whatever was parsed, whose output must stay well-formed. */
#include "profile.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    pa_profile *p = pa_profile_new();
    pa_parse_stats st;
    pa_error err;
    /* Split the input in two feeds to exercise chunk boundaries. */
    pa_parser *ps = pa_parser_new(p, "fuzz");
    size_t half = size / 2;
    int rc = pa_parser_feed(ps, data, half, &err);
    if (rc == 0)
        rc = pa_parser_feed(ps, data + half, size - half, &err);
    if (rc == 0)
        rc = pa_parser_finish(ps, &st, &err);
    pa_parser_free(ps);
    if (rc == 0) {
        pa_buf b = {0};
        pa_profile_encode_folded(p, &b);
        pa_buf_free(&b);
        pa_profile_encode_report_json(p, p, "t", &b);
        if (b.len && memchr(b.data, '<', b.len))
            abort(); /* report JSON must never contain a raw '<' */
        pa_buf_free(&b);
        pa_profile_encode_speedscope(p, "t", &b);
        pa_buf_free(&b);
        if (pa_pprof_encode(p, 0, &b, &err) == 0) {
            pa_profile *q = pa_profile_new();
            if (pa_profile_parse_buffer(q, b.data, b.len, "again", &st, &err) != 0 ||
                pa_profile_total(q) != pa_profile_total(p))
                abort(); /* what we write we must read back */
            pa_profile_free(q);
        }
        pa_buf_free(&b);
    }
    pa_profile_free(p);
    return 0;
}
