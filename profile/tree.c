/* tree.c - a prefix tree of frames, the shape both the reports' JSON and the Firefox
 * Profiler's stack table give stacks: a node is (parent, frame), found through an
 * open-addressing hash of that pair, and nodes are numbered in creation order, so a parent
 * always comes before its children and a reader rebuilds any view in one pass. */
#include "profile_int.h"

#include <stdlib.h>

static uint32_t edge_hash(uint32_t parent, uint32_t frame) {
    uint64_t k = ((uint64_t)parent << 32) | frame;
    k *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(k >> 32);
}

static void tree_rehash(pa_tree *t) {
    size_t cap = t->slots_cap ? t->slots_cap * 2 : 4096;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        abort();
    for (size_t i = 0; i < t->n; i++) {
        size_t h = edge_hash(t->parent[i], t->frame[i]) & (cap - 1);
        while (slots[h])
            h = (h + 1) & (cap - 1);
        slots[h] = (uint32_t)i + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->slots_cap = cap;
}

uint32_t pa_tree_child(pa_tree *t, uint32_t parent, uint32_t frame) {
    if ((t->n + 1) * 2 > t->slots_cap)
        tree_rehash(t);
    size_t mask = t->slots_cap - 1;
    size_t h = edge_hash(parent, frame) & mask;
    while (t->slots[h]) {
        uint32_t i = t->slots[h] - 1;
        if (t->parent[i] == parent && t->frame[i] == frame)
            return i;
        h = (h + 1) & mask;
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 4096;
        t->parent = pa_xrealloc(t->parent, t->cap * sizeof *t->parent);
        t->frame = pa_xrealloc(t->frame, t->cap * sizeof *t->frame);
    }
    uint32_t i = (uint32_t)t->n++;
    t->parent[i] = parent;
    t->frame[i] = frame;
    t->slots[h] = i + 1;
    return i;
}

void pa_tree_free(pa_tree *t) {
    free(t->parent);
    free(t->frame);
    free(t->slots);
}
