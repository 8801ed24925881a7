/* model.c - the profile: interned frame strings and aggregated stacks.
 *
 * Two open-addressing hash tables do all the work: one maps frame strings to ids, one maps
 * stacks (arrays of ids) to their index. Strings live in one arena and stacks in one pool of
 * ids, so a profile is a handful of allocations however many samples it holds, and adding a
 * stack seen before costs a hash and a compare. */
#include "profile_int.h"

#include <regex.h>
#include <stdlib.h>
#include <string.h>

struct meta {
    char *key;
    char *value;
};

struct stack {
    size_t off;     /* into pool */
    uint32_t depth; /* number of frames */
    uint32_t hash;
    uint64_t count;
};

struct tentry {
    int64_t t; /* bucket start, Unix ms */
    uint32_t stack;
    uint64_t count;
};

struct pa_profile {
    pa_buf arena;        /* frame strings, each NUL-terminated */
    size_t *frame_off;   /* id -> offset in arena */
    uint32_t *frame_len; /* id -> length */
    uint32_t *frame_hash;
    size_t nframes, frames_cap;
    uint32_t *fslots; /* id + 1, 0 = empty */
    size_t fslots_cap;

    uint32_t *pool;
    size_t pool_len, pool_cap;
    struct stack *stacks;
    size_t nstacks, stacks_cap;
    uint32_t *sslots; /* stack index + 1, 0 = empty */
    size_t sslots_cap;
    uint64_t total;

    struct meta *meta;
    size_t nmeta;

    uint32_t bucket_ms;
    struct tentry *te;
    size_t nte, cap_te;
    uint32_t *tslots; /* entry + 1, 0 = empty */
    size_t tslots_cap;
};

void *pa_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fputs("pyagent: out of memory\n", stderr);
        abort();
    }
    return q;
}

