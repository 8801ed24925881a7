/* embed_late.c: a C program that embeds CPython as uWSGI and mod_wsgi do: libpython is loaded
 * with dlopen after start (RTLD_LOCAL), then initialized, and runs a script.
 *
 *   pa_embed_late LIBPYTHON SCRIPT [ARG...]
 *
 * Exits with the script's status (PyRun_SimpleFileExFlags: 0, or 1 on an exception). No
 * Python header: the few functions are looked up by name. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <wchar.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s LIBPYTHON SCRIPT [ARG...]\n", argv[0]);
        return 2;
    }
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
