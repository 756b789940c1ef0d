/* tests/test_residual — residual adds fused into the matmul before them (passes/epilogue.c's
 * gr_pass_fuse_residual, the matmul's fourth input, the library call's `residual`: cuBLASLt's
 * C with beta = 1) on the simulator.
 *
 * 1. Recognition: add(y, h) and add(h, y) after a matmul with no bias or a row bias, through
 *    reshapes (GPT-2's Gemm on [batch*seq, n] read as [batch, seq, n]), two residual adds in a
 *    row (a transformer's stream); a row bias add becomes the matmul's bias, and a residual add
 *    after it the residual (BERT's dense: matmul, bias, residual), through reshapes too; near
 *    misses are not fused: a column or broadcasting addend, y read elsewhere or a graph output,
 *    an activated matmul, a full bias, a cast between, integers, a matmul that has a residual
 *    already, a bias beside the matmul's own, a reshape changing the columns before a bias.
 * 2. Fused vs unfused (session option no_fuse_epilogue) at three bindings of a symbolic row
 *    count, explain showing "+residual": f32 within 1e-6, bf16 within 1e-2, f16 within 2e-3
 *    (normalised L2; the fused call rounds once), also as a generated matmul kernel (shape
 *    policy generic) and with the residual written directly in .gir.
 * 3. The ops.c rules: a residual of another shape or dtype, or beside a full bias, is a
 *    shape error naming the node.
 * 4. The Llama export (tests/data/onnx/dyn/llama_dynamo): two residual adds per layer fused,
 *    outputs within 1e-5 of the unfused plan.
 * 5. Every allocation of the pass failing once: NOMEM, no crash, no leak.
 */
#include "check.h"
#include "fused_check.h"
#include "frontend/frontend.h"
#include "codegen/kir.h"
#include "passes/passes.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* x[rows, 16] @ w[16, 24] (+ bias[24]), a residual h[rows, 24]; `body` writes `out`. */
static const char *model(const char *dt, const char *body, char *buf, size_t n) {
    snprintf(buf, n,
             "graft 1\n"
             "input x: %s[rows, 16]\n"
             "input w: %s[16, 24]\n"
             "input bias: %s[24]\n"
             "input h: %s[rows, 24]\n"
             "%s\n"
             "output out\n",
             dt, dt, dt, dt, body);
    return buf;
}

/* matmuls the pass made: a residual taken (".residual") or a row bias (".bias") */
static int count_residual_matmuls(const gr_graph *g) {
    int n = 0;
    for (int i = 0; i < g->nodes.len; i++) {
        const gr_ir_node *m = &g->nodes.data[i];
        if (m->op != GR_OP_MATMUL || !m->name) continue;
        size_t len = strlen(m->name);
        bool res = len > 9 && !strcmp(m->name + len - 9, ".residual"), bias = len > 5 && !strcmp(m->name + len - 5, ".bias");
        CHECK_MSG(!res || (m->n_in > 3 && m->in[3] >= 0), "%s: no residual input", m->name);
        CHECK_MSG(!bias || (m->n_in > 2 && m->in[2] >= 0), "%s: no bias input", m->name);
        n += res || bias;
    }
    return n;
}

/* The node producing `out` after the pass: a matmul of x, w, [bias], [h] (names, NULL = absent). */
static void expect_final(const char *what, const char *text, const char *bias, const char *res) {
    gr_graph *g = NULL;
    CHECK_OK(gr_graph_parse(text, what, NULL, &g));
    if (!g) return;
    int n = 0;
    CHECK_OK(gr_pass_fuse_residual(g, &n));
    int out = gr_ir_find_value(g, "out");
    const gr_ir_node *m = NULL;
    /* through the reshape back to the add's dims */
    for (int v = out, hops = 0; v >= 0 && hops < 4 && !m; hops++) {
        if (g->values.data[v].kind != GR_VAL_NODE || g->values.data[v].producer < 0) break;
        const gr_ir_node *p = &g->nodes.data[g->values.data[v].producer];
        if (p->op == GR_OP_MATMUL) m = p;
        else v = p->op == GR_OP_RESHAPE ? p->in[0] : -1;
    }
    CHECK_MSG(m && m->in[0] == gr_ir_find_value(g, "x") && m->in[1] == gr_ir_find_value(g, "w"), "%s: out is no matmul of x, w",
              what);
    if (m) {
        int b = m->n_in > 2 ? m->in[2] : -1, r = m->n_in > 3 ? m->in[3] : -1;
        /* the bias may come through a reshape to [N] */
        if (b >= 0 && g->values.data[b].kind == GR_VAL_NODE && g->nodes.data[g->values.data[b].producer].op == GR_OP_RESHAPE)
            b = g->nodes.data[g->values.data[b].producer].in[0];
        CHECK_MSG(bias ? b == gr_ir_find_value(g, bias) : b < 0, "%s: bias input", what);
        if (r >= 0 && g->values.data[r].kind == GR_VAL_NODE && g->nodes.data[g->values.data[r].producer].op == GR_OP_RESHAPE)
            r = g->nodes.data[g->values.data[r].producer].in[0];
        CHECK_MSG(res ? r == gr_ir_find_value(g, res) : r < 0, "%s: residual input", what);
    }
    CHECK_OK(gr_ir_verify(g));
    gr_graph_destroy(g);
}

