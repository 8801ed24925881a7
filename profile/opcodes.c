/* opcodes.c - CPython's opcode names per minor version, for reports that unfold a line into
 * its bytecode instructions. The names are data (opcodes.inc, generated from each
 * interpreter's own opcode module by scripts/gen_opcodes.py), so a new CPython is a new row,
 * not new code. Names are offsets into one string, not pointers: libpyagent.so links this file
 * in, and each pointer would be a relocation the loader applies in every process that preloads
 * it, Python or not. */
#include "profile_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct opcode_table {
    int major, minor;
    const uint16_t *names; /* offsets into opcode_pool, by opcode; 0: none */
    size_t n;
};

#include "opcodes.inc"

const char *pa_opcode_name(int major, int minor, unsigned op) {
    for (size_t i = 0; i < sizeof opcode_tables / sizeof opcode_tables[0]; i++) {
        const struct opcode_table *t = &opcode_tables[i];
        if (t->major == major && t->minor == minor)
            return op < t->n && t->names[op] ? opcode_pool + t->names[op] : NULL;
    }
    return NULL;
}

struct key {
    const char *s;
    size_t len;
};

static int cmp_base(const void *k, const void *e) {
    const struct key *key = k;
    const char *name = opcode_pool + (*(const uint16_t(*)[2])e)[0];
    size_t n = strlen(name);
    int c = memcmp(key->s, name, key->len < n ? key->len : n);
    return c ? c : key->len < n ? -1 : key->len > n;
}

const char *pa_opcode_base(const char *name, size_t len) {
    struct key k = {name, len};
    const uint16_t(*e)[2] = bsearch(&k, opcode_bases, sizeof opcode_bases / sizeof opcode_bases[0],
                                    sizeof opcode_bases[0], cmp_base);
    return e ? opcode_pool + (*e)[1] : NULL;
}
