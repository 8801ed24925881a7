/* libFuzzer target for what decodes Pyroscope's and OpenTelemetry's APIs from the network:
 * the first byte picks the entry (a querier method in binary or JSON, Push in binary or JSON,
 * OTLP, gzip'd or not), the rest is the body. Every answer must be a well-formed response;
 * the store is a real one in a temporary directory (what decodes is stored, as in the
 * collector). Built with clang only. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "otlp.h"
#include "push.h"
#include "querier.h"

static struct pa_coll_store *store;

static void open_store(void) {
    char dir[] = "/tmp/pa-fuzz-proto-XXXXXX", path[64];
    pa_error e;
    if (!mkdtemp(dir))
        abort();
    snprintf(path, sizeof path, "%s/p.db", dir);
    struct pa_coll_store_options opt = {.sync = PA_SYNC_NORMAL};
    if (pa_coll_store_open(&store, path, &opt, &e) != 0) {
        fprintf(stderr, "fuzz_proto: %s\n", e.msg);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const methods[] = {
        "ProfileTypes",           "LabelNames",         "LabelValues",  "Series",
        "SelectMergeStacktraces", "SelectMergeProfile", "SelectSeries", "Diff"};
    if (!store)
        open_store();
    if (size < 1)
        return 0;
    unsigned mode = data[0] % 20;
    data++, size--;
    struct pa_coll_response r = {0};
    if (mode < 16) {
        pa_coll_handle_querier(store, methods[mode / 2],
                               mode % 2 ? "application/json" : "application/proto", data, size,
                               1700000100, &r);
    } else {
        struct pa_coll_proto_request rq = {
            .content_type = mode == 16   ? "application/proto"
                            : mode == 17 ? "application/json"
                                         : "application/x-protobuf",
            .content_encoding = mode == 19 ? "gzip" : NULL,
            .body = data,
            .body_len = size,
            .max_decompressed = 1 << 20,
            .now = 1700000100,
        };
        if (mode < 18)
            pa_coll_handle_push(store, &rq, &r);
        else
            pa_coll_handle_otlp(store, &rq, &r);
    }
    if (r.status < 200 || r.status > 599 || !r.content_type)
        abort();
    pa_buf_free(&r.body);
    free(r.location);
    return 0;
}