/* The pass on `text`: the count it reports, checked against the matmuls with a residual. */
static int fused_in(const char *what, const char *text) {
    gr_graph *g = NULL;
    int n = -1;
    CHECK_OK(gr_graph_parse(text, what, NULL, &g));
    if (!g) return -1;
    CHECK_OK(gr_pass_fuse_residual(g, &n));
    CHECK_OK(gr_ir_verify(g));
    CHECK_MSG(count_residual_matmuls(g) == n, "%s: %d fused but %d matmuls with a residual", what, n,
              count_residual_matmuls(g));
    gr_graph_destroy(g);
    return n;
}

static void expect(const char *what, const char *text, int want) {
    int n = fused_in(what, text);
    CHECK_MSG(n == want, "%s: %d fused, expected %d", what, n, want);
}

/* ==== 1. recognition =========================================================================== */
static void test_recognition(void) {
    char buf[4096];
    expect("add(y, h)", model("f32", "[mm] y = matmul(x, w)\n[ad] out = add(y, h)", buf, sizeof buf), 1);
    expect("add(h, y)", model("f32", "[mm] y = matmul(x, w)\n[ad] out = add(h, y)", buf, sizeof buf), 1);
    expect("a row bias (a Gemm)", model("f32", "[mm] y = matmul(x, w, bias)\n[ad] out = add(h, y)", buf, sizeof buf), 1);
    expect("bf16", model("bf16", "[mm] y = matmul(x, w)\n[ad] out = add(y, h)", buf, sizeof buf), 1);
    expect("f16", model("f16", "[mm] y = matmul(x, w)\n[ad] out = add(y, h)", buf, sizeof buf), 1);
    expect("reshapes between (GPT-2's Gemm on [batch*seq, n])",
           model("f32",
                 "[mm] y = matmul(x, w, bias)\n[rs] y3 = reshape(y, shape=[1, rows, 24])\n"
                 "[rh] h3 = reshape(h, shape=[1, rows, 24])\n[ad] out = add(h3, y3)",
                 buf, sizeof buf),
           1);
    expect("a residual stream: two adds in a row",
           model("f32",
                 "input w2: f32[24, 24]\n[mm] y = matmul(x, w)\n[ad] h1 = add(h, y)\n"
                 "[mm2] y2 = matmul(h1, w2)\n[ad2] out = add(h1, y2)",
                 buf, sizeof buf),
           2);
    {
        /* the fused node: a, b, the bias, the residual; the add's place in the node order */
        gr_graph *g = NULL;
        CHECK_OK(gr_graph_parse(model("f32", "[mm] y = matmul(x, w, bias)\n[ad] out = add(h, y)", buf, sizeof buf), "<inputs>",
                                NULL, &g));
        int n = 0;
        if (g) CHECK_OK(gr_pass_fuse_residual(g, &n));
        if (g && n == 1) {
            int out = gr_ir_find_value(g, "out");
            const gr_ir_node *m = &g->nodes.data[g->values.data[out].producer];
            CHECK(m->op == GR_OP_MATMUL && m->n_in == 4 && m->in[0] == gr_ir_find_value(g, "x") &&
                  m->in[1] == gr_ir_find_value(g, "w") && m->in[2] == gr_ir_find_value(g, "bias") &&
                  m->in[3] == gr_ir_find_value(g, "h"));
            CHECK(m->name && strstr(m->name, "mm") && strstr(m->name, "residual"));
        }
        gr_graph_destroy(g);
    }

    /* a row bias add becomes the matmul's bias; a residual add after it then the residual */
    expect("a row bias add", model("f32", "[mm] y = matmul(x, w)\n[ad] out = add(y, bias)", buf, sizeof buf), 1);
    expect_final("a row bias add", buf, "bias", NULL);
    expect("bias then residual (BERT's dense)",
           model("f32", "[mm] y = matmul(x, w)\n[ba] yb = add(bias, y)\n[ad] out = add(yb, h)", buf, sizeof buf), 2);
    expect_final("bias then residual (BERT's dense)", buf, "bias", "h");
    expect("bias then residual through reshapes",
           model("bf16",
                 "[mm] y = matmul(x, w)\n[rs] y3 = reshape(y, shape=[1, rows, 24])\n[ba] yb = add(y3, bias)\n"
                 "[rh] h3 = reshape(h, shape=[1, rows, 24])\n[ad] out = add(h3, yb)",
                 buf, sizeof buf),
           2);
    expect_final("bias then residual through reshapes", buf, "bias", "h3");
    expect("a [1, 1, N] bias",
           model("f32", "input b3: f32[1, 1, 24]\n[mm] y = matmul(x, w)\n[rs] y3 = reshape(y, shape=[1, rows, 24])\n"
                        "[ad] out = add(y3, b3)",
                 buf, sizeof buf),
           1);
    expect_final("a [1, 1, N] bias", buf, "b3", NULL);

    /* near misses */
    expect("a bias beside the matmul's own", model("f32", "[mm] y = matmul(x, w, bias)\n[ad] out = add(y, bias)", buf, sizeof buf),
           0);
    expect("a reshape that changes the last dim before the bias",
           model("f32", "input b12: f32[12]\n[mm] y = matmul(x, w)\n[rs] y2 = reshape(y, shape=[rows, 2, 12])\n"
                        "[ad] out = add(y2, b12)",
                 buf, sizeof buf),
           0);
    expect("an addend broadcasting the result up",
           model("f32", "input b2: f32[2, 1, 24]\n[mm] y = matmul(x, w)\n[ad] out = add(y, b2)", buf, sizeof buf), 0);
    expect("a broadcast addend (a column)",
           model("f32", "input c: f32[rows, 1]\n[mm] y = matmul(x, w)\n[ad] out = add(y, c)", buf, sizeof buf), 0);
    expect("y read elsewhere",
           model("f32", "[mm] y = matmul(x, w)\n[ad] a = add(y, h)\n[mu] out = mul(a, y)", buf, sizeof buf), 0);
    expect("y a graph output",
           model("f32", "[mm] y = matmul(x, w)\n[ad] out = add(y, h)\noutput y", buf, sizeof buf), 0);
    expect("a view of y read elsewhere",
           model("f32", "[mm] y = matmul(x, w)\n[rs] y3 = reshape(y, shape=[1, rows, 24])\n"
                        "[rh] h3 = reshape(h, shape=[1, rows, 24])\n[ad] a = add(y3, h3)\n[mu] out = mul(a, y3)",
                 buf, sizeof buf),
           0);
    expect("an activated matmul", model("f32", "[mm] y = matmul(x, w, epilogue=\"relu\")\n[ad] out = add(y, h)", buf, sizeof buf),
           0);
    expect("a full bias", model("f32", "[mm] y = matmul(x, w, h)\n[ad] out = add(y, h)", buf, sizeof buf), 0);
    expect("a cast between (f32 add of a bf16 matmul)",
           model("bf16", "input hf: f32[rows, 24]\n[mm] y = matmul(x, w)\n[c] yf = cast(y, to=\"f32\")\n"
                         "[ad] o = add(yf, hf)\n[cb] out = cast(o, to=\"bf16\")",
                 buf, sizeof buf),
           0);
    expect("integers", model("i64", "[mm] y = matmul(x, w)\n[ad] out = add(y, h)", buf, sizeof buf), 0);
    expect("a sub, not an add", model("f32", "[mm] y = matmul(x, w)\n[ad] out = sub(h, y)", buf, sizeof buf), 0);
    expect("y + y", model("f32", "[mm] y = matmul(x, w)\n[ad] out = add(y, y)", buf, sizeof buf), 0);
    expect("a matmul with a residual already: only the first add",
           model("f32", "input g: f32[rows, 24]\n[mm] y = matmul(x, w)\n[ad] a = add(y, h)\n[ad2] out = add(a, g)", buf,
                 sizeof buf),
           1);
}

