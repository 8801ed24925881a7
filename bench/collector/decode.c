/* decode.c: the CPU one /ingest upload costs in the decoder, phase by phase, without HTTP,
 * SQLite or other processes in the way: run.sh's folded upload (ingest.lua's 200 stacks,
 * built the same way here) parsed, encoded as pprof and gzip'd, N times on one thread, timed
 * with the thread's CPU clock so that a busy machine changes the figures little.
 * usage: collector_decode [N]  (default 2000) */
#include "ingest.h"
#include "profile.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* ingest.lua's make_body(). */
static void make_body(pa_buf *b) {
    for (int i = 1; i <= 200; i++) {
        pa_buf_puts(b, "thread:MainThread;<module> (app.py:10)");
        int depth = 10 + i % 20;
        for (int d = 1; d <= depth; d++)
            pa_buf_printf(b, ";fn_%d_%d (/srv/app/mod%d.py:%d)", d, i % (d + 3), d % 7,
                          10 + (i * d) % 300);
        pa_buf_printf(b, " %d\n", 1 + (i * 37) % 40);
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    /* The collector's allocator settings (main.c): without them every upload's pages go
     * back to the system and fault in again, which the figures would count. */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    mallopt(M_TRIM_THRESHOLD, 4 << 20);
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    if (n < 1)
        n = 1;
    pa_buf body = {0};
    make_body(&body);
    double *whole = calloc((size_t)n, sizeof *whole), parse = 0, encode = 0, gzip = 0;
    size_t pprof_len = 0, blob_len = 0;
    for (int i = 0; i < n; i++) {
        /* The whole decoder, as do_ingest calls it (on a scratch copy, as the server's). */
        uint8_t *copy = malloc(body.len);
        memcpy(copy, body.data, body.len);
        struct pa_coll_ingest_request rq = {
            .name = "bench.cpu{host=bench,pid=1}",
            .from = "1700000000",
            .until = "1700000010",
            .sample_rate = "100",
            .spy_name = "pyagent",
            .format = "folded",
            .body = copy,
            .body_len = body.len,
            .body_scratch = true,
            .max_decompressed = 256u << 20,
            .now = 1700000010,
            .rules = {.folded_strict = true},
        };
        struct pa_coll_ingest_result res;
        pa_error err = {""};
        double t0 = cpu_ms();
        if (pa_coll_ingest_decode(&rq, &res, &err) != 0) {
            fprintf(stderr, "collector_decode: %s\n", err.msg);
            return 1;
        }
        whole[i] = cpu_ms() - t0;
        blob_len = res.blob_len;
        pa_coll_ingest_result_free(&res);
        free(copy);

        /* Its three phases on their own. */
        pa_parse_stats stats;
        pa_error perr = {""};
        memset(&stats, 0, sizeof stats);
        pa_profile *p = pa_profile_new();
        t0 = cpu_ms();
        pa_profile_parse_buffer(p, body.data, body.len, "upload", &stats, &perr);
        double t1 = cpu_ms();
        pa_buf pb = {0};
        pa_pprof_encode(p, 0, &pb, &perr);
        double t2 = cpu_ms();
        uint8_t *gz;
        size_t gzlen;
        pa_coll_gzip((const uint8_t *)pb.data, pb.len, &gz, &gzlen);
        double t3 = cpu_ms();
        parse += t1 - t0;
        encode += t2 - t1;
        gzip += t3 - t2;
        pprof_len = pb.len;
        free(gz);
        pa_buf_free(&pb);
        pa_profile_free(p);
    }
    qsort(whole, (size_t)n, sizeof *whole, cmp);
    printf("RESULT body=%zu pprof=%zu blob=%zu decode_ms_median=%.3f decode_ms_p10=%.3f "
           "parse_ms=%.3f encode_ms=%.3f gzip_ms=%.3f\n",
           body.len, pprof_len, blob_len, whole[n / 2], whole[n / 10], parse / n, encode / n,
           gzip / n);
    free(whole);
    pa_buf_free(&body);
    return 0;
}
