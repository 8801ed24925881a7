/* labels.c: label sets interned for the program, and the handler's read of the current one
 * (see labels.h).
 *
 * SIGNAL-HANDLER SIDE for pa_labels_of (and what it calls): reads of the sampled thread's
 * context under the walk's fault guard, and of arrays filled before they are published,
 * nothing else. The rest
 * runs in normal context, called by the module with the GIL held, or by the agent thread.
 *
 * Why the handler reads the ContextVar itself: a per-thread slot set on `with` would stay with
 * the thread when asyncio switches tasks, and a map from context objects to label sets would
 * go stale when a context is freed and another takes its address. The variable's value in the
 * current context is exactly what ContextVar.get() would return, with copy_context(), task
 * creation and Context.run() all behaving as contextvars say, and it costs a few dependent
 * reads (one bitmap node for a context of fewer than 17 variables). */
#include "labels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/bss.h"
#include "../profile/profile.h"
#include "codecache.h"
#include "guard.h"

/* A label set's value in the ContextVar: a bytes object of these 4 bytes and the id. */
static const char MAGIC[4] = {'p', 'y', 'a', 'L'};

/* The interned sets: texts[id - 1] and the pairs they were made from, published by a release
 * store of n_sets; written under lock, read by the agent thread without it. */
static const char *texts[PA_LABELS_MAX_SETS] PA_LARGE_BSS(label_texts);
static char *pairs_of[PA_LABELS_MAX_SETS] PA_LARGE_BSS(label_pairs);
static size_t pairs_len[PA_LABELS_MAX_SETS] PA_LARGE_BSS(label_pairs_len);
static _Atomic uint32_t n_sets;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* The variable and the types its lookup checks, published by the release store of var. */
static _Atomic uintptr_t var;
static uint32_t var_hash32;

/* The root span's variable (pyagent's OpenTelemetry bridge), published by the release store
 * of span_var after var; and the interned span names, published as the sets are. */
static const char SPAN_MAGIC[4] = {'p', 'y', 'a', 'S'};
static _Atomic uintptr_t span_var;
static uint32_t span_hash32;
static char *span_names[PA_SPAN_MAX_NAMES] PA_LARGE_BSS(span_names);
static size_t span_name_len[PA_SPAN_MAX_NAMES] PA_LARGE_BSS(span_name_len);
static _Atomic uint32_t n_span_names;
static _Atomic uint64_t span_names_refused;
static uintptr_t context_type, hamt_type, bitmap_type, array_type;

/* ---- normal context ------------------------------------------------------------------------ */

static int name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (c >= '0' && c <= '9') ||
           c == '.';
}

/* Is name a label name the program may set, value a value it may give? -1 with a message that
 * names the label. python/pyagent.py makes the same checks, with or without the agent. */
static int check_pair(const char *name, const char *value, pa_error *err) {
    size_t n = strlen(name), v = strlen(value);
    if (n == 0 || n > PA_LABELS_MAX_NAME)
        return pa_fail(err, "label name '%.80s': must be 1 to %d characters", name,
                       PA_LABELS_MAX_NAME);
    for (size_t i = 0; i < n; i++)
        if (!name_char(name[i]) || (i == 0 && name[i] >= '0' && name[i] <= '9'))
            return pa_fail(err,
                           "label name '%.80s': only letters, digits, '_' and '.', not first a "
                           "digit",
                           name);
    /* Names the servers give meaning to: Pyroscope drops names that start with "__" and sets
     * service_name and pyroscope_spy itself; span_id and span_name are the span bridge's. */
    if (strncmp(name, "__", 2) == 0 || strcmp(name, "service_name") == 0 ||
        strcmp(name, "pyroscope_spy") == 0 || strcmp(name, "span_id") == 0 ||
        strcmp(name, "span_name") == 0)
        return pa_fail(err, "label name '%s' is reserved", name);
    if (v == 0 || v > PA_LABELS_MAX_VALUE)
        return pa_fail(err, "label '%s': the value must be 1 to %d bytes of UTF-8", name,
                       PA_LABELS_MAX_VALUE);
    if (!pa_utf8_valid(value, v))
        return pa_fail(err, "label '%s': the value is not valid UTF-8", name);
    for (size_t i = 0; i < v; i++)
        if ((unsigned char)value[i] < 0x20 || value[i] == 0x7f)
            return pa_fail(err, "label '%s': the value holds a control character", name);
    return 0;
}