char *pa_xstrndup(const char *s, size_t n) {
    char *d = pa_xrealloc(NULL, n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

uint64_t pa_hash_bytes(const void *data, size_t n) {
    const unsigned char *s = data;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0x100000001B3ull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 31;
    return h;
}

pa_profile *pa_profile_new(void) {
    pa_profile *p = calloc(1, sizeof *p);
    if (!p)
        abort();
    return p;
}

void pa_profile_free(pa_profile *p) {
    if (!p)
        return;
    pa_buf_free(&p->arena);
    free(p->frame_off);
    free(p->frame_len);
    free(p->frame_hash);
    free(p->fslots);
    free(p->pool);
    free(p->stacks);
    free(p->sslots);
    for (size_t i = 0; i < p->nmeta; i++) {
        free(p->meta[i].key);
        free(p->meta[i].value);
    }
    free(p->meta);
    free(p->te);
    free(p->tslots);
    free(p);
}

static void frames_rehash(pa_profile *p) {
    size_t cap = p->fslots_cap ? p->fslots_cap * 2 : 1024;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        abort();
    for (size_t id = 0; id < p->nframes; id++) {
        size_t i = p->frame_hash[id] & (cap - 1);
        while (slots[i])
            i = (i + 1) & (cap - 1);
        slots[i] = (uint32_t)id + 1;
    }
    free(p->fslots);
    p->fslots = slots;
    p->fslots_cap = cap;
}

uint32_t pa_profile_intern(pa_profile *p, const char *s, size_t len) {
    if (len > UINT32_MAX)
        len = UINT32_MAX;
    if ((p->nframes + 1) * 2 > p->fslots_cap)
        frames_rehash(p);
    uint32_t h = (uint32_t)pa_hash_bytes(s, len);
    size_t mask = p->fslots_cap - 1;
    size_t i = h & mask;
    while (p->fslots[i]) {
        uint32_t id = p->fslots[i] - 1;
        if (p->frame_hash[id] == h && p->frame_len[id] == len &&
            memcmp(p->arena.data + p->frame_off[id], s, len) == 0)
            return id;
        i = (i + 1) & mask;
    }
    if (p->nframes == p->frames_cap) {
        p->frames_cap = p->frames_cap ? p->frames_cap * 2 : 256;
        p->frame_off = pa_xrealloc(p->frame_off, p->frames_cap * sizeof *p->frame_off);
        p->frame_len = pa_xrealloc(p->frame_len, p->frames_cap * sizeof *p->frame_len);
        p->frame_hash = pa_xrealloc(p->frame_hash, p->frames_cap * sizeof *p->frame_hash);
    }
    uint32_t id = (uint32_t)p->nframes++;
    p->frame_off[id] = p->arena.len;
    p->frame_len[id] = (uint32_t)len;
    p->frame_hash[id] = h;
    pa_buf_append(&p->arena, s, len);
    pa_buf_append(&p->arena, "", 1); /* keeps every frame NUL-terminated */
    p->fslots[i] = id + 1;
    return id;
}

int pa_profile_find_frame(const pa_profile *p, const char *s, size_t len, uint32_t *id) {
    if (!p->fslots_cap)
        return -1;
    uint32_t h = (uint32_t)pa_hash_bytes(s, len);
    size_t mask = p->fslots_cap - 1;
    for (size_t i = h & mask; p->fslots[i]; i = (i + 1) & mask) {
        uint32_t f = p->fslots[i] - 1;
        if (p->frame_hash[f] == h && p->frame_len[f] == len &&
            memcmp(p->arena.data + p->frame_off[f], s, len) == 0) {
            *id = f;
            return 0;
        }
    }
    return -1;
}

int pa_profile_find_stack(const pa_profile *p, const uint32_t *ids, size_t n, size_t *index) {
    if (!p->sslots_cap || n == 0)
        return -1;
    uint32_t h = (uint32_t)pa_hash_bytes(ids, n * sizeof *ids);
    size_t mask = p->sslots_cap - 1;
    for (size_t i = h & mask; p->sslots[i]; i = (i + 1) & mask) {
        const struct stack *st = &p->stacks[p->sslots[i] - 1];
        if (st->hash == h && st->depth == n &&
            memcmp(p->pool + st->off, ids, n * sizeof *ids) == 0) {
            *index = p->sslots[i] - 1;
            return 0;
        }
    }
    return -1;
}

size_t pa_profile_frame_count(const pa_profile *p) {
    return p->nframes;
}

const char *pa_profile_frame(const pa_profile *p, uint32_t id, size_t *len) {
    assert(id < p->nframes);
    if (len)
        *len = p->frame_len[id];
    return p->arena.data + p->frame_off[id];
}

static void stacks_rehash(pa_profile *p) {
    size_t cap = p->sslots_cap ? p->sslots_cap * 2 : 1024;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        abort();
    for (size_t s = 0; s < p->nstacks; s++) {
        size_t i = p->stacks[s].hash & (cap - 1);
        while (slots[i])
            i = (i + 1) & (cap - 1);
        slots[i] = (uint32_t)s + 1;
    }
    free(p->sslots);
    p->sslots = slots;
    p->sslots_cap = cap;
}

size_t pa_profile_add_stack_ids(pa_profile *p, const uint32_t *ids, size_t n, uint64_t count) {
    if (count == 0 || n == 0) /* nothing to draw: empty stacks are not kept */
        return SIZE_MAX;
    if (n > UINT32_MAX)
        n = UINT32_MAX;
    if ((p->nstacks + 1) * 2 > p->sslots_cap)
        stacks_rehash(p);
    uint32_t h = (uint32_t)pa_hash_bytes(ids, n * sizeof *ids);
    size_t mask = p->sslots_cap - 1;
    size_t i = h & mask;
    while (p->sslots[i]) {
        struct stack *st = &p->stacks[p->sslots[i] - 1];
        if (st->hash == h && st->depth == n &&
            memcmp(p->pool + st->off, ids, n * sizeof *ids) == 0) {
            st->count += count;
            p->total += count;
            return (size_t)(p->sslots[i] - 1);
        }
        i = (i + 1) & mask;
    }
    if (p->pool_cap - p->pool_len < n) {
        while (p->pool_cap - p->pool_len < n)
            p->pool_cap = p->pool_cap ? p->pool_cap * 2 : 4096;
        p->pool = pa_xrealloc(p->pool, p->pool_cap * sizeof *p->pool);
    }
    if (p->nstacks == p->stacks_cap) {
        p->stacks_cap = p->stacks_cap ? p->stacks_cap * 2 : 256;
        p->stacks = pa_xrealloc(p->stacks, p->stacks_cap * sizeof *p->stacks);
    }
    if (n)
        memcpy(p->pool + p->pool_len, ids, n * sizeof *ids);
    struct stack *st = &p->stacks[p->nstacks];
    st->off = p->pool_len;
    st->depth = (uint32_t)n;
    st->hash = h;
    st->count = count;
    p->pool_len += n;
    p->sslots[i] = (uint32_t)++p->nstacks;
    p->total += count;
    return p->nstacks - 1;
}

void pa_profile_add_stack(pa_profile *p, const char *const *frames, size_t n, uint64_t count) {
    if (n == 0)
        return;
    uint32_t small[128];
    uint32_t *ids = n <= 128 ? small : pa_xrealloc(NULL, n * sizeof *ids);
    for (size_t i = 0; i < n; i++)
        ids[i] = pa_profile_intern(p, frames[i], strlen(frames[i]));
    pa_profile_add_stack_ids(p, ids, n, count);
    if (ids != small)
        free(ids);
}

size_t pa_profile_stack_count(const pa_profile *p) {
    return p->nstacks;
}

uint64_t pa_profile_total(const pa_profile *p) {
    return p->total;
}

const uint32_t *pa_profile_stack(const pa_profile *p, size_t i, size_t *n, uint64_t *count) {
    assert(i < p->nstacks);
    const struct stack *st = &p->stacks[i];
    if (n)
        *n = st->depth;
    if (count)
        *count = st->count;
    return p->pool + st->off;
}

void pa_profile_set_meta(pa_profile *p, const char *key, const char *value) {
    for (size_t i = 0; i < p->nmeta; i++) {
        if (strcmp(p->meta[i].key, key) == 0) {
            free(p->meta[i].value);
            p->meta[i].value = pa_xstrndup(value, strlen(value));
            return;
        }
    }
    p->meta = pa_xrealloc(p->meta, (p->nmeta + 1) * sizeof *p->meta);
    p->meta[p->nmeta].key = pa_xstrndup(key, strlen(key));
    p->meta[p->nmeta].value = pa_xstrndup(value, strlen(value));
    p->nmeta++;
}

const char *pa_profile_meta(const pa_profile *p, const char *key) {
    for (size_t i = 0; i < p->nmeta; i++)
        if (strcmp(p->meta[i].key, key) == 0)
            return p->meta[i].value;
    return NULL;
}

size_t pa_profile_meta_count(const pa_profile *p) {
    return p->nmeta;
}

void pa_profile_meta_at(const pa_profile *p, size_t i, const char **key, const char **value) {
    assert(i < p->nmeta);
    *key = p->meta[i].key;
    *value = p->meta[i].value;
}

/* ---- combining metadata ---- */

/* thread_states (pa_profile_add_thread_states) */

struct thread_entry {
    const char *name; /* into the value it was read from, up to ';' or its end */
    size_t len;
    uint64_t n[PA_THREAD_STATE_COUNTS];
};

/* One "HELD:...:RAISING:NAME" entry of s (up to ';' or the end) into e; 0 if malformed. */
static int read_thread_entry(const char *s, const char **end, struct thread_entry *e) {
    *end = s + strcspn(s, ";");
    for (int k = 0; k < PA_THREAD_STATE_COUNTS; k++) {
        if (*s < '0' || *s > '9')
            return 0;
        char *after;
        e->n[k] = strtoull(s, &after, 10);
        if (after >= *end || *after != ':')
            return 0;
        s = after + 1;
    }
    e->name = s;
    e->len = (size_t)(*end - s);
    return 1;
}

/* At most this many threads are kept: a merge compares every name with every other, which a
 * hostile header must not make quadratic in its length. More are left out. */
enum { THREAD_STATES_MAX = 4096 };

/* Appends e to (*v)[*n], room for THREAD_STATES_MAX; 0 when full. */
static int push_thread_entry(struct thread_entry **v, size_t *n, const struct thread_entry *e) {
    if (*n == THREAD_STATES_MAX)
        return 0;
    if (*n == 0 || (*n >= 8 && (*n & (*n - 1)) == 0)) /* full: double */
        *v = pa_xrealloc(*v, (*n ? 2 * *n : 8) * sizeof **v);
    (*v)[(*n)++] = *e;
    return 1;
}

static size_t read_thread_entries(const char *value, struct thread_entry **out) {
    size_t n = 0;
    for (const char *s = value; s && *s;) {
        const char *end;
        struct thread_entry e;
        if (read_thread_entry(s, &end, &e) && !push_thread_entry(out, &n, &e))
            break;
        s = *end ? end + 1 : NULL;
    }
    return n;
}

void pa_profile_add_thread_states(pa_profile *p, const char *value) {
    const char *old = pa_profile_meta(p, "thread_states");
    char *kept = old ? pa_xstrndup(old, strlen(old)) : NULL; /* set_meta frees old */
    struct thread_entry *have = NULL, *add = NULL;
    size_t nhave = kept ? read_thread_entries(kept, &have) : 0;
    size_t nadd = read_thread_entries(value, &add);
    for (size_t i = 0; i < nadd; i++) {
        size_t j = 0;
        while (j < nhave &&
               (have[j].len != add[i].len || memcmp(have[j].name, add[i].name, add[i].len) != 0))
            j++;
        if (j == nhave) {
            push_thread_entry(&have, &nhave, &add[i]);
        } else {
            for (int k = 0; k < PA_THREAD_STATE_COUNTS; k++)
                have[j].n[k] += add[i].n[k];
        }
    }
    pa_buf b = {0};
    for (size_t j = 0; j < nhave; j++) {
        pa_buf_printf(&b, "%s", j ? ";" : "");
        for (int k = 0; k < PA_THREAD_STATE_COUNTS; k++)
            pa_buf_printf(&b, "%llu:", (unsigned long long)have[j].n[k]);
        pa_buf_append(&b, have[j].name, have[j].len);
    }
    pa_buf_append(&b, "", 1);
    if (nhave || old)
        pa_profile_set_meta(p, "thread_states", b.data);
    pa_buf_free(&b);
    free(have);
    free(add);
    free(kept);
}

static int is_counter_key(const char *key) {
    static const char *const counters[] = {"samples",  "dropped",   "unreadable", "truncated",
                                           "signals",  "cpu_s",     "gil_held",   "gil_released",
                                           "gil_wait", "exception", "raising",    "tasks_over"};
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
        if (strcmp(key, counters[i]) == 0)
            return 1;
    return 0;
}

/* "a,b" contains the value v as one of its comma-separated items? */
static int lists(const char *list, const char *v) {
    size_t n = strlen(v);
    for (const char *s = list; s;) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (len == n && memcmp(s, v, n) == 0)
            return 1;
        s = comma ? comma + 1 : NULL;
    }
    return 0;
}

void pa_profile_combine_meta(pa_profile *p, const char *key, const char *value) {
    const char *old = pa_profile_meta(p, key);
    if (!old) {
        pa_profile_set_meta(p, key, value);
        return;
    }
    if (strcmp(key, "thread_states") == 0) {
        pa_profile_add_thread_states(p, value);
        return;
    }
    char buf[64];
    if (is_counter_key(key)) {
        /* cpu_s has decimals; the others are integers and must stay exact. */
        if (strcmp(key, "cpu_s") == 0)
            snprintf(buf, sizeof buf, "%.3f", atof(old) + atof(value));
        else
            snprintf(buf, sizeof buf, "%llu", strtoull(old, NULL, 10) + strtoull(value, NULL, 10));
        pa_profile_set_meta(p, key, buf);
        const char *sig = pa_profile_meta(p, "signals"), *cpu = pa_profile_meta(p, "cpu_s");
        if (pa_profile_meta(p, "achieved_rate") && sig && cpu && atof(cpu) > 0) {
            snprintf(buf, sizeof buf, "%.0f", atof(sig) / atof(cpu));
            pa_profile_set_meta(p, "achieved_rate", buf);
        }
        return;
    }
    if (strcmp(key, "start") == 0 || strcmp(key, "end") == 0) {
        int earlier = strtoll(value, NULL, 10) < strtoll(old, NULL, 10);
        if (earlier == (strcmp(key, "start") == 0))
            pa_profile_set_meta(p, key, value);
        return;
    }
    if (strcmp(key, "achieved_rate") == 0 || lists(old, value))
        return; /* recomputed from the counters above, or already listed */
    if (strlen(old) > 3 && strcmp(old + strlen(old) - 3, "...") == 0)
        return;
    size_t items = 1;
    for (const char *c = old; *c; c++)
        items += *c == ',';
    pa_buf b = {0};
    pa_buf_printf(&b, "%s,%s", old, items >= 8 ? "..." : value);
    pa_profile_set_meta(p, key, b.data);
    pa_buf_free(&b);
}

/* ---- time ---- */

static uint32_t time_hash(uint32_t stack, int64_t t) {
    uint64_t k = ((uint64_t)t * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)stack * 0xC2B2AE3D27D4EB4Full);
    return (uint32_t)(k >> 32);
}

