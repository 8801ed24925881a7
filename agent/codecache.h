/* codecache.h: code object -> (qualified name, file name), resolved once per code object.
 *
 * SIGNAL-HANDLER SIDE for pa_code_lookup: the first sample that meets a code object copies
 * its names out of interpreter memory into a lock-free, append-only arena; later samples find
 * the entry by address and validate it (the object at that address may have been freed and
 * another allocated there). Entries are never changed once published, so the agent thread
 * can read them at any time without locks. */
#ifndef PA_CODECACHE_H
#define PA_CODECACHE_H

#include <stdint.h>

#include "guard.h"
#include "pyversions.h"

/* Frame ids below this are synthetic frames; code entries start here. */
enum pa_synthetic {
    PA_SYN_UNKNOWN = 1,    /* <unknown>: a frame we could not read */
    PA_SYN_TRUNCATED = 2,  /* <truncated>: deeper frames cut off at the depth limit */
    PA_SYN_NO_PYTHON = 3,  /* <no Python frames>: a thread with no Python stack */
    PA_SYN_IDLE = 5,       /* <idle>: wall mode, the thread waits in a system call */
    PA_SYN_GIL_WAIT = 6,   /* <waiting for the GIL>: wall mode */
    PA_SYN_STARTUP = 7,    /* <startup>: before the interpreter is initialized */
    PA_SYN_SHUTDOWN = 8,   /* <shutdown>: finalizing, or finalized before our exit flush */
    PA_SYN_INTERP = 9,     /* interp:ID, the root of a sub-interpreter's sample; line = ID */
    PA_SYN_GC = 10,        /* <GC>: the leaf while this thread runs the cyclic collector */
    PA_SYN_LABELS = 11,    /* labels:TEXT, the root of a labelled sample; line = label set id */
    PA_SYN_TASK = 12,      /* task:NAME, the running asyncio task (agent/tasks.h encodes NAME) */
    PA_SYN_SPAN = 13,      /* a root span's id: line = its low 32 bits, instr = its high ones */
    PA_SYN_SPAN_NAME = 14, /* that span's name: line = its id (agent/labels.h) */
    PA_SYN_AWAIT = 15,     /* <await X>, what a suspended task waits on; line = pa_await_kind */
    PA_SYN_FIRST_CODE = 16,
};

/* Whether obj is an object of type (a type object's address), under the fault guard: ob_type
 * sits at 8, or at 24 in a free-threaded build's larger header (the layout says). */
static inline int pa_is_type(const struct pa_python *py, uintptr_t obj, uintptr_t type) {
    return pa_aligned(obj, 8) && PA_READ(uintptr_t, obj + py->layout.ob_type) == type;
}

/* Must be called once in normal context before any lookup; 0 or -1 (mmap failed). */
int pa_code_cache_init(unsigned capacity_log2, unsigned arena_bytes);

/* Signal-safe. Returns the frame id of the code object, or PA_SYN_UNKNOWN (unreadable, or
 * the cache or arena is full: counted in pa_code_cache_full). Must run under the fault
 * guard. */
uint32_t pa_code_lookup(const struct pa_python *py, uintptr_t code);

/* Signal-safe, under the guard: copies at most max_chars characters of the str object s into
 * out as NUL-terminated UTF-8 of at most cap - 1 bytes (whole characters only; ';' and
 * control characters replaced, as in frame names). Returns the bytes written, or -1 when s
 * is not a str this can read. */
int pa_code_copy_str(const struct pa_python *py, uintptr_t s, unsigned max_chars, char *out,
                     unsigned cap);

/* Normal context: names of a frame id (valid ids only); strings live as long as the process. */
const char *pa_code_qualname(uint32_t id);
const char *pa_code_filename(uint32_t id);
/* Normal context: the name of a synthetic id (below PA_SYN_FIRST_CODE, PA_SYN_INTERP and
 * PA_SYN_LABELS aside: their frames are interp:ID and labels:TEXT), "<unknown>" for one that
 * has none. */
const char *pa_code_synthetic_name(uint32_t id);

/* Signal-safe: the line executed at the given instruction offset (in bytes from the start of
 * the bytecode) of a live code object, or -1 when the table says "no line". Under the guard. */
int pa_code_line(const struct pa_python *py, uintptr_t code, long offset_bytes);

/* The same through the entry of a code-cache id (valid id for that code object): remembers
 * the last offset decoded, which is where a caller's frame stays while its callee runs. */
int pa_code_line_cached(const struct pa_python *py, uint32_t id, uintptr_t code, long offset_bytes);

/* Normal context (never the signal handler): the 0-based columns [*col, *end_col) of the
 * source span of the instruction at offset_bytes of the code object of id (3.11+ location
 * table), when that span starts and ends on `line`, the frame's line, and has columns; else 0.
 * live: the interpreter runs (not finalizing), so code objects may be read: the code object is
 * read again under the fault guard, only while it still has the key its entry was made with.
 * Without live only what an earlier call found is answered: what is found is remembered for
 * that (id, offset, line). Calls must not run concurrently. */
int pa_code_columns(const struct pa_python *py, uint32_t id, long offset_bytes, int line, int live,
                    int *col, int *end_col);

extern unsigned long pa_code_cache_full;

#endif
