/* tests/test_attention — fused attention (passes/attention.c, the `attention` op, the
 * GR_LIB_ATTENTION library call) on the simulator.
 *
 * 1. Recognition on the real exports (tests/data/onnx/dyn: GPT-2, BERT dynamo and
 *    TorchScript, Llama with grouped-query heads), on their symbolic shapes: one
 *    attention per layer, K/V read before Llama's repeat_kv.
 * 2. Broken patterns stay unfused: softmax on another axis, a mask that does not
 *    broadcast to the scores, a scale that is not a constant, scores read elsewhere.
 * 3. Fused vs unfused outputs (session option no_fuse_attention) at several bindings of
 *    a symbolic seq: f32 within 1e-5, bf16 within 2e-2 (normalised L2 error); the GPT-2
 *    and Llama exports within 1e-5.
 */
#include "check.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int count_op(const gr_graph *g, gr_op op) {
    int n = 0;
    for (int i = 0; i < g->nodes.len; i++) n += g->nodes.data[i].op == op;
    return n;
}

/* ==== 1. the exports ============================================================================ */
static void test_fixtures(void) {
    static const char *const cases[] = {"gpt2_dynamo", "bert_dynamo", "bert_torchscript", "llama_dynamo"};
    for (int c = 0; c < 4; c++) {
        char path[256];
        snprintf(path, sizeof path, "tests/data/onnx/dyn/%s/model.onnx", cases[c]);
        gr_graph *g = NULL;
        CHECK_OK(gr_onnx_load(path, &g));
        if (!g) continue;
        int n = -1;
        CHECK_OK(gr_pass_fuse_attention(g, true, &n));
        CHECK_MSG(n == 2, "%s: %d attentions fused, expected 2 (one per layer)", cases[c], n);
        CHECK(count_op(g, GR_OP_ATTENTION) == 2);
        CHECK_OK(gr_ir_verify(g));
        for (int i = 0; i < g->nodes.len; i++) {
            const gr_ir_node *a = &g->nodes.data[i];
            if (a->op != GR_OP_ATTENTION) continue;
            const gr_ir_value *q = &g->values.data[a->in[0]], *k = &g->values.data[a->in[1]];
            const gr_ir_value *o = &g->values.data[a->out[0]];
            CHECK(a->n_in == 4); /* every export adds a mask */
            /* symbolic: batch and seq stay expressions */
            CHECK(gr_dx_is_sym(q->dims[0]) && gr_dx_is_sym(q->dims[2]) && gr_dx_is_sym(o->dims[2]));
            CHECK(q->dims[1].size == 4 && q->dims[3].size == 16 && o->typed);
            CHECK_MSG(k->dims[1].size == (c == 3 ? 2 : 4), "%s: k has %lld heads", cases[c], (long long)k->dims[1].size);
            const gr_ir_attr *sc = gr_ir_attr_find(a, "scale");
            CHECK(sc && fabs(sc->f - 0.25) < 1e-7);
        }
        gr_ir_graph_destroy(g);
    }
}

/* ==== 2. broken patterns ========================================================================= */
static const char *pattern(const char *dt, const char *mask_dims, const char *scale_line, const char *softmax_axis,
                           const char *extra_output, char *buf, size_t n) {
    snprintf(buf, n,
             "graft 1\n"
             "input q: %s[2, 4, seq, 16]\n"
             "input k: %s[2, 4, seq, 16]\n"
             "input v: %s[2, 4, seq, 16]\n"
             "input m: %s%s\n"
             "input w: %s[]\n"
             "const c: %s[] = [0.25]\n"
             "[kt] kt = transpose(k, perm=[0, 1, 3, 2])\n"
             "[s] s = matmul(q, kt)\n"
             "%s\n"
             "[u] u = add(t, m)\n"
             "[p] p = softmax(u, axis=%s)\n"
             "[o] o = matmul(p, v)\n"
             "output o\n%s",
             dt, dt, dt, dt, mask_dims, dt, dt, scale_line, softmax_axis, extra_output);
    return buf;
}

static int fused_in_f32(const char *text, bool include_f32) {
    gr_graph *g = NULL;
    int n = -1;
    CHECK_OK(gr_graph_parse(text, "<attention test>", NULL, &g)); /* parsed and typed, as graft loads it */
    if (!g) return -1;
    CHECK_OK(gr_pass_fuse_attention(g, include_f32, &n));
    if (n > 0) CHECK_OK(gr_ir_verify(g));
    gr_graph_destroy(g);
    return n;
}