/* Checks the pairs' form and content; *text gets the label text (the caller frees it). */
static int parse_pairs(const char *pairs, size_t len, char **text, pa_error *err) {
    if (len == 0 || pairs[len - 1] != '\0')
        return pa_fail(err, "label pairs must be NUL-terminated strings");
    pa_buf b = {0};
    const char *p = pairs, *end = pairs + len, *prev = NULL;
    int n = 0;
    while (p < end) {
        const char *name = p;
        p += strlen(p) + 1;
        if (p >= end) {
            pa_buf_free(&b);
            return pa_fail(err, "label '%.80s' has no value", name);
        }
        const char *value = p;
        p += strlen(p) + 1;
        if (++n > PA_LABELS_MAX_PAIRS || check_pair(name, value, err) != 0 ||
            (prev && strcmp(prev, name) >= 0)) {
            if (n > PA_LABELS_MAX_PAIRS)
                pa_fail(err, "more than %d labels in one set", PA_LABELS_MAX_PAIRS);
            else if (prev && strcmp(prev, name) >= 0)
                pa_fail(err, "label names must be given once each, in order");
            pa_buf_free(&b);
            return -1;
        }
        prev = name;
        pa_buf_printf(&b, "%s%s=", b.len ? "," : "", name);
        pa_series_put_value(&b, value);
    }
    pa_buf_append(&b, "", 1);
    *text = b.data;
    return 0;
}

int pa_labels_intern(const char *pairs, size_t len, pa_error *err) {
    char *text = NULL;
    if (parse_pairs(pairs, len, &text, err) != 0)
        return -1;
    pthread_mutex_lock(&lock);
    uint32_t n = atomic_load_explicit(&n_sets, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++)
        if (pairs_len[i] == len && memcmp(pairs_of[i], pairs, len) == 0) {
            pthread_mutex_unlock(&lock);
            free(text);
            return (int)i + 1;
        }
    if (n == PA_LABELS_MAX_SETS) {
        pthread_mutex_unlock(&lock);
        free(text);
        return pa_fail(err, "more than %d different label sets in this process",
                       PA_LABELS_MAX_SETS);
    }
    pairs_of[n] = malloc(len);
    if (!pairs_of[n]) {
        pthread_mutex_unlock(&lock);
        free(text);
        return pa_fail(err, "out of memory");
    }
    memcpy(pairs_of[n], pairs, len);
    pairs_len[n] = len;
    texts[n] = text;
    atomic_store_explicit(&n_sets, n + 1, memory_order_release);
    pthread_mutex_unlock(&lock);
    return (int)n + 1;
}

/* The set's pairs as a series label text ("endpoint=/api,tenant=t1", values quoted where
 * they must be, profile/series.c), NULL for an unknown id. */
static const char *set_text(uint32_t id) {
    return id >= 1 && id <= atomic_load_explicit(&n_sets, memory_order_acquire) ? texts[id - 1]
                                                                                : NULL;
}

/* CPython's hamt_hash of a variable: its 64-bit hash folded to 32 bits, -1 avoided. */
static uint32_t hamt_hash(int64_t hash) {
    int32_t h = (int32_t)((uint64_t)hash & 0xffffffffu) ^ (int32_t)((uint64_t)hash >> 32);
    return (uint32_t)(h == -1 ? -2 : h);
}

int pa_labels_bind(const struct pa_python *py, uintptr_t v, int64_t hash, uintptr_t hamt,
                   uintptr_t bitmap, uintptr_t array, pa_error *err) {
    if (!py->layout.ts_context || !py->layout.ctx_vars || !py->layout.hamt_root)
        return pa_fail(err,
                       "Python %s: the thread state's context is not known; labels are "
                       "ignored",
                       py->version);
    /* The first module to bind keeps it: a second pyagent module (a sub-interpreter's
     * import, an importlib.reload) has a variable of its own, which would hide the first's
     * labels from every thread. It runs as if no agent were there. */
    uintptr_t bound = atomic_load_explicit(&var, memory_order_acquire);
    if (bound && bound != v)
        return pa_fail(err, "labels are read from another pyagent module's variable (a "
                            "sub-interpreter's, or a module loaded again); this one is ignored");
    uintptr_t ctx = (uintptr_t)pa_py_sym("PyContext_Type");
    if (!v || !hamt || !bitmap || !array || !ctx)
        return pa_fail(err, "labels: a type of contextvars was not found; labels are ignored");
    atomic_store_explicit(&var, 0, memory_order_release);
    var_hash32 = hamt_hash(hash);
    context_type = ctx;
    hamt_type = hamt;
    bitmap_type = bitmap;
    array_type = array;
    atomic_store_explicit(&var, v, memory_order_release);
    return 0;
}

