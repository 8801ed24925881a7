/* fuzz_pprof.c - libFuzzer target: the protobuf decoder on raw (untrusted) profile.proto. */
#include "profile.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    pa_profile *p = pa_profile_new();
    pa_parse_stats st = {0};
    pa_error err;
    pa_pprof_decode(p, data, size, &st, &err);
    pa_profile_free(p);
    return 0;
}
