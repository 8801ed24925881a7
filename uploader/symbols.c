/* symbols.c: native address -> "symbol [library]" for this process.
 *
 * Normal context (the uploader, and pa_native_init's callers). Each loaded object is read once
 * from its file: the ELF section headers lead to .symtab and .dynsym; their function symbols
 * (with sizes) are copied out, sorted by address, and the file is unmapped again. Stripped
 * objects keep only .dynsym, unless the distribution's debug file (found by the build id in
 * the loaded image) supplies a .symtab. Every offset read from a file is checked against the
 * file's size: a truncated or hostile file yields fewer symbols, never a crash. */
#include "symbols.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MAX_BUILD_ID = 64, SIZELESS_MAX = 64 * 1024 };

struct sym {
    uintptr_t start;
    uintptr_t size;
    uint32_t name; /* offset in the object's string blob */
    uint32_t rank; /* among aliases at one address, the lowest rank names it */
};

struct object {
    uintptr_t base;   /* dlpi_addr: file addresses + base = run-time addresses */
    uintptr_t lo, hi; /* span of the PT_LOAD segments */
    char *path;
    const char *name; /* basename, inside path */
    unsigned char build_id[MAX_BUILD_ID];
    size_t build_id_len;
    int live;   /* reported by the last dl_iterate_phdr */
    int loaded; /* symbols read (or tried) */
    struct sym *syms;
    size_t nsyms;
    char *strs;
    size_t strs_len, strs_cap;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct object *objs;
static size_t nobjs, capobjs;
static unsigned long long seen_adds, seen_subs;
static int refreshed;
static uintptr_t interp_eval; /* address of _PyEval_EvalFrameDefault, 0 when absent */

/* ---- the list of loaded objects ----------------------------------------------------------- */

struct found {
    uintptr_t base, lo, hi;
    char path[4096];
    unsigned char build_id[MAX_BUILD_ID];
    size_t build_id_len;
};

struct found_list {
    struct found *v;
    size_t n, cap;
    unsigned long long adds, subs;
};

static void note_build_id(struct found *f, const struct dl_phdr_info *info) {
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
        const unsigned char *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            size_t namesz = (nh->n_namesz + 3) & ~(size_t)3, descsz = (nh->n_descsz + 3) & ~3u;
            const unsigned char *name = p + sizeof *nh, *desc = name + namesz;
            if (desc + descsz > end)
                break;
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(name, "GNU", 4) &&
                nh->n_descsz <= MAX_BUILD_ID) {
                memcpy(f->build_id, desc, nh->n_descsz);
                f->build_id_len = nh->n_descsz;
                return;
            }
            p = desc + descsz;
        }
    }
}

/* Runs under the loader's lock: only copies what it is told. */
static int collect(struct dl_phdr_info *info, size_t size, void *arg) {
    struct found_list *l = arg;
    (void)size;
    l->adds = info->dlpi_adds;
    l->subs = info->dlpi_subs;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (a < lo)
            lo = a;
        if (a + ph->p_memsz > hi)
            hi = a + ph->p_memsz;
    }
    if (lo >= hi)
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        struct found *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return 1;
        l->v = v;
        l->cap = cap;
    }
    struct found *f = &l->v[l->n++];
    memset(f, 0, sizeof *f);
    f->base = info->dlpi_addr;
    f->lo = lo;
    f->hi = hi;
    snprintf(f->path, sizeof f->path, "%s", info->dlpi_name ? info->dlpi_name : "");
    note_build_id(f, info);
    return 0;
}

static void object_free(struct object *o) {
    free(o->path);
    free(o->syms);
    free(o->strs);
}

/* Re-reads the list of loaded objects; objects no longer loaded stay, marked not live. */
static void refresh(void) {
    struct found_list l = {0};
    dl_iterate_phdr(collect, &l);
    seen_adds = l.adds;
    seen_subs = l.subs;
    refreshed = 1;
    for (size_t i = 0; i < nobjs; i++)
        objs[i].live = 0;
    for (size_t k = 0; k < l.n; k++) {
        struct found *f = &l.v[k];
        if (!f->path[0]) { /* the main program */
            ssize_t n = readlink("/proc/self/exe", f->path, sizeof f->path - 1);
            f->path[n > 0 ? n : 0] = 0;
        }
        size_t i;
        for (i = 0; i < nobjs; i++)
            if (objs[i].base == f->base && objs[i].lo == f->lo && objs[i].hi == f->hi &&
                !strcmp(objs[i].path, f->path))
                break;
        if (i < nobjs) {
            objs[i].live = 1;
            continue;
        }
        if (nobjs == capobjs) {
            size_t cap = capobjs ? capobjs * 2 : 64;
            struct object *v = realloc(objs, cap * sizeof *v);
            if (!v)
                break;
            objs = v;
            capobjs = cap;
        }
        struct object *o = &objs[nobjs];
        memset(o, 0, sizeof *o);
        o->path = strdup(f->path);
        if (!o->path)
            break;
        const char *slash = strrchr(o->path, '/');
        o->name = slash ? slash + 1 : o->path;
        o->base = f->base;
        o->lo = f->lo;
        o->hi = f->hi;
        memcpy(o->build_id, f->build_id, f->build_id_len);
        o->build_id_len = f->build_id_len;
        o->live = 1;
        nobjs++;
    }
    free(l.v);
    if (!interp_eval)
        interp_eval = (uintptr_t)dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
}

