/* uploader.c: drain the stack tables into profiles; write the local profile file (folded, or
 * any format of profile/'s registry: PYAGENT_OUTPUT_FORMAT or PYAGENT_OUTPUT's extension).
 *
 * The profile model (interning, aggregation, folded encoding) is the shared one in
 * profile/, the same code the renderer and collector read profiles with. */
#include "uploader.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "../agent/codecache.h"
#include "../agent/labels.h"
#include "../agent/native.h"
#include "../agent/sampler.h"
#include "../agent/awaits.h"
#include "../agent/tasks.h"
#include "../profile/profile.h"
#include "../base/bss.h"
#include "../base/log.h"
#include "send.h"
#include "symbols.h"

/* The shim's configuration, read once per process and never changed: referred to, not
 * copied (a copy writes 25 KiB, seven pages faulted in at start-up). */
static const struct pa_config *cfg;
/* The shim's: follow_again replaces it when libpython is loaded again (a copy here would keep
 * pointing into the unloaded one). */
static const struct pa_python *py;
static pa_profile *total;   /* everything since this process started sampling (local file) */
static pa_profile *pending; /* drained since the last upload */
static time_t pending_from; /* start of the samples in pending */
static char out_path[4096] PA_LARGE_BSS(out_path);
static const pa_output_format *out_format; /* what the local file is written in */
static time_t started;
static uint64_t dropped_total;
static int write_failed_logged;
static int spooled; /* this process has put a profile of its own in the spool */

static uint64_t untimed_total;       /* samples counted whose time bucket was not recorded */
static struct pa_send_stats written; /* the uploads' counters in the local file's header */

/* A profile of this process: with time buckets when they are on (PYAGENT_TIME_BUCKET_MS). */
static pa_profile *new_profile(void) {
    pa_profile *p = pa_profile_new();
    if (cfg->bucket_ms)
        pa_profile_set_bucket_ms(p, cfg->bucket_ms);
    return p;
}

static const char *mode_name(void) {
    return cfg->mode == PA_MODE_WALL ? "wall" : cfg->mode == PA_MODE_GIL ? "gil" : "cpu";
}

/* The profile replaces out_path by rename, which is right only for a regular file (or none
 * yet): a FIFO, a device or a socket named there stays what it is. /dev/null, the natural way
 * to say "no file", quietly means no local file; anything else says so once. A symbolic link
 * to a regular file is followed, so the link stays a link. Returns 0 when the path can be
 * written, else -1 with out_path cleared. */
