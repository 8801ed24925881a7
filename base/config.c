/* config.c: environment variables -> struct pa_config (see config.h). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

/* The environment's PYAGENT_ and PYROSCOPE_ entries, gathered by one pass at the start of
 * pa_config_read: its 31 reads then look through a few entries, not each through the whole
 * environment (getenv: 42,000 instructions at every start). More entries than fit: getenv. */
extern char **environ;
enum { MAX_OURS = 64 };
static const char *ours[MAX_OURS];
static int n_ours = -1; /* -1: not gathered (getenv) */

static void gather_env(void) {
    n_ours = 0;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "PYAGENT_", 8) != 0 && strncmp(*e, "PYROSCOPE_", 10) != 0)
            continue;
        if (n_ours == MAX_OURS) {
            n_ours = -1;
            return;
        }
        ours[n_ours++] = *e;
    }
}

static const char *env(const char *name) {
    const char *v = NULL;
    if (n_ours < 0) {
        v = getenv(name);
    } else {
        size_t len = strlen(name);
        for (int i = 0; i < n_ours && !v; i++)
            if (strncmp(ours[i], name, len) == 0 && ours[i][len] == '=')
                v = ours[i] + len + 1;
    }
    return v && *v ? v : NULL;
}

/* An unsigned in [lo, hi]; anything else warns once and gives def. */
static unsigned env_uint(const char *name, unsigned lo, unsigned hi, unsigned def) {
    const char *v = env(name);
    if (!v)
        return def;
    char *end;
    errno = 0;
    unsigned long x = strtoul(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-' || x < lo || x > hi) {
        pa_log(PA_LOG_ERROR, "%s=\"%.64s\" is not a whole number from %u to %u; using %u", name, v,
               lo, hi, def);
        return def;
    }
    return (unsigned)x;
}

void pa_config_output_path(const char *pattern, int pid, char *out, unsigned outlen) {
    unsigned w = 0;
    for (const char *p = pattern; *p && w + 1 < outlen; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            int n = snprintf(out + w, outlen - w, "%d", pid);
            if (n < 0 || (unsigned)n >= outlen - w)
                break;
            w += (unsigned)n;
            p++;
        } else {
            out[w++] = *p;
        }
    }
    out[w] = 0;
}

static void set_output(struct pa_config *cfg, const char *v) {
    /* Absolute now: the program may chdir before we write. */
    if (v[0] == '/') {
        snprintf(cfg->output, sizeof cfg->output, "%s", v);
        return;
    }
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) {
        snprintf(cfg->output, sizeof cfg->output, "%s", v);
        return;
    }
    size_t need = strlen(cwd) + 1 + strlen(v) + 1;
    if (need > sizeof cfg->output) {
        pa_log(PA_LOG_ERROR, "PYAGENT_OUTPUT=\"%.64s...\" is too long; using pyagent.%%p.folded",
               v);
        v = "pyagent.%p.folded";
        cwd[sizeof cfg->output - 32] = 0; /* a cwd this long cannot hold a file name anyway */
    }
    strcpy(cfg->output, cwd);
    strcat(cfg->output, "/");
    strcat(cfg->output, v);
}

static int env_bool(const char *name, int def) {
    const char *v = env(name);
    if (!v)
        return def;
    if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "off") || !strcmp(v, "no"))
        return 0;
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "on") || !strcmp(v, "yes"))
        return 1;
    pa_log(PA_LOG_ERROR, "%s=\"%.64s\" is not 0 or 1; using %d", name, v, def);
    return def;
}

/* The first of the variables that is set, copied into out. */
static void env_str(char *out, size_t len, const char *name, const char *fallback) {
    const char *v = env(name);
    if (!v && fallback)
        v = env(fallback);
    if (!v)
        return;
    if (strlen(v) >= len) {
        pa_log(PA_LOG_ERROR, "%s is longer than %zu bytes; ignored",
               v == env(name) ? name : fallback, len - 1);
        return;
    }
    strcpy(out, v);
}

