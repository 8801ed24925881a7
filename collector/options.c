/* options.c: command-line parsing. Every value is validated here, with a message naming the
 * option, so that the server itself never starts half-configured. */
#include "options.h"

#include <getopt.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "units.h"

const char pa_coll_usage[] =
    "usage: pyagent-collector --db FILE [options]\n"
    "  --listen ADDR:PORT       address to serve on (default 127.0.0.1:4040; port 0 picks one)\n"
    "  --db FILE                SQLite database (created if missing)\n"
    "  --retention DURATION     delete profiles older than this (default 7d; 0 keeps all)\n"
    "  --retention-interval DURATION  time between retention passes (default retention/20,\n"
    "                           at most 1m)\n"
    "  --max-body BYTES         largest request body accepted (default 16M)\n"
    "  --max-decompressed BYTES largest body after gunzip (default 256M)\n"
    "  --max-decompressed-total BYTES  memory for gunzip shared by all uploads in flight\n"
    "                           (default: --max-decompressed); past it 503 + Retry-After\n"
    "  --token TOKEN            require 'Authorization: Bearer TOKEN' (or Basic, password TOKEN)\n"
    "  --token-file FILE        the same, with the token read from FILE (first line)\n"
    "  --threads N              HTTP threads: ingest and /healthz (default 4 per CPU)\n"
    "  --query-threads N        threads that run queries, at low priority (default 2)\n"
    "  --max-queries N          queries running or queued at once (default 16); past it 503\n"
    "  --max-queries-per-client N  of which from one client address (default 4)\n"
    "  --query-timeout DURATION time budget of one query (default 30s); past it 503\n"
    "  --max-connections N      open connections (default 1024)\n"
    "  --max-connections-per-client N  open connections from one address (default 64)\n"
    "  --header-timeout DURATION  a request's headers must arrive within this (default 10s)\n"
    "  --body-timeout DURATION  its body, and then its answer, within this (default 60s)\n"
    "  --sync full|normal       fsync every commit (full, default: survives power loss) or\n"
    "                           not (normal: survives a collector crash, not a machine crash)\n"
    "  --shutdown-grace DURATION  how long SIGTERM waits for requests in flight (default 10s)\n"
    "  --source-root OLD=NEW    heatmaps read a source file under OLD from under NEW; without\n"
    "                           it no source file is ever read\n"
    "  --reject-older-than DURATION  refuse a profile taken this long ago or earlier, as\n"
    "                           Grafana Pyroscope does (default 1h, its reject_older_than;\n"
    "                           0 keeps every profile, however old)\n"
    "  --reject-newer-than DURATION  refuse a profile this far in the future or further\n"
    "                           (default 10m, Pyroscope's reject_newer_than; 0: none)\n"
    "  --folded-dialects        /ingest folded text in any dialect pyagent reads (its '#'\n"
    "                           header and timeline, Austin's, py-spy's), a name's unknown\n"
    "                           type suffix a cpu series; without it, Pyroscope's rules:\n"
    "                           flamegraph.pl lines only (422), types cpu, itimer, wall (400)\n"
    "  --help, --version\n"
    "Environment: PYAGENT_COLLECTOR_TOKEN is used when neither --token nor --token-file is "
    "given.\n";

static int usage_error(pa_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pa_vfail(err, fmt, ap);
    va_end(ap);
    return 2;
}

static char *read_token_file(const char *path, pa_error *err) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        usage_error(err, "--token-file: cannot open %s", path);
        return NULL;
    }
    char line[1024];
    char *tok = NULL;
    if (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (*line)
            tok = strdup(line);
    }
    fclose(f);
    if (tok == NULL)
        usage_error(err, "--token-file: %s holds no token on its first line", path);
    return tok;
}