static int check_out_path(void) {
    struct stat st;
    if (lstat(out_path, &st) != 0 || S_ISREG(st.st_mode))
        return 0; /* absent (the write reports other errors) or regular */
    if (S_ISLNK(st.st_mode) && stat(out_path, &st) == 0 && S_ISREG(st.st_mode)) {
        char target[PATH_MAX];
        if (realpath(out_path, target) && strlen(target) < sizeof out_path) {
            strcpy(out_path, target);
            return 0;
        }
    }
    int null = stat(out_path, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
    if (!null)
        pa_log(PA_LOG_ERROR, "PYAGENT_OUTPUT: %s is not a regular file; no local profile written",
               out_path);
    out_path[0] = 0;
    return -1;
}

static void set_out_path(int child) {
    out_path[0] = 0;
    if (!cfg->output[0])
        return;
    pa_config_output_path(cfg->output, (int)getpid(), out_path, sizeof out_path);
    /* Without %p a child would overwrite its parent's file: give it its own. */
    if (child && !strstr(cfg->output, "%p")) {
        size_t n = strlen(out_path);
        snprintf(out_path + n, sizeof out_path - n, ".%d", (int)getpid());
    }
    check_out_path();
}

/* PYAGENT_OUTPUT_FORMAT names a format of the registry; without it the file's extension
 * chooses, as for pyagent-render export (".pyacap": the binary capture); else folded. */
static void choose_out_format(void) {
    out_format = NULL;
    if (cfg->out_format[0]) {
        out_format = pa_output_format_find(cfg->out_format);
        if (!out_format) {
            pa_buf names = {0};
            for (size_t i = 0; pa_output_formats[i]; i++)
                pa_buf_printf(&names, "%s%s", i ? " " : "", pa_output_formats[i]->name);
            pa_log(PA_LOG_ERROR, "PYAGENT_OUTPUT_FORMAT=\"%.32s\" is not one of %s; using folded",
                   cfg->out_format, names.data);
            pa_buf_free(&names);
        }
    } else if (cfg->output[0]) {
        out_format = pa_output_format_for_path(cfg->output);
    }
    if (!out_format)
        out_format = pa_output_format_find("folded");
}

int pa_uploader_init(const struct pa_config *c, const struct pa_python *p) {
    cfg = c;
    py = p;
    total = new_profile();
    pending = new_profile();
    started = pending_from = time(NULL);
    set_out_path(0);
    choose_out_format();
    pa_send_init(cfg);
    return total && pending ? 0 : -1;
}

const char *pa_uploader_output_path(void) {
    return out_path;
}

/* Interns a frame name as valid UTF-8: names cut to fit a buffer (thread names, long
 * qualnames) or read from the OS and from native symbols may hold invalid bytes, which make
 * Grafana Pyroscope refuse the whole profile. Each such byte becomes U+FFFD, in the upload and
 * the local file alike. */
static uint32_t intern_utf8(const char *s, size_t n) {
    if (pa_utf8_valid(s, n))
        return pa_profile_intern(pending, s, n);
    pa_buf fixed = {0};
    pa_buf_utf8(&fixed, s, n);
    uint32_t id = pa_profile_intern(pending, fixed.data, fixed.len);
    pa_buf_free(&fixed);
    return id;
}

/* "thread:NAME" with the characters that would break a folded line replaced. */
static uint32_t thread_frame(uint32_t serial) {
    char name[80], frame[96];
    pa_threads_name(serial, name, sizeof name);
    for (char *s = name; *s; s++)
        if (*s == ';')
            *s = ':';
        else if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
    int n = snprintf(frame, sizeof frame, "thread:%s", name);
    return intern_utf8(frame, (size_t)n < sizeof frame ? (size_t)n : sizeof frame - 1);
}

/* The threads' state counts since the last drain, into the profile's thread_states by the
 * name of each one's root frame (docs/formats.md): before pa_threads_prune forgets the
 * threads that ended. */
static void take_thread_states(void) {
    /* Threads that registered meanwhile beyond the room are taken at the next drain. */
    size_t cap = pa_threads_take_states(NULL, 0) + 16;
    struct pa_thread_states *st = malloc(cap * sizeof *st);
    if (!st)
        return;
    size_t n = pa_threads_take_states(st, cap);
    n = n < cap ? n : cap;
    pa_buf value = {0};
    for (size_t i = 0; i < n; i++) {
        uint64_t any = 0;
        for (int k = 0; k < PA_COUNT_N; k++)
            any |= st[i].n[k];
        if (!any)
            continue;
        size_t len;
        const char *frame = pa_profile_frame(pending, thread_frame(st[i].serial), &len);
        pa_buf_printf(&value, "%s%llu:%llu:%llu:%llu:%llu:", value.len ? ";" : "",
                      (unsigned long long)st[i].n[PA_COUNT_HELD],
                      (unsigned long long)st[i].n[PA_COUNT_RELEASED],
                      (unsigned long long)st[i].n[PA_COUNT_GIL_WAIT],
                      (unsigned long long)st[i].n[PA_COUNT_HANDLING],
                      (unsigned long long)st[i].n[PA_COUNT_RAISING]);
        pa_buf_append(&value, frame + 7, len - 7); /* without "thread:" */
    }
    if (value.len) {
        pa_buf_append(&value, "", 1);
        pa_profile_add_thread_states(total, value.data);
    }
    pa_buf_free(&value);
    free(st);
}

/* Whether code objects may be read now (pa_code_columns): not once the interpreter finalizes,
 * when the memory of freed ones may still look like them. Set by each drain. */
static int py_live;

static int python_runs(void) {
    return pa_py_initialized() && !pa_py_finalizing(py);
}

/* The local file keeps span_id for its first PYAGENT_LOCAL_SPAN_IDS root spans (10,000);
 * after that, samples go into it without span_id (with span_name), counted in the header's
 * span_ids_dropped: a long-running server's file, held in memory for its whole life, must not
 * grow by every request. Uploads, one interval each (bounded by the stack table), always carry
 * span_id. The spans are counted as the distinct labels frames with a span of each interval:
 * a span sampled in two intervals counts twice, so the bound holds. */
static uint64_t local_span_ids;   /* in total */
static uint64_t pending_span_ids; /* distinct span labels frames in pending */
static uint64_t pending_span_samples;
static uint64_t span_ids_dropped; /* samples in total without their span_id */

/* "labels:TEXT" of a label set and a root span (either may be absent): its label text can
 * be longer than code_frame's buffer. */
static uint32_t labels_frame(uint32_t id, const struct pa_span *span) {
    pa_buf b = {0};
    pa_labels_frame_text(&b, id, span);
    size_t before = pa_profile_frame_count(pending);
    uint32_t frame = intern_utf8(b.data, b.len);
    if (span->id && pa_profile_frame_count(pending) > before)
        pending_span_ids++;
    pa_buf_free(&b);
    return frame;
}

/* Appends src to buf[*n...] as far as it fits (size includes the NUL), counting its whole
 * length in *n as snprintf would. */
static void append(char *buf, size_t size, size_t *n, const char *src, size_t len) {
    if (*n + 1 < size) {
        size_t room = size - 1 - *n;
        memcpy(buf + *n, src, len < room ? len : room);
    }
    *n += len;
}

/* "NAME (FILE:LINE)", or "NAME (FILE)" when line <= 0: what snprintf made of it, for every
 * frame of every drain, at a fifth of its cost (a drain formats each new frame once). */
static int join_frame(char *buf, size_t size, const char *name, const char *file, int line) {
    size_t n = 0;
    append(buf, size, &n, name, strlen(name));
    append(buf, size, &n, " (", 2);
    append(buf, size, &n, file, strlen(file));
    if (line > 0) {
        char digits[12];
        size_t d = sizeof digits;
        for (unsigned v = (unsigned)line; v; v /= 10)
            digits[--d] = (char)('0' + v % 10);
        append(buf, size, &n, ":", 1);
        append(buf, size, &n, digits + d, sizeof digits - d);
    }
    append(buf, size, &n, ")", 1);
    buf[n < size ? n : size - 1] = 0;
    return n > INT_MAX ? INT_MAX : (int)n;
}

static uint32_t code_frame(const struct pa_frame *f) {
    char buf[1400];
    int n;
    if (pa_native_is_native(f)) {
        n = pa_symbols_lookup(pa_native_ip(f), buf, sizeof buf);
        return intern_utf8(buf, n > 0 ? (size_t)n : 0);
    }
    if (f->id == PA_SYN_INTERP)
        n = snprintf(buf, sizeof buf, "interp:%d", f->line);
    else if (f->id == PA_SYN_TASK)
        n = pa_task_frame_name(f, buf, sizeof buf);
    else if (f->id == PA_SYN_AWAIT)
        n = snprintf(buf, sizeof buf, "%s", pa_await_name(f->line));
    else if (f->id < PA_SYN_FIRST_CODE)
        n = snprintf(buf, sizeof buf, "%s", pa_code_synthetic_name(f->id));
    else
        n = join_frame(buf, sizeof buf, pa_code_qualname(f->id), pa_code_filename(f->id), f->line);
    long offset;
    unsigned op;
    if (n >= 0 && (size_t)n < sizeof buf && f->id >= PA_SYN_FIRST_CODE &&
        pa_frame_instr(f, &offset, &op)) {
        /* PYAGENT_OPCODES: " @OFFSET[:COL-ENDCOL] OPNAME", named for this interpreter's
         * version, the columns read from the code object's location table here, outside the
         * signal handler (docs/formats.md, "Instructions"). */
        int m = snprintf(buf + n, sizeof buf - (size_t)n, " @%ld", offset);
        n = m < 0 ? n : n + m;
        int col, end_col;
        if (n < (int)sizeof buf &&
            pa_code_columns(py, f->id, offset, f->line, py_live, &col, &end_col)) {
            m = snprintf(buf + n, sizeof buf - (size_t)n, ":%d-%d", col, end_col);
            n = m < 0 ? n : n + m;
        }
        const char *name = pa_opcode_name((int)py->major, (int)py->minor, op);
        if (n < (int)sizeof buf) {
            m = name ? snprintf(buf + n, sizeof buf - (size_t)n, " %s", name)
                     : snprintf(buf + n, sizeof buf - (size_t)n, " OP%u", op);
            n = m < 0 ? n : n + m;
        }
    }
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof buf)
        n = sizeof buf - 1;
    return intern_utf8(buf, (size_t)n);
}

