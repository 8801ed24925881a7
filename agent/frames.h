/* frames.h: walks the interrupted thread's own Python stack.
 *
 * SIGNAL-HANDLER SIDE. */
#ifndef PA_FRAMES_H
#define PA_FRAMES_H

#include <stdint.h>

#include "pyversions.h"

struct pa_frame {
    uint32_t id; /* code-cache id or a pa_synthetic value */
    int32_t line;
};

struct pa_walk_counts {
    unsigned long unreadable; /* frames that faulted or failed validation */
    unsigned long truncated;  /* stacks cut at the depth limit */
};

/* Fills out[] leaf first, at most max entries (the last may be <truncated> or <unknown>).
 * Returns the depth (>= 1: a thread without Python frames gets <no Python frames>). */
int pa_walk_this_thread(const struct pa_python *py, struct pa_frame *out, int max,
                        struct pa_walk_counts *counts);

/* Test hook (PYAGENT_FAULT_INJECTION builds): every Nth walk reads a frame from an address
 * that faults, as a freed or corrupted frame would. 0 disables it. */
extern unsigned pa_walk_inject_every;

#endif