static int fused_in(const char *text) { return fused_in_f32(text, true); }

static void test_broken(void) {
    char buf[2048];
    const char *scale = "[t] t = mul(s, c)";
    CHECK(fused_in(pattern("f32", "[2, 1, 1, seq]", scale, "-1", "", buf, sizeof buf)) == 1);
    CHECK(fused_in(pattern("f32", "[seq, seq]", scale, "3", "", buf, sizeof buf)) == 1);
    CHECK(fused_in(pattern("f32", "[2, 1, 1, seq]", "[t] t = div(s, c)", "-1", "", buf, sizeof buf)) == 1);
    /* by default only f16/bf16 (the tensor-core kernels) */
    CHECK(fused_in_f32(pattern("f32", "[2, 1, 1, seq]", scale, "-1", "", buf, sizeof buf), false) == 0);
    CHECK(fused_in_f32(pattern("bf16", "[2, 1, 1, seq]", scale, "-1", "", buf, sizeof buf), false) == 1);
    CHECK(fused_in_f32(pattern("f16", "[seq, seq]", scale, "-1", "", buf, sizeof buf), false) == 1);
    /* softmax over the query axis */
    CHECK(fused_in(pattern("f32", "[2, 1, 1, seq]", scale, "2", "", buf, sizeof buf)) == 0);
    /* a mask over batch 3 does not broadcast onto scores of batch 2 (the add grows its result) */
    CHECK(fused_in(pattern("f32", "[3, 2, 4, seq, seq]", scale, "-1", "", buf, sizeof buf)) == 0);
    /* a mask with a length of its own */
    CHECK(fused_in(pattern("f32", "[2, 1, 1, kv]", scale, "-1", "", buf, sizeof buf)) == 0);
    /* a scale that is an input, not a constant */
    CHECK(fused_in(pattern("f32", "[2, 1, 1, seq]", "[t] t = mul(s, w)", "-1", "", buf, sizeof buf)) == 0);
    /* the scores are read elsewhere too */
    CHECK(fused_in(pattern("f32", "[2, 1, 1, seq]", scale, "-1", "output s\n", buf, sizeof buf)) == 0);
    CHECK(fused_in(pattern("f32", "[2, 1, 1, seq]", scale, "-1", "output p\n", buf, sizeof buf)) == 0);
}

/* ==== 3. fused vs unfused ======================================================================== */
static uint64_t rng = 12345;
static double urand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

/* Runs g with no_fuse_attention = unfused; inputs from `data` (f32 values, cast as needed). */
static float *run_graph(gr_graph_t g, bool unfused, int n_in, float *const *data, const int64_t (*dims)[4],
                        const int *ndims, gr_dtype dt, size_t *n_out, int *n_attention_steps) {
    gr_session_options o;
    gr_session_options_init(&o);
    o.device = GR_DEVICE_SIM;
    o.no_fuse_attention = unfused;
    o.fuse_attention_f32 = 1;
    gr_session_t s = NULL;
    CHECK_OK(gr_session_create(g, &o, &s));
    if (!s) return NULL;
    for (int i = 0; i < n_in; i++) {
        gr_value_info info;
        CHECK_OK(gr_graph_input_info(g, i, &info));
        int64_t n = 1;
        for (int d = 0; d < ndims[i]; d++) n *= dims[i][d];
        size_t es = gr_dtype_size(info.dtype);
        void *buf = malloc((size_t)n * es + 1);
        for (int64_t j = 0; j < n; j++) gr_store_f64(buf, info.dtype, j, data[i][j]);
        CHECK_OK(gr_session_set_input(s, info.name, info.dtype, ndims[i], dims[i], buf, (size_t)n * es));
        free(buf);
    }
    float *res = NULL;
    if (gr_session_run(s) == GR_OK) {
        gr_output out;
        CHECK_OK(gr_session_output(s, 0, &out));
        size_t nbytes = gr_session_output_nbytes(s, out);
        size_t n = nbytes / gr_dtype_size(dt);
        void *raw = malloc(nbytes + 1);
        res = malloc(sizeof(float) * (n + 1));
        CHECK_OK(gr_session_output_read(s, out, raw, nbytes));
        for (size_t j = 0; j < n; j++) res[j] = (float)gr_load_f64(raw, dt, (int64_t)j);
        free(raw);
        *n_out = n;
        char *text = NULL;
        if (gr_session_explain(s, &text) == GR_OK && text) {
            int k = 0;
            for (const char *p = text; (p = strstr(p, "] attn ")); p++) k++;
            *n_attention_steps = k;
            gr_strfree(text);
        }
    } else {
        CHECK_MSG(false, "run: %s", gr_last_error());
    }
    gr_session_destroy(s);
    return res;
}

