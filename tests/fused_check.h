/* tests/fused_check.h — what the fusion tests (test_epilogue, test_residual) share: a
 * deterministic generator, the normalised L2 error, and a model export run fused and unfused
 * (session option no_fuse_epilogue) on the simulator with the same token ids. Header-only,
 * static: each test is one translation unit. */
#ifndef GRAFT_TESTS_FUSED_CHECK_H
#define GRAFT_TESTS_FUSED_CHECK_H
#include "check.h"
#include <stdbool.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* uniform in [0, 1) from *state (an LCG: the same numbers on every platform) */
static inline double fc_urand(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*state >> 11) * (1.0 / 9007199254740992.0);
}

/* ||a - b|| / ||b|| (||a - b|| when b is 0; infinity when a NaN appears) */
static inline double fc_rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return isnan(num) ? INFINITY : sqrt(num) / (den > 0 ? sqrt(den) : 1);
}

/* Runs the export at `path` (first input: i64 token ids [2, 7] drawn from *state) fused and
 * unfused; checks its first output (f32) agrees within tol and prints the error under `what`. */
static inline void fc_export_fused_vs_unfused(const char *what, const char *path, uint64_t *state, double tol) {
    gr_graph_t gg = NULL;
    CHECK_OK(gr_graph_load(path, &gg));
    if (!gg) return;
    const int64_t dims[2] = {2, 7};
    int64_t ids[14];
    for (int i = 0; i < 14; i++) ids[i] = (int64_t)(fc_urand(state) * 100);
    gr_value_info in0;
    CHECK_OK(gr_graph_input_info(gg, 0, &in0));
    float *res[2] = {NULL, NULL};
    size_t nres[2] = {0, 0};
    for (int unfused = 0; unfused < 2; unfused++) {
        gr_session_options o;
        gr_session_options_init(&o);
        o.device = GR_DEVICE_SIM;
        o.no_fuse_epilogue = unfused;
        gr_session_t s = NULL;
        CHECK_OK(gr_session_create(gg, &o, &s));
        if (!s) continue;
        CHECK_OK(gr_session_set_input(s, in0.name, GR_I64, 2, dims, ids, sizeof ids));
        if (gr_session_run(s) == GR_OK) {
            gr_output out;
            CHECK_OK(gr_session_output(s, 0, &out));
            size_t nb = gr_session_output_nbytes(s, out);
            res[unfused] = malloc(nb + 1);
            nres[unfused] = nb / sizeof(float);
            CHECK_OK(gr_session_output_read(s, out, res[unfused], nb));
        } else {
            CHECK_MSG(false, "%s run: %s", what, gr_last_error());
        }
        gr_session_destroy(s);
    }
    if (res[0] && res[1] && nres[0] == nres[1]) {
        double e = fc_rel_err(res[0], res[1], nres[0]);
        CHECK_MSG(e <= tol, "%s fused vs unfused: %.3e", what, e);
        printf("%s: fused vs unfused %.2e\n", what, e);
    } else {
        CHECK_MSG(false, "%s: no result", what);
    }
    free(res[0]);
    free(res[1]);
    gr_graph_destroy(gg);
}

#endif
