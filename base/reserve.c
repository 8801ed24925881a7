/* reserve.c: address space reserved around a pivot (reserve.h). */
#include "reserve.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

static size_t page_round(size_t bytes) {
    return (bytes + 4095) & ~(size_t)4095;
}

char *pa_reserve_around(size_t below, size_t above, struct pa_reserve *r) {
    below = page_round(below);
    above = page_round(above);
    /* One area more than asked: somewhere in it the pivot can sit LEAD bytes past a boundary. */
    size_t size = below + above + PA_RESERVE_AREA;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
        memset(r, 0, sizeof *r);
        return NULL;
    }
    r->base = p;
    r->size = size;
    /* The first address LEAD bytes past a boundary at or above the lowest pivot with `below`
     * bytes under it; at most AREA - 1 bytes above that, so `above` bytes still fit. */
    uintptr_t lowest = (uintptr_t)p + below;
    uintptr_t pivot = ((lowest - PA_RESERVE_LEAD + PA_RESERVE_AREA - 1) & ~(PA_RESERVE_AREA - 1)) +
                      PA_RESERVE_LEAD;
    return (char *)pivot;
}

void pa_reserve_release(struct pa_reserve *r) {
    if (r->base)
        munmap(r->base, r->size);
    memset(r, 0, sizeof *r);
}
