/* profile.h - the profile model shared by the renderer, the uploader and the collector.
 *
 * A profile is a bag of stacks with counts. A stack is a sequence of frame ids, root first;
 * frame ids index a table of interned frame strings ("qualname (file:line)", "symbol [lib]",
 * "thread:NAME", "<synthetic>"). Identical stacks are aggregated as they are added, so a
 * profile's size is its number of unique stacks, never its number of samples.
 *
 * Everything here works on memory buffers (pa_buf) so the collector can parse uploads and the
 * uploader can encode snapshots without touching the file system; file helpers stream.
 * Errors are values: functions that can fail return 0 on success and -1 with a message in
 * the caller's pa_error. */
#ifndef PA_PROFILE_H
#define PA_PROFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../base/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pa_profile pa_profile;


/* A growable byte buffer; zero-initialise it, release it with pa_buf_free. */
typedef struct pa_buf {
    char *data;
    size_t len;
    size_t cap;
} pa_buf;

void pa_buf_free(pa_buf *b);
void pa_buf_reserve(pa_buf *b, size_t extra); /* aborts on out-of-memory */
void pa_buf_append(pa_buf *b, const void *data, size_t len);
void pa_buf_puts(pa_buf *b, const char *s);
void pa_buf_printf(pa_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as the contents of a JSON string (no quotes): invalid UTF-8 becomes U+FFFD,
 * control characters, '"' and '\' are escaped, and so are '<', '>', '&' so the JSON can sit
 * inside an HTML <script> element without ever closing it. */
void pa_buf_json_str(pa_buf *b, const char *s, size_t len);
/* Appends s escaped for HTML/XML text and attribute values: invalid UTF-8 becomes U+FFFD and
 * control characters (including NUL) become visible "\xHH" text. */
void pa_buf_html_str(pa_buf *b, const char *s, size_t len);
/* Is s valid UTF-8 (no overlong forms, surrogates or code points above U+10FFFF)? */
int pa_utf8_valid(const char *s, size_t len);
/* Appends s with every byte that does not start a valid UTF-8 sequence replaced by U+FFFD;
 * returns how many were replaced. */
size_t pa_buf_utf8(pa_buf *b, const char *s, size_t len);

/* ---- building ---- */

pa_profile *pa_profile_new(void);
void pa_profile_free(pa_profile *p);

/* Interns a frame string and returns its id (stable for the profile's life). */
uint32_t pa_profile_intern(pa_profile *p, const char *s, size_t len);
/* Adds count samples of the stack made of nframes frame strings, root first. Empty stacks
 * and zero counts are ignored. */
void pa_profile_add_stack(pa_profile *p, const char *const *frames, size_t nframes, uint64_t count);
/* The same with frame ids from pa_profile_intern. */
void pa_profile_add_stack_ids(pa_profile *p, const uint32_t *ids, size_t nframes, uint64_t count);

/* Metadata: "key=value" pairs from the "# pyagent 1 ..." header (rate, mode, pid, ...).
 * Setting a key again replaces its value. */
void pa_profile_set_meta(pa_profile *p, const char *key, const char *value);
const char *pa_profile_meta(const pa_profile *p, const char *key); /* NULL if absent */
size_t pa_profile_meta_count(const pa_profile *p);
void pa_profile_meta_at(const pa_profile *p, size_t i, const char **key, const char **value);

/* ---- reading ---- */

size_t pa_profile_frame_count(const pa_profile *p);
const char *pa_profile_frame(const pa_profile *p, uint32_t id, size_t *len);
size_t pa_profile_stack_count(const pa_profile *p);
uint64_t pa_profile_total(const pa_profile *p);
/* Stack i (0 <= i < pa_profile_stack_count): its frame ids, root first, and its count. */
const uint32_t *pa_profile_stack(const pa_profile *p, size_t i, size_t *nframes, uint64_t *count);

/* Lookups without modification: 0 and the id/index if present, -1 if not. */
int pa_profile_find_frame(const pa_profile *p, const char *s, size_t len, uint32_t *id);
int pa_profile_find_stack(const pa_profile *p, const uint32_t *ids, size_t nframes, size_t *index);

/* ---- transforming ---- */

/* Adds every stack of src into dst (frames are re-interned). */
void pa_profile_merge(pa_profile *dst, const pa_profile *src);
/* The same for stacks [first, first + n) of src only (and only the frames they use): splits a
 * profile into parts, e.g. to stay within a server's per-profile limits. */
void pa_profile_merge_stacks(pa_profile *dst, const pa_profile *src, size_t first, size_t n);

/* Keeps stacks in which some frame matches include (POSIX extended regex; NULL = all) and no
 * frame matches exclude (NULL = none). Returns a new profile or NULL with err set for a bad
 * regular expression. */
pa_profile *pa_profile_filter(const pa_profile *p, const char *include, const char *exclude,
                              pa_error *err);

/* Options of pa_profile_transform. */
typedef struct pa_transform {
    int strip_lines;      /* "f (a.py:12)" -> "f (a.py)": merge by function */
    int drop_threads;     /* remove "thread:NAME" roots: merge all threads */
    uint64_t scale_total; /* when non-zero, scale counts so they sum to about this */
} pa_transform;
pa_profile *pa_profile_transform(const pa_profile *p, const pa_transform *t);

/* ---- parsing ---- */

typedef enum pa_format {
    PA_FORMAT_UNKNOWN = 0,
    PA_FORMAT_PYAGENT, /* folded with a "# pyagent" header */
    PA_FORMAT_FOLDED,  /* flamegraph.pl folded */
    PA_FORMAT_PYSPY,   /* py-spy record -f raw */
    PA_FORMAT_AUSTIN,  /* Austin's collapsed output, P<pid>;T<tid>;file:func:line */
    PA_FORMAT_CPYTHON, /* python -m profiling.sampling --collapsed, tid:N;file:func:line */
    PA_FORMAT_PPROF,   /* profile.proto */
} pa_format;

const char *pa_format_name(pa_format f);

typedef struct pa_parse_stats {
    pa_format format;
    int gzip;                /* the input was gzip-compressed */
    uint64_t lines;          /* text lines read */
    uint64_t stacks;         /* stack lines (or pprof samples) accepted */
    uint64_t samples;        /* sum of their counts */
    uint64_t bad_lines;      /* malformed lines skipped */
    uint64_t first_bad_line; /* 1-based line number of the first, 0 if none */
} pa_parse_stats;

/* Incremental parser: feed bytes in any chunking, then finish. Detects gzip, pprof and the
 * text dialects by themselves. name appears in error messages. */
typedef struct pa_parser pa_parser;
pa_parser *pa_parser_new(pa_profile *into, const char *name);
int pa_parser_feed(pa_parser *ps, const void *data, size_t len, pa_error *err);
/* Returns -1 for an empty input or one without a single valid stack. */
int pa_parser_finish(pa_parser *ps, pa_parse_stats *stats, pa_error *err);
void pa_parser_free(pa_parser *ps);

int pa_profile_parse_buffer(pa_profile *p, const void *data, size_t len, const char *name,
                            pa_parse_stats *stats, pa_error *err);
/* path "-" reads standard input. Streams: memory grows with unique stacks, not file size. */
int pa_profile_parse_file(pa_profile *p, const char *path, pa_parse_stats *stats, pa_error *err);
int pa_profile_parse_stream(pa_profile *p, FILE *f, const char *name, pa_parse_stats *stats,
                            pa_error *err);

/* ---- encoding ---- */

/* Folded text, one stack per line, with a "# pyagent 1 ..." header when meta is present. */
void pa_profile_encode_folded(const pa_profile *p, pa_buf *out);
/* The same lines without the header: what Grafana Pyroscope's folded parser accepts (it
 * reads the text after a line's last space as its count and refuses anything else). */
void pa_profile_encode_folded_stacks(const pa_profile *p, pa_buf *out);
/* pprof profile.proto; gzip-compressed when gzip is non-zero. sample_type is "samples/count"
 * and, when the profile has a rate, MODE/nanoseconds too (also the period type), where MODE
 * is the meta "mode": "wall" or "gil", else "cpu". Grafana Pyroscope files a profile by these
 * names: a "wall" type as __name__ wall, a "cpu" one as process_cpu. Returns -1 only if zlib
 * fails. */
int pa_pprof_encode(const pa_profile *p, int gzip, pa_buf *out, pa_error *err);
/* Decodes a pprof profile (plain protobuf; gzip is handled by the parser). A sample type
 * named "wall", "gil" or "cpu" sets the meta "mode" (unless set), so a profile written by
 * pa_pprof_encode reads back with its mode. */
int pa_pprof_decode(pa_profile *p, const void *data, size_t len, pa_parse_stats *stats,
                    pa_error *err);
/* speedscope's file format (a "sampled" profile per thread root). */
void pa_profile_encode_speedscope(const pa_profile *p, const char *name, pa_buf *out);

/* The data of the HTML reports: the union of both profiles' stacks as a prefix tree, with
 * frames split into name/file/line/kind. base may be NULL (a flamegraph) or the baseline of a
 * diff. The output is JSON that is safe to embed in a <script> element. */
void pa_profile_encode_report_json(const pa_profile *cur, const pa_profile *base, const char *title,
                                   pa_buf *out);

/* ---- frames ---- */

typedef enum pa_frame_kind {
    PA_FRAME_OWN = 0,   /* Python code of the program itself */
    PA_FRAME_STDLIB,    /* the standard library */
    PA_FRAME_SITE,      /* site-packages / dist-packages */
    PA_FRAME_NATIVE,    /* "symbol [library]" */
    PA_FRAME_SYNTHETIC, /* "<idle>", "<truncated>" ... */
    PA_FRAME_THREAD,    /* "thread:NAME" */
    PA_FRAME_OTHER,     /* anything else (plain folded names) */
} pa_frame_kind;

/* A frame string split into its parts; pointers are into the original string. */
typedef struct pa_frame_info {
    pa_frame_kind kind;
    const char *name; /* qualname, symbol, thread name or the whole string */
    size_t name_len;
    const char *file; /* Python file or native library; NULL if none */
    size_t file_len;
    uint32_t line; /* 0 if none */
} pa_frame_info;

void pa_frame_parse(const char *s, size_t len, pa_frame_info *out);
/* Classifies a Python file name as own code, stdlib or site-packages. */
pa_frame_kind pa_file_kind(const char *file, size_t len);

const char *pa_frame_kind_name(pa_frame_kind k);

#ifdef __cplusplus
}
#endif
#endif