static void time_rehash(pa_profile *p) {
    size_t cap = p->tslots_cap ? p->tslots_cap * 2 : 1024;
    while ((p->nte + 1) * 2 > cap)
        cap *= 2;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        abort();
    for (size_t e = 0; e < p->nte; e++) {
        size_t i = time_hash(p->te[e].stack, p->te[e].t) & (cap - 1);
        while (slots[i])
            i = (i + 1) & (cap - 1);
        slots[i] = (uint32_t)e + 1;
    }
    free(p->tslots);
    p->tslots = slots;
    p->tslots_cap = cap;
}

static int64_t floor_to(int64_t t, uint32_t width) {
    int64_t w = width;
    return (t >= 0 ? t / w : -((-t + w - 1) / w)) * w;
}

void pa_profile_add_time(pa_profile *p, size_t stack, int64_t t_ms, uint64_t count) {
    assert(p->bucket_ms > 0 && stack < p->nstacks);
    if (count == 0)
        return;
    int64_t t = floor_to(t_ms, p->bucket_ms);
    if ((p->nte + 1) * 2 > p->tslots_cap)
        time_rehash(p);
    size_t mask = p->tslots_cap - 1;
    size_t i = time_hash((uint32_t)stack, t) & mask;
    while (p->tslots[i]) {
        struct tentry *e = &p->te[p->tslots[i] - 1];
        if (e->stack == stack && e->t == t) {
            e->count += count;
            return;
        }
        i = (i + 1) & mask;
    }
    if (p->nte == p->cap_te) {
        p->cap_te = p->cap_te ? p->cap_te * 2 : 1024;
        p->te = pa_xrealloc(p->te, p->cap_te * sizeof *p->te);
    }
    p->te[p->nte] = (struct tentry){t, (uint32_t)stack, count};
    p->tslots[i] = (uint32_t)++p->nte;
}

