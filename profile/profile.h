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

#include <stdbool.h>
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
/* Appends the rest of the stream f; -1 (errno set) on a read error, with what was read kept. */
int pa_buf_read_stream(pa_buf *b, FILE *f);
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

/* ---- series names (series.c) ----
 * A series name APP{k=v,k2="v,2"} under Pyroscope's rules: the uploader builds names with
 * them, the collector parses names, selectors and its stored label text with them. */
bool pa_series_app_char(char c);   /* [A-Za-z0-9_./-] */
bool pa_series_label_char(char c); /* [A-Za-z0-9_.] */
bool pa_series_value_char(char c); /* in a bare value: printable, not one of , { } = " */
/* Appends a label value as a label text holds it: bare when it reads back so, else quoted. */
void pa_series_put_value(pa_buf *b, const char *v);
/* Appends v double-quoted, with \" \\ \n \r \t escapes. */
void pa_series_put_quoted(pa_buf *b, const char *v);
/* At p's opening quote: decodes the quoted value in place into *value (NUL-terminated), and
 * returns the position after the closing quote, or NULL when there is none. */
char *pa_series_unquote(char *p, char **value);
/* Splits the next pair off a mutable label text ("k=v, k2=\"v,2\""): *key and *value are
 * NUL-terminated in place, bare ones trimmed of spaces, a quoted value decoded; *p moves past
 * the pair and its comma. 1: a pair; 0: the end; -1: no '=', an open quote, or text after a
 * closing quote. */
int pa_series_split(char **p, char **key, char **value);

/* The labels:TEXT frame of a labelled sample (pyagent.labels; docs/formats.md): the root, or
 * right under a thread:NAME root, TEXT a label text as above. */
#define PA_LABELS_PREFIX "labels:"
#define PA_LABELS_PREFIX_LEN 7
/* Where a stack (ids root first) has its labels frame: 0, 1, or -1 for none. Only a
 * well-formed one (at least one pair, no NUL) with frames under it counts. */
int pa_profile_labels_frame(const pa_profile *p, const uint32_t *ids, size_t n);
typedef struct pa_label_pair {
    const char *name, *value;
} pa_label_pair;
/* Appends the label text of pairs (each name once; sorted by name in place; empty values left
 * out); returns how many pairs it holds. */
size_t pa_series_labels_text(pa_buf *out, pa_label_pair *pairs, size_t n);

/* ---- building ---- */

pa_profile *pa_profile_new(void);
void pa_profile_free(pa_profile *p);

/* Interns a frame string and returns its id (stable for the profile's life). */
uint32_t pa_profile_intern(pa_profile *p, const char *s, size_t len);
/* Adds count samples of the stack made of nframes frame strings, root first. Empty stacks
 * and zero counts are ignored. */
void pa_profile_add_stack(pa_profile *p, const char *const *frames, size_t nframes, uint64_t count);
/* The same with frame ids from pa_profile_intern. Returns the stack's index, or SIZE_MAX when
 * nothing was added (an empty stack or a zero count). */
size_t pa_profile_add_stack_ids(pa_profile *p, const uint32_t *ids, size_t nframes, uint64_t count);

/* ---- time ----
 * A profile may say when its samples were taken: per stack, how many samples fell into each
 * time bucket. Buckets are bucket_ms wide and aligned to multiples of bucket_ms since the Unix
 * epoch, so profiles of the same width merge exactly. A stack's bucket counts add up to at most
 * its count (samples from inputs without time are "untimed"). docs/formats.md, "Time". */

/* Sets the bucket width of a profile without time entries yet; a profile that has some is
 * re-bucketed when the width grows (merging a coarser profile does that too). */
void pa_profile_set_bucket_ms(pa_profile *p, uint32_t bucket_ms);
uint32_t pa_profile_bucket_ms(const pa_profile *p); /* 0: the profile has no time */
/* Adds count samples of stack (an index from pa_profile_add_stack_ids) at time t_ms (Unix
 * milliseconds; floored to its bucket). Needs a bucket width. */
void pa_profile_add_time(pa_profile *p, size_t stack, int64_t t_ms, uint64_t count);
size_t pa_profile_time_count(const pa_profile *p);
/* Entry i: its stack, bucket start (Unix ms) and count. Entries are unique per (stack, bucket)
 * and come in no particular order. */