/* ==== 2. fused vs unfused ========================================================================= */
static uint64_t rng = 9876;
static double urand(void) { return fc_urand(&rng); }

static bool generic_policy; /* shape policy generic: x @ w (two inputs) is a generated kernel */

/* g on the simulator with inputs x, w, bias, h (fused_check.h); *n_res the explain lines showing
 * "+residual" */
static float *run(gr_graph_t g, bool unfused, int64_t rows, float *const *data, size_t *n_out, int *n_res) {
    const int64_t dims[4][3] = {{rows, 16}, {16, 24}, {24}, {rows, 24}};
    const int ndims[4] = {2, 2, 1, 2};
    return fc_run(g, unfused, generic_policy, 4, data, dims, ndims, n_out, " +residual ", n_res);
}

/* want_fused: matmuls explain shows with a residual in the fused plan (the unfused: 0, unless
 * the .gir writes the residual itself: `direct`) */
static void compare(const char *what, const char *text, int want_fused, bool direct, double tol) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(text, what, NULL, &g));
    if (!g) return;
    if (generic_policy) CHECK_OK(gr_graph_set_dim_range(g, "rows", 1, 64));
    static const int64_t rows_list[] = {1, 5, 64};
    for (int ri = 0; ri < 3; ri++) {
        int64_t R = rows_list[ri];
        const int64_t counts[4] = {R * 16, 16 * 24, 24, R * 24};
        float *data[4];
        for (int i = 0; i < 4; i++) {
            data[i] = malloc(sizeof(float) * (size_t)counts[i]);
            double scale = i == 1 ? 0.4 : 1.0;
            for (int64_t j = 0; j < counts[i]; j++) data[i][j] = (float)(scale * (2 * urand() - 1));
        }
        size_t nf = 0, nu = 0;
        int ef = -1, eu = -1;
        float *f = run(g, false, R, data, &nf, &ef);
        float *u = run(g, true, R, data, &nu, &eu);
        if (f && u && nf == nu && nf == (size_t)(R * 24)) {
            double e = fc_rel_err(f, u, nf);
            CHECK_MSG(e <= tol, "%s rows=%lld: fused vs unfused %.3e > %.0e", what, (long long)R, e, tol);
            /* generic: the matmul is a generated kernel, which explain does not list as a matmul */
            int want_u = direct ? want_fused : 0;
            CHECK_MSG(generic_policy || (ef == want_fused && eu == want_u),
                      "%s rows=%lld: explain shows %d fused (%d unfused), expected %d (%d)", what, (long long)R, ef, eu,
                      want_fused, want_u);
            if (ri == 2) printf("%s: fused vs unfused %.2e (tolerance %.0e)\n", what, e, tol);
        } else {
            CHECK_MSG(false, "%s rows=%lld: no result", what, (long long)R);
        }
        free(f);
        free(u);
        for (int i = 0; i < 4; i++) free(data[i]);
    }
    gr_graph_destroy(g);
}