int pa_labels_bind_span(uintptr_t v, int64_t hash, pa_error *err) {
    if (!atomic_load_explicit(&var, memory_order_acquire))
        return pa_fail(err, "spans: labels are not bound; spans are ignored");
    uintptr_t bound = atomic_load_explicit(&span_var, memory_order_acquire);
    if (bound && bound != v)
        return pa_fail(err, "spans are read from another pyagent module's variable; this one "
                            "is ignored");
    if (!v)
        return pa_fail(err, "spans: no variable");
    atomic_store_explicit(&span_var, 0, memory_order_release);
    span_hash32 = hamt_hash(hash);
    atomic_store_explicit(&span_var, v, memory_order_release);
    return 0;
}

int pa_labels_span_name(const char *name, size_t len, pa_error *err) {
    if (len == 0 || len > PA_SPAN_MAX_NAME || !pa_utf8_valid(name, len) || memchr(name, 0, len))
        return pa_fail(err, "span name: must be 1 to %d bytes of UTF-8 without NUL",
                       PA_SPAN_MAX_NAME);
    pthread_mutex_lock(&lock);
    uint32_t n = atomic_load_explicit(&n_span_names, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++)
        if (span_name_len[i] == len && memcmp(span_names[i], name, len) == 0) {
            pthread_mutex_unlock(&lock);
            return (int)i + 1;
        }
    char *copy = n < PA_SPAN_MAX_NAMES ? malloc(len + 1) : NULL;
    if (!copy) {
        pthread_mutex_unlock(&lock);
        atomic_fetch_add_explicit(&span_names_refused, 1, memory_order_relaxed);
        return pa_fail(err, "more than %d different span names in this process", PA_SPAN_MAX_NAMES);
    }
    memcpy(copy, name, len);
    copy[len] = '\0';
    /* Control characters would break a label text's line: they read as '?'. */
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)copy[i] < 0x20 || copy[i] == 0x7f)
            copy[i] = '?';
    span_names[n] = copy;
    span_name_len[n] = len;
    atomic_store_explicit(&n_span_names, n + 1, memory_order_release);
    pthread_mutex_unlock(&lock);
    return (int)n + 1;
}

uint64_t pa_labels_span_names_refused(void) {
    return atomic_load_explicit(&span_names_refused, memory_order_relaxed);
}

void pa_labels_frame_text(pa_buf *out, uint32_t id, const struct pa_span *span) {
    if (!span || !span->id) { /* a label set alone: its text, made when it was interned */
        const char *text = set_text(id);
        pa_buf_printf(out, "%s%s", PA_LABELS_PREFIX, text ? text : "");
        return;
    }
    pa_label_pair pairs[PA_LABELS_MAX_PAIRS + 2];
    size_t n = 0;
    if (set_text(id)) {
        const char *p = pairs_of[id - 1], *end = p + pairs_len[id - 1];
        while (p < end && n < PA_LABELS_MAX_PAIRS) {
            pairs[n].name = p;
            p += strlen(p) + 1;
            pairs[n++].value = p;
            p += strlen(p) + 1;
        }
    }
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)span->id);
    pairs[n++] = (pa_label_pair){"span_id", hex};
    if (span->name >= 1 && span->name <= atomic_load_explicit(&n_span_names, memory_order_acquire))
        pairs[n++] = (pa_label_pair){"span_name", span_names[span->name - 1]};
    pa_buf_printf(out, "%s", PA_LABELS_PREFIX);
    pa_series_labels_text(out, pairs, n);
}

/* ---- signal-handler side ------------------------------------------------------------------- */

/* The object header's end with ob_size (PyObject_VAR_HEAD), where a bitmap or collision node's
 * fields start; a node's array of pointers starts 8 bytes after it. The node structs live in
 * Python/hamt.c and have not changed since 3.7: bitmap {VAR_HEAD; uint32 b_bitmap;
 * PyObject *b_array[]} (key, value pairs; a NULL key: the value is a sub-node), collision
 * {VAR_HEAD; int32 c_hash; PyObject *c_array[]} (ob_size entries), array {HEAD;
 * PyHamtNode *a_array[32]; ...}. */
enum { HAMT_LEVELS = 7, COLLISION_MAX = 64 };

