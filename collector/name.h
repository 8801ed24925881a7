/* name.h: Pyroscope series names, `APP.cpu{k=v,k2=v2}`, as sent to /ingest, and the selectors
 * of the query API, `APP.cpu{k=v,k2!=v2,k3=~"re.*"}`.
 *
 * An ingested name is normalised into (app, labels) where labels is the canonical string
 * "k=v,k2=v2" with keys sorted and unique: two uploads of the same series always produce the
 * same bytes, so the store can key series by plain string equality. */
#ifndef PA_COLL_NAME_H
#define PA_COLL_NAME_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>

#include "../base/error.h"

#define PA_COLL_MAX_LABELS 30 /* Pyroscope's per-series limit */
#define PA_COLL_MAX_APP_LEN 256
#define PA_COLL_MAX_KEY_LEN 1024   /* Pyroscope's label name limit */
#define PA_COLL_MAX_VALUE_LEN 2048 /* Pyroscope's label value limit */

struct pa_coll_label {
    const char *key;
    const char *value;
};

struct pa_coll_series {
    char *buf; /* owned copy of the name; app and labels point into it */
    const char *app;
    size_t nlabels;
    struct pa_coll_label labels[PA_COLL_MAX_LABELS]; /* sorted by key */
};

/* Parses an ingest name. Returns 0, or 400 with a one-line reason in err. A label name may
 * start with a digit here, as in Pyroscope's name syntax; its validation refuses it later. */
int pa_coll_series_parse(struct pa_coll_series *s, const char *name, pa_error *err);
/* The canonical label string "k=v,k2=v2" (empty when there are no labels); malloc'ed. */
char *pa_coll_series_labels(const struct pa_coll_series *s);
void pa_coll_series_free(struct pa_coll_series *s);

enum pa_coll_match_op { PA_MATCH_EQ, PA_MATCH_NE, PA_MATCH_RE, PA_MATCH_NRE };

struct pa_coll_matcher {
    const char *key;
    const char *value;
    enum pa_coll_match_op op;
    regex_t re; /* compiled, anchored, for the regex operators */
};

struct pa_coll_selector {
    char *buf;
    const char *app;
    size_t nmatchers;
    struct pa_coll_matcher m[PA_COLL_MAX_LABELS];
};

/* Parses a query selector. Values may be bare or double-quoted. 0, or 400 with err. */
int pa_coll_selector_parse(struct pa_coll_selector *sel, const char *query, pa_error *err);
/* Does a canonical label string satisfy every matcher? A missing label reads as "". */
bool pa_coll_selector_matches(const struct pa_coll_selector *sel, const char *labels);
void pa_coll_selector_free(struct pa_coll_selector *sel);

bool pa_coll_valid_app(const char *app);

#endif