static void test_fused_vs_unfused(void) {
    char buf[4096];
    const char *plain = "[mm] y = matmul(x, w)\n[ad] out = add(h, y)";
    const char *gemm = "[mm] y = matmul(x, w, bias)\n[rs] y3 = reshape(y, shape=[1, rows, 24])\n"
                       "[rh] h3 = reshape(h, shape=[1, rows, 24])\n[ad] out = add(y3, h3)";
    const char *stream = "[tw] wt = transpose(w, perm=[1, 0])\n[ww] w2 = matmul(wt, w)\n[mm] y = matmul(x, w, bias)\n"
                         "[ad] h1 = add(h, y)\n[mm2] y2 = matmul(h1, w2)\n[ad2] out = add(h1, y2)";
    const char *dense = "[mm] y = matmul(x, w)\n[rs] y3 = reshape(y, shape=[1, rows, 24])\n[ba] yb = add(y3, bias)\n"
                        "[rh] h3 = reshape(h, shape=[1, rows, 24])\n[ad] out = add(h3, yb)";
    compare("f32 matmul + bias + h (BERT's dense)", model("f32", dense, buf, sizeof buf), 1, false, 1e-6);
    compare("bf16 matmul + bias + h (BERT's dense)", model("bf16", dense, buf, sizeof buf), 1, false, 1e-2);
    compare("f32 matmul + h", model("f32", plain, buf, sizeof buf), 1, false, 1e-6);
    compare("f32 gemm with bias, reshaped, + h", model("f32", gemm, buf, sizeof buf), 1, false, 1e-6);
    compare("f32 residual stream", model("f32", stream, buf, sizeof buf), 2, false, 1e-6);
    compare("bf16 matmul + h", model("bf16", plain, buf, sizeof buf), 1, false, 1e-2);
    compare("bf16 gemm with bias, reshaped, + h", model("bf16", gemm, buf, sizeof buf), 1, false, 1e-2);
    compare("f16 gemm with bias, reshaped, + h", model("f16", gemm, buf, sizeof buf), 1, false, 2e-3);
    /* written in .gir: the same values fused or not (the pass has nothing to do) */
    compare("f32 residual input in .gir", model("f32", "[mm] out = matmul(x, w, bias, h)", buf, sizeof buf), 1, true, 0);
    compare("f32 residual input, no bias", model("f32", "[mm] out = matmul(x, w, _, h)", buf, sizeof buf), 1, true, 0);
    /* the residual inside a generated matmul kernel (lower-gen.c's mm_kernel) */
    generic_policy = true;
    compare("f32 gemm with bias, reshaped, + h, generated kernel", model("f32", gemm, buf, sizeof buf), 1, false, 1e-6);
    compare("bf16 matmul + h, generated kernel", model("bf16", plain, buf, sizeof buf), 1, false, 1e-2);
    generic_policy = false;
}

