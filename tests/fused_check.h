/* tests/fused_check.h — what the fusion tests (test_epilogue, test_residual, test_attention) share: a
 * deterministic generator, the normalised L2 error, and a model export run fused and unfused
 * (session option no_fuse_epilogue) on the simulator with the same token ids. Header-only,
 * static: each test is one translation unit. */
#ifndef GRAFT_TESTS_FUSED_CHECK_H
#define GRAFT_TESTS_FUSED_CHECK_H
#include "check.h"
#include "util/util.h"
#include "passes/passes.h"
#include <stdbool.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Runs g on the simulator with options o; input i has ndims[i] dims, dims[i * dim_stride ..], and holds
 * data[i] (converted to its dtype); returns the first output as floats (malloc), *n_out its count,
 * *n_pat the times `pat` appears in explain's text. NULL when the run fails (a failed check). */
static inline float *fc_run_opts(gr_graph_t g, const gr_session_options *o, int n_in, float *const *data,
                                 const int64_t *dims, int dim_stride, const int *ndims, size_t *n_out, const char *pat,
                                 int *n_pat) {
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, o, &s));
    if (!s) return NULL;
    for (int i = 0; i < n_in; i++) {
        gr_value_info info;
        CHECK_OK(gr_graph_input_info(g, i, &info));
        const int64_t *di = dims + (size_t)i * (size_t)dim_stride;
        int64_t n = 1;
        for (int d = 0; d < ndims[i]; d++) n *= di[d];
        size_t es = gr_dtype_size(info.dtype);
        void *buf = malloc((size_t)n * es + 1);
        for (int64_t j = 0; j < n; j++) gr_store_f64(buf, info.dtype, j, data[i][j]);
        CHECK_OK(gr_session_set_input(s, info.name, info.dtype, ndims[i], di, buf, (size_t)n * es));
        free(buf);
    }
    float *res = NULL;
    if (gr_session_run(s) == GR_OK) {
        gr_output out;
        CHECK_OK(gr_session_output(s, 0, &out));
        gr_value_info oi;
        CHECK_OK(gr_graph_output_info(g, 0, &oi));
        size_t nbytes = gr_session_output_nbytes(s, out), n = nbytes / gr_dtype_size(oi.dtype);
        void *raw = malloc(nbytes + 1);
        res = malloc(sizeof(float) * (n + 1));
        CHECK_OK(gr_session_output_read(s, out, raw, nbytes));
        for (size_t j = 0; j < n; j++) res[j] = (float)gr_load_f64(raw, oi.dtype, (int64_t)j);
        free(raw);
        *n_out = n;
        char *text = NULL;
        *n_pat = 0;
        if (gr_session_explain(s, &text) == GR_OK && text) {
            for (const char *p = text; (p = strstr(p, pat)); p++) (*n_pat)++;
            gr_strfree(text);
        }
    } else {
        CHECK_MSG(false, "run: %s", gr_last_error());
    }
    gr_session_destroy(s);
    return res;
}

/* fc_run_opts with unfused: session option no_fuse_epilogue; generic: shape policy generic. */
static inline float *fc_run(gr_graph_t g, bool unfused, bool generic, int n_in, float *const *data,
                            const int64_t (*dims)[3], const int *ndims, size_t *n_out, const char *pat, int *n_pat) {
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = GR_DEVICE_SIM;
    o.no_fuse_epilogue = unfused;
    if (generic) o.shape_policy = GR_SHAPES_GENERIC;
    return fc_run_opts(g, &o, n_in, data, &dims[0][0], 3, ndims, n_out, pat, n_pat);
}

/* Every allocation `pass` makes on the graph of `text` fails once in turn: NOMEM, or a failure
 * the callee absorbs (then *fused == want), never another status, a crash or a leak; at least
 * three of them must fail the pass. */
static inline void fc_alloc_failures(const char *text, gr_status (*pass)(gr_graph *, int *), int want) {
    long total = -1;
    int failures = 0;
    for (long n = 0; n == 0 || n <= total; n++) {
        long live = gr_debug_live_allocs();
        gr_graph *g = NULL;
        CHECK_OK(gr_graph_parse(text, "<alloc>", NULL, &g));
        if (!g) break;
        int fused = -1;
        gr_debug_fail_alloc_after(n);
        gr_status st = pass(g, &fused);
        long made = gr_debug_fail_alloc_after(0);
        if (n == 0) total = made;
        CHECK_MSG(st == GR_OK || st == GR_ERR_NOMEM, "allocation failure %ld gave %s", n, gr_status_name(st));
        if (st == GR_OK) CHECK_MSG(fused == want, "allocation failure %ld: %d fused", n, fused);
        failures += st == GR_ERR_NOMEM;
        gr_error_clear();
        gr_graph_destroy(g);
        CHECK_MSG(gr_debug_live_allocs() == live, "allocation failure %ld leaks %ld allocations", n, gr_debug_live_allocs() - live);
    }
    CHECK_MSG(total > 3 && failures >= 3, "%ld allocations, %d failed the pass", total, failures);
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
