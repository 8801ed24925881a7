/* bss.h: where the agent's large zeroed arrays go.
 *
 * libpyagent.so's .bss is 2.2 MiB, nearly all of it a dozen arrays that only some modes or
 * programs use (labels, asyncio tasks, thread names, native unwinding, instruction columns).
 * The 200-odd small variables that every start writes lay between them, so a start faulted
 * in a page for nearly each one. PA_LARGE_BSS puts an array in .lbss, which the linker places
 * after .bss: the small variables share a few pages (docs/architecture.md, "Start-up cost").
 * GCC on x86-64 only, which knows .lbss as zeroed data; clang 14 (the sanitizer builds) would
 * store the zeros in the file. */
#ifndef PA_BSS_H
#define PA_BSS_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PA_LARGE_BSS(name) __attribute__((section(".lbss." #name)))
#else
#define PA_LARGE_BSS(name)
#endif

#endif