void pa_profile_set_bucket_ms(pa_profile *p, uint32_t bucket_ms) {
    if (bucket_ms == 0 || bucket_ms == p->bucket_ms)
        return;
    if (p->nte == 0 || bucket_ms > p->bucket_ms) {
        /* Coarser buckets: every entry moves to the bucket that holds its start. */
        struct tentry *old = p->te;
        size_t n = p->nte;
        p->te = NULL;
        p->nte = p->cap_te = 0;
        free(p->tslots);
        p->tslots = NULL;
        p->tslots_cap = 0;
        p->bucket_ms = bucket_ms;
        for (size_t e = 0; e < n; e++)
            pa_profile_add_time(p, old[e].stack, old[e].t, old[e].count);
        free(old);
    }
}

uint32_t pa_profile_bucket_ms(const pa_profile *p) {
    return p->nte ? p->bucket_ms : 0;
}

uint32_t pa_profile_time_width(const pa_profile *p) {
    return p->bucket_ms;
}

int64_t pa_profile_time_first(const pa_profile *p) {
    int64_t first = p->nte ? p->te[0].t : 0;
    for (size_t e = 1; e < p->nte; e++)
        if (p->te[e].t < first)
            first = p->te[e].t;
    return first;
}

size_t pa_profile_time_count(const pa_profile *p) {
    return p->nte;
}