/* The frames a drain has interned, one slot per code object (ids are dense, in the order
 * the code objects were first met), for the line and instruction it was last met at: a frame
 * occurs in many stacks (an import chain's thirty frames are shared by every sample taken
 * under it), and making its text (names, file, line), checking it as UTF-8 and hashing it into
 * the profile at each occurrence was most of a drain's work (about 1 million of the exit
 * flush's instructions in `import asyncio` at 20 Hz, for some 3,000 occurrences of a few
 * hundred frames). Dense, so that a short program touches a page or two of it (a hash table
 * spread over 80 KiB cost 16 page faults at exit). Valid for one drain: `pending` may be sent
 * and emptied between two, so a drain bumps the generation rather than clearing. Native and
 * synthetic frames are made each time. */
enum { MEMO_CODES = 1 << 14 };
struct frame_memo {
    int32_t line;
    uint32_t instr, id, gen;
};
static struct frame_memo memo[MEMO_CODES] PA_LARGE_BSS(frame_memo);
static uint32_t memo_gen;

static uint32_t memo_frame(const struct pa_frame *f) {
    uint32_t k = f->id - PA_SYN_FIRST_CODE;
    if (pa_native_is_native(f) || f->id < PA_SYN_FIRST_CODE || k >= MEMO_CODES)
        return code_frame(f);
    struct frame_memo *m = &memo[k];
    if (m->gen == memo_gen && m->line == f->line && m->instr == f->instr)
        return m->id;
    uint32_t id = code_frame(f);
    *m = (struct frame_memo){f->line, f->instr, id, memo_gen};
    return id;
}

