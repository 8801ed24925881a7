/* libFuzzer target for the ingest parsers: the first byte picks the path (folded, folded with
 * Content-Encoding gzip, pprof, multipart pprof; a selector), the rest is the body. Limits are
 * small so that bombs are found quickly rather than exhausting memory. Built with clang only. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ingest.h"
#include "name.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    uint8_t mode = data[0] % 5;
    data++, size--;
    if (mode == 4) {
        /* Names and selectors from arbitrary text. */
        char *s = malloc(size + 1);
        memcpy(s, data, size);
        s[size] = '\0';
        pa_error e;
        struct pa_coll_series ser;
        if (pa_coll_series_parse(&ser, s, &e) == 0)
            free(pa_coll_series_labels(&ser));
        pa_coll_series_free(&ser);
        struct pa_coll_selector sel;
        if (pa_coll_selector_parse(&sel, s, &e) == 0)
            pa_coll_selector_matches(&sel, "a=b,c=d");
        pa_coll_selector_free(&sel);
        free(s);
        return 0;
    }
    /* Half the inputs as the server passes its own buffer (body_scratch: decoded in place),
     * in an allocation of exactly the body's size, so that ASan sees any write past it. */
    uint8_t *scratch = size % 2 ? malloc(size) : NULL;
    if (scratch)
        memcpy(scratch, data, size);
    struct pa_coll_ingest_request rq = {
        .name = "fuzz.cpu{k=v}",
        .from = "1700000000",
        .until = "1700000010",
        .format = mode >= 2 ? "pprof" : "folded",
        .content_encoding = mode == 1 ? "gzip" : NULL,
        .content_type = mode == 3 ? "multipart/form-data; boundary=b" : NULL,
        .body = scratch ? scratch : data,
        .body_len = size,
        .body_scratch = scratch != NULL,
        .max_decompressed = 1 << 20,
        .now = 1700000100,
    };
    struct pa_coll_ingest_result res;
    pa_error e;
    pa_coll_ingest_decode(&rq, &res, &e);
    pa_coll_ingest_result_free(&res);
    free(scratch);
    return 0;
}