void pa_profile_time_at(const pa_profile *p, size_t i, size_t *stack, int64_t *t_ms,
                        uint64_t *count) {
    assert(i < p->nte);
    if (stack)
        *stack = p->te[i].stack;
    if (t_ms)
        *t_ms = p->te[i].t;
    if (count)
        *count = p->te[i].count;
}

static const struct tentry *order_ctx;
static int cmp_time(const void *a, const void *b) {
    const struct tentry *x = &order_ctx[*(const size_t *)a], *y = &order_ctx[*(const size_t *)b];
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->stack < y->stack ? -1 : x->stack > y->stack;
}

size_t *pa_profile_time_order(const pa_profile *p) {
    size_t *order = pa_xrealloc(NULL, (p->nte + 1) * sizeof *order);
    for (size_t i = 0; i < p->nte; i++)
        order[i] = i;
    /* qsort has no context argument in C11; profiles are not sorted concurrently. */
    order_ctx = p->te;
    if (p->nte > 1)
        qsort(order, p->nte, sizeof *order, cmp_time);
    return order;
}

static const pa_profile *by_stack_ctx;
static int cmp_stack_time(const void *a, const void *b) {
    const struct tentry *x = &by_stack_ctx->te[*(const size_t *)a];
    const struct tentry *y = &by_stack_ctx->te[*(const size_t *)b];
    if (x->stack != y->stack)
        return x->stack < y->stack ? -1 : 1;
    return x->t < y->t ? -1 : x->t > y->t;
}

