/* reserve.h: address space for the agent's tables, reserved around a pivot.
 *
 * A table whose arrays grow away from one point (the pivot: one array downward below it, the
 * others upward above it) touches its first pages next to that point, so a short program's
 * few samples fault in pages of one 2 MiB area. Each 2 MiB area first touched costs the kernel
 * a page-table page besides the page itself: on the VM we measured a first touch there cost
 * 23-63 us against 12-16 us in an area already in use (bench/startup.py prints both), and the
 * first sample of a process touched five such areas before the tables were laid out this way
 * (docs/architecture.md, "Start-up cost"). The pivot is placed PA_RESERVE_LEAD bytes into an
 * aligned area, which leaves that much room below it in the same area. */
#ifndef PA_RESERVE_H
#define PA_RESERVE_H

#include <stddef.h>

#define PA_RESERVE_AREA ((size_t)2 << 20)
#define PA_RESERVE_LEAD ((size_t)64 << 10)

struct pa_reserve {
    void *base;
    size_t size;
};

/* Normal context. Reserves at least `below` bytes under the returned pivot and `above` bytes
 * from it, readable and writable, untouched (MAP_NORESERVE: pages cost memory once written).
 * NULL on failure (r zeroed). */
char *pa_reserve_around(size_t below, size_t above, struct pa_reserve *r);

/* Normal context. Unmaps what pa_reserve_around reserved (nothing when nothing was). */
void pa_reserve_release(struct pa_reserve *r);

#endif