void pa_profile_time_at(const pa_profile *p, size_t i, size_t *stack, int64_t *t_ms,
                        uint64_t *count);
/* Entry indexes sorted by time, then stack (the caller frees the array). */
size_t *pa_profile_time_order(const pa_profile *p);

/* Metadata: "key=value" pairs from the "# pyagent 1 ..." header (rate, mode, pid, ...).
 * Setting a key again replaces its value. */
void pa_profile_set_meta(pa_profile *p, const char *key, const char *value);
/* Combines a value from another profile into p's, as merging profiles should: counters
 * (samples, dropped, unreadable, truncated, signals, cpu_s, the thread-state counts) add up,
 * thread_states add up thread by thread, start takes the earliest
 * and end the latest, achieved_rate follows signals / cpu_s, and any other key that differs
 * lists the distinct values, comma-separated (at most 8, then "..."). */
void pa_profile_combine_meta(pa_profile *p, const char *key, const char *value);
const char *pa_profile_meta(const pa_profile *p, const char *key); /* NULL if absent */
/* The thread_states key (docs/formats.md): "HELD:RELEASED:WAIT:HANDLING:RAISING:NAME;...", a
 * thread's samples by state, NAME its root frame's name without "thread:". Adds value's
 * entries into p's (a thread already there adds up, a new one is appended); malformed entries
 * are left out. pa_profile_combine_meta combines the key so. */
enum { PA_THREAD_STATE_COUNTS = 5 };
void pa_profile_add_thread_states(pa_profile *p, const char *value);
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

/* Labelled samples (pa_profile_labels_frame): the distinct labels frames of p's stacks (*frames
 * malloc'ed, frame ids of p; returns how many), and a new profile of the stacks whose labels
 * frame is `frame` (UINT32_MAX: the stacks without one), without that frame, with their time
 * and p's metadata (a labelled part without the counters, samples, dropped, ..., which stay
 * with the unlabelled one). */
size_t pa_profile_label_sets(const pa_profile *p, uint32_t **frames);
pa_profile *pa_profile_labelled(const pa_profile *p, uint32_t frame);

/* Keeps stacks in which some frame matches include (POSIX extended regex; NULL = all) and no
 * frame matches exclude (NULL = none). Returns a new profile or NULL with err set for a bad
 * regular expression. */
pa_profile *pa_profile_filter(const pa_profile *p, const char *include, const char *exclude,
                              pa_error *err);

