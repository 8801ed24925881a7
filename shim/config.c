/* config.c: environment variables -> struct pa_config (see config.h). */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

static const char *env(const char *name) {
    const char *v = getenv(name);
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

void pa_config_read(struct pa_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
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

    cfg->enabled = 1;
    v = env("PYAGENT_ENABLE");
    if (v) {
        if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "off") || !strcmp(v, "no"))
            cfg->enabled = 0;
        else if (strcmp(v, "1") && strcmp(v, "true") && strcmp(v, "on") && strcmp(v, "yes"))
            pa_log(PA_LOG_ERROR, "PYAGENT_ENABLE=\"%.64s\" is not 0 or 1; using 1", v);
    }

    cfg->rate = env_uint("PYAGENT_RATE", 1, 10000, 100);
    cfg->interval_s = env_uint("PYAGENT_UPLOAD_INTERVAL", 1, 3600, 10);
    cfg->max_depth = env_uint("PYAGENT_MAX_DEPTH", 2, 512, 256);
    cfg->fault_every = env_uint("PYAGENT_FAULT_INJECT", 0, 1000000, 0);

    cfg->mode = PA_MODE_CPU;
    v = env("PYAGENT_MODE");
    if (v && strcmp(v, "cpu") != 0)
        pa_log(PA_LOG_ERROR, "PYAGENT_MODE=\"%.64s\" is not supported (supported: cpu); using cpu",
               v);

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

    v = env("PYAGENT_OUTPUT");
    if (v)
        set_output(cfg, v);
    else if (!cfg->server[0])
        set_output(cfg, "pyagent.%p.folded");
}
