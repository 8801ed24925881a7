/* config.h: the agent's configuration, read once from the environment.
 *
 * A bad value never stops the program: one line on stderr names the variable, the value and
 * what is used instead. docs/configuration.md documents every variable. */
#ifndef PA_CONFIG_H
#define PA_CONFIG_H

enum pa_protocol { PA_PROTO_PUSH = 0, PA_PROTO_INGEST = 1, PA_PROTO_OTLP = 2 };

/* PYAGENT_DUMP: the `pyagent dump` listener. AUTO: served by the agent thread when there is
 * one (a program with threads, or uploading); ON: the agent thread starts for it in every
 * profiled process; OFF: none. */
enum pa_dump_want { PA_DUMP_AUTO = 0, PA_DUMP_ON = 1, PA_DUMP_OFF = 2 };

enum pa_mode { PA_MODE_CPU = 0, PA_MODE_WALL = 1, PA_MODE_GIL = 2 }; /* = enum pa_walk_mode */

struct pa_config {
    /* The numbers first and the long strings last, tags at the end: the agent reads its
     * configuration into a static that starts zeroed and writes only what is set, so a start
     * with a few variables set touches one or two of its seven pages. */
    int enabled;         /* PYAGENT_ENABLE */
    unsigned rate;       /* PYAGENT_RATE */
    int mode;            /* PYAGENT_MODE */
    unsigned interval_s; /* PYAGENT_UPLOAD_INTERVAL */
    unsigned max_depth;  /* PYAGENT_MAX_DEPTH */
    /* PYAGENT_LOCAL_SPAN_IDS: root spans whose span_id the local file keeps */
    unsigned local_span_ids;
    int log_level;        /* PYAGENT_LOG */
    unsigned fault_every; /* PYAGENT_FAULT_INJECT (fault-injection builds only) */
    int timer_want;       /* PYAGENT_TIMER: enum pa_timer_want (auto, perf, cpu) */
    int native;           /* PYAGENT_NATIVE */
    int native_unwind;    /* PYAGENT_NATIVE_UNWIND: 0 cached, 1 libunwind, 2 check (native.h) */
    int opcodes;          /* PYAGENT_OPCODES: each Python frame's instruction (3.11+) */
    unsigned bucket_ms;   /* PYAGENT_TIME_BUCKET_MS: time buckets' width, 0 = no time */
    int dump;             /* PYAGENT_DUMP: enum pa_dump_want */
    int async_tasks;      /* PYAGENT_ASYNC: every asyncio task's await chain (wall mode) */

    /* Uploads (docs/continuous.md). */
    int tag_host, tag_pid; /* PYAGENT_TAG_HOST, PYAGENT_TAG_PID */
    int upload_pprof;      /* PYAGENT_UPLOAD_FORMAT: 1 pprof (gzip), 0 folded */
    int protocol;          /* PYAGENT_PROTOCOL: enum pa_protocol */
    int tls_verify;        /* PYAGENT_TLS_VERIFY */
    unsigned connect_timeout_ms, upload_timeout_ms, exit_timeout_ms;
    unsigned spool_max_mb; /* PYAGENT_SPOOL_MAX_MB */
    /* PYAGENT_MAX_PROFILE_STACKS: the server's max_profile_stacktrace_samples (Pyroscope's
     * default 16000; a tenant may have another) */
    unsigned max_profile_stacks;

    char out_format[32];      /* PYAGENT_OUTPUT_FORMAT; "" = by PYAGENT_OUTPUT's extension */
    char output[4096];        /* PYAGENT_OUTPUT, absolute, %p not yet expanded; "" = none */
    char server[1024];        /* PYAGENT_SERVER / PYROSCOPE_SERVER_ADDRESS */
    char app_name[256];       /* PYAGENT_APP_NAME / PYROSCOPE_APPLICATION_NAME */
    char auth_token[512];     /* PYAGENT_AUTH_TOKEN: Authorization: Bearer */
    char basic_user[256];     /* PYAGENT_BASIC_AUTH_USER / PYROSCOPE_BASIC_AUTH_USER */
    char basic_password[256]; /* PYAGENT_BASIC_AUTH_PASSWORD / PYROSCOPE_BASIC_AUTH_PASSWORD */
    char tenant[256];         /* PYAGENT_TENANT_ID / PYROSCOPE_TENANT_ID: X-Scope-OrgID */
    char ca_file[1024];       /* PYAGENT_CA_FILE */
    char spool_dir[1024];     /* PYAGENT_SPOOL_DIR */
    char tags[16384];         /* PYAGENT_TAGS "k=v,k2=v2", validated when the name is built */
};

/* Fills cfg from the environment; warnings go to stderr. cfg must be all zero, as a static is
 * before its first use: only what is set is written. The agent reads its configuration once
 * per process into a static of 25 KiB, mostly empty strings, and zeroing it again faulted its
 * 7 pages in at every start (docs/benchmarks.md, "Start-up and exit"). */
void pa_config_read(struct pa_config *cfg);
/* The program's arguments, when the agent starts from the stub's constructor (which the C
 * library calls with them): pa_config_read then takes the default application name from them
 * rather than from /proc/self/cmdline. argv must outlive pa_config_read. */
void pa_config_set_args(int argc, char **argv);

/* Expands %p in pattern to pid, into out. */
void pa_config_output_path(const char *pattern, int pid, char *out, unsigned outlen);

#endif
