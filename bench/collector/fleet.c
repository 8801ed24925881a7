/* fleet.c: the collector's fleet-scale benchmark. Loads HOURS hours of a fleet of PROCS
 * processes uploading every 10 s (24 h x 50 = 432,000 uploads) straight through the store API
 * (group commit, as /ingest does after decoding), builds the rollups, then times the queries
 * a user makes of such a fleet (the collector's own and Grafana's querier.v1 calls), and the
 * ingest path (decode + commit) while queries run.
 *
 * Profiles: each of 5 applications has a stable set of 600 stacks (depth 10-30, Python-like
 * frame names, four functions per depth); each upload holds 150 of them with random counts. To
 * generate fast, each process cycles through 32 pre-encoded uploads: row sizes and merge work are
 * those of real distinct uploads, only their contents repeat.
 *
 * usage: collector_fleet DB_PATH [HOURS [PROCS]]   (DB_PATH is created; remove it after) */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ingest.h"
#include "querier.h"
#include "query.h"
#include "store.h"

#define APPS 5
#define STACKS_PER_APP 600
#define STACKS_PER_UPLOAD 150
#define VARIANTS 32
#define INTERVAL 10

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static char *stacks[APPS][STACKS_PER_APP];

static void make_stacks(void) {
    for (int a = 0; a < APPS; a++)
        for (int s = 0; s < STACKS_PER_APP; s++) {
            pa_buf b = {0};
            pa_buf_printf(&b, "thread:MainThread");
            int depth = 10 + (int)(next_rand() % 21);
            /* Four functions per depth: stacks share prefixes and frames, as a program's
             * do (about 120 distinct frames per application). */
            for (int d = 0; d < depth; d++) {
                int k = (int)(next_rand() % 4);
                pa_buf_printf(&b, ";handler_%d_%d (/srv/app%d/mod%d.py:%d)", d, k, a, d % 9,
                              10 * d + k + 1);
            }
            stacks[a][s] = b.data;
        }
}

/* One upload of app a as folded text (what an agent sends). */
static char *folded_upload(int a) {
    pa_buf b = {0};
    for (int i = 0; i < STACKS_PER_UPLOAD; i++)
        pa_buf_printf(&b, "%s %d\n", stacks[a][next_rand() % STACKS_PER_APP],
                      (int)(next_rand() % 40) + 1);
    return b.data;
}

struct blob {
    uint8_t *data;
    size_t len;
    uint64_t samples, stacks;
};
static struct blob blobs[APPS][VARIANTS];
static int hours = 24, procs = 50;
static int64_t t_end;
static struct pa_coll_store *st;

static void encode_blobs(void) {
    for (int a = 0; a < APPS; a++)
        for (int v = 0; v < VARIANTS; v++) {
            char *text = folded_upload(a);
            pa_profile *p = pa_profile_new();
            pa_parse_stats stats = {0};
            pa_error err = {{0}};
            if (pa_profile_parse_buffer(p, text, strlen(text), "gen", &stats, &err) != 0 ||
                pa_coll_profile_blob(p, &blobs[a][v].data, &blobs[a][v].len) != 0) {
                fprintf(stderr, "cannot encode a generated profile: %s\n", err.msg);
                exit(1);
            }
            blobs[a][v].samples = pa_profile_total(p);
            blobs[a][v].stacks = stats.stacks;
            pa_profile_free(p);
            free(text);
        }
}

static void labels_of(int proc, char *out, size_t n) {
    snprintf(out, n, "host=node-%d,pod=app%d-%d", proc % 10, proc % APPS, proc);
}

static atomic_long next_upload;

