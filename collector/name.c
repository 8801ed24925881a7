/* name.c: parsing series names and selectors, the one parser of the grammar
 * APP{k=v,...} / APP{k="v",k2=~"re",...} in the tree. The characters each piece may hold are
 * Pyroscope's rules, kept beside the uploader's use of them in profile/series.c. */
#include "name.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile.h"

static int fail(pa_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pa_vfail(err, fmt, ap);
    va_end(ap);
    return 400;
}

bool pa_coll_valid_app(const char *app) {
    size_t n = strlen(app);
    if (n == 0 || n > PA_COLL_MAX_APP_LEN)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!pa_series_app_char(app[i]))
            return false;
    return true;
}

static char *skip_space(char *p) {
    while (*p == ' ')
        p++;
    return p;
}

static void trim_end(char *start, char *end) {
    while (end > start && end[-1] == ' ')
        *--end = '\0';
}

/* Splits "app{...}" in place: *app gets the name, *body the inside of the braces (or NULL). */
static int split_name(char *buf, char **app, char **body, pa_error *err) {
    char *brace = strchr(buf, '{');
    *body = NULL;
    if (brace) {
        size_t n = strlen(brace);
        if (brace[n - 1] != '}')
            return fail(err, "name: the label set must end with '}'");
        brace[n - 1] = '\0';
        *brace = '\0';
        *body = brace + 1;
    }
    *app = buf;
    trim_end(buf, buf + strlen(buf));
    if (**app == '\0')
        return fail(err, "name: the application name is empty");
    if (strlen(*app) > PA_COLL_MAX_APP_LEN)
        return fail(err, "name: the application name is longer than %d bytes", PA_COLL_MAX_APP_LEN);
    for (const char *p = *app; *p; p++)
        if (!pa_series_app_char(*p))
            return fail(err,
                        "name: character 0x%02x is not allowed in an application "
                        "name (allowed: A-Z a-z 0-9 _ . / -)",
                        (unsigned char)*p);
    return 0;
}

/* A label name: Pyroscope's characters; a digit first too when digit_first (a name's syntax
 * allows it, its validation then refuses it with a status of its path: see ingest.c). */
static int check_key(const char *k, bool digit_first, pa_error *err) {
    size_t n = strlen(k);
    if (n == 0)
        return fail(err, "labels: a label name is empty");
    if (n > PA_COLL_MAX_KEY_LEN)
        return fail(err, "labels: a label name is longer than %d bytes", PA_COLL_MAX_KEY_LEN);
    if (!digit_first && k[0] >= '0' && k[0] <= '9')
        return fail(err, "labels: label name '%.64s' starts with a digit", k);
    for (size_t i = 0; i < n; i++)
        if (!pa_series_label_char(k[i]))
            return fail(err,
                        "labels: character 0x%02x is not allowed in label name '%.64s' "
                        "(allowed: A-Z a-z 0-9 _ .)",
                        (unsigned char)k[i], k);
    return 0;
}

static int check_value(const char *k, const char *v, pa_error *err) {
    size_t n = strlen(v);
    if (n > PA_COLL_MAX_VALUE_LEN)
        return fail(err, "labels: the value of '%.64s' is longer than %d bytes", k,
                    PA_COLL_MAX_VALUE_LEN);
    for (size_t i = 0; i < n; i++)
        if (!pa_series_value_char(v[i]))
            return fail(err,
                        "labels: character 0x%02x is not allowed in the value of "
                        "'%.64s'",
                        (unsigned char)v[i], k);
    return 0;
}

static int cmp_label(const void *a, const void *b) {
    return strcmp(((const struct pa_coll_label *)a)->key, ((const struct pa_coll_label *)b)->key);
}

int pa_coll_series_parse(struct pa_coll_series *s, const char *name, pa_error *err) {
    memset(s, 0, sizeof *s);
    if (name == NULL || *name == '\0')
        return fail(err, "name: the 'name' parameter is missing (APP.cpu{k=v,...})");
    s->buf = strdup(name);
    if (s->buf == NULL)
        return fail(err, "out of memory");
    char *app, *body;
    int rc = split_name(s->buf, &app, &body, err);
    if (rc)
        return rc;
    s->app = app;
    if (body == NULL)
        return 0;
    char *p = skip_space(body);
    while (*p) {
        if (s->nlabels == PA_COLL_MAX_LABELS)
            return fail(err, "labels: more than %d labels", PA_COLL_MAX_LABELS);
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        char *eq = strchr(p, '=');
        if (eq == NULL)
            return fail(err, "labels: '%.64s' is not of the form key=value", p);
        *eq = '\0';
        trim_end(p, eq);
        char *v = skip_space(eq + 1);
        trim_end(v, v + strlen(v));
        if ((rc = check_key(p, true, err)) || (rc = check_value(p, v, err)))
            return rc;
        s->labels[s->nlabels++] = (struct pa_coll_label){p, v};
        if (comma == NULL)
            break;
        p = skip_space(comma + 1);
        /* A trailing comma ("{a=b,}") is tolerated: agents that build the set in a loop
         * commonly emit one. */
    }
    qsort(s->labels, s->nlabels, sizeof s->labels[0], cmp_label);
    for (size_t i = 1; i < s->nlabels; i++)
        if (strcmp(s->labels[i].key, s->labels[i - 1].key) == 0)
            return fail(err, "labels: '%.64s' appears twice", s->labels[i].key);
    return 0;
}