void pa_uploader_find_columns(void) {
    static struct pa_table *table;
    static uint32_t seen;
    if (!cfg->opcodes || py->layout.line_kind != PA_LINE_LOCATIONS)
        return;
    struct pa_table *t = atomic_load(&pa_sampler_tables()->active);
    uint32_t used = atomic_load(&t->frames_used);
    if (used > t->frames_cap)
        used = t->frames_cap;
    if (t != table || used < seen) { /* swapped, or cleared since */
        table = t;
        seen = 0;
    }
    int live = python_runs();
    for (; live && seen < used; seen++) {
        /* A handler may still be writing the newest frames: whatever they hold, a span is
         * only taken from the code object of an id, for the line given, and one missed here
         * is looked for again at the drain. */
        const struct pa_frame *f = &t->frames[seen];
        long offset;
        unsigned op;
        int col, end_col;
        if (!pa_native_is_native(f) && f->id >= PA_SYN_FIRST_CODE &&
            pa_frame_instr(f, &offset, &op))
            pa_code_columns(py, f->id, offset, f->line, live, &col, &end_col);
    }
}

/* Interpreter internals between Python frames and the C functions they call: dropped. A
 * stripped interpreter names none of its static functions, so anything unnamed inside it
 * counts as plumbing too. */
static int is_plumbing(uintptr_t ip) {
    struct pa_symbol s;
    if (pa_symbols_resolve(ip, &s) == 0)
        return pa_symbols_is_plumbing(s.name);
    /* The C library's unnamed (static) functions are its process and thread start code. */
    return s.in_interpreter || (s.object && strncmp(s.object, "libc.so", 7) == 0);
}

int pa_uploader_has_samples(void) {
    struct pa_tables *ts = pa_sampler_tables();
    return pa_profile_total(total) || pa_profile_total(pending) || !pa_table_empty(&ts->t[0]) ||
           !pa_table_empty(&ts->t[1]);
}

/* The index of slot in used (sorted, n entries), or n when it is not there. */
static uint32_t used_index(const uint32_t *used, uint32_t n, uint32_t slot) {
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (used[mid] < slot)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && used[lo] == slot ? lo : n;
}

