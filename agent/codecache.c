/* codecache.c: the code-object cache, the string arena and line-table decoding.
 *
 * SIGNAL-HANDLER SIDE (pa_code_lookup, pa_code_line and everything static they call): no
 * malloc, no locks, no stdio. All interpreter memory is read under the caller's fault guard.
 *
 * The cache is an open-addressing index keyed by code address whose slots hold entry numbers
 * (0 empty, FILLING while claimed by CAS, then the entry's number + 1, published with release
 * order); the entries themselves are appended to a dense array in the order code objects are
 * first met. A reader that meets a FILLING slot moves on and may add a second entry for the
 * same code object: duplicates are harmless, names are compared as strings when the profile
 * is written.
 *
 * The index has two levels: one page probed first, then the large one. A short program's
 * code objects fit in the first, so its samples fault in a few pages (the first index page,
 * the first entries, the arena's first strings) rather than one page of a 3.5 MiB table per
 * code object, at a few microseconds each on a VM. The first level's slots are never freed,
 * so a code object placed in the second level (its window in the first was full) is never
 * placed in the first later. */
#include "codecache.h"

#include <stdatomic.h>
#include <string.h>

#include "../base/bss.h"
#include "../base/reserve.h"
#include "guard.h"

enum { IDX_EMPTY = 0, IDX_FILLING = 0xffffffffu };
enum { MAX_PROBE = 64, NAME_MAX_CHARS = 200, FILE_MAX_CHARS = 1000 };
enum { FIRST_LOG2 = 10, FIRST_PROBE = 16 }; /* the first level: 4 KiB, 16 slots a cache line */

/* What tells code objects at one address apart: the same address with other names, another
 * line table or another first line is another code object. */
struct code_key {
    uintptr_t filename, name, linetable;
    int32_t firstlineno;
};

struct code_entry {
    uintptr_t code;
    struct code_key key;
    uint32_t qualname_off, filename_off; /* into the arena */
    /* The last (offset, line) decoded for this code object, packed so that one atomic load
     * reads a consistent pair: a caller's frame sits at the same call site sample after
     * sample, and decoding a 3.11+ location table from its start costs far more. */
    _Atomic uint64_t last_line;
    /* Where the last decode of a 3.11+ location table found its entry (packed, see
     * pack_resume): a later offset is decoded from there rather than from the table's start.
     * A module body runs from its top to its end while it is imported, and each sample of it
     * decoded its long table from the start (half of the handler's instructions in `import
     * asyncio`). */
    _Atomic uint64_t resume;
};

static _Atomic uint32_t *index1; /* 2^FIRST_LOG2 slots */
static _Atomic uint32_t *index2; /* the second level: slot_mask + 1 slots */
static uint32_t slot_mask;
static struct code_entry *slots; /* one per index slot of either level, at most */
static _Atomic uint32_t slots_used;
/* The arena lies under the index and grows down from it: a string's offset is its distance
 * below arena_end, so that the first strings share the index's 2 MiB area (base/reserve.h). */
static char *arena_end;
static uint32_t arena_size;
static _Atomic uint32_t arena_used = 1; /* offset 0 means "none" */
static struct pa_reserve reserved;
unsigned long pa_code_cache_full;

int pa_code_cache_init(unsigned capacity_log2, unsigned arena_bytes) {
    if (slots)
        return 0;
    size_t n = (size_t)1 << capacity_log2, first = (size_t)1 << FIRST_LOG2;
    /* One mapping: the arena under the pivot, then the first level, the second, the entries
     * (untouched until used: MAP_NORESERVE). */
    size_t bytes = (first + n) * sizeof *index2 + (first + n) * sizeof *slots;
    char *m = pa_reserve_around(arena_bytes, bytes, &reserved);
    if (!m)
        return -1;
    index1 = (_Atomic uint32_t *)m;
    index2 = index1 + first;
    slots = (struct code_entry *)(index2 + n); /* 8-aligned: first + n is even */
    slot_mask = (uint32_t)(n - 1);
    arena_end = m;
    arena_size = arena_bytes;
    return 0;
}