static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return isnan(num) ? INFINITY : sqrt(num) / (den > 0 ? sqrt(den) : 1);
}

static void compare_pattern(const char *dt_name, gr_dtype dt, double tol) {
    char buf[2048];
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(pattern(dt_name, "[2, 1, 1, seq]", "[t] t = mul(s, c)", "-1", "", buf, sizeof buf), "<attention>",
                            NULL, &g));
    if (!g) return;
    static const int64_t seqs[] = {1, 7, 33, 64};
    for (int si = 0; si < 4; si++) {
        int64_t S = seqs[si];
        int64_t dims[5][4] = {{2, 4, S, 16}, {2, 4, S, 16}, {2, 4, S, 16}, {2, 1, 1, S}, {0}};
        int ndims[5] = {4, 4, 4, 4, 0};
        float *data[5];
        for (int i = 0; i < 5; i++) {
            int64_t n = 1;
            for (int d = 0; d < ndims[i]; d++) n *= dims[i][d];
            data[i] = malloc(sizeof(float) * (size_t)(n + 1));
            /* padding mask: 0 or -1e4 (never every key of a row) */
            for (int64_t j = 0; j < n; j++)
                data[i][j] = i == 3 ? ((j % S) != 0 && urand() < 0.3 ? -1e4f : 0.f) : (float)(2 * urand() - 1);
        }
        size_t n_f = 0, n_u = 0;
        int steps_f = 0, steps_u = 0;
        float *f = run_graph(g, false, 5, data, (const int64_t(*)[4])dims, ndims, dt, &n_f, &steps_f);
        float *u = run_graph(g, true, 5, data, (const int64_t(*)[4])dims, ndims, dt, &n_u, &steps_u);
        CHECK_MSG(steps_f == 1 && steps_u == 0, "%s seq %lld: %d / %d attention steps", dt_name, (long long)S, steps_f, steps_u);
        if (f && u && n_f == n_u) {
            double e = rel_err(f, u, n_f);
            CHECK_MSG(e <= tol, "%s seq %lld: fused vs unfused error %.3e > %.0e", dt_name, (long long)S, e, tol);
        } else {
            CHECK_MSG(false, "%s seq %lld: no outputs to compare", dt_name, (long long)S);
        }
        free(f);
        free(u);
        for (int i = 0; i < 5; i++) free(data[i]);
    }
    gr_graph_destroy(g);
}

/* The exports at two lengths: fused and unfused agree (inputs: token ids). */
static void compare_export(const char *name) {
    char path[256];
    snprintf(path, sizeof path, "tests/data/onnx/dyn/%s/model.onnx", name);
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_load(path, &g));
    if (!g) return;
    static const int64_t seqs[] = {5, 17, 40};
    for (int si = 0; si < 3; si++) {
        int64_t dims[1][4] = {{3, seqs[si]}};
        int ndims[1] = {2};
        float *ids = malloc(sizeof(float) * (size_t)(3 * seqs[si]));
        for (int64_t j = 0; j < 3 * seqs[si]; j++) ids[j] = (float)(int)(urand() * 900);
        size_t n_f = 0, n_u = 0;
        int steps_f = 0, steps_u = 0;
        float *f = run_graph(g, false, 1, &ids, (const int64_t(*)[4])dims, ndims, GR_F32, &n_f, &steps_f);
        float *u = run_graph(g, true, 1, &ids, (const int64_t(*)[4])dims, ndims, GR_F32, &n_u, &steps_u);
        CHECK_MSG(steps_f == 2 && steps_u == 0, "%s seq %lld: %d / %d attention steps", name, (long long)seqs[si], steps_f,
                  steps_u);
        if (f && u && n_f == n_u) {
            double e = rel_err(f, u, n_f);
            CHECK_MSG(e <= 1e-5, "%s seq %lld: fused vs unfused error %.3e", name, (long long)seqs[si], e);
        }
        free(f);
        free(u);
        free(ids);
    }
    gr_graph_destroy(g);
}

int main(void) {
    test_fixtures();
    test_broken();
    compare_pattern("f32", GR_F32, 1e-5);
    compare_pattern("bf16", GR_BF16, 2e-2);
    compare_export("gpt2_dynamo");
    compare_export("llama_dynamo");
    return check_summary("test_attention");
}