void pa_uploader_drain(int final) {
    struct pa_tables *ts = pa_sampler_tables();
    unsigned long abandoned = pa_tables_abandoned;
    struct pa_table *t = pa_tables_swap(ts);
    if (pa_tables_abandoned != abandoned)
        pa_log(PA_LOG_WARN,
               "a sample was left unfinished inside the stack table (a signal handler of the "
               "program's that jumped out of it with longjmp); the table was drained after "
               "100 ms without it");
    /* The table now filling gets the frame store's pages the last interval needed, twice
     * over, before handlers reach them: no first-touch page faults in the handler. Not after
     * the final drain: sampling has stopped, and an exiting process would only zero them. */
    if (!final)
        pa_table_prefault(atomic_load(&ts->active), 2 * atomic_load(&t->frames_used), 0);
    uint32_t ids[520];
    py_live = python_runs();
    if (++memo_gen == 0) { /* wrapped: no entry may look current */
        memset(memo, 0, sizeof memo);
        memo_gen = 1;
    }
    /* Only the slots claimed are read, in slot order as a scan of the table would: a short
     * program's table is not read page by page. */
    const uint32_t *used;
    uint32_t nused = pa_table_used_slots(t, &used);
    /* Each claimed slot's stack in pending, for the time entries that name slots. */
    size_t *stack_of = nused && cfg->bucket_ms ? malloc(nused * sizeof *stack_of) : NULL;
    for (uint32_t j = 0; j < nused; j++) {
        struct pa_table_slot *s = &t->slots[used[j]];
        if (stack_of)
            stack_of[j] = SIZE_MAX;
        if (atomic_load(&s->state) != 2)
            continue;
        const struct pa_frame *f = &t->frames[s->frames_off];
        uint32_t d = s->depth;
        if (d > 512)
            d = 512;
        size_t n = 0;
        ids[n++] = thread_frame(s->thread);
        /* A labelled sample's labels:TEXT frame, with its root span's span_id and span_name,
         * comes right under the thread root, wherever native frames put it (formats.md,
         * "Labels"). Native ids carry PA_NATIVE_FLAG, so these ids are never native. */
        uint32_t set = 0;
        struct pa_span span = {0, 0};
        for (uint32_t k = 0; k < d; k++)
            if (f[k].id == PA_SYN_LABELS)
                set = (uint32_t)f[k].line;
            else if (f[k].id == PA_SYN_SPAN)
                span.id = (uint32_t)f[k].line | (uint64_t)f[k].instr << 32;
            else if (f[k].id == PA_SYN_SPAN_NAME)
                span.name = (uint32_t)f[k].line;
        if (set || span.id)
            ids[n++] = labels_frame(set, &span);
        if (span.id)
            pending_span_samples += atomic_load(&s->count);
        for (uint32_t k = d; k-- > 0;) { /* the table is leaf first; profiles are root first */
            if (pa_native_is_native(&f[k]) && is_plumbing(pa_native_ip(&f[k])))
                continue;
            if (f[k].id == PA_SYN_LABELS || f[k].id == PA_SYN_SPAN || f[k].id == PA_SYN_SPAN_NAME)
                continue;
            ids[n++] = memo_frame(&f[k]);
        }
        size_t stack = pa_profile_add_stack_ids(pending, ids, n, atomic_load(&s->count));
        if (stack_of)
            stack_of[j] = stack;
    }
    uint64_t untimed = atomic_load(&t->untimed);
    if (cfg->bucket_ms) {
        uint32_t n = atomic_load(&t->times_used);
        if (n > t->times_cap)
            n = t->times_cap;
        uint64_t base = pa_sampler_time_base();
        for (uint32_t i = 0; i < n; i++) {
            const struct pa_time_entry *e = pa_table_time(t, i);
            uint32_t j = stack_of ? used_index(used, nused, e->slot) : nused;
            if (j == nused || stack_of[j] == SIZE_MAX) {
                untimed += e->weight;
                continue;
            }
            int64_t t_ms = (int64_t)((base + e->bucket) * cfg->bucket_ms);
            pa_profile_add_time(pending, stack_of[j], t_ms, e->weight);
        }
    }
    untimed_total += untimed;
    free(stack_of);
    dropped_total += atomic_load(&t->dropped);
    if (!final) /* the last drain: clearing would only dirty pages of a process that ends */
        pa_table_clear(t);
    take_thread_states();
    pa_threads_prune();
}

