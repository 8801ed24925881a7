/* embed_late.c: a C program that embeds CPython as uWSGI and mod_wsgi do: libpython is loaded
 * with dlopen after start (RTLD_LOCAL), then initialized, and runs a script.
 *
 *   pa_embed_late [--reload] LIBPYTHON SCRIPT [ARG...]
 *
 * --reload first loads libpython and unloads it again, as Apache does with its modules when it
 * reads its configuration the second time at start, and keeps the address range it had
 * reserved, so the second load lands elsewhere (as it does in Apache, where other modules
 * load in between).
 * Exits with the script's status (PyRun_SimpleFileExFlags: 0, or 1 on an exception). No
 * Python header: the few functions are looked up by name. */
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <wchar.h>

struct span {
    uintptr_t base, end;
};

static int find_span(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    struct span *s = arg;
    if (info->dlpi_addr != s->base)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && info->dlpi_addr + ph->p_vaddr + ph->p_memsz > s->end)
            s->end = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
    }
    return 1;
}

/* Loads and unloads libpython, then reserves the range it occupied. */
static int load_unload(const char *lib) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    Dl_info info;
    if (!h || !dladdr(dlsym(h, "Py_GetVersion"), &info)) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return -1;
    }
    struct span s = {(uintptr_t)info.dli_fbase, 0};
    dl_iterate_phdr(find_span, &s);
    dlclose(h);
    size_t len = (s.end - s.base + 4095) & ~(size_t)4095;
    if (mmap((void *)s.base, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1,
             0) == MAP_FAILED) {
        perror("libpython was not unloaded");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int reload = argc > 1 && strcmp(argv[1], "--reload") == 0;
    argc -= reload;
    argv += reload;
    if (argc < 3) {
        fprintf(stderr, "usage: %s [--reload] LIBPYTHON SCRIPT [ARG...]\n", argv[0]);
        return 2;
    }
    if (reload && load_unload(argv[1]) != 0)
        return 2;
    void *py = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!py) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    void (*init)(void) = (void (*)(void))dlsym(py, "Py_Initialize");
    int (*finalize)(void) = (int (*)(void))dlsym(py, "Py_FinalizeEx");
    int (*run)(const char *) = (int (*)(const char *))dlsym(py, "PyRun_SimpleString");
    wchar_t *(*decode)(const char *, size_t *) =
        (wchar_t * (*)(const char *, size_t *)) dlsym(py, "Py_DecodeLocale");
    void (*set_argv)(int, wchar_t **, int) =
        (void (*)(int, wchar_t **, int))dlsym(py, "PySys_SetArgvEx");
    if (!init || !finalize || !run || !decode) {
        fprintf(stderr, "not a libpython: %s\n", argv[1]);
        return 2;
    }
    init();
    int n = argc - 2;
    wchar_t **wargv = calloc((size_t)n, sizeof *wargv);
    for (int i = 0; i < n; i++)
        wargv[i] = decode(argv[i + 2], NULL);
    if (set_argv)
        set_argv(n, wargv, 0);
    int rc = run("import runpy, sys\nrunpy.run_path(sys.argv[0], run_name='__main__')\n");
    if (finalize() != 0)
        rc = 120;
    return rc == 0 ? 0 : 1;
}