void pa_time_index_init(pa_time_index *ix, const pa_profile *p) {
    ix->order = pa_xrealloc(NULL, (p->nte + 1) * sizeof *ix->order);
    ix->start = calloc(p->nstacks + 1, sizeof *ix->start);
    if (!ix->start)
        abort();
    for (size_t i = 0; i < p->nte; i++)
        ix->order[i] = i;
    by_stack_ctx = p; /* qsort has no context argument in C11 (see pa_profile_time_order) */
    if (p->nte > 1)
        qsort(ix->order, p->nte, sizeof *ix->order, cmp_stack_time);
    for (size_t i = 0; i < p->nte; i++)
        ix->start[p->te[i].stack + 1]++;
    for (size_t s = 0; s < p->nstacks; s++)
        ix->start[s + 1] += ix->start[s];
}

void pa_time_index_free(pa_time_index *ix) {
    free(ix->order);
    free(ix->start);
}

/* Adds src's time entries to dst through a map from src stack indexes to dst's. */
static void merge_time(pa_profile *dst, const pa_profile *src, const size_t *stack_map) {
    if (src->nte == 0)
        return;
    if (src->bucket_ms > dst->bucket_ms)
        pa_profile_set_bucket_ms(dst, src->bucket_ms);
    for (size_t e = 0; e < src->nte; e++) {
        size_t s = stack_map[src->te[e].stack];
        if (s != SIZE_MAX)
            pa_profile_add_time(dst, s, src->te[e].t, src->te[e].count);
    }
}

/* Adds src's stacks through a map from src frame ids to dst frame ids. */
void pa_profile_merge(pa_profile *dst, const pa_profile *src) {
    pa_profile_merge_stacks(dst, src, 0, src->nstacks);
}

/* Whether a labels:TEXT frame's TEXT is a whole label text of at least one pair (and no NUL):
 * one that is not (hostile input, say) stays an ordinary frame everywhere. */
static int well_formed_labels(const char *s, size_t len) {
    if (memchr(s, '\0', len))
        return 0;
    char *text = pa_xrealloc(NULL, len + 1), *at = text + PA_LABELS_PREFIX_LEN, *key, *value;
    memcpy(text, s, len);
    text[len] = '\0';
    int pairs = 0, r;
    while ((r = pa_series_split(&at, &key, &value)) == 1)
        pairs++;
    free(text);
    return r == 0 && pairs > 0;
}

int pa_profile_labels_frame(const pa_profile *p, const uint32_t *ids, size_t n) {
    for (size_t i = 0; i < n && i < 2; i++) {
        size_t len;
        const char *s = pa_profile_frame(p, ids[i], &len);
        /* A labels frame stands above the sample's own frames: never its leaf. */
        if (len >= PA_LABELS_PREFIX_LEN && memcmp(s, PA_LABELS_PREFIX, PA_LABELS_PREFIX_LEN) == 0)
            return i + 1 < n && well_formed_labels(s, len) ? (int)i : -1;
        if (i == 0 && !(len >= 7 && memcmp(s, "thread:", 7) == 0))
            return -1; /* only a thread root may stand above it */
    }
    return -1;
}

/* Adds stacks [first, first + n) of src into dst, with their time and src's metadata. With
 * labels set, only those whose labels frame (pa_profile_labels_frame) is *labels, or that
 * have none when it is UINT32_MAX, and without that frame. */