void pa_uploader_spool(void) {
    time_t now = time(NULL);
    char rate[16];
    snprintf(rate, sizeof rate, "%u", cfg->rate);
    pa_profile_set_meta(pending, "rate", rate);
    pa_profile_set_meta(pending, "mode", mode_name());
    if (out_path[0] && local_span_ids + pending_span_ids > cfg->local_span_ids) {
        pa_profile *q = pa_profile_transform(pending, &(pa_transform){.drop_label = "span_id"});
        pa_profile_merge(total, q);
        pa_profile_free(q);
        span_ids_dropped += pending_span_samples;
    } else if (out_path[0]) {
        pa_profile_merge(total, pending);
        local_span_ids += pending_span_ids;
    }
    pending_span_ids = pending_span_samples = 0;
    if (cfg->server[0] && pa_profile_total(pending) > 0) {
        /* from/until must not be empty: the collector and Pyroscope want until > from. */
        time_t until = now > pending_from ? now : pending_from + 1;
        spooled |= pa_send_spool(pending, pending_from, until) == 0;
    }
    pa_profile_free(pending);
    pending = new_profile();
    pending_from = now;
}

void pa_uploader_send(double deadline, int final) {
    /* At exit only a process that spooled profiles of its own sends: a forked child that
     * sampled nothing does not spend its exit on the spool its parent left, which the parent
     * or the next process sends. */
    if (cfg->server[0] && (!final || spooled))
        pa_send_flush(deadline, !final);
}

static void set_meta_u64(const char *key, uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    pa_profile_set_meta(total, key, buf);
}

static int write_local(int final, int quiet);

int pa_uploader_write_local(int final) {
    return write_local(final, 0);
}

int pa_uploader_rewrite_local(void) {
    struct pa_send_stats now;
    pa_send_get_stats(&now);
    if (!cfg->server[0] ||
        (now.rejected == written.rejected && now.rejected_dropped == written.rejected_dropped &&
         now.spool_dropped == written.spool_dropped))
        return 0;
    return write_local(1, 1);
}

