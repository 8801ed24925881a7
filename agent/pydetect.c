/* pydetect.c: is this process CPython? Compiled into the stub libpyagent.so, which every
 * preloaded process loads (shim/stub.c), and into the agent (pyversions.c). Normal context.
 *
 * Every CPython exports Py_GetVersion and Py_IsInitialized (_PyRuntime only from 3.7 on:
 * older versions are CPython too, and are told they are not supported). Most processes that
 * ask are not Python (/bin/sh, the C compiler): the loaded objects' own hash tables answer
 * first, without the loader's failed lookup, which allocates its error message (the heap's
 * first page and brk calls in a process that may never use malloc: architecture.md,
 * "Start-up cost"). dlsym decides wherever an object might define the name. */
#include "pydetect.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

/* The GNU hash of a symbol name (the ELF gABI extension's: h * 33 + c from 5381). */
static uint32_t gnu_hash(const char *name) {
    uint32_t h = 5381;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        h = h * 33 + *c;
    return h;
}

/* A dynamic-section address: relocated in place by the loader for most objects, not for
 * some (the vDSO), so one below the load address is taken as relative to it. */
static const void *dyn_ptr(const struct dl_phdr_info *info, ElfW(Addr) p) {
    return (const void *)(p < info->dlpi_addr ? p + info->dlpi_addr : p);
}

struct defined_query {
    const char *name;
    uint32_t hash;
    int found;      /* an object defines it */
    int unknown;    /* an object could not be asked (no DT_GNU_HASH) */
    uintptr_t only; /* 0, or an address: ask only the object whose segments hold it */
};

/* Does one of the object's loadable segments hold addr? */
static int holds(const struct dl_phdr_info *info, uintptr_t addr) {
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && addr >= lo && addr - lo < ph->p_memsz)
            return 1;
    }
    return 0;
}

/* Looks the query's symbol up in one loaded object's GNU hash table: found when the object
 * defines it (an undefined reference, as an executable linked with libpython has, does
 * not count). */
static int defines(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    struct defined_query *q = arg;
    if (q->only && !holds(info, q->only))
        return 0;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn)
        return 0;
    const uint32_t *gh = NULL;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        if (dyn->d_tag == DT_GNU_HASH)
            gh = dyn_ptr(info, dyn->d_un.d_ptr);
        else if (dyn->d_tag == DT_SYMTAB)
            symtab = dyn_ptr(info, dyn->d_un.d_ptr);
        else if (dyn->d_tag == DT_STRTAB)
            strtab = dyn_ptr(info, dyn->d_un.d_ptr);
    }
    if (!symtab || !strtab)
        return 0; /* no symbols at all */
    if (!gh) {
        q->unknown = 1;
        return 0;
    }
    uint32_t nbuckets = gh[0], symoffset = gh[1], bloom_size = gh[2], shift = gh[3];
    if (nbuckets == 0 || bloom_size == 0)
        return 0;
    const ElfW(Addr) *bloom = (const ElfW(Addr) *)(gh + 4);
    const uint32_t *buckets = (const uint32_t *)(bloom + bloom_size), *chain = buckets + nbuckets;
    enum { BITS = sizeof(ElfW(Addr)) * 8 };
    uint32_t h = q->hash;
    ElfW(Addr) word = bloom[(h / BITS) % bloom_size];
    ElfW(Addr) mask = ((ElfW(Addr))1 << (h % BITS)) | ((ElfW(Addr))1 << ((h >> shift) % BITS));
    if ((word & mask) != mask)
        return 0;
    for (uint32_t i = buckets[h % nbuckets]; i >= symoffset; i++) {
        uint32_t c = chain[i - symoffset];
        if ((c | 1) == (h | 1) && strcmp(strtab + symtab[i].st_name, q->name) == 0 &&
            symtab[i].st_shndx != SHN_UNDEF) {
            q->found = 1;
            return 1;
        }
        if (c & 1)
            break;
    }
    return 0;
}

int pa_py_exported(void) {
    struct defined_query q = {"Py_GetVersion", gnu_hash("Py_GetVersion"), 0, 0, 0};
    dl_iterate_phdr(defines, &q);
    if (!q.found && !q.unknown)
        return 0;
    return pa_py_exported_in(RTLD_DEFAULT);
}

int pa_py_exported_in(void *handle) {
    return dlsym(handle, "Py_GetVersion") != NULL && dlsym(handle, "Py_IsInitialized") != NULL;
}

int pa_py_defined_beside(const void *addr, const char *name) {
    struct defined_query q = {name, gnu_hash(name), 0, 0, (uintptr_t)addr};
    dl_iterate_phdr(defines, &q);
    return q.found ? 1 : q.unknown ? -1 : 0;
}