/* The program's arguments as the C library gave them to the stub's constructor
 * (pa_config_set_args); NULL when the agent started later (a libpython loaded by dlopen). */
static int arg_count;
static char **arg_vector;

void pa_config_set_args(int argc, char **argv) {
    arg_count = argc;
    arg_vector = argv;
}

/* The script's name from the arguments (Python's command line, up to the script): "python3
 * app.py" -> "app", "python -m pkg.mod" -> "pkg.mod", "python -c ...", "python -" or the
 * bare REPL -> "python". Options may be grouped ("-bB") and the values of -W and -X follow
 * them or the next argument ("-Xutf8", "-X utf8"). */
static void app_name_from_args(char *out, size_t len, int n, char *const *args) {
    snprintf(out, len, "python");
    const char *script = NULL, *module = NULL;
    for (int i = 1; i < n && !script && !module; i++) {
        const char *a = args[i];
        if (a[0] != '-' || !a[1]) {
            if (a[0] != '-')
                script = a;
            break; /* "-": the program comes from stdin */
        }
        if (a[1] == '-') {
            if (!strcmp(a, "--check-hash-based-pycs"))
                i++; /* its mode */
            continue;
        }
        for (const char *f = a + 1; *f; f++) {
            if (*f == 'c')
                return;
            if (*f == 'm' || *f == 'W' || *f == 'X') {
                const char *value = f[1] ? f + 1 : i + 1 < n ? args[++i] : NULL;
                if (*f == 'm')
                    module = value;
                break;
            }
        }
    }
    const char *name = module ? module : script;
    if (!name || !*name)
        return;
    const char *slash = module ? NULL : strrchr(name, '/');
    snprintf(out, len, "%s", slash ? slash + 1 : name);
    size_t l = strlen(out);
    if (!module && l > 3 && !strcmp(out + l - 3, ".py"))
        out[l - 3] = 0;
}

/* The script's name from the arguments the stub was given, else from /proc/self/cmdline (an
 * open of /proc costs 20-90 us at start on the VMs we measured). */
static void default_app_name(char *out, size_t len) {
    if (arg_vector && arg_count > 0) {
        app_name_from_args(out, len, arg_count, arg_vector);
        return;
    }
    snprintf(out, len, "python");
    char buf[4096];
    char *args[64];
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = 0;
    int count = 0;
    for (char *a = buf; a < buf + n && count < 64; a += strlen(a) + 1)
        args[count++] = a;
    app_name_from_args(out, len, count, args);
}