/* The id in a label set's value, 0 when it is not one. */
static uint32_t id_of(const struct pa_python *py, uintptr_t value) {
    if (!pa_is_type(py, value, py->bytes_type) || PA_READ(long, value + py->layout.b_size) != 8)
        return 0;
    uintptr_t s = value + py->layout.b_sval;
    for (int i = 0; i < 4; i++)
        if (PA_READ(char, s + (uintptr_t)i) != MAGIC[i])
            return 0;
    uint32_t id = PA_READ(uint32_t, s + 4);
    return id <= atomic_load_explicit(&n_sets, memory_order_acquire) ? id : 0;
}

/* Set bits of x, in a few instructions of our own: __builtin_popcount is a call into libgcc
 * on CPUs without popcnt, which the handler's boundary does not allow. */
static unsigned popcount32(uint32_t x) {
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    return (((x + (x >> 4)) & 0x0f0f0f0fu) * 0x01010101u) >> 24;
}

/* hamt_node_find: the value of key in the HAMT under node, 0 when absent. */
static uintptr_t hamt_find(const struct pa_python *py, uintptr_t node, uintptr_t key, uint32_t h) {
    const uintptr_t fields = py->layout.b_size + 8, array = fields + 8;
    for (unsigned shift = 0, level = 0; level < HAMT_LEVELS; shift += 5, level++) {
        if (!pa_aligned(node, 8))
            return 0;
        uintptr_t type = PA_READ(uintptr_t, node + py->layout.ob_type);
        unsigned slot = (h >> shift) & 0x1f;
        if (type == bitmap_type) {
            uint32_t bitmap = PA_READ(uint32_t, node + fields), bit = 1u << slot;
            if (!(bitmap & bit))
                return 0;
            uintptr_t at = node + array + 16u * popcount32(bitmap & (bit - 1));
            uintptr_t k = PA_READ(uintptr_t, at), v = PA_READ(uintptr_t, at + 8);
            if (k)
                return k == key ? v : 0;
            node = v;
        } else if (type == array_type) {
            node = PA_READ(uintptr_t, node + py->layout.ob_type + 8 + 8u * slot); /* a_array */
        } else { /* the HAMT's third kind, a collision node: keys of one hash */
            long n = PA_READ(long, node + py->layout.b_size);
            for (long i = 0; i + 1 < n && i < COLLISION_MAX; i += 2)
                if (PA_READ(uintptr_t, node + array + 8u * (uintptr_t)i) == key)
                    return PA_READ(uintptr_t, node + array + 8u * (uintptr_t)(i + 1));
            return 0;
        }
    }
    return 0;
}

/* The root span in a span variable's value, or span->id 0 when it is not one. */
static void span_of(const struct pa_python *py, uintptr_t value, struct pa_span *span) {
    if (!pa_is_type(py, value, py->bytes_type) || PA_READ(long, value + py->layout.b_size) != 16)
        return;
    uintptr_t s = value + py->layout.b_sval;
    for (int i = 0; i < 4; i++)
        if (PA_READ(char, s + (uintptr_t)i) != SPAN_MAGIC[i])
            return;
    uint32_t name = PA_READ(uint32_t, s + 4);
    span->name = name <= atomic_load_explicit(&n_span_names, memory_order_acquire) ? name : 0;
    span->id = PA_READ(uint64_t, s + 8);
}

uint32_t pa_labels_of(const struct pa_python *py, uintptr_t ts, struct pa_span *span) {
    span->id = 0;
    span->name = 0;
    uintptr_t key = atomic_load_explicit(&var, memory_order_acquire);
    if (!key)
        return 0;
    uintptr_t skey = atomic_load_explicit(&span_var, memory_order_acquire);
    const struct pa_layout *l = &py->layout;
    uintptr_t ctx = PA_READ(uintptr_t, ts + l->ts_context);
    if (!pa_is_type(py, ctx, context_type))
        return 0; /* no context yet (NULL until a variable is first used), or not one */
    uintptr_t vars = PA_READ(uintptr_t, ctx + l->ctx_vars);
    if (!pa_is_type(py, vars, hamt_type))
        return 0;
    uintptr_t root = PA_READ(uintptr_t, vars + l->hamt_root);
    if (skey) {
        uintptr_t value = hamt_find(py, root, skey, span_hash32);
        if (value)
            span_of(py, value, span);
    }
    uintptr_t value = hamt_find(py, root, key, var_hash32);
    return value ? id_of(py, value) : 0;
}
