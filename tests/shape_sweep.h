/* tests/shape_sweep.h — what the many-shape tests share (test_shapes, test_shape_policies,
 * test_shape_generic, test_shape_auto): deterministic input data, the shuffled order of a
 * sweep over lengths, and a host step that does nothing (a segment boundary). */
#ifndef GR_TEST_SHAPE_SWEEP_H
#define GR_TEST_SHAPE_SWEEP_H
#include "graft.h"
#include "passes/passes.h"

/* n floats in [-1, 1) from a linear congruential generator seeded by seed. */
static inline void sweep_fill(float *x, int n, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 65536.0f * 2.0f - 1.0f;
    }
}

/* Lengths 1..n twice each, plus (every > 0) every every-th length once more, in an order
 * shuffled by seed; returns how many (order needs room for 2n + n/every + 1). */
static inline int sweep_order(int *order, int n, int every, unsigned seed) {
    int len = 0;
    for (int r = 0; r < 2; r++)
        for (int i = 1; i <= n; i++) order[len++] = i;
    if (every > 0)
        for (int i = 1; i <= n; i += every) order[len++] = i;
    for (int i = len - 1; i > 0; i--) {
        seed = seed * 1664525u + 1013904223u;
        int j = (int)((seed >> 8) % (unsigned)(i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    return len;
}

/* A host step's function that does nothing: inserted between kernels it splits a segment. */
static inline gr_status sweep_noop_host(void *user, const struct gr_step_host_ctx *c) {
    (void)user;
    (void)c;
    return GR_OK;
}
#endif