char *pa_coll_series_labels(const struct pa_coll_series *s) {
    size_t n = 1;
    for (size_t i = 0; i < s->nlabels; i++)
        n += strlen(s->labels[i].key) + strlen(s->labels[i].value) + 2;
    char *out = malloc(n), *p = out;
    if (out == NULL)
        return NULL;
    *p = '\0';
    for (size_t i = 0; i < s->nlabels; i++)
        p += sprintf(p, "%s%s=%s", i ? "," : "", s->labels[i].key, s->labels[i].value);
    return out;
}

void pa_coll_series_free(struct pa_coll_series *s) {
    free(s->buf);
    memset(s, 0, sizeof *s);
}

/* Reads one selector value at p: bare up to ',' or the end, or "quoted" with \" and \\
 * escapes (decoded in place). Returns the position after it, or NULL if a quote is open. */
static char *read_value(char *p, char **value) {
    if (*p != '"') {
        char *comma = strchr(p, ',');
        char *end = comma ? comma : p + strlen(p);
        *value = p;
        if (comma) {
            *comma = '\0';
            trim_end(p, comma);
            return comma + 1;
        }
        trim_end(p, end);
        return end;
    }
    char *w = ++p;
    *value = w;
    for (; *p && *p != '"'; p++) {
        if (*p == '\\' && p[1])
            p++;
        *w++ = *p;
    }
    if (*p != '"')
        return NULL;
    p = skip_space(p + 1);
    *w = '\0';
    if (*p == ',')
        return p + 1;
    return *p == '\0' ? p : NULL;
}

int pa_coll_selector_parse(struct pa_coll_selector *sel, const char *query, pa_error *err) {
    memset(sel, 0, sizeof *sel);
    if (query == NULL || *query == '\0')
        return fail(err, "query: the 'query' parameter is missing (APP.cpu{k=v,...})");
    sel->buf = strdup(query);
    if (sel->buf == NULL)
        return fail(err, "out of memory");
    char *app, *body;
    int rc = split_name(sel->buf, &app, &body, err);
    if (rc)
        return rc;
    sel->app = app;
    char *p = body ? skip_space(body) : "";
    while (*p) {
        if (sel->nmatchers == PA_COLL_MAX_LABELS)
            return fail(err, "query: more than %d matchers", PA_COLL_MAX_LABELS);
        struct pa_coll_matcher *m = &sel->m[sel->nmatchers];
        char *k = p;
        while (pa_series_label_char(*p))
            p++;
        char *kend = p;
        p = skip_space(p);
        if (p[0] == '=' && p[1] == '~')
            m->op = PA_MATCH_RE, p += 2;
        else if (p[0] == '!' && p[1] == '~')
            m->op = PA_MATCH_NRE, p += 2;
        else if (p[0] == '!' && p[1] == '=')
            m->op = PA_MATCH_NE, p += 2;
        else if (p[0] == '=')
            m->op = PA_MATCH_EQ, p += 1;
        else
            return fail(err, "query: expected =, !=, =~ or !~ after label name '%.*s'",
                        (int)(kend - k > 64 ? 64 : kend - k), k);
        *kend = '\0';
        if ((rc = check_key(k, false, err)))
            return rc;
        char *v;
        p = read_value(skip_space(p), &v);
        if (p == NULL)
            return fail(err, "query: unterminated quoted value for '%.64s'", k);
        m->key = k;
        m->value = v;
        if (m->op == PA_MATCH_RE || m->op == PA_MATCH_NRE) {
            /* Anchored like Prometheus/Pyroscope matchers: the whole value must match. */
            size_t n = strlen(v) + 5;
            char *anchored = malloc(n);
            if (anchored == NULL)
                return fail(err, "out of memory");
            snprintf(anchored, n, "^(%s)$", v);
            int bad = regcomp(&m->re, anchored, REG_EXTENDED | REG_NOSUB);
            free(anchored);
            if (bad)
                return fail(err, "query: invalid regular expression for '%.64s'", k);
        }
        sel->nmatchers++;
        p = skip_space(p);
    }
    return 0;
}

/* Finds key in a canonical label string; copies its value into buf. */
static const char *lookup(const char *labels, const char *key, char *buf, size_t buflen) {
    size_t klen = strlen(key);
    const char *p = labels;
    while (p && *p) {
        const char *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);
        if ((size_t)(end - p) > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
            size_t vlen = (size_t)(end - p) - klen - 1;
            if (vlen >= buflen)
                vlen = buflen - 1;
            memcpy(buf, p + klen + 1, vlen);
            buf[vlen] = '\0';
            return buf;
        }
        p = comma ? comma + 1 : NULL;
    }
    buf[0] = '\0';
    return buf;
}

bool pa_coll_selector_matches(const struct pa_coll_selector *sel, const char *labels) {
    char value[PA_COLL_MAX_VALUE_LEN + 1];
    for (size_t i = 0; i < sel->nmatchers; i++) {
        const struct pa_coll_matcher *m = &sel->m[i];
        lookup(labels, m->key, value, sizeof value);
        bool ok;
        switch (m->op) {
        case PA_MATCH_EQ:
            ok = strcmp(value, m->value) == 0;
            break;
        case PA_MATCH_NE:
            ok = strcmp(value, m->value) != 0;
            break;
        case PA_MATCH_RE:
            ok = regexec(&m->re, value, 0, NULL, 0) == 0;
            break;
        default:
            ok = regexec(&m->re, value, 0, NULL, 0) != 0;
            break;
        }
        if (!ok)
            return false;
    }
    return true;
}

void pa_coll_selector_free(struct pa_coll_selector *sel) {
    for (size_t i = 0; i < sel->nmatchers; i++)
        if (sel->m[i].op == PA_MATCH_RE || sel->m[i].op == PA_MATCH_NRE)
            regfree(&sel->m[i].re);
    free(sel->buf);
    memset(sel, 0, sizeof *sel);
}