/* Has anything been loaded or unloaded since the last refresh? */
static int changed_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    unsigned long long *v = arg;
    v[0] = info->dlpi_adds;
    v[1] = info->dlpi_subs;
    return 1; /* the counters are the same in every entry */
}

static int loader_changed(void) {
    unsigned long long v[2] = {0, 0};
    dl_iterate_phdr(changed_cb, v);
    return !refreshed || v[0] != seen_adds || v[1] != seen_subs;
}

/* ---- reading one object's symbols --------------------------------------------------------- */

static uint32_t add_string(struct object *o, const char *s, size_t n) {
    if (o->strs_len + n + 1 > o->strs_cap) {
        size_t cap = o->strs_cap ? o->strs_cap * 2 : 4096;
        while (cap < o->strs_len + n + 1)
            cap *= 2;
        char *p = realloc(o->strs, cap);
        if (!p)
            return UINT32_MAX;
        o->strs = p;
        o->strs_cap = cap;
    }
    uint32_t off = (uint32_t)o->strs_len;
    memcpy(o->strs + off, s, n);
    o->strs[off + n] = 0;
    o->strs_len += n + 1;
    return off;
}

/* Among aliases of one address (printf/_IO_printf), the global, least-underscored, shortest
 * name wins: that is the one a user knows. */
static uint32_t rank_of(const char *name, size_t len, unsigned bind) {
    unsigned underscores = 0;
    while (underscores < len && name[underscores] == '_')
        underscores++;
    unsigned b = bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2;
    return (uint32_t)(b << 24 | (underscores > 15 ? 15 : underscores) << 16 |
                      (len > 0xffff ? 0xffff : len));
}

/* Adds the function symbols of one symbol table section. Returns 1 if it was a .symtab. */
static int read_symtab(struct object *o, const unsigned char *img, size_t len,
                       const ElfW(Shdr) * sh, const ElfW(Shdr) * strsh) {
    if (sh->sh_entsize != sizeof(ElfW(Sym)) || sh->sh_offset > len ||
        sh->sh_size > len - sh->sh_offset || strsh->sh_offset > len ||
        strsh->sh_size > len - strsh->sh_offset || strsh->sh_type != SHT_STRTAB)
        return 0;
    const ElfW(Sym) *s = (const ElfW(Sym) *)(img + sh->sh_offset);
    size_t n = sh->sh_size / sizeof *s;
    const char *strtab = (const char *)img + strsh->sh_offset;
    size_t strsz = strsh->sh_size;
    struct sym *v = realloc(o->syms, (o->nsyms + n) * sizeof *v);
    if (!v)
        return 0;
    o->syms = v;
    for (size_t i = 0; i < n; i++) {
        unsigned type = ELF64_ST_TYPE(s[i].st_info);
        if ((type != STT_FUNC && type != STT_GNU_IFUNC) || s[i].st_shndx == SHN_UNDEF ||
            !s[i].st_value || s[i].st_name >= strsz)
            continue;
        const char *name = strtab + s[i].st_name;
        size_t nlen = strnlen(name, strsz - s[i].st_name);
        if (!nlen || nlen == strsz - s[i].st_name) /* empty or not terminated */
            continue;
        uint32_t off = add_string(o, name, nlen);
        if (off == UINT32_MAX)
            break;
        struct sym *y = &o->syms[o->nsyms++];
        y->start = o->base + s[i].st_value;
        y->size = s[i].st_size;
        y->name = off;
        y->rank = rank_of(name, nlen, ELF64_ST_BIND(s[i].st_info));
    }
    return sh->sh_type == SHT_SYMTAB;
}

