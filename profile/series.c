/* series.c: series names, APP{k=v,k2="v,2"}, in one place for the uploader that builds names
 * and the collector that parses them, its selectors and its stored label text
 * (collector/name.c). The characters are Pyroscope's: application names [A-Za-z0-9_./-],
 * label names [A-Za-z0-9_.]. A label value may hold anything (Pyroscope stores any UTF-8): it
 * is written bare when it reads back so, else double-quoted with \" \\ \n \r \t escapes, so a
 * label text always splits again into the same pairs and one set of labels has one text. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "profile.h"

bool pa_series_app_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '/' || c == '-';
}

bool pa_series_label_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.';
}

bool pa_series_value_char(char c) {
    unsigned char u = (unsigned char)c;
    return u >= 0x20 && u != 0x7f && c != ',' && c != '{' && c != '}' && c != '=' && c != '"';
}

/* Bare when every character is a value character and no space starts or ends it (a bare
 * value is read trimmed). Stored text written before quoting existed is all bare. */
static bool plain(const char *v) {
    size_t n = strlen(v);
    if (n && (v[0] == ' ' || v[n - 1] == ' '))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!pa_series_value_char(v[i]))
            return false;
    return true;
}

void pa_series_put_quoted(pa_buf *b, const char *v) {
    pa_buf_puts(b, "\"");
    for (const char *c = v; *c; c++) {
        const char *esc = *c == '"'    ? "\\\""
                          : *c == '\\' ? "\\\\"
                          : *c == '\n' ? "\\n"
                          : *c == '\r' ? "\\r"
                          : *c == '\t' ? "\\t"
                                       : NULL;
        if (esc)
            pa_buf_puts(b, esc);
        else
            pa_buf_append(b, c, 1);
    }
    pa_buf_puts(b, "\"");
}

void pa_series_put_value(pa_buf *b, const char *v) {
    if (plain(v))
        pa_buf_puts(b, v);
    else
        pa_series_put_quoted(b, v);
}

char *pa_series_unquote(char *p, char **value) {
    assert(*p == '"');
    char *w = ++p;
    *value = w;
    for (; *p && *p != '"'; p++) {
        if (*p == '\\' && p[1]) {
            p++;
            *w++ = *p == 'n' ? '\n' : *p == 'r' ? '\r' : *p == 't' ? '\t' : *p;
        } else {
            *w++ = *p;
        }
    }
    if (*p != '"')
        return NULL;
    *w = '\0';
    return p + 1;
}

/* Cuts the spaces that end [start, end). */
static void trim(char *start, char *end) {
    for (; end > start && end[-1] == ' '; end--)
        end[-1] = '\0';
}

int pa_series_split(char **pp, char **key, char **value) {
    char *p = *pp + strspn(*pp, " ");
    if (*p == '\0')
        return 0;
    *key = p;
    p += strcspn(p, "=,");
    if (*p != '=')
        return -1;
    *p = '\0';
    trim(*key, p);
    p += 1 + strspn(p + 1, " ");
    if (*p == '"') {
        char *after = pa_series_unquote(p, value);
        if (after == NULL)
            return -1;
        p = after + strspn(after, " ");
        if (*p != ',' && *p != '\0')
            return -1;
    } else {
        *value = p;
        p += strcspn(p, ",");
        trim(*value, p);
    }
    if (*p == ',')
        *p++ = '\0';
    *pp = p;
    return 1;
}

/* ---- the labels:TEXT frame (docs/formats.md) --------------------------------------------- */

static int cmp_pair(const void *a, const void *b) {
    return strcmp(((const pa_label_pair *)a)->name, ((const pa_label_pair *)b)->name);
}

size_t pa_series_labels_text(pa_buf *out, pa_label_pair *pairs, size_t n) {
    qsort(pairs, n, sizeof *pairs, cmp_pair);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (!pairs[i].value[0])
            continue;
        pa_buf_printf(out, "%s%s=", kept++ ? "," : "", pairs[i].name);
        pa_series_put_value(out, pairs[i].value);
    }
    return kept;
}
