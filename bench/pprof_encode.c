/* pprof_encode: the hand-written pprof encoder (profile/pprof.c, what the agent uploads)
 * against the same profile encoded with the code protoc-c generates from
 * proto/google/v1/profile.proto, on a profile of Python-like stacks; then the whole upload
 * bodies of each protocol (uploader/wire.c): /ingest's gzip'd pprof, a Push, an OTLP request.
 *
 *     pprof_encode [STACKS [DEPTH [ROUNDS]]]      (defaults 2000 30 21)
 *
 * Both encoders are given the same work: one Location and Line per frame string, Functions
 * shared by name and file, the string table, two sample types, and the samples. Prints, for
 * each, the median and range of ROUNDS encodes (CPU time of the calling thread) and the
 * encoded size; the outputs must decode to the same samples (checked with pa_pprof_decode). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../uploader/wire.h"
#include "google/v1/profile.pb-c.h"
#include "profile.h"

static double now_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A deterministic profile: STACKS stacks of DEPTH frames drawn from 600 functions of 60 files. */
static pa_profile *make_profile(size_t nstacks, size_t depth) {
    pa_profile *p = pa_profile_new();
    pa_profile_set_meta(p, "rate", "250");
    pa_profile_set_meta(p, "mode", "cpu");
    pa_profile_set_meta(p, "start", "1700000000");
    unsigned seed = 1;
    char buf[256];
    const char **frames = malloc(depth * sizeof *frames);
    char(*store)[256] = malloc(depth * sizeof *store);
    for (size_t s = 0; s < nstacks; s++) {
        snprintf(store[0], sizeof store[0], "thread:MainThread");
        frames[0] = store[0];
        for (size_t d = 1; d < depth; d++) {
            seed = seed * 1103515245u + 12345u;
            unsigned f = (seed >> 8) % 600, line = 1 + (seed >> 20) % 400;
            snprintf(buf, sizeof buf, "pkg%u.mod%u.Class.func%u (/srv/app/pkg%u/mod%u.py:%u)",
                     f / 60, f % 60, f, f / 60, f % 60, line);
            snprintf(store[d], sizeof store[d], "%s", buf);
            frames[d] = store[d];
        }
        pa_profile_add_stack(p, frames, depth, 1 + s % 17);
    }
    free(frames);
    free(store);
    return p;
}