/* Reads the symbol tables of an ELF image; returns 1 if it had a .symtab. */
static int read_image(struct object *o, const unsigned char *img, size_t len, int symtab_only) {
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)img;
    if (len < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) ||
        eh->e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
        eh->e_shentsize != sizeof(ElfW(Shdr)) || eh->e_shoff > len ||
        (size_t)eh->e_shnum * sizeof(ElfW(Shdr)) > len - eh->e_shoff)
        return 0;
    const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(img + eh->e_shoff);
    int had_symtab = 0;
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_SYMTAB && (symtab_only || sh[i].sh_type != SHT_DYNSYM))
            continue;
        if (sh[i].sh_link >= eh->e_shnum)
            continue;
        had_symtab |= read_symtab(o, img, len, &sh[i], &sh[sh[i].sh_link]);
    }
    return had_symtab;
}

static int read_file(struct object *o, const char *path, int symtab_only) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    int r = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
        void *img = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (img != MAP_FAILED) {
            r = read_image(o, img, (size_t)st.st_size, symtab_only);
            munmap(img, (size_t)st.st_size);
        }
    }
    close(fd);
    return r;
}

static int by_start(const void *a, const void *b) {
    const struct sym *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    if ((x->size != 0) != (y->size != 0)) /* a sized alias says more */
        return x->size ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static void load(struct object *o) {
    o->loaded = 1;
    int had_symtab = read_file(o, o->path, 0);
    if (had_symtab < 0 && o->lo == getauxval(AT_SYSINFO_EHDR))
        had_symtab = read_image(o, (const unsigned char *)o->lo, o->hi - o->lo, 0); /* the vDSO */
    if (had_symtab <= 0 && o->build_id_len > 1) {
        char path[64 + 2 * MAX_BUILD_ID], *p = path;
        p += sprintf(p, "/usr/lib/debug/.build-id/%02x/", o->build_id[0]);
        for (size_t i = 1; i < o->build_id_len; i++)
            p += sprintf(p, "%02x", o->build_id[i]);
        strcpy(p, ".debug");
        read_file(o, path, 1);
    }
    if (!o->nsyms)
        return;
    qsort(o->syms, o->nsyms, sizeof *o->syms, by_start);
    /* One entry per address (the best-named alias); a sizeless symbol (hand-written
     * assembly) covers up to the next one, within reason. */
    size_t w = 0;
    for (size_t i = 0; i < o->nsyms; i++)
        if (w == 0 || o->syms[w - 1].start != o->syms[i].start)
            o->syms[w++] = o->syms[i];
    o->nsyms = w;
    for (size_t i = 0; i < w; i++)
        if (!o->syms[i].size) {
            uintptr_t next = i + 1 < w ? o->syms[i + 1].start : o->hi;
            o->syms[i].size = next - o->syms[i].start;
            if (o->syms[i].size > SIZELESS_MAX)
                o->syms[i].size = SIZELESS_MAX;
        }
}

static const struct sym *find_sym(struct object *o, uintptr_t ip) {
    if (!o->loaded)
        load(o);
    size_t lo = 0, hi = o->nsyms;
    while (lo < hi) { /* first symbol starting after ip */
        size_t mid = lo + (hi - lo) / 2;
        if (o->syms[mid].start <= ip)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* Usually the symbol just before covers ip; a few more back catch a function that
     * encloses a smaller one (rare, but local labels typed as functions exist). */
    for (size_t k = lo, tries = 0; k > 0 && tries < 4; k--, tries++)
        if (ip - o->syms[k - 1].start < o->syms[k - 1].size)
            return &o->syms[k - 1];
    return NULL;
}

static struct object *find_object(uintptr_t ip, int live) {
    for (size_t i = nobjs; i-- > 0;) /* newest first: a dead object's range may be reused */
        if (objs[i].live == live && ip >= objs[i].lo && ip < objs[i].hi)
            return &objs[i];
    return NULL;
}

/* ---- public ------------------------------------------------------------------------------- */

int pa_symbols_resolve(uintptr_t ip, struct pa_symbol *s) {
    memset(s, 0, sizeof *s);
    pthread_mutex_lock(&lock);
    if (!refreshed)
        refresh();
    struct object *o = find_object(ip, 1);
    if (!o && loader_changed()) {
        refresh();
        o = find_object(ip, 1);
    }
    if (!o) /* samples taken before a dlclose */
        o = find_object(ip, 0);
    int r = -1;
    if (o) {
        const struct sym *y = find_sym(o, ip);
        s->object = o->name;
        s->in_interpreter = interp_eval >= o->lo && interp_eval < o->hi;
        s->offset = ip - o->base;
        if (y) {
            s->name = o->strs + y->name;
            s->offset = ip - y->start;
            r = 0;
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

int pa_symbols_lookup(uintptr_t ip, char *out, size_t len) {
    struct pa_symbol s;
    pa_symbols_resolve(ip, &s);
    int n;
    if (s.name)
        n = snprintf(out, len, "%s [%s]", s.name, s.object);
    else if (s.object)
        n = snprintf(out, len, "[%s+0x%lx]", s.object, (unsigned long)s.offset);
    else
        n = snprintf(out, len, "[unknown+0x%lx]", (unsigned long)ip);
    if (n < 0)
        n = 0;
    if (len && (size_t)n >= len)
        n = (int)len - 1;
    return n;
}

int pa_symbols_find(const char *name, uintptr_t *start, size_t *size) {
    int r = -1;
    pthread_mutex_lock(&lock);
    if (loader_changed())
        refresh();
    for (size_t i = 0; i < nobjs && r < 0; i++) {
        struct object *o = &objs[i];
        if (!o->live)
            continue;
        if (!o->loaded)
            load(o);
        for (size_t k = 0; k < o->nsyms; k++)
            if (!strcmp(o->strs + o->syms[k].name, name)) {
                *start = o->syms[k].start;
                *size = o->syms[k].size;
                r = 0;
                break;
            }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

void pa_symbols_free(void) {
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nobjs; i++)
        object_free(&objs[i]);
    free(objs);
    objs = NULL;
    nobjs = capobjs = 0;
    refreshed = 0;
    interp_eval = 0;
    pthread_mutex_unlock(&lock);
}

/* ---- interpreter plumbing ----------------------------------------------------------------- */

/* Exact names. */
static const char *const plumbing_names[] = {
    "main",
    "_start",
    "clone",
    "clone3",
    "start_thread",
    "thread_run",
    "pythread_wrapper",
    "t_bootstrap",
    "run_mod",
    "run_eval_code_obj",
    "Py_RunMain",
    "Py_BytesMain",
    "Py_Main",
    "slot_tp_call",
    "type_call",
    "call_function",
    "do_call_core",
    "function_code_fastcall",
    "wrapperdescr_call",
    "wrapper_call",
    "methoddescr_call",
    "classmethoddescr_call",
    "builtin_exec",
    "builtin_exec_impl",
    "builtin_eval",
    "builtin_eval_impl",
    "exec_code_in_module",
    "gen_send_ex",
    "gen_send_ex2",
    "gen_iternext",
    "gen_send",
    "PyIter_Send",
    "partial_call",
    "partial_vectorcall",
};

/* Prefixes: families of call machinery. */
static const char *const plumbing_prefixes[] = {
    "_PyEval",        /* the loop and its entry points (_PyEvalFramePushAndInit too) */
    "PyEval_Eval",    /* PyEval_EvalCode, PyEval_EvalFrameEx */
    "PyEval_Call",    /* PyEval_CallObjectWithKeywords (3.8) */
    "_PyObject_Call", /* _PyObject_Call, _PyObject_Call_Prepend, _PyObject_CallMethod... */
    "_PyObject_Vectorcall",
    "_PyObject_FastCall",
    "_PyObject_MakeTpCall",
    "PyObject_Call", /* PyObject_Call, PyObject_CallObject, PyObject_CallMethod... */
    "PyObject_Vectorcall",
    "PyVectorcall_Call",
    "_PyVectorcall_Call",
    "_PyFunction_", /* _PyFunction_Vectorcall, _PyFunction_FastCall* */
    "PyCFunction_Call",
    "_PyCFunction", /* _PyCFunctionWithKeywords_TrampolineCall */
    "cfunction_",   /* cfunction_vectorcall_O, cfunction_call */
    "method_vectorcall",
    "vectorcall_", /* vectorcall_method, vectorcall_unbound */
    "_Py_Check",   /* _Py_CheckFunctionResult */
    "_Py_call_",   /* _Py_call_instrumentation */
    "_Py_Vectorcall",
    "_PyRun_",
    "PyRun_",
    "pyrun_",
    "pymain_",
    "__libc_start",
    "slot_tp_",
    "slot_nb_",
    "slot_sq_",
    "slot_mp_",
    "slot_am_", /* slot wrappers of classes */
};

int pa_symbols_is_plumbing(const char *symbol) {
    if (!symbol)
        return 0;
    for (size_t i = 0; i < sizeof plumbing_names / sizeof *plumbing_names; i++)
        if (!strcmp(symbol, plumbing_names[i]))
            return 1;
    for (size_t i = 0; i < sizeof plumbing_prefixes / sizeof *plumbing_prefixes; i++)
        if (!strncmp(symbol, plumbing_prefixes[i], strlen(plumbing_prefixes[i])))
            return 1;
    return 0;
}