static void copy_stacks(pa_profile *dst, const pa_profile *src, size_t first, size_t n,
                        const uint32_t *labels) {
    /* Frames are interned on first use: a part of a profile holds only its own frames. */
    uint32_t *map = pa_xrealloc(NULL, (src->nframes + 1) * sizeof *map);
    for (size_t id = 0; id < src->nframes; id++)
        map[id] = UINT32_MAX;
    uint32_t *ids = NULL;
    size_t cap = 0;
    size_t *smap = pa_xrealloc(NULL, (src->nstacks + 1) * sizeof *smap);
    for (size_t s = 0; s < src->nstacks; s++)
        smap[s] = SIZE_MAX;
    for (size_t s = first; s < src->nstacks && s - first < n; s++) {
        const struct stack *st = &src->stacks[s];
        const uint32_t *frames = &src->pool[st->off];
        int skip = -1;
        if (labels) {
            skip = pa_profile_labels_frame(src, frames, st->depth);
            if (skip < 0 ? *labels != UINT32_MAX : frames[skip] != *labels)
                continue;
        }
        if (st->depth > cap) {
            cap = st->depth * 2;
            ids = pa_xrealloc(ids, cap * sizeof *ids);
        }
        size_t depth = 0;
        for (uint32_t k = 0; k < st->depth; k++) {
            uint32_t id = frames[k];
            if ((int)k == skip)
                continue;
            if (map[id] == UINT32_MAX)
                map[id] = pa_profile_intern(dst, src->arena.data + src->frame_off[id],
                                            src->frame_len[id]);
            ids[depth++] = map[id];
        }
        smap[s] = pa_profile_add_stack_ids(dst, ids, depth, st->count);
    }
    merge_time(dst, src, smap);
    /* A labelled part leaves the counters to the unlabelled one: merged again, the parts
     * would count them once each. */
    int part = labels && *labels != UINT32_MAX;
    for (size_t i = 0; i < src->nmeta; i++)
        if (!part || !is_counter_key(src->meta[i].key))
            pa_profile_combine_meta(dst, src->meta[i].key, src->meta[i].value);
    free(smap);
    free(ids);
    free(map);
}

void pa_profile_merge_stacks(pa_profile *dst, const pa_profile *src, size_t first, size_t n) {
    copy_stacks(dst, src, first, n, NULL);
}

size_t pa_profile_label_sets(const pa_profile *p, uint32_t **frames) {
    size_t n = 0, cap = 0;
    *frames = NULL;
    char *seen = pa_xrealloc(NULL, p->nframes + 1);
    memset(seen, 0, p->nframes + 1);
    for (size_t s = 0; s < p->nstacks; s++) {
        const uint32_t *ids = &p->pool[p->stacks[s].off];
        int at = pa_profile_labels_frame(p, ids, p->stacks[s].depth);
        if (at < 0 || seen[ids[at]])
            continue;
        seen[ids[at]] = 1;
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            *frames = pa_xrealloc(*frames, cap * sizeof **frames);
        }
        (*frames)[n++] = ids[at];
    }
    free(seen);
    return n;
}

pa_profile *pa_profile_labelled(const pa_profile *p, uint32_t frame) {
    pa_profile *out = pa_profile_new();
    copy_stacks(out, p, 0, p->nstacks, &frame);
    return out;
}

static int compile(regex_t *re, const char *pattern, pa_error *err) {
    int rc = regcomp(re, pattern, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char msg[256];
        regerror(rc, re, msg, sizeof msg);
        pa_fail(err, "bad regular expression '%s': %s", pattern, msg);
        return -1;
    }
    return 0;
}

pa_profile *pa_profile_filter(const pa_profile *p, const char *include, const char *exclude,
                              pa_error *err) {
    regex_t inc, exc;
    if (include && compile(&inc, include, err) != 0)
        return NULL;
    if (exclude && compile(&exc, exclude, err) != 0) {
        if (include)
            regfree(&inc);
        return NULL;
    }
    /* Match each frame once, not once per stack it appears in. */
    unsigned char *hit = calloc(p->nframes + 1, 1);
    if (!hit)
        abort();
    for (size_t id = 0; id < p->nframes; id++) {
        const char *s = p->arena.data + p->frame_off[id];
        if (include && regexec(&inc, s, 0, NULL, 0) == 0)
            hit[id] |= 1;
        if (exclude && regexec(&exc, s, 0, NULL, 0) == 0)
            hit[id] |= 2;
    }
    pa_profile *out = pa_profile_new();
    size_t *smap = pa_xrealloc(NULL, (p->nstacks + 1) * sizeof *smap);
    for (size_t s = 0; s < p->nstacks; s++) {
        const struct stack *st = &p->stacks[s];
        smap[s] = SIZE_MAX;
        int in = !include, out_ = 0;
        for (uint32_t k = 0; k < st->depth; k++) {
            unsigned char h = hit[p->pool[st->off + k]];
            in |= h & 1;
            out_ |= h & 2;
        }
        if (!in || out_)
            continue;
        uint32_t *ids = pa_xrealloc(NULL, (st->depth + 1) * sizeof *ids);
        for (uint32_t k = 0; k < st->depth; k++) {
            uint32_t id = p->pool[st->off + k];
            ids[k] = pa_profile_intern(out, p->arena.data + p->frame_off[id], p->frame_len[id]);
        }
        smap[s] = pa_profile_add_stack_ids(out, ids, st->depth, st->count);
        free(ids);
    }
    merge_time(out, p, smap);
    free(smap);
    for (size_t i = 0; i < p->nmeta; i++)
        pa_profile_set_meta(out, p->meta[i].key, p->meta[i].value);
    free(hit);
    if (include)
        regfree(&inc);
    if (exclude)
        regfree(&exc);
    return out;
}