static void *loader(void *arg) {
    (void)arg;
    long total = (long)hours * 3600 / INTERVAL * procs;
    char labels[64], app[16];
    pa_error e;
    for (;;) {
        long k = atomic_fetch_add(&next_upload, 1);
        if (k >= total)
            return NULL;
        int proc = (int)(k % procs);
        long step = k / procs;
        int a = proc % APPS;
        struct blob *b = &blobs[a][(step + proc) % VARIANTS];
        labels_of(proc, labels, sizeof labels);
        snprintf(app, sizeof app, "app%d.cpu", a);
        int64_t from = t_end - (int64_t)hours * 3600 + step * INTERVAL;
        struct pa_coll_upload u = {.app = app,
                                   .labels = labels,
                                   .from = from,
                                   .until = from + INTERVAL,
                                   .samples = b->samples,
                                   .stacks = b->stacks,
                                   .sample_rate = 100,
                                   .spy_name = "pyagent",
                                   .profile = b->data,
                                   .profile_len = b->len};
        if (pa_coll_store_insert(st, &u, &e) != 0) {
            fprintf(stderr, "insert: %s\n", e.msg);
            exit(1);
        }
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of three runs of one query: the merged profile of query over [from, until). */
static void time_query(const char *what, const char *query, int64_t from, int64_t until) {
    double t[3];
    uint64_t uploads = 0, total = 0;
    pa_error e;
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        pa_profile *p;
        if (pa_coll_query_profile(st, query, from, until, &p, &uploads, &e) != 0) {
            fprintf(stderr, "%s: %s\n", what, e.msg);
            exit(1);
        }
        total = pa_profile_total(p);
        pa_profile_free(p);
        t[r] = now_s() - t0;
    }
    qsort(t, 3, sizeof t[0], cmp_double);
    printf("RESULT query=%s median_s=%.3f min_s=%.3f uploads=%" PRIu64 " samples=%" PRIu64 "\n",
           what, t[1], t[0], uploads, total);
}

/* Median of three runs of one querier.v1 call (JSON codec, as Grafana's data source may send),
 * whole: selection, merge, the answer's tree or points, and its encoding. */
static void time_querier(const char *what, const char *method, int64_t from, int64_t until,
                         const char *fields) {
    char body[512];
    snprintf(body, sizeof body,
             "{\"profileTypeID\":\"process_cpu:samples:count:cpu:nanoseconds\","
             "\"labelSelector\":\"{service_name=\\\"app0\\\"}\",\"start\":\"%" PRId64
             "000\",\"end\":\"%" PRId64 "000\"%s}",
             from, until, fields);
    double t[3];
    size_t len = 0;
    for (int r = 0; r < 3; r++) {
        struct pa_coll_response resp = {0};
        double t0 = now_s();
        pa_coll_handle_querier(st, method, "application/json", (const uint8_t *)body, strlen(body),
                               t_end, &resp);
        t[r] = now_s() - t0;
        if (resp.status != 200) {
            fprintf(stderr, "%s: %d %.*s\n", what, resp.status, (int)resp.body.len,
                    resp.body.data ? resp.body.data : "");
            exit(1);
        }
        len = resp.body.len;
        pa_buf_free(&resp.body);
        free(resp.location);
    }
    qsort(t, 3, sizeof t[0], cmp_double);
    printf("RESULT querier=%s median_s=%.3f min_s=%.3f answer_bytes=%zu\n", what, t[1], t[0], len);
}

static atomic_bool querying;

static void *query_loop(void *arg) {
    (void)arg;
    pa_error e;
    /* As the collector's query threads run (pool.c). */
    setpriority(PRIO_PROCESS, (id_t)gettid(), 10);
    while (atomic_load(&querying)) {
        pa_profile *p;
        if (pa_coll_query_profile(st, "app0.cpu", t_end - 86400, t_end, &p, NULL, &e) == 0)
            pa_profile_free(p);
    }
    return NULL;
}

struct ingester {
    int id;
    double lat[4096];
    int n;
};

/* The ingest path after HTTP: decode a folded body (parse, re-encode, gzip), commit. */
static void *ingest_loop(void *arg) {
    struct ingester *g = arg;
    char name[64], from[32], until[32];
    pa_error e;
    char *bodies[4];
    for (int i = 0; i < 4; i++)
        bodies[i] = folded_upload(i % APPS);
    while (atomic_load(&querying) && g->n < 4096) {
        snprintf(name, sizeof name, "live.cpu{pod=live-%d}", g->id);
        snprintf(from, sizeof from, "%" PRId64, t_end + g->n * INTERVAL);
        snprintf(until, sizeof until, "%" PRId64, t_end + g->n * INTERVAL + INTERVAL);
        const char *body = bodies[g->n % 4];
        struct pa_coll_ingest_request rq = {.name = name,
                                            .from = from,
                                            .until = until,
                                            .format = "folded",
                                            .body = (const uint8_t *)body,
                                            .body_len = strlen(body),
                                            .max_decompressed = 1 << 28,
                                            .now = t_end};
        double t0 = now_s();
        struct pa_coll_ingest_result res;
        int rc = pa_coll_ingest_decode(&rq, &res, &e);
        if (rc == 0) {
            struct pa_coll_upload u = pa_coll_upload_of(&res, "pyagent");
            rc = pa_coll_store_insert(st, &u, &e);
        }
        pa_coll_ingest_result_free(&res);
        if (rc != 0) {
            fprintf(stderr, "ingest: %s\n", e.msg);
            exit(1);
        }
        g->lat[g->n++] = now_s() - t0;
    }
    for (int i = 0; i < 4; i++)
        free(bodies[i]);
    return NULL;
}

static long file_kib(const char *path, const char *suffix) {
    char p[4096];
    struct stat sb;
    snprintf(p, sizeof p, "%s%s", path, suffix);
    return stat(p, &sb) == 0 ? (long)(sb.st_size / 1024) : 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: collector_fleet DB_PATH [HOURS [PROCS]]\n");
        return 2;
    }
    const char *path = argv[1];
    if (argc > 2)
        hours = atoi(argv[2]);
    if (argc > 3)
        procs = atoi(argv[3]);
    if (hours < 2 || procs < 1) {
        fprintf(stderr, "collector_fleet: HOURS >= 2 and PROCS >= 1\n");
        return 2;
    }
    /* The last upload ends 10 minutes ago, past the rollup grace, at an unaligned time. */
    t_end = (int64_t)time(NULL) - 600;
    pa_error e;
    struct pa_coll_store_options o = {
        .sync = PA_SYNC_FULL, .retention = 0, .rollup_quiet = PA_COLL_ROLLUP_QUIET};
    if (pa_coll_store_open(&st, path, &o, &e) != 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    make_stacks();
    encode_blobs();

    long total = (long)hours * 3600 / INTERVAL * procs;
    double t0 = now_s();
    pthread_t th[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&th[i], NULL, loader, NULL);
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    double load = now_s() - t0;
    printf("RESULT load uploads=%ld seconds=%.1f uploads_per_s=%.0f (store API, 8 threads, "
           "sync=full)\n",
           total, load, total / load);

    /* The store's own compactor has been building rollups during the load; finish, once
     * the last spans are quiet (PA_COLL_ROLLUP_QUIET), as the collector would. */
    sleep(PA_COLL_ROLLUP_QUIET + 1);
    t0 = now_s();
    uint64_t built = 0, b;
    while (pa_coll_store_compact(st, (int64_t)time(NULL), &b) == 0 && b > 0)
        built += b;
    printf("RESULT compact_after_load rollups=%" PRIu64 " seconds=%.1f\n", built, now_s() - t0);
    printf("RESULT db_kib=%ld wal_kib=%ld per_day_mib=%.0f\n", file_kib(path, ""),
           file_kib(path, "-wal"),
           (file_kib(path, "") + file_kib(path, "-wal")) / 1024.0 * 24 / hours);

    /* What a user asks of the fleet. The last hour is not aligned to the hour. */
    time_query("last_hour_app", "app0.cpu", t_end - 3600, t_end);
    time_query("last_day_app", "app0.cpu", t_end - (int64_t)hours * 3600, t_end);
    time_query("day_label_pod_regex", "app1.cpu{pod=~\"app1-1.*\"}", t_end - (int64_t)hours * 3600,
               t_end);
    time_query("day_label_host", "app2.cpu{host=\"node-2\"}", t_end - (int64_t)hours * 3600, t_end);
    time_query("diff_left_hour", "app0.cpu", t_end - 7200, t_end - 3600);
    time_query("diff_right_hour", "app0.cpu", t_end - 3600, t_end);
    /* Grafana's calls for one service: its flame graph and its series broken down by pod,
     * over the last hour (15 s steps) and the whole range (5 minute steps). */
    time_querier("merge_stacktraces_hour", "SelectMergeStacktraces", t_end - 3600, t_end, "");
    time_querier("merge_stacktraces_day", "SelectMergeStacktraces", t_end - (int64_t)hours * 3600,
                 t_end, "");
    time_querier("select_series_hour", "SelectSeries", t_end - 3600, t_end,
                 ",\"step\":15,\"groupBy\":[\"pod\"]");
    time_querier("select_series_day", "SelectSeries", t_end - (int64_t)hours * 3600, t_end,
                 ",\"step\":300,\"groupBy\":[\"pod\"]");
    double ta = now_s();
    struct pa_coll_series_list l = {0};
    pa_coll_store_series(st, NULL, pa_coll_series_collect, &l, &e);
    printf("RESULT query=series_list seconds=%.3f series=%zu\n", now_s() - ta, l.n);
    pa_coll_series_list_free(&l);

    /* Ingest (decode + commit) from 4 threads while a day-long query runs in a loop. */
    atomic_store(&querying, true);
    pthread_t qt, it[4];
    static struct ingester g[4];
    pthread_create(&qt, NULL, query_loop, NULL);
    for (int i = 0; i < 4; i++) {
        g[i].id = i;
        pthread_create(&it[i], NULL, ingest_loop, &g[i]);
    }
    t0 = now_s();
    struct timespec ten = {10, 0};
    nanosleep(&ten, NULL);
    atomic_store(&querying, false);
    for (int i = 0; i < 4; i++)
        pthread_join(it[i], NULL);
    double span = now_s() - t0;
    pthread_join(qt, NULL);
    static double all[4 * 4096];
    int n = 0;
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < g[i].n; k++)
            all[n++] = g[i].lat[k];
    qsort(all, (size_t)n, sizeof all[0], cmp_double);
    printf("RESULT ingest_during_queries uploads=%d per_s=%.0f p50_ms=%.1f p99_ms=%.1f\n", n,
           n / span, n ? all[n / 2] * 1000 : 0, n ? all[n * 99 / 100] * 1000 : 0);
    pa_coll_store_close(st);
    return 0;
}