int pa_coll_options_parse(int argc, char **argv, struct pa_coll_options *o, pa_error *err) {
    enum {
        O_LISTEN = 1000,
        O_DB,
        O_RETENTION,
        O_RETENTION_INTERVAL,
        O_MAX_BODY,
        O_MAX_DECOMP,
        O_MAX_DECOMP_TOTAL,
        O_TOKEN,
        O_TOKEN_FILE,
        O_THREADS,
        O_QUERY_THREADS,
        O_MAX_QUERIES,
        O_MAX_QUERIES_CLIENT,
        O_MAX_CONNS,
        O_MAX_CONNS_CLIENT,
        O_QUERY_TIMEOUT,
        O_HEADER_TIMEOUT,
        O_BODY_TIMEOUT,
        O_SYNC,
        O_GRACE,
        O_SOURCE_ROOT,
        O_REJECT_OLDER,
        O_REJECT_NEWER,
        O_FOLDED_DIALECTS,
        O_HELP,
        O_VERSION
    };
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, O_LISTEN},
        {"db", required_argument, NULL, O_DB},
        {"retention", required_argument, NULL, O_RETENTION},
        {"retention-interval", required_argument, NULL, O_RETENTION_INTERVAL},
        {"max-body", required_argument, NULL, O_MAX_BODY},
        {"max-decompressed", required_argument, NULL, O_MAX_DECOMP},
        {"max-decompressed-total", required_argument, NULL, O_MAX_DECOMP_TOTAL},
        {"token", required_argument, NULL, O_TOKEN},
        {"token-file", required_argument, NULL, O_TOKEN_FILE},
        {"threads", required_argument, NULL, O_THREADS},
        {"query-threads", required_argument, NULL, O_QUERY_THREADS},
        {"max-queries", required_argument, NULL, O_MAX_QUERIES},
        {"max-queries-per-client", required_argument, NULL, O_MAX_QUERIES_CLIENT},
        {"max-connections", required_argument, NULL, O_MAX_CONNS},
        {"max-connections-per-client", required_argument, NULL, O_MAX_CONNS_CLIENT},
        {"query-timeout", required_argument, NULL, O_QUERY_TIMEOUT},
        {"header-timeout", required_argument, NULL, O_HEADER_TIMEOUT},
        {"body-timeout", required_argument, NULL, O_BODY_TIMEOUT},
        {"sync", required_argument, NULL, O_SYNC},
        {"shutdown-grace", required_argument, NULL, O_GRACE},
        {"source-root", required_argument, NULL, O_SOURCE_ROOT},
        {"reject-older-than", required_argument, NULL, O_REJECT_OLDER},
        {"reject-newer-than", required_argument, NULL, O_REJECT_NEWER},
        {"folded-dialects", no_argument, NULL, O_FOLDED_DIALECTS},
        {"help", no_argument, NULL, O_HELP},
        {"version", no_argument, NULL, O_VERSION},
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    o->listen = "127.0.0.1:4040";
    o->retention = 7 * 86400;
    o->max_body = 16u << 20;
    o->max_decompressed = 256u << 20;
    /* An HTTP thread decodes an upload and then waits for the group commit that stores it
     * (fsync included), and libmicrohttpd binds each connection to one thread when it
     * accepts it: with 4 threads on 2 CPUs, 50 kept-alive connections left the CPUs 15%
     * idle (docs/benchmarks.md, "Where an upload's CPU goes"). */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = cpus < 1 ? 4 : cpus > 64 ? 256 : (unsigned)(4 * cpus);
    o->query_threads = 2;
    o->max_queries = 16;
    o->max_queries_per_client = 4;
    o->max_connections = 1024;
    o->max_connections_per_client = 64;
    o->query_timeout_ms = 30000;
    o->header_timeout_ms = 10000;
    o->body_timeout_ms = 60000;
    o->sync = PA_SYNC_FULL;
    o->grace_ms = 10000;
    o->reject_older_than = 3600; /* Grafana Pyroscope's defaults (pkg/validation/limits.go) */
    o->reject_newer_than = 600;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int64_t d;
        uint64_t n;
        switch (c) {
        case O_LISTEN:
            o->listen = optarg;
            break;
        case O_DB:
            o->db = optarg;
            break;
        case O_RETENTION:
            if (pa_coll_parse_duration(optarg, &o->retention) != 0)
                return usage_error(err, "--retention: '%s' is not a duration (e.g. 7d, 12h, 0)",
                                   optarg);
            break;
        case O_RETENTION_INTERVAL:
            if (pa_coll_parse_duration(optarg, &d) != 0 || d <= 0)
                return usage_error(err, "--retention-interval: '%s' is not a positive duration",
                                   optarg);
            o->retention_interval = d;
            break;
        case O_MAX_BODY:
        case O_MAX_DECOMP:
        case O_MAX_DECOMP_TOTAL:
            if (pa_coll_parse_size(optarg, &n) != 0 || n < 1024 || n > (1ull << 32))
                return usage_error(err, "%s: '%s' is not a size from 1K to 4G (e.g. 16M)",
                                   c == O_MAX_BODY     ? "--max-body"
                                   : c == O_MAX_DECOMP ? "--max-decompressed"
                                                       : "--max-decompressed-total",
                                   optarg);
            *(c == O_MAX_BODY     ? &o->max_body
              : c == O_MAX_DECOMP ? &o->max_decompressed
                                  : &o->max_decompressed_total) = n;
            break;
        case O_TOKEN:
            free(o->token);
            if (*optarg == '\0')
                return usage_error(err, "--token: the token is empty");
            o->token = strdup(optarg);
            break;
        case O_TOKEN_FILE:
            free(o->token);
            if ((o->token = read_token_file(optarg, err)) == NULL)
                return 2;
            break;
        case O_THREADS:
        case O_QUERY_THREADS:
        case O_MAX_QUERIES:
        case O_MAX_QUERIES_CLIENT:
        case O_MAX_CONNS:
        case O_MAX_CONNS_CLIENT: {
            static const struct {
                int opt;
                const char *name;
                long max;
                size_t field;
            } counts[] = {
                {O_THREADS, "--threads", 256, offsetof(struct pa_coll_options, threads)},
                {O_QUERY_THREADS, "--query-threads", 64,
                 offsetof(struct pa_coll_options, query_threads)},
                {O_MAX_QUERIES, "--max-queries", 4096,
                 offsetof(struct pa_coll_options, max_queries)},
                {O_MAX_QUERIES_CLIENT, "--max-queries-per-client", 4096,
                 offsetof(struct pa_coll_options, max_queries_per_client)},
                {O_MAX_CONNS, "--max-connections", 65536,
                 offsetof(struct pa_coll_options, max_connections)},
                {O_MAX_CONNS_CLIENT, "--max-connections-per-client", 65536,
                 offsetof(struct pa_coll_options, max_connections_per_client)},
            };
            size_t k = 0;
            while (counts[k].opt != c)
                k++;
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end != '\0' || v < 1 || v > counts[k].max)
                return usage_error(err, "%s: '%s' is not a number from 1 to %ld", counts[k].name,
                                   optarg, counts[k].max);
            *(unsigned *)((char *)o + counts[k].field) = (unsigned)v;
            break;
        }
        case O_QUERY_TIMEOUT:
        case O_HEADER_TIMEOUT:
        case O_BODY_TIMEOUT: {
            const char *name = c == O_QUERY_TIMEOUT    ? "--query-timeout"
                               : c == O_HEADER_TIMEOUT ? "--header-timeout"
                                                       : "--body-timeout";
            if (pa_coll_parse_duration(optarg, &d) != 0 || d < 1 || d > 3600)
                return usage_error(err, "%s: '%s' is not a duration from 1s to 1h", name, optarg);
            *(c == O_QUERY_TIMEOUT    ? &o->query_timeout_ms
              : c == O_HEADER_TIMEOUT ? &o->header_timeout_ms
                                      : &o->body_timeout_ms) = (unsigned)d * 1000;
            break;
        }
        case O_SYNC:
            if (strcmp(optarg, "full") == 0)
                o->sync = PA_SYNC_FULL;
            else if (strcmp(optarg, "normal") == 0)
                o->sync = PA_SYNC_NORMAL;
            else
                return usage_error(err, "--sync: '%s' is not full or normal", optarg);
            break;
        case O_GRACE:
            if (pa_coll_parse_duration(optarg, &d) != 0 || d > 3600)
                return usage_error(err, "--shutdown-grace: '%s' is not a duration up to 1h",
                                   optarg);
            o->grace_ms = (unsigned)d * 1000;
            break;
        case O_SOURCE_ROOT: {
            const char *eq = strchr(optarg, '=');
            if (eq == NULL || eq == optarg || eq[1] != '/' || optarg[0] != '/')
                return usage_error(err, "--source-root: '%s' is not OLD=NEW with absolute paths",
                                   optarg);
            free(o->source_from);
            free(o->source_to);
            o->source_from = strndup(optarg, (size_t)(eq - optarg));
            o->source_to = strdup(eq + 1);
            break;
        }
        case O_REJECT_OLDER:
        case O_REJECT_NEWER:
            if (pa_coll_parse_duration(optarg, &d) != 0)
                return usage_error(
                    err, "%s: '%s' is not a duration (e.g. 1h, 10m, 0)",
                    c == O_REJECT_OLDER ? "--reject-older-than" : "--reject-newer-than", optarg);
            *(c == O_REJECT_OLDER ? &o->reject_older_than : &o->reject_newer_than) = d;
            break;
        case O_FOLDED_DIALECTS:
            o->folded_dialects = 1;
            break;
        case O_HELP:
            o->help = 1;
            return 0;
        case O_VERSION:
            o->version = 1;
            return 0;
        default:
            if (optopt)
                return usage_error(err, "option needs a value or is unknown: %s", argv[optind - 1]);
            return usage_error(err, "unknown option: %s", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error(err, "unexpected argument: %s", argv[optind]);
    if (o->db == NULL || *o->db == '\0')
        return usage_error(err, "--db FILE is required");
    if (o->max_decompressed < o->max_body)
        o->max_decompressed = o->max_body;
    if (o->max_decompressed_total == 0)
        o->max_decompressed_total = o->max_decompressed;
    if (o->token == NULL) {
        const char *env = getenv("PYAGENT_COLLECTOR_TOKEN");
        if (env && *env)
            o->token = strdup(env);
    }
    return 0;
}

void pa_coll_options_free(struct pa_coll_options *o) {
    free(o->token);
    free(o->source_from);
    free(o->source_to);
    o->token = o->source_from = o->source_to = NULL;
}