static int write_local(int final, int quiet) {
    /* Checked again at each write: the program may have made the path a FIFO meanwhile. */
    if (!out_path[0] || check_out_path() != 0)
        return 0;
    struct pa_sampler_stats st;
    pa_sampler_get_stats(&st);
    set_meta_u64("rate", cfg->rate);
    pa_profile_set_meta(total, "mode", mode_name());
    set_meta_u64("pid", (uint64_t)getpid());
    pa_profile_set_meta(total, "python", py->version);
    set_meta_u64("start", (uint64_t)started);
    set_meta_u64("samples", pa_profile_total(total));
    set_meta_u64("dropped", dropped_total);
    /* Root spans whose name the agent refused (more than PA_SPAN_MAX_NAMES names): their
     * samples carry span_id without span_name. */
    if (span_ids_dropped)
        set_meta_u64("span_ids_dropped", span_ids_dropped);
    if (pa_labels_span_names_refused())
        set_meta_u64("span_names_refused", pa_labels_span_names_refused());
    if (cfg->bucket_ms)
        set_meta_u64("untimed", untimed_total);
    set_meta_u64("unreadable", st.unreadable);
    set_meta_u64("truncated", st.truncated);
    if (cfg->async_tasks)
        set_meta_u64("tasks_over", st.tasks_over);
    /* The sampled threads' states: shares of `samples` in the report's sidebar
     * (docs/formats.md). No exception count where the thread state's exc_info is unknown. */
    set_meta_u64("gil_held", st.gil_held);
    set_meta_u64("gil_released", st.gil_released);
    /* Under perf events a GIL wait's kernel time (the futex calls, the wake-up) is weighed
     * onto the thread's next user-mode sample, taken after it got the GIL: in CPU mode the
     * waiting share would be a small part of the truth (about 1% of 43-53% measured;
     * docs/modes.md), so it is not given, and the reports show it as unknown. */
    if (!(cfg->mode == PA_MODE_CPU && strstr(st.timer, "perf")))
        set_meta_u64("gil_wait", st.gil_wait);
    if (py->layout.ts_exc_info)
        set_meta_u64("exception", st.exception);
    if (py->layout.ts_raising)
        set_meta_u64("raising", st.raising);
    set_meta_u64("handler_p50_ns", st.handler_p50_ns);
    set_meta_u64("handler_p99_ns", st.handler_p99_ns);
    pa_profile_set_meta(total, "handler_hist", st.handler_hist);
    pa_profile_set_meta(total, "timer", st.timer);
    if (cfg->native) {
        /* How the native frames were unwound (docs/formats.md, architecture.md). */
        static const char *const unwinders[] = {"cached", "libunwind", "check"};
        struct pa_native_counts nc;
        pa_native_get_counts(&nc);
        pa_profile_set_meta(total, "native_unwind", unwinders[cfg->native_unwind % 3]);
        set_meta_u64("native_steps_cached", nc.cached_steps);
        set_meta_u64("native_steps_learned", nc.learned_steps);
        set_meta_u64("native_walks_libunwind", nc.libunwind_walks);
        if (cfg->native_unwind == 2) {
            set_meta_u64("native_checked", nc.checked);
            set_meta_u64("native_mismatched", nc.mismatched);
        }
    }
    /* What the samples are measured over, and the timers' signals per second of it
     * (docs/formats.md). */
    double cpu_s = (double)st.cpu_ns / 1e9;
    char cpu_buf[32];
    snprintf(cpu_buf, sizeof cpu_buf, "%.3f", cpu_s);
    pa_profile_set_meta(total, "cpu_s", cpu_buf);
    set_meta_u64("signals", st.signals);
    set_meta_u64("achieved_rate", cpu_s > 0 ? (uint64_t)((double)st.signals / cpu_s + 0.5) : 0);
    pa_profile_set_meta(total, "final", final ? "1" : "0");
    if (cfg->server[0]) {
        /* What the server refused is on stderr and in rejected/; the header keeps the count
         * with the profile (docs/formats.md). */
        pa_send_get_stats(&written);
        set_meta_u64("rejected", written.rejected);
        set_meta_u64("rejected_dropped", written.rejected_dropped);
        set_meta_u64("spool_dropped", written.spool_dropped);
    }

    pa_buf buf = {0};
    pa_error enc_err;
    pa_output_opts opts = {.title = cfg->app_name};
    if (out_format->encode(total, &opts, &buf, &enc_err) != 0) {
        pa_buf_free(&buf);
        if (!write_failed_logged || final)
            pa_log(PA_LOG_ERROR, "cannot encode the profile for %s: %s", out_path, enc_err.msg);
        write_failed_logged = 1;
        return -1;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", out_path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int ok = fd >= 0;
    size_t off = 0;
    while (ok && off < buf.len) {
        ssize_t w = write(fd, buf.data + off, buf.len - off);
        if (w < 0 && errno == EINTR)
            continue;
        ok = w > 0;
        off += ok ? (size_t)w : 0;
    }
    if (fd >= 0 && close(fd) != 0)
        ok = 0;
    if (ok && rename(tmp, out_path) != 0)
        ok = 0;
    int err = errno;
    pa_buf_free(&buf);
    if (!ok) {
        unlink(tmp);
        if (!write_failed_logged || final)
            pa_log(PA_LOG_ERROR, "cannot write the profile to %s: %s", out_path, strerror(err));
        write_failed_logged = 1;
        return -1;
    }
    if (final && !quiet) {
        pa_log(PA_LOG_INFO, "profile written to %s (%llu samples)", out_path,
               (unsigned long long)pa_profile_total(total));
        pa_log(PA_LOG_DEBUG, "handler time, ns (bucket floor:samples): %s", st.handler_hist);
    }
    return 0;
}

void pa_uploader_fork_child(void) {
    pa_profile_free(total);
    pa_profile_free(pending);
    total = new_profile();
    pending = new_profile();
    started = pending_from = time(NULL);
    pa_send_fork_child();
    dropped_total = 0;
    untimed_total = 0;
    write_failed_logged = 0;
    spooled = 0;
    memset(&written, 0, sizeof written);
    set_out_path(1);
}