static void read_upload_config(struct pa_config *cfg) {
    env_str(cfg->tags, sizeof cfg->tags, "PYAGENT_TAGS", NULL);
    cfg->tag_host = env_bool("PYAGENT_TAG_HOST", 1);
    cfg->tag_pid = env_bool("PYAGENT_TAG_PID", 1);
    cfg->upload_pprof = 1;
    const char *v = env("PYAGENT_UPLOAD_FORMAT");
    if (v && !strcmp(v, "folded"))
        cfg->upload_pprof = 0;
    else if (v && strcmp(v, "pprof"))
        pa_log(PA_LOG_ERROR, "PYAGENT_UPLOAD_FORMAT=\"%.64s\" is not pprof or folded; using pprof",
               v);
    /* Push by default, except with PYAGENT_UPLOAD_FORMAT=folded, which only /ingest has. */
    cfg->protocol = cfg->upload_pprof ? PA_PROTO_PUSH : PA_PROTO_INGEST;
    v = env("PYAGENT_PROTOCOL");
    if (v && (!strcmp(v, "push") || !strcmp(v, "ingest") || !strcmp(v, "otlp"))) {
        cfg->protocol = v[0] == 'p' ? PA_PROTO_PUSH : v[0] == 'i' ? PA_PROTO_INGEST : PA_PROTO_OTLP;
        if (cfg->protocol != PA_PROTO_INGEST && !cfg->upload_pprof)
            pa_log(PA_LOG_WARN,
                   "PYAGENT_UPLOAD_FORMAT=folded: only PYAGENT_PROTOCOL=ingest sends folded "
                   "text; %s sends pprof",
                   v);
    } else if (v) {
        pa_log(PA_LOG_ERROR, "PYAGENT_PROTOCOL=\"%.64s\" is not push, ingest or otlp; using push",
               v);
        cfg->protocol = PA_PROTO_PUSH;
    }
    if (cfg->protocol != PA_PROTO_INGEST)
        cfg->upload_pprof = 1;
    env_str(cfg->auth_token, sizeof cfg->auth_token, "PYAGENT_AUTH_TOKEN", NULL);
    env_str(cfg->basic_user, sizeof cfg->basic_user, "PYAGENT_BASIC_AUTH_USER",
            "PYROSCOPE_BASIC_AUTH_USER");
    env_str(cfg->basic_password, sizeof cfg->basic_password, "PYAGENT_BASIC_AUTH_PASSWORD",
            "PYROSCOPE_BASIC_AUTH_PASSWORD");
    env_str(cfg->tenant, sizeof cfg->tenant, "PYAGENT_TENANT_ID", "PYROSCOPE_TENANT_ID");
    env_str(cfg->ca_file, sizeof cfg->ca_file, "PYAGENT_CA_FILE", NULL);
    cfg->tls_verify = env_bool("PYAGENT_TLS_VERIFY", 1);
    cfg->connect_timeout_ms = env_uint("PYAGENT_CONNECT_TIMEOUT_MS", 10, 600000, 3000);
    cfg->upload_timeout_ms = env_uint("PYAGENT_UPLOAD_TIMEOUT_MS", 10, 600000, 10000);
    cfg->exit_timeout_ms = env_uint("PYAGENT_EXIT_TIMEOUT_MS", 0, 600000, 1000);
    cfg->spool_max_mb = env_uint("PYAGENT_SPOOL_MAX_MB", 1, 1000000, 64);
    cfg->max_profile_stacks = env_uint("PYAGENT_MAX_PROFILE_STACKS", 1, 100000000, 16000);
    env_str(cfg->spool_dir, sizeof cfg->spool_dir, "PYAGENT_SPOOL_DIR", NULL);
}

