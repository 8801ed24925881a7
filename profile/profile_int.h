/* profile_int.h - helpers shared by the files of the profile library, not part of its API. */
#ifndef PA_PROFILE_INT_H
#define PA_PROFILE_INT_H

#include "profile.h"

#include <assert.h>
#include <stdio.h>

void *pa_xrealloc(void *p, size_t n); /* aborts on out-of-memory */
char *pa_xstrndup(const char *s, size_t n);
uint64_t pa_hash_bytes(const void *data, size_t n);

/* pa_frame_parse without telling a Python frame's file apart (own, stdlib, site): every
 * Python frame is PA_FRAME_OWN. For the pprof encoder, which needs only the split and runs
 * on every frame of every upload the collector stores. */
void pa_frame_split(const char *s, size_t len, pa_frame_info *out);

/* Binary helpers of pprof.c and capture.c (buf.c). Varints are protobuf's: 7 bits a byte,
 * low group first, the high bit set on every byte but the last. */
/* Inline and written in place: the pprof encoder writes a few varints per frame and per
 * sample, and the call with a copy through a scratch array was a tenth of the collector's
 * ingest CPU. */
static inline void pa_put_varint(pa_buf *b, uint64_t v) {
    if (b->cap - b->len <= 10)
        pa_buf_reserve(b, 10);
    unsigned char *o = (unsigned char *)b->data + b->len;
    while (v > 0x7F) {
        *o++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *o++ = (unsigned char)v;
    b->len = (size_t)((char *)o - b->data);
    b->data[b->len] = '\0';
}
/* A cursor over untrusted bytes: a read past end, or a varint over 10 bytes, sets bad and
 * returns 0, so a decoder checks bad once after a run of reads. */
typedef struct pa_reader {
    const unsigned char *p, *end;
    int bad;
} pa_reader;
uint64_t pa_get_varint(pa_reader *r);
/* Appends data compressed by zlib: a gzip member when gzip, else a zlib stream (RFC 1950). */
int pa_deflate(const void *data, size_t len, int gzip, pa_buf *out, pa_error *err);

/* A prefix tree of frame ids (tree.c): node i is frame[i] under parent[i] (UINT32_MAX for a
 * root); nodes are numbered in creation order, parents first. Zero-initialise it. */
typedef struct pa_tree {
    uint32_t *parent, *frame;
    size_t n, cap;
    uint32_t *slots; /* node + 1 */
    size_t slots_cap;
} pa_tree;
/* The node of frame under parent, created (as node n) if new. */
uint32_t pa_tree_child(pa_tree *t, uint32_t parent, uint32_t frame);
void pa_tree_free(pa_tree *t);

/* What the text dialects' line parser carries from one line to the next. */
typedef struct pa_text_state {
    pa_format format;
    size_t last_stack;   /* index of the stack the previous stack line added, SIZE_MAX if none */
    uint64_t last_count; /* its count on that line, which its "#t" line must not exceed */
    int64_t t0_ms;       /* from the header: the time of "#t" bucket 0 */
} pa_text_state;

/* Parses one line (without its newline). Returns 1 for a stack, 0 for a line that carries none
 * (blank, comment, metadata), -1 for a malformed line. */
int pa_parse_text_line(pa_profile *p, const char *line, size_t len, pa_text_state *state);
/* "key=value key=value" (the header's tail, or a pprof comment) into p's metadata; values are
 * percent-decoded, bucket_ms and t0_ms go to the time fields of p and state. */
void pa_parse_header(pa_profile *p, const char *s, size_t len, pa_text_state *state);
/* Appends p's metadata as " key=value ..." with values percent-encoded where needed, and the
 * time fields when p has time (t0_ms is the earliest bucket). */
void pa_put_meta_pairs(const pa_profile *p, pa_buf *out);
/* The bucket width set on p, whether or not it has time entries yet. */
uint32_t pa_profile_time_width(const pa_profile *p);
/* A profile's time entries grouped by stack: order holds the entry indexes sorted by (stack,
 * time), and stack s's entries are order[start[s] .. start[s + 1]). */
typedef struct pa_time_index {
    size_t *order;
    size_t *start;
} pa_time_index;
void pa_time_index_init(pa_time_index *ix, const pa_profile *p);
void pa_time_index_free(pa_time_index *ix);
/* The earliest bucket of p's time entries (0 when it has none). */
int64_t pa_profile_time_first(const pa_profile *p);

#endif
