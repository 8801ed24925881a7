/* symbols.h: names for native addresses of this process (normal context only).
 *
 * The objects loaded in the process (dl_iterate_phdr) are read from disk once each: their
 * function symbols from .symtab when present, else from the separate debug file found by
 * build id (/usr/lib/debug/.build-id/), and from .dynsym, with sizes, sorted. An address in
 * an object not seen yet (loaded later by dlopen) refreshes the list. Thread-safe (one lock);
 * never called from a signal handler. */
#ifndef PA_SYMBOLS_H
#define PA_SYMBOLS_H

#include <stddef.h>
#include <stdint.h>

struct pa_symbol {
    const char *name;   /* the function, or NULL when no symbol covers the address */
    const char *object; /* basename of the object ("libz.so.1"), or NULL when none maps it */
    uintptr_t offset;   /* from the symbol's start, or from the object's base without name */
    int in_interpreter; /* the object that holds _PyEval_EvalFrameDefault */
};

/* Resolves ip. Strings stay valid until pa_symbols_free (objects are never dropped before,
 * even after dlclose: their names may still be wanted for samples already taken). Returns 0
 * when a symbol was found, -1 otherwise (s still says what is known). */
int pa_symbols_resolve(uintptr_t ip, struct pa_symbol *s);

/* Writes "symbol [library]", "[library+0xOFFSET]" (no symbol covers ip; offset from the
 * object's load base, as in a file-relative address) or "[unknown+0xADDR]" (no object maps
 * ip). Always NUL-terminated; returns the length written (snprintf semantics, truncated). */
int pa_symbols_lookup(uintptr_t ip, char *out, size_t len);

/* Finds a function by exact name in any loaded object (first match in load order). 0 or -1. */
int pa_symbols_find(const char *name, uintptr_t *start, size_t *size);

/* Is this interpreter plumbing, the C machinery between Python frames and the C functions
 * they call (eval loop, vectorcall/call helpers, slot wrappers, the program's start-up and
 * thread start), which the interleaved stack leaves out? Module implementations
 * (zlib_compress, time_sleep) and library functions are not. */
int pa_symbols_is_plumbing(const char *symbol);

/* Drops every cached object (tests, and memory checkers at exit). */
void pa_symbols_free(void);

#endif