void pa_config_read(struct pa_config *cfg) {
    gather_env();
    const char *v = env("PYAGENT_LOG");
    pa_log_level = PA_LOG_WARN;
    if (v) {
        if (!strcmp(v, "error"))
            pa_log_level = PA_LOG_ERROR;
        else if (!strcmp(v, "warn"))
            pa_log_level = PA_LOG_WARN;
        else if (!strcmp(v, "info"))
            pa_log_level = PA_LOG_INFO;
        else if (!strcmp(v, "debug"))
            pa_log_level = PA_LOG_DEBUG;
        else
            pa_log(PA_LOG_ERROR,
                   "PYAGENT_LOG=\"%.64s\" is not error, warn, info or debug; using warn", v);
    }
    cfg->log_level = pa_log_level;

    cfg->enabled = env_bool("PYAGENT_ENABLE", 1);

    cfg->rate = env_uint("PYAGENT_RATE", 1, 10000, 100);
    cfg->interval_s = env_uint("PYAGENT_UPLOAD_INTERVAL", 1, 3600, 10);
    cfg->max_depth = env_uint("PYAGENT_MAX_DEPTH", 2, 512, 256);
    cfg->local_span_ids = env_uint("PYAGENT_LOCAL_SPAN_IDS", 0, 10000000, 10000);
#ifdef PYAGENT_FAULT_INJECTION
    cfg->fault_every = env_uint("PYAGENT_FAULT_INJECT", 0, 1000000, 0);
#endif

    cfg->native = env_bool("PYAGENT_NATIVE", 0);
    cfg->opcodes = env_bool("PYAGENT_OPCODES", 0);
    /* Time buckets (docs/formats.md, "Time"): 20 ms is FlameScope's 50 rows per second. */
    cfg->bucket_ms = env_uint("PYAGENT_TIME_BUCKET_MS", 0, 3600000, 20);
    cfg->timer_want = 0; /* auto: perf events where allowed, else CPU timers */
    v = env("PYAGENT_TIMER");
    if (v) {
        if (!strcmp(v, "perf"))
            cfg->timer_want = 1;
        else if (!strcmp(v, "cpu"))
            cfg->timer_want = 2;
        else if (strcmp(v, "auto"))
            pa_log(PA_LOG_ERROR, "PYAGENT_TIMER=\"%.64s\" is not auto, perf or cpu; using auto", v);
    }

    cfg->native_unwind = 0;
    v = env("PYAGENT_NATIVE_UNWIND");
    if (v) {
        if (!strcmp(v, "libunwind"))
            cfg->native_unwind = 1;
        else if (!strcmp(v, "check"))
            cfg->native_unwind = 2;
        else if (strcmp(v, "cached"))
            pa_log(
                PA_LOG_ERROR,
                "PYAGENT_NATIVE_UNWIND=\"%.64s\" is not cached, libunwind or check; using cached",
                v);
    }

    cfg->dump = PA_DUMP_AUTO;
    v = env("PYAGENT_DUMP");
    if (v) {
        if (!strcmp(v, "1") || !strcmp(v, "on"))
            cfg->dump = PA_DUMP_ON;
        else if (!strcmp(v, "0") || !strcmp(v, "off"))
            cfg->dump = PA_DUMP_OFF;
        else if (strcmp(v, "auto"))
            pa_log(PA_LOG_ERROR, "PYAGENT_DUMP=\"%.64s\" is not auto, 1 or 0; using auto", v);
    }

    cfg->mode = PA_MODE_CPU;
    v = env("PYAGENT_MODE");
    if (v) {
        if (!strcmp(v, "wall"))
            cfg->mode = PA_MODE_WALL;
        else if (!strcmp(v, "gil"))
            cfg->mode = PA_MODE_GIL;
        else if (strcmp(v, "cpu"))
            pa_log(PA_LOG_ERROR, "PYAGENT_MODE=\"%.64s\" is not cpu, wall or gil; using cpu", v);
    }
    cfg->async_tasks = env_bool("PYAGENT_ASYNC", 0);
    if (cfg->async_tasks && cfg->mode != PA_MODE_WALL) {
        pa_log(PA_LOG_ERROR, "PYAGENT_ASYNC=1 samples waiting tasks in wall mode only "
                             "(PYAGENT_MODE=wall); using 0");
        cfg->async_tasks = 0;
    }

    v = env("PYAGENT_SERVER");
    if (!v)
        v = env("PYROSCOPE_SERVER_ADDRESS");
    if (v)
        snprintf(cfg->server, sizeof cfg->server, "%s", v);
    v = env("PYAGENT_APP_NAME");
    if (!v)
        v = env("PYROSCOPE_APPLICATION_NAME");
    if (v)
        snprintf(cfg->app_name, sizeof cfg->app_name, "%s", v);
    else
        default_app_name(cfg->app_name, sizeof cfg->app_name);

    read_upload_config(cfg);

    env_str(cfg->out_format, sizeof cfg->out_format, "PYAGENT_OUTPUT_FORMAT", NULL);
    v = env("PYAGENT_OUTPUT");
    if (!v && !cfg->server[0])
        v = "pyagent.%p.folded";
    if (v) {
        set_output(cfg, v);
        /* The first profiled process decides where profiles go, in the directory it started
         * in (the one the user chose): its Python children inherit the absolute path, so a
         * helper run in a scratch directory never leaves a profile there. */
        if (strcmp(v, cfg->output) != 0)
            setenv("PYAGENT_OUTPUT", cfg->output, 1);
    }
    n_ours = -1; /* the environment may change from here on */
}