/* protobuf-c: build the message (as pprof.c lays it out) and pack it. */
static void encode_pbc(const pa_profile *p, pa_buf *out) {
    size_t nframes = pa_profile_frame_count(p), nstacks = pa_profile_stack_count(p);
    pa_profile *strs = pa_profile_new(), *funcs = pa_profile_new();
    Google__V1__Location *locs = calloc(nframes, sizeof *locs);
    Google__V1__Location **lptrs = calloc(nframes, sizeof *lptrs);
    Google__V1__Line *lines = calloc(nframes, sizeof *lines);
    Google__V1__Line **lineptrs = calloc(nframes, sizeof *lineptrs);
    Google__V1__Function *fns = calloc(nframes, sizeof *fns);
    Google__V1__Function **fptrs = calloc(nframes, sizeof *fptrs);
    size_t nfn = 0;
    pa_buf key = {0};
    for (uint32_t id = 0; id < nframes; id++) {
        size_t len;
        const char *s = pa_profile_frame(p, id, &len);
        pa_frame_info fi;
        pa_frame_parse(s, len, &fi);
        const char *name = fi.file ? fi.name : s, *file = fi.file ? fi.file : "";
        size_t nl = fi.file ? fi.name_len : len, fl = fi.file ? fi.file_len : 0;
        key.len = 0;
        pa_buf_append(&key, name, nl);
        pa_buf_append(&key, "", 1);
        pa_buf_append(&key, file, fl);
        size_t before = pa_profile_frame_count(funcs);
        uint64_t fid = pa_profile_intern(funcs, key.data, key.len) + 1;
        if (pa_profile_frame_count(funcs) > before) {
            google__v1__function__init(&fns[nfn]);
            fns[nfn].id = fid;
            fns[nfn].name = fns[nfn].system_name = pa_profile_intern(strs, name, nl) + 1;
            fns[nfn].filename = pa_profile_intern(strs, file, fl) + 1;
            fptrs[nfn] = &fns[nfn];
            nfn++;
        }
        google__v1__line__init(&lines[id]);
        lines[id].function_id = fid;
        lines[id].line = fi.line;
        lineptrs[id] = &lines[id];
        google__v1__location__init(&locs[id]);
        locs[id].id = id + 1;
        locs[id].n_line = 1;
        locs[id].line = &lineptrs[id];
        lptrs[id] = &locs[id];
    }
    pa_buf_free(&key);
    Google__V1__Sample *samples = calloc(nstacks, sizeof *samples);
    Google__V1__Sample **sptrs = calloc(nstacks, sizeof *sptrs);
    uint64_t **locids = calloc(nstacks, sizeof *locids);
    int64_t *values = calloc(nstacks * 2, sizeof *values);
    for (size_t s = 0; s < nstacks; s++) {
        size_t depth;
        uint64_t count;
        const uint32_t *ids = pa_profile_stack(p, s, &depth, &count);
        locids[s] = malloc(depth * sizeof **locids);
        for (size_t k = 0; k < depth; k++)
            locids[s][k] = (uint64_t)ids[depth - 1 - k] + 1;
        google__v1__sample__init(&samples[s]);
        samples[s].n_location_id = depth;
        samples[s].location_id = locids[s];
        values[2 * s] = (int64_t)count;
        values[2 * s + 1] = (int64_t)count * 4000000;
        samples[s].n_value = 2;
        samples[s].value = &values[2 * s];
        sptrs[s] = &samples[s];
    }
    Google__V1__ValueType vt[2] = {GOOGLE__V1__VALUE_TYPE__INIT, GOOGLE__V1__VALUE_TYPE__INIT};
    Google__V1__ValueType *vts[2] = {&vt[0], &vt[1]};
    vt[0].type = pa_profile_intern(strs, "samples", 7) + 1;
    vt[0].unit = pa_profile_intern(strs, "count", 5) + 1;
    vt[1].type = pa_profile_intern(strs, "cpu", 3) + 1;
    vt[1].unit = pa_profile_intern(strs, "nanoseconds", 11) + 1;
    size_t nstr = pa_profile_frame_count(strs) + 1;
    char **st = calloc(nstr, sizeof *st);
    st[0] = "";
    pa_buf arena = {0};
    size_t *offs = calloc(nstr, sizeof *offs);
    for (uint32_t i = 1; i < nstr; i++) {
        size_t len;
        const char *s = pa_profile_frame(strs, i - 1, &len);
        offs[i] = arena.len;
        pa_buf_append(&arena, s, len);
        pa_buf_append(&arena, "", 1);
    }
    for (size_t i = 1; i < nstr; i++)
        st[i] = arena.data + offs[i];
    Google__V1__Profile prof = GOOGLE__V1__PROFILE__INIT;
    prof.n_sample_type = 2;
    prof.sample_type = vts;
    prof.n_sample = nstacks;
    prof.sample = sptrs;
    prof.n_location = nframes;
    prof.location = lptrs;
    prof.n_function = nfn;
    prof.function = fptrs;
    prof.n_string_table = nstr;
    prof.string_table = st;
    prof.time_nanos = 1700000000000000000;
    prof.period_type = &vt[1];
    prof.period = 4000000;
    size_t n = protobuf_c_message_get_packed_size(&prof.base);
    pa_buf_reserve(out, n);
    protobuf_c_message_pack(&prof.base, (uint8_t *)out->data + out->len);
    out->len += n;
    for (size_t s = 0; s < nstacks; s++)
        free(locids[s]);
    free(locids), free(values), free(sptrs), free(samples), free(st), free(offs);
    pa_buf_free(&arena);
    free(locs), free(lptrs), free(lines), free(lineptrs), free(fns), free(fptrs);
    pa_profile_free(strs);
    pa_profile_free(funcs);
}

