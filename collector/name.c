/* name.c: parsing series names and selectors, the one parser of the grammar
 * APP{k=v,k2="v,2",...} / APP{k="v",k2=~"re",...} in the tree. The characters each piece may
 * hold, and how a value is quoted, are in profile/series.c beside the uploader's use of them. */
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

/* Any value is stored (quoted where it must be, series.c), as Pyroscope stores any. */
static int check_value(const char *k, const char *v, pa_error *err) {
    if (strlen(v) > PA_COLL_MAX_VALUE_LEN)
        return fail(err, "labels: the value of '%.64s' is longer than %d bytes", k,
                    PA_COLL_MAX_VALUE_LEN);
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
    /* A trailing comma ("{a=b,}") is tolerated: agents that build the set in a loop commonly
     * emit one. */
    char *p = body, *k = NULL, *v = NULL;
    while ((rc = pa_series_split(&p, &k, &v)) == 1) {
        if (s->nlabels == PA_COLL_MAX_LABELS)
            return fail(err, "labels: more than %d labels", PA_COLL_MAX_LABELS);
        if ((rc = check_key(k, true, err)) || (rc = check_value(k, v, err)))
            return rc;
        s->labels[s->nlabels++] = (struct pa_coll_label){k, v};
    }
    if (rc < 0)
        return fail(err, "labels: '%.64s' is not of the form key=value or key=\"quoted value\"",
                    k ? k : body);
    qsort(s->labels, s->nlabels, sizeof s->labels[0], cmp_label);
    for (size_t i = 1; i < s->nlabels; i++)
        if (strcmp(s->labels[i].key, s->labels[i - 1].key) == 0)
            return fail(err, "labels: '%.64s' appears twice", s->labels[i].key);
    return 0;
}

char *pa_coll_series_labels(const struct pa_coll_series *s) {
    pa_buf b = {0};
    pa_buf_puts(&b, "");
    for (size_t i = 0; i < s->nlabels; i++) {
        pa_buf_printf(&b, "%s%s=", i ? "," : "", s->labels[i].key);
        pa_series_put_value(&b, s->labels[i].value);
    }
    return b.data;
}

void pa_coll_series_free(struct pa_coll_series *s) {
    free(s->buf);
    memset(s, 0, sizeof *s);
}

/* Reads one selector value at p: bare up to ',' or the end, or "quoted" (series.c's escapes,
 * decoded in place). Returns the position after it, or NULL if a quote is open. */
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
    if ((p = pa_series_unquote(p, value)) == NULL)
        return NULL;
    p = skip_space(p);
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

bool pa_coll_selector_matches(const struct pa_coll_selector *sel, const char *labels) {
    if (sel->nmatchers == 0)
        return true;
    /* The label text split once into pairs (decoded in place in a copy). */
    char *text = strdup(labels), *p = text, *keys[PA_COLL_MAX_LABELS * 2],
         *vals[PA_COLL_MAX_LABELS * 2];
    if (text == NULL)
        abort();
    size_t n = 0;
    while (n < sizeof keys / sizeof keys[0] && pa_series_split(&p, &keys[n], &vals[n]) == 1)
        n++;
    bool all = true;
    for (size_t i = 0; all && i < sel->nmatchers; i++) {
        const struct pa_coll_matcher *m = &sel->m[i];
        const char *value = ""; /* a missing label reads as "" */
        for (size_t k = 0; k < n; k++)
            if (strcmp(keys[k], m->key) == 0) {
                value = vals[k];
                break;
            }
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
        all = ok;
    }
    free(text);
    return all;
}

void pa_coll_selector_free(struct pa_coll_selector *sel) {
    for (size_t i = 0; i < sel->nmatchers; i++)
        if (sel->m[i].op == PA_MATCH_RE || sel->m[i].op == PA_MATCH_NRE)
            regfree(&sel->m[i].re);
    free(sel->buf);
    memset(sel, 0, sizeof *sel);
}
