/* labels.h: the program's labels (pyagent.labels), read by the handler from the sampled
 * thread's current context.
 *
 * The Python module `pyagent` keeps the current label set in a contextvars.ContextVar whose
 * value is a small bytes object naming an interned label set ("pyaL" + its id). The handler
 * reads that variable's value the way ContextVar.get() would: the thread state's current
 * context (tstate->context, which asyncio switches at every task step), its variables (an
 * immutable HAMT) and a lookup of the variable in it, every read guarded. So labels follow
 * threads and asyncio tasks with contextvars' own semantics, and nothing has to be told at a
 * task switch. docs/architecture.md, "Labels". */
#ifndef PA_LABELS_H
#define PA_LABELS_H

#include <stddef.h>
#include <stdint.h>

#include "../base/error.h"
#include "pyversions.h"

/* Label sets a process may intern, and pairs in one set. */
enum { PA_LABELS_MAX_SETS = 4096, PA_LABELS_MAX_PAIRS = 16, PA_LABELS_MAX_VALUE = 2048 };
enum { PA_LABELS_MAX_NAME = 64 };

/* Normal context (the module's call, GIL held). pairs: len bytes of NUL-terminated name and
 * value strings, alternating, names in increasing order, each pair valid (labels.c, check_pair).
 * Returns the set's id (1..PA_LABELS_MAX_SETS; the same id for the same pairs), or -1 with a
 * message (invalid pairs, too many sets). */
int pa_labels_intern(const char *pairs, size_t len, pa_error *err);

/* Normal context (the module's import, GIL held): which ContextVar holds the label set (its
 * address and hash(var)), and the types of a HAMT and of its bitmap and array nodes (found by
 * the module through gc.get_referents: CPython exports them only up to 3.10). 0, or -1 with a
 * message when the interpreter's layout has no context to read, or another variable was bound
 * before (the first module keeps it; labels are then ignored for the caller). */
int pa_labels_bind(const struct pa_python *py, uintptr_t var, int64_t var_hash, uintptr_t hamt_type,
                   uintptr_t bitmap_type, uintptr_t array_type, pa_error *err);

/* Span profiles (pyagent's OpenTelemetry bridge). A span id per request would use up the
 * interned sets, so the root span is a second ContextVar whose value carries it raw: a bytes
 * object of 16 bytes, "pyaS", the span name's id (uint32, 0: no name) and the span id
 * (uint64, never 0), little-endian. Only names are interned, PA_SPAN_MAX_NAMES at most. */
enum { PA_SPAN_MAX_NAMES = 1024, PA_SPAN_MAX_NAME = 256 };

/* Normal context (the module's import, GIL held): which ContextVar holds the root span. 0, or
 * -1 with a message (labels are not bound, or another variable was bound before). */
int pa_labels_bind_span(uintptr_t var, int64_t var_hash, pa_error *err);

/* Normal context (GIL held): the id (1..PA_SPAN_MAX_NAMES; the same id for the same name) of a
 * span name of len bytes of valid UTF-8, or -1 with a message (bad name, too many names:
 * those are counted, pa_labels_span_names_refused). Names over PA_SPAN_MAX_NAME bytes are
 * refused as bad. */
int pa_labels_span_name(const char *name, size_t len, pa_error *err);
/* Span names refused because the table was full (the header's span_names_refused). */
uint64_t pa_labels_span_names_refused(void);

/* The root span a sample was taken in: id 0 for none. */
struct pa_span {
    uint64_t id;
    uint32_t name; /* 0: none (refused) */
};

/* SIGNAL-HANDLER SIDE: the id of the label set current in thread state ts, 0 for none, and
 * in *span the root span current there (id 0 for none). Must run under the fault guard (the
 * walk's: the sampled thread's own context cannot be freed while it is interrupted; another
 * thread's, read by wall mode's tick, can, and a fault then ends that sample in <unknown> as
 * any other read of the walk would). */
uint32_t pa_labels_of(const struct pa_python *py, uintptr_t ts, struct pa_span *span);

/* Normal context: the frame "labels:TEXT" of label set id (0: none) and the root span (id 0:
 * none), appended to out: TEXT a series label text ("endpoint=/api,tenant=t1", values quoted
 * where they must be, profile/series.c) of the set's pairs and the span's span_id (16
 * lowercase hex digits) and span_name (when it has one), in name order. */
struct pa_buf;
void pa_labels_frame_text(struct pa_buf *out, uint32_t id, const struct pa_span *span);

#endif