static void encode_hand(const pa_profile *p, pa_buf *out) {
    pa_error err;
    if (pa_pprof_encode(p, 0, out, &err) != 0)
        abort();
}

static void run(const char *name, void (*enc)(const pa_profile *, pa_buf *), const pa_profile *p,
                int rounds, uint64_t want) {
    double *t = malloc((size_t)rounds * sizeof *t);
    size_t bytes = 0;
    for (int r = 0; r < rounds; r++) {
        pa_buf out = {0};
        double t0 = now_cpu();
        enc(p, &out);
        t[r] = now_cpu() - t0;
        bytes = out.len;
        if (r == 0) { /* the encoding must read back as the same samples */
            pa_profile *back = pa_profile_new();
            pa_parse_stats st = {0};
            pa_error err;
            if (pa_pprof_decode(back, out.data, out.len, &st, &err) != 0 ||
                pa_profile_total(back) != want) {
                fprintf(stderr, "%s: decodes to %llu samples, want %llu\n", name,
                        (unsigned long long)pa_profile_total(back), (unsigned long long)want);
                exit(1);
            }
            pa_profile_free(back);
        }
        pa_buf_free(&out);
    }
    qsort(t, (size_t)rounds, sizeof *t, cmp_double);
    printf("%-10s median %8.3f ms  range %8.3f-%8.3f ms  %9zu bytes\n", name, t[rounds / 2] * 1e3,
           t[0] * 1e3, t[rounds - 1] * 1e3, bytes);
    free(t);
}

/* One upload body per protocol: median encode time and size. */
static void bodies(const pa_profile *p, int rounds) {
    static const char *const names[] = {"ingest", "push", "otlp"};
    struct pa_wire_label labels[] = {{"env", "prod"}, {"hostname", "web-1"}, {"pid", "4242"}};
    double *t = malloc((size_t)rounds * sizeof *t);
    for (int k = 0; k < 3; k++) {
        size_t bytes = 0;
        for (int r = 0; r < rounds; r++) {
            pa_buf out = {0};
            pa_error err;
            double t0 = now_cpu();
            int rc = k == 0   ? pa_pprof_encode(p, 1, &out, &err)
                     : k == 1 ? pa_wire_push(p, "shop", labels, 3, "id", &out, &err)
                              : pa_wire_otlp(p, "shop", labels, 3, 1700000000, 1700000010, NULL,
                                             &out, &err);
            t[r] = now_cpu() - t0;
            if (rc != 0)
                abort();
            bytes = out.len;
            pa_buf_free(&out);
        }
        qsort(t, (size_t)rounds, sizeof *t, cmp_double);
        printf("body %-6s median %8.3f ms  range %8.3f-%8.3f ms  %9zu bytes\n", names[k],
               t[rounds / 2] * 1e3, t[0] * 1e3, t[rounds - 1] * 1e3, bytes);
    }
    free(t);
}

int main(int argc, char **argv) {
    size_t nstacks = argc > 1 ? strtoul(argv[1], NULL, 10) : 2000;
    size_t depth = argc > 2 ? strtoul(argv[2], NULL, 10) : 30;
    int rounds = argc > 3 ? atoi(argv[3]) : 21;
    pa_profile *p = make_profile(nstacks, depth);
    printf("profile: %zu stacks of %zu frames, %zu frame strings, %llu samples; %d rounds\n",
           pa_profile_stack_count(p), depth, pa_profile_frame_count(p),
           (unsigned long long)pa_profile_total(p), rounds);
    run("hand", encode_hand, p, rounds, pa_profile_total(p));
    run("protobuf-c", encode_pbc, p, rounds, pa_profile_total(p));
    bodies(p, rounds);
    pa_profile_free(p);
    return 0;
}