/* Options of pa_profile_transform. */
typedef struct pa_transform {
    int strip_lines;        /* "f (a.py:12)" -> "f (a.py)": merge by function */
    int drop_threads;       /* remove "thread:NAME" roots: merge all threads */
    int strip_instructions; /* "f (a.py:12) @84 LOAD_ATTR" -> "f (a.py:12)" */
    int drop_time;          /* forget the time buckets */
    uint64_t scale_total;   /* when non-zero, scale counts so they sum to about this */
    /* When set, a label name: labels:TEXT frames lose that label; one left without labels
     * leaves its stacks (span_id, which would make a series or an upload per request). */
    const char *drop_label;
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
    PA_FORMAT_CAPTURE, /* pyagent's binary capture (capture.c) */
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
    uint64_t bad_utf8;       /* pprof: string table entries that are not valid UTF-8 */
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
/* pyagent's binary capture (.pyacap, docs/formats.md "Binary capture"): everything a folded
 * file with its header and "#t" lines holds (metadata, frames, stacks in their order, weights,
 * time buckets), compact, zlib-compressed, read back into the same profile. Encoding returns
 * -1 only if zlib fails. Decoding adds into p as the parser does for any input (metadata
 * combined, frames re-interned); a malformed, truncated or over-large capture is -1 with a
 * one-line reason, and nothing is allocated beyond what the checked counts allow: a body over
 * 1 GiB inflated, or stacks that expand to more than PA_CAPTURE_MAX_FRAMES frame ids in all,
 * are refused. */
#define PA_CAPTURE_MAGIC_LEN 8
#define PA_CAPTURE_MAX_FRAMES (1ull << 28)
int pa_capture_encode(const pa_profile *p, pa_buf *out, pa_error *err);
int pa_capture_decode(pa_profile *p, const void *data, size_t len, pa_parse_stats *stats,
                      pa_error *err);
/* Do the first len bytes (at least 2) begin the capture's magic? */
int pa_capture_sniff(const void *data, size_t len);
/* speedscope's file format (a "sampled" profile per thread root). With time buckets the
 * samples come in time order, one per (stack, bucket), weighted by their count. */
void pa_profile_encode_speedscope(const pa_profile *p, const char *name, pa_buf *out);
/* The Firefox Profiler's processed profile format (version 70: shared stack, frame, func and
 * string tables, one thread per thread root, samples with times and weights). Samples of a
 * profile without time are spread evenly over its duration, which the file says. */
void pa_profile_encode_firefox(const pa_profile *p, const char *name, pa_buf *out);

/* One row per code location (file, line, function), as CPython's profiling.sampling writes
 * them (stats.c): pstats, the marshalled dict pstats.Stats loads, {(file, line, func): (self
 * samples, cumulative samples, self seconds, cumulative seconds, {caller: samples})}; and its
 * JSON lines (meta, string_table, frame_table, agg, end records). Seconds are samples / rate
 * (a millisecond each without a rate). Return 0 (err is for symmetry with pprof). */
int pa_profile_encode_pstats(const pa_profile *p, pa_buf *out, pa_error *err);
int pa_profile_encode_jsonl(const pa_profile *p, pa_buf *out, pa_error *err);

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
    /* A Python frame may name the bytecode instruction it was executing (PYAGENT_OPCODES):
     * "qualname (file:line) @OFFSET[:COL-ENDCOL] [OPNAME]" (docs/formats.md, "Instructions").
     * base_len is the length without that suffix. */
    size_t base_len;
    int64_t offset;       /* byte offset of the instruction in co_code, -1 if none */
    int32_t col, end_col; /* 0-based columns of the instruction's source span, -1 if none */
    const char *op;       /* opcode name, NULL if none */
    size_t op_len;
} pa_frame_info;

void pa_frame_parse(const char *s, size_t len, pa_frame_info *out);
/* Classifies a Python file name as own code, stdlib or site-packages. */
pa_frame_kind pa_file_kind(const char *file, size_t len);

const char *pa_frame_kind_name(pa_frame_kind k);

/* ---- opcodes ----
 * CPython's opcode names per minor version, generated from each interpreter's own `opcode`
 * module (scripts/gen_opcodes.py -> profile/opcodes.inc). Specialized instructions (3.11+)
 * have their own numbers and a base instruction they deoptimize to. */

/* The name of opcode number op in CPython major.minor, or NULL if unknown. */
const char *pa_opcode_name(int major, int minor, unsigned op);
/* The base instruction of a specialized one ("LOAD_ATTR_INSTANCE_VALUE" -> "LOAD_ATTR") in any
 * known version, or NULL when name is not a specialized instruction. */
const char *pa_opcode_base(const char *name, size_t len);

/* ---- output formats ----
 * The one registry of the data formats a profile can be written in, shared by the renderer,
 * the uploader and the collector (reports drawn from a profile are the renderer's:
 * pa_render_format_find in render.h covers both). */
typedef struct pa_output_opts {
    const char *title; /* speedscope's and the Firefox Profiler's name of the profile */
} pa_output_opts;

typedef struct pa_output_format {
    const char *name;      /* "folded", "pprof", ... */
    const char *extension; /* the usual file name ending, with its dot */
    const char *mime;      /* Content-Type */
    /* How a server offers it: NULL shows it in place, else a Content-Disposition that saves
     * it under a file name with its extension. */
    const char *disposition;
    int (*encode)(const pa_profile *p, const pa_output_opts *o, pa_buf *out, pa_error *err);
} pa_output_format;

/* NULL-terminated, in the order help texts list them. */
extern const pa_output_format *const pa_output_formats[];
/* By name, or NULL. */
const pa_output_format *pa_output_format_find(const char *name);
/* By file name: the format whose extension ends path (".pb.gz", ".pprof", ...), or NULL. */
const pa_output_format *pa_output_format_for_path(const char *path);

#ifdef __cplusplus
}
#endif
#endif