/* ==== 3. the op's rules ============================================================================ */
static void test_rules(void) {
    static const char *const bad[][2] = {
        {"[mymm] out = matmul(x, w, _, x)", "residual"},          /* x is [rows, 16], the result [rows, 24] */
        {"input hh: f32[rows, 1]\n[mymm] out = matmul(x, w, _, hh)", "residual"}, /* broadcast: not allowed */
        {"input hb: bf16[rows, 24]\n[mymm] out = matmul(x, w, _, hb)", "residual"},
        {"[mymm] out = matmul(x, w, h, h)", "row bias"},          /* a full bias beside a residual */
    };
    char buf[4096];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gr_graph *g = NULL;
        gr_status st = gr_graph_parse(model("f32", bad[i][0], buf, sizeof buf), "<rules>", NULL, &g);
        if (st == GR_OK) st = gr_ir_verify(g);
        CHECK_MSG(st == GR_ERR_SHAPE && strstr(gr_last_error(), "mymm") && strstr(gr_last_error(), bad[i][1]),
                  "case %zu: status %s, '%s'", i, gr_status_name(st), gr_last_error());
        gr_error_clear();
        gr_graph_destroy(g);
    }
}

/* ==== 4. the Llama export ========================================================================= */
static void test_llama(void) {
    const char *path = "tests/data/onnx/dyn/llama_dynamo/model.onnx";
    gr_graph *g = NULL;
    CHECK_OK(gr_onnx_load(path, &g));
    if (!g) return;
    int layers = 0;
    for (int i = 0; i < g->nodes.len; i++) layers += g->nodes.data[i].op == GR_OP_SOFTMAX;
    int n = -1;
    CHECK_OK(gr_pass_fuse_residual(g, &n));
    CHECK_MSG(layers > 0 && n == 2 * layers, "llama: %d residual adds fused, expected %d (two per layer)", n, 2 * layers);
    CHECK_OK(gr_ir_verify(g));
    gr_ir_graph_destroy(g);
    fc_export_fused_vs_unfused("llama export", path, &rng, 1e-5);
}

/* ==== 5. allocation failures ======================================================================= */
static void test_alloc_failures(void) {
    char buf[4096];
    model("f32",
          "[mm] y = matmul(x, w, bias)\n[rs] y3 = reshape(y, shape=[1, rows, 24])\n"
          "[rh] h3 = reshape(h, shape=[1, rows, 24])\n[ad] out = add(y3, h3)",
          buf, sizeof buf);
    fc_alloc_failures(buf, gr_pass_fuse_residual, 1);
}

int main(void) {
    long live0 = gr_debug_live_allocs();
    test_recognition();
    test_fused_vs_unfused();
    test_rules();
    test_llama();
    test_alloc_failures();
    CHECK_MSG(gr_debug_live_allocs() == live0, "%ld allocations leaked", gr_debug_live_allocs() - live0);
    return check_summary("test_residual");
}