/* The labels frame s (len bytes, well formed) without the label name, interned into out;
 * UINT32_MAX when no label is left. */
static uint32_t labels_without(pa_profile *out, const char *s, size_t len, const char *name) {
    char *text = pa_xstrndup(s, len), *at = text + PA_LABELS_PREFIX_LEN, *key, *value;
    pa_label_pair *pairs = pa_xrealloc(NULL, (len / 2 + 1) * sizeof *pairs); /* "k=v," each */
    size_t n = 0;
    while (pa_series_split(&at, &key, &value) == 1)
        if (strcmp(key, name) != 0)
            pairs[n++] = (pa_label_pair){key, value};
    uint32_t id = UINT32_MAX;
    if (n) {
        pa_buf b = {0};
        pa_buf_puts(&b, PA_LABELS_PREFIX);
        pa_series_labels_text(&b, pairs, n);
        id = pa_profile_intern(out, b.data, b.len);
        pa_buf_free(&b);
    }
    free(pairs);
    free(text);
    return id;
}

pa_profile *pa_profile_transform(const pa_profile *p, const pa_transform *t) {
    pa_profile *out = pa_profile_new();
    uint32_t *map = pa_xrealloc(NULL, (p->nframes + 1) * sizeof *map);
    unsigned char *is_thread = calloc(p->nframes + 1, 1);
    if (!is_thread)
        abort();
    for (size_t id = 0; id < p->nframes; id++) {
        const char *s = p->arena.data + p->frame_off[id];
        size_t len = p->frame_len[id];
        pa_frame_info fi;
        pa_frame_parse(s, len, &fi);
        is_thread[id] = fi.kind == PA_FRAME_THREAD;
        if (t->strip_lines && fi.line && fi.file) {
            /* "name (file:line)" -> "name (file)": the instruction goes with the line */
            pa_buf b = {0};
            pa_buf_append(&b, s, (size_t)(fi.file - s) + fi.file_len);
            pa_buf_puts(&b, ")");
            map[id] = pa_profile_intern(out, b.data, b.len);
            pa_buf_free(&b);
        } else if (t->strip_instructions && fi.offset >= 0) {
            map[id] = pa_profile_intern(out, s, fi.base_len);
        } else if (t->drop_label && len >= PA_LABELS_PREFIX_LEN &&
                   memcmp(s, PA_LABELS_PREFIX, PA_LABELS_PREFIX_LEN) == 0 &&
                   well_formed_labels(s, len)) {
            map[id] = labels_without(out, s, len, t->drop_label);
        } else {
            map[id] = pa_profile_intern(out, s, len);
        }
    }
    double scale = 1.0;
    if (t->scale_total && p->total)
        scale = (double)t->scale_total / (double)p->total;
    uint32_t *ids = NULL;
    size_t cap = 0;
    size_t *smap = pa_xrealloc(NULL, (p->nstacks + 1) * sizeof *smap);
    for (size_t s = 0; s < p->nstacks; s++) {
        const struct stack *st = &p->stacks[s];
        if (st->depth + 1 > cap) {
            cap = (st->depth + 1) * 2;
            ids = pa_xrealloc(ids, cap * sizeof *ids);
        }
        size_t n = 0;
        for (uint32_t k = 0; k < st->depth; k++) {
            uint32_t id = p->pool[st->off + k];
            if ((t->drop_threads && is_thread[id]) || map[id] == UINT32_MAX)
                continue;
            ids[n++] = map[id];
        }
        uint64_t count = st->count;
        if (scale != 1.0) {
            double c = (double)count * scale + 0.5;
            count = c < 1.0 ? 1 : (uint64_t)c;
        }
        smap[s] = pa_profile_add_stack_ids(out, ids, n, count);
    }
    /* Scaled counts no longer add up to their buckets: scaling drops the time. */
    if (!t->drop_time && scale == 1.0)
        merge_time(out, p, smap);
    free(smap);
    for (size_t i = 0; i < p->nmeta; i++)
        pa_profile_set_meta(out, p->meta[i].key, p->meta[i].value);
    free(ids);
    free(map);
    free(is_thread);
    return out;
}