static inline uint32_t hash_ptr(uintptr_t p) {
    uint64_t x = (uint64_t)p >> 4;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (uint32_t)x;
}

/* Appends UTF-8 for code point c to out (cap bytes left); returns bytes written or 0. */
static unsigned put_utf8(char *out, unsigned cap, uint32_t c) {
    if (c < 0x80 && cap >= 1) {
        /* Names become frame names: keep the folded line parseable. */
        out[0] = (c == ';') ? ':' : (c < 0x20 || c == 0x7f) ? '?' : (char)c;
        return 1;
    }
    if (c < 0x800 && cap >= 2) {
        out[0] = (char)(0xc0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c >= 0xd800 && c < 0xe000) /* lone surrogate: not representable in UTF-8 */
        return put_utf8(out, cap, '?');
    if (c < 0x10000 && cap >= 3) {
        out[0] = (char)(0xe0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        out[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    if (c < 0x110000 && cap >= 4) {
        out[0] = (char)(0xf0 | (c >> 18));
        out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
        out[2] = (char)(0x80 | ((c >> 6) & 0x3f));
        out[3] = (char)(0x80 | (c & 0x3f));
        return 4;
    }
    return 0;
}

int pa_code_copy_str(const struct pa_python *py, uintptr_t s, unsigned max_chars, char *out,
                     unsigned cap) {
    const struct pa_layout *l = &py->layout;
    if (cap == 0 || !pa_is_type(py, s, py->unicode_type))
        return -1;
    uint32_t state = PA_READ(uint32_t, s + l->u_state);
    long len = PA_READ(long, s + l->u_length);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    if (!compact || len < 0 || (kind != 1 && kind != 2 && kind != 4))
        return -1;
    uintptr_t data = s + (ascii ? l->u_ascii_size : l->u_compact_size);
    unsigned n = len > (long)max_chars ? max_chars : (unsigned)len;
    unsigned w = 0;
    for (unsigned i = 0; i < n; i++) {
        uint32_t c = kind == 1   ? PA_READ(uint8_t, data + i)
                     : kind == 2 ? PA_READ(uint16_t, data + 2 * i)
                                 : PA_READ(uint32_t, data + 4 * i);
        unsigned k = put_utf8(out + w, cap - 1 - w, c);
        if (k == 0)
            break; /* no room for the whole character: the prefix ends here */
        w += k;
    }
    out[w] = 0;
    return (int)w;
}

/* Copies a str object into the arena as NUL-terminated UTF-8; returns its offset (its start's
 * distance below arena_end) or 0. */
static uint32_t arena_put_str(const struct pa_python *py, uintptr_t s, unsigned max_chars) {
    const struct pa_layout *l = &py->layout;
    if (!pa_is_type(py, s, py->unicode_type))
        return 0;
    long len = PA_READ(long, s + l->u_length);
    if (len < 0)
        return 0;
    unsigned n = len > (long)max_chars ? max_chars : (unsigned)len;
    unsigned need = n * 4 + 1; /* worst case UTF-8 */
    uint64_t off =
        atomic_fetch_add_explicit(&arena_used, need, memory_order_relaxed) + (uint64_t)need;
    if (off > arena_size)
        return 0;
    return pa_code_copy_str(py, s, max_chars, arena_end - off, need) < 0 ? 0 : (uint32_t)off;
}

/* Reads the key of the code object at code (of the code type); under the guard. */
static struct code_key read_key(const struct pa_python *py, uintptr_t code) {
    const struct pa_layout *l = &py->layout;
    return (struct code_key){
        .filename = PA_READ(uintptr_t, code + l->co_filename),
        .name = PA_READ(uintptr_t, code + (l->co_qualname ? l->co_qualname : l->co_name)),
        .linetable = PA_READ(uintptr_t, code + l->co_linetable),
        .firstlineno = PA_READ(int32_t, code + l->co_firstlineno),
    };
}

static int same_key(const struct code_key *a, const struct code_key *b) {
    return a->filename == b->filename && a->name == b->name && a->linetable == b->linetable &&
           a->firstlineno == b->firstlineno;
}

uint32_t pa_code_lookup(const struct pa_python *py, uintptr_t code) {
    if (!slots || !pa_is_type(py, code, py->code_type))
        return PA_SYN_UNKNOWN;
    struct code_key key = read_key(py, code);
    uint32_t h = hash_ptr(code);
    for (uint32_t probe = 0; probe < FIRST_PROBE + MAX_PROBE; probe++) {
        _Atomic uint32_t *x = probe < FIRST_PROBE ? &index1[(h + probe) & ((1u << FIRST_LOG2) - 1)]
                                                  : &index2[(h + probe - FIRST_PROBE) & slot_mask];
        uint32_t v = atomic_load_explicit(x, memory_order_acquire);
        if (v != IDX_EMPTY && v != IDX_FILLING) {
            const struct code_entry *e = &slots[v - 1];
            if (e->code == code && same_key(&e->key, &key))
                return PA_SYN_FIRST_CODE + v - 1;
            continue;
        }
        if (v != IDX_EMPTY)
            continue; /* another thread is filling it */
        uint32_t expected = IDX_EMPTY;
        if (!atomic_compare_exchange_strong_explicit(x, &expected, IDX_FILLING,
                                                     memory_order_acquire, memory_order_relaxed))
            continue;
        /* Each index slot is claimed once: there is an entry for every one. */
        uint32_t k = atomic_fetch_add_explicit(&slots_used, 1, memory_order_relaxed);
        struct code_entry *e = &slots[k];
        e->code = code;
        e->key = key;
        /* If a read below faults, the guard jumps out and this index slot stays FILLING
         * forever: one slot lost, never a wrong name. */
        e->qualname_off = arena_put_str(py, key.name, NAME_MAX_CHARS);
        e->filename_off = arena_put_str(py, key.filename, FILE_MAX_CHARS);
        atomic_store_explicit(x, k + 1, memory_order_release);
        return PA_SYN_FIRST_CODE + k;
    }
    pa_code_cache_full++;
    return PA_SYN_UNKNOWN;
}

const char *pa_code_qualname(uint32_t id) {
    const struct code_entry *e = &slots[id - PA_SYN_FIRST_CODE];
    return e->qualname_off ? arena_end - e->qualname_off : "<unnamed>";
}

const char *pa_code_filename(uint32_t id) {
    const struct code_entry *e = &slots[id - PA_SYN_FIRST_CODE];
    return e->filename_off ? arena_end - e->filename_off : "<unknown file>";
}

const char *pa_code_synthetic_name(uint32_t id) {
    static const char *const names[PA_SYN_FIRST_CODE] = {[PA_SYN_UNKNOWN] = "<unknown>",
                                                         [PA_SYN_TRUNCATED] = "<truncated>",
                                                         [PA_SYN_NO_PYTHON] = "<no Python frames>",
                                                         [PA_SYN_IDLE] = "<idle>",
                                                         [PA_SYN_GIL_WAIT] =
                                                             "<waiting for the GIL>",
                                                         [PA_SYN_STARTUP] = "<startup>",
                                                         [PA_SYN_SHUTDOWN] = "<shutdown>",
                                                         [PA_SYN_GC] = "<GC>"};
    return id < PA_SYN_FIRST_CODE && names[id] ? names[id] : "<unknown>";
}

/* ---- line tables ------------------------------------------------------------------------ */

/* Reads the bytes object at obj: *data and *size, or returns 0. */
static int bytes_of(const struct pa_python *py, uintptr_t obj, uintptr_t *data, long *size) {
    if (!pa_is_type(py, obj, py->bytes_type))
        return 0;
    *size = PA_READ(long, obj + py->layout.b_size);
    *data = obj + py->layout.b_sval;
    return *size >= 0 && *size < (1L << 26);
}

/* 3.8-3.9 co_lnotab: (byte offset increment, signed line increment) pairs. */
static int line_lnotab(uintptr_t tab, long size, int line, long target) {
    long addr = 0;
    for (long i = 0; i + 1 < size; i += 2) {
        addr += PA_READ(uint8_t, tab + i);
        if (addr > target)
            break;
        line += (int8_t)PA_READ(uint8_t, tab + i + 1);
    }
    return line;
}

/* 3.10 co_linetable: (byte length, signed line delta) pairs; delta -128 means "no line". */
static int line_310(uintptr_t tab, long size, int line, long target) {
    long addr = 0;
    for (long i = 0; i + 1 < size; i += 2) {
        unsigned sdelta = PA_READ(uint8_t, tab + i);
        int ldelta = (int8_t)PA_READ(uint8_t, tab + i + 1);
        long end = addr + sdelta;
        if (ldelta != -128)
            line += ldelta;
        if (target >= addr && target < end)
            return ldelta == -128 ? -1 : line;
        addr = end;
    }
    return -1;
}

/* 3.11+ location table: entries of (code, length in code units) with varint payloads. */
static unsigned read_varint(uintptr_t tab, long size, long *i) {
    unsigned v = 0, shift = 0;
    while (*i < size && shift < 32) {
        unsigned b = PA_READ(uint8_t, tab + (*i)++);
        v |= (b & 63) << shift;
        shift += 6;
        if (!(b & 64))
            break;
    }
    return v;
}

static int read_svarint(uintptr_t tab, long size, long *i) {
    unsigned v = read_varint(tab, size, i);
    return (v & 1) ? -(int)(v >> 1) : (int)(v >> 1);
}

/* One entry of a location table (Objects/locations.md): the source span of a code unit.
 * Columns are 0-based, -1 when the table has none; line -1 is "no line". */
struct location {
    int line, end_line, col, end_col;
};

/* A position in a location table at the start of an entry: its byte, its first code unit,
 * the line before its delta. */
struct table_pos {
    long i, addr;
    int line;
};

/* Decodes the entry that covers code unit target_units into *out, from *at (a position at or
 * before it), and leaves *at at that entry's start; 0 when none does (past the end, or a
 * garbage table). Entries before it are skipped, their columns left unread. */
static int locate_from(uintptr_t tab, long size, struct table_pos *at, long target_units,
                       struct location *out) {
    long addr = at->addr, i = at->i;
    int line = at->line;
    while (i < size) {
        long entry = i;
        int entry_line = line;
        unsigned first = PA_READ(uint8_t, tab + i++);
        if (!(first & 0x80))
            return 0; /* lost sync: garbage table */
        unsigned code = (first >> 3) & 15;
        long len = (first & 7) + 1;
        int hit = target_units >= addr && target_units < addr + len;
        struct location loc = {-1, -1, -1, -1};
        if (code == 15) {
            /* no location: nothing follows */
        } else if (code == 14) { /* long form */
            line += read_svarint(tab, size, &i);
            loc.end_line = line + (int)read_varint(tab, size, &i);
            loc.col = (int)read_varint(tab, size, &i) - 1;
            loc.end_col = (int)read_varint(tab, size, &i) - 1;
        } else if (code == 13) { /* no columns */
            line += read_svarint(tab, size, &i);
            loc.end_line = line;
        } else if (code >= 10) { /* one line: start and end columns */
            line += (int)code - 10;
            loc.end_line = line;
            if (hit) {
                loc.col = PA_READ(uint8_t, tab + i);
                loc.end_col = PA_READ(uint8_t, tab + i + 1);
            }
            i += 2;
        } else { /* short form: the column's high bits in code, its low bits and length next */
            loc.end_line = line;
            if (hit) {
                unsigned b = PA_READ(uint8_t, tab + i);
                loc.col = (int)(code << 3 | ((b >> 4) & 7));
                loc.end_col = loc.col + (int)(b & 15);
            }
            i += 1;
        }
        if (hit) {
            loc.line = code == 15 ? -1 : line;
            *out = loc;
            *at = (struct table_pos){entry, addr, entry_line};
            return 1;
        }
        addr += len;
    }
    return 0;
}

static int locate(uintptr_t tab, long size, int line, long target_units, struct location *out) {
    struct table_pos at = {0, 0, line};
    return locate_from(tab, size, &at, target_units, out);
}

/* A table position in 64 bits, relative to the first line: byte 24 bits, code unit 20 bits,
 * line 20 bits (signed). 0: none, or a position that does not fit (decoded from the start). */
static uint64_t pack_resume(const struct table_pos *p, int first) {
    long d = (long)p->line - first;
    if (p->i <= 0 || p->i >= (1L << 24) || p->addr < 0 || p->addr >= (1L << 20) ||
        d < -(1L << 19) || d >= (1L << 19))
        return 0;
    return (uint64_t)p->i | (uint64_t)p->addr << 24 | (uint64_t)(d + (1L << 19)) << 44;
}

static struct table_pos unpack_resume(uint64_t v, int first) {
    return (struct table_pos){(long)(v & 0xffffff), (long)(v >> 24 & 0xfffff),
                              first + (int)((long)(v >> 44) - (1L << 19))};
}

/* pa_code_line for a 3.11+ table, from the entry's resume point when the offset is at or past
 * it. A position that reads as garbage (a table replaced under a reused entry) is dropped and
 * the table decoded from its start. */
static int line_resumed(struct code_entry *e, uintptr_t tab, long size, int first, long target) {
    struct table_pos at = {0, 0, first};
    uint64_t v = atomic_load_explicit(&e->resume, memory_order_relaxed);
    if (v) {
        struct table_pos r = unpack_resume(v, first);
        if (r.addr <= target && r.i < size)
            at = r;
    }
    struct location loc;
    if (!locate_from(tab, size, &at, target, &loc)) {
        if (at.i == 0)
            return -1;
        at = (struct table_pos){0, 0, first};
        if (!locate_from(tab, size, &at, target, &loc))
            return -1;
    }
    atomic_store_explicit(&e->resume, pack_resume(&at, first), memory_order_relaxed);
    return loc.line;
}

static int line_locations(uintptr_t tab, long size, int line, long target_units) {
    struct location loc;
    return locate(tab, size, line, target_units, &loc) ? loc.line : -1;
}

/* The line of offset_bytes in code; a 3.11+ table from e's resume position when there is an
 * entry. */
static int code_line(const struct pa_python *py, struct code_entry *e, uintptr_t code,
                     long offset_bytes) {
    const struct pa_layout *l = &py->layout;
    uintptr_t tab;
    long size;
    if (offset_bytes < 0 || !bytes_of(py, PA_READ(uintptr_t, code + l->co_linetable), &tab, &size))
        return -1;
    int first = PA_READ(int32_t, code + l->co_firstlineno);
    switch (l->line_kind) {
    case PA_LINE_LNOTAB:
        return line_lnotab(tab, size, first, offset_bytes);
    case PA_LINE_TABLE310:
        return line_310(tab, size, first, offset_bytes);
    default:
        return e ? line_resumed(e, tab, size, first, offset_bytes / 2)
                 : line_locations(tab, size, first, offset_bytes / 2);
    }
}

int pa_code_line_cached(const struct pa_python *py, uint32_t id, uintptr_t code,
                        long offset_bytes) {
    struct code_entry *e = &slots[id - PA_SYN_FIRST_CODE];
    /* offset + 1 so that a zero word means "nothing cached yet". */
    uint64_t key = (uint64_t)(uint32_t)(offset_bytes + 1) << 32;
    uint64_t last = atomic_load_explicit(&e->last_line, memory_order_relaxed);
    if ((last & 0xffffffff00000000ULL) == key)
        return (int32_t)(uint32_t)last;
    int line = code_line(py, e, code, offset_bytes);
    atomic_store_explicit(&e->last_line, key | (uint32_t)line, memory_order_relaxed);
    return line;
}

int pa_code_line(const struct pa_python *py, uintptr_t code, long offset_bytes) {
    return code_line(py, NULL, code, offset_bytes);
}

/* ---- columns (normal context) ----------------------------------------------------------- */

/* Spans already found, by (id, offset, line): an entry never changes once published, so
 * neither do they, and a code object freed since still gets the span it had. Open addressing,
 * a few probes, the first of them replaced when all are taken; the callers are serialized
 * (the uploader, under its lock). */
enum { COLS_MEMO = 1 << 16, COLS_PROBE = 8 };
struct cols_memo {
    uint32_t id, unit;          /* unit: offset in code units + 1; 0 = empty */
    int32_t line, col, end_col; /* col -1: no span */
};
static struct cols_memo cols_memo[COLS_MEMO] PA_LARGE_BSS(cols_memo);

static struct cols_memo *memo_slot(uint32_t id, uint32_t unit, int line, int *hit) {
    uint32_t h = hash_ptr(((uintptr_t)id << 32 | unit) << 4) ^ (uint32_t)line;
    for (uint32_t k = 0; k < COLS_PROBE; k++) {
        struct cols_memo *m = &cols_memo[(h + k) & (COLS_MEMO - 1)];
        *hit = m->unit && m->id == id && m->unit == unit && m->line == line;
        if (*hit || !m->unit)
            return m;
    }
    *hit = 0;
    return &cols_memo[h & (COLS_MEMO - 1)];
}

/* The location of code unit `unit` of the live code object of entry e: 0 when it is gone
 * (unreadable, or another object with another key at its address) or the table has none. */
static int read_location(const struct pa_python *py, const struct code_entry *e, long unit,
                         struct location *loc) {
    sigjmp_buf env;
    sigjmp_buf *volatile prev = pa_guard_env;
    pa_guard_env = &env;
    if (sigsetjmp(env, 0)) {
        pa_guard_env = prev;
        return 0;
    }
    int found = 0;
    uintptr_t tab;
    long size;
    if (pa_is_type(py, e->code, py->code_type)) {
        struct code_key key = read_key(py, e->code);
        found = same_key(&key, &e->key) && bytes_of(py, key.linetable, &tab, &size) &&
                locate(tab, size, key.firstlineno, unit, loc);
    }
    pa_guard_env = prev;
    return found;
}

int pa_code_columns(const struct pa_python *py, uint32_t id, long offset_bytes, int line, int live,
                    int *col, int *end_col) {
    /* An id from a sample names an entry that was complete when it was returned. */
    if (!slots || id < PA_SYN_FIRST_CODE ||
        id - PA_SYN_FIRST_CODE >= atomic_load_explicit(&slots_used, memory_order_acquire) ||
        line <= 0 || offset_bytes < 0 || offset_bytes >= (1L << 30) ||
        py->layout.line_kind != PA_LINE_LOCATIONS)
        return 0;
    const struct code_entry *e = &slots[id - PA_SYN_FIRST_CODE];
    uint32_t unit = (uint32_t)(offset_bytes / 2) + 1;
    int hit;
    struct cols_memo *m = memo_slot(id, unit, line, &hit);
    if (!hit) {
        /* The code object may have been freed since the sample and its memory reused: read
         * only while the interpreter runs, under the guard, from an object with the entry's
         * key. What is not found now may be found later: not remembered. */
        struct location loc;
        if (!live || !pa_guard_installed() || pa_py_gone() ||
            !read_location(py, e, (long)unit - 1, &loc))
            return 0;
        /* A span that leaves the frame's line, or has no columns, is written as none. */
        int on_line = loc.line == line && loc.end_line == line && loc.col >= 0 &&
                      loc.end_col >= loc.col && loc.end_col < 0xffff;
        *m = (struct cols_memo){id, unit, line, on_line ? loc.col : -1, on_line ? loc.end_col : -1};
    }
    if (m->col < 0)
        return 0;
    *col = m->col;
    *end_col = m->end_col;
    return 1;
}
