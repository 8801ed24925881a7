/* fakepython.c: a program that looks like CPython to the agent (it exports Py_GetVersion,
 * Py_IsInitialized, _PyRuntime and the type objects) but is not one, so tests can show what
 * the agent does with builds it must refuse: a version it does not know (3.16), a
 * free-threaded 3.15 (no free-threaded layout known for it), a 3.13 whose _PyRuntime has no
 * debug-offsets cookie.
 * The version string comes from FAKEPY_VERSION (default 3.16.0); _PyRuntime is static data,
 * as in CPython, because the agent reads it before main(): built four times, with
 * -DFAKE_FREE_THREADED=1 -DFAKE_VERSION_HEX=0x030F00F0 and -DFAKE_NO_COOKIE=1 for the
 * next two cases; -DFAKE_DEBUG=1 exports the reference totals of a debug build (_Py_RefTotal up to
 * 3.11, _Py_GetGlobalRefTotal from 3.12), which before 3.13 is all that tells one.
 * It "initializes", runs a little, prints "fake done" and exits 0. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef FAKE_FREE_THREADED
#define FAKE_FREE_THREADED 0
#endif
/* The version _Py_DebugOffsets claims: 3.13.0 final; the free-threaded fake claims 3.15.0, a
 * version whose free-threaded build the agent has no layout for. */
#ifndef FAKE_VERSION_HEX
#define FAKE_VERSION_HEX 0x030D00F0
#endif
#ifdef FAKE_NO_COOKIE
__attribute__((visibility("default"))) uint64_t _PyRuntime[4096];
#else
/* "xdebugpy" little-endian, then the version and free_threaded. */
__attribute__((visibility("default")))
uint64_t _PyRuntime[4096] = {0x7970677562656478ULL, FAKE_VERSION_HEX, FAKE_FREE_THREADED};
#endif
__attribute__((visibility("default"))) char PyCode_Type[256], PyUnicode_Type[256],
    PyBytes_Type[256];
#ifdef FAKE_DEBUG
__attribute__((visibility("default"))) long _Py_RefTotal;
__attribute__((visibility("default"))) long _Py_GetGlobalRefTotal(void) {
    return _Py_RefTotal;
}
#endif
static int initialized;
static char version[64] = "3.16.0";

__attribute__((visibility("default"))) const char *Py_GetVersion(void) {
    const char *v = getenv("FAKEPY_VERSION");
    snprintf(version, sizeof version, "%s (fake)", v ? v : "3.16.0");
    return version;
}

__attribute__((visibility("default"))) int Py_IsInitialized(void) {
    return initialized;
}

int main(void) {
    initialized = 1;
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    puts("fake done");
    return 0;
}
