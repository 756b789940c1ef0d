/* tests/test_epilogue — activations fused into the matmul before them (passes/epilogue.c,
 * the matmul's `epilogue` attribute, GR_EPI_GELU_TANH / GR_EPI_RELU of the library call)
 * on the simulator.
 *
 * 1. Recognition: the tanh-GELU chain as exporters spell it (Pow or x*x*x, operands in
 *    either order, 0.5*x*(...) or x*0.5*(...), folded coefficients, division by a constant,
 *    f32 casts around a half chain, a reshape between the matmul and the chain, the row
 *    bias as an add or the matmul's own), gelu(approximate="tanh") and relu are fused;
 *    near misses are not: a wrong constant, the pre-activation read elsewhere or a graph
 *    output, erf GELU, a bias that is not a row, a chain that broadcasts x up.
 * 2. Fused vs unfused (session option no_fuse_epilogue) at several bindings of a symbolic
 *    row count, explain showing the epilogue: f32 within 1e-6 (the epilogue in f64 against
 *    the chain's f32 steps), bf16 within 1e-2 and f16 within 2e-3 (normalised L2 error;
 *    the unfused chain rounds the pre-activation and its steps to the half dtype, the
 *    epilogue rounds once).
 * 3. The GPT-2 export (tests/data/onnx/dyn/gpt2_dynamo): one GELU per layer fused, outputs
 *    within 1e-5 of the unfused plan.
 * 4. The epilogue in generated matmul kernels (integer matmul: relu) and bad attributes.
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

/* A matmul x[rows, 16] @ w[16, 24] (+ bias) followed by `chain`, which reads `u` and writes
 * `out`; `head` adds lines before the matmul, `mm` is the matmul line (or the default). */
static const char *model(const char *dt, const char *mm, const char *chain, const char *extra, char *buf, size_t n) {
    snprintf(buf, n,
             "graft 1\n"
             "input x: %s[rows, 16]\n"
             "input w: %s[16, 24]\n"
             "input bias: %s[24]\n"
             "const half: %s[] = [0.5]\n"
             "const one: %s[] = [1.0]\n"
             "const three: %s[] = [3.0]\n"
             "const cub: %s[] = [0.044715]\n"
             "const c1: %s[] = [0.7978845608028654]\n"
             "%s\n"
             "%s\n"
             "output out\n%s",
             dt, dt, dt, dt, dt, dt, dt, dt,
             mm ? mm : "[mm] y = matmul(x, w)\n[badd] u = add(y, bias)", chain, extra);
    return buf;
}

/* Hugging Face's NewGELUActivation as torch exports it */
static const char *const HF_CHAIN = "[m1] h = mul(u, half)\n"
                                    "[p] p3 = pow(u, three)\n"
                                    "[m2] q = mul(p3, cub)\n"
                                    "[a1] s = add(u, q)\n"
                                    "[m3] t = mul(s, c1)\n"
                                    "[th] th = tanh(t)\n"
                                    "[a2] o1 = add(th, one)\n"
                                    "[m4] out = mul(h, o1)";

static int count_op(const gr_graph *g, gr_op op) {
    int n = 0;
    for (int i = 0; i < g->nodes.len; i++) n += g->nodes.data[i].op == op;
    return n;
}

/* Number of matmuls fused in `text`; *epi the epilogue of the last one fused. */
static int fused_in(const char *text, const char **epi, int *n_bias_inputs) {
    gr_graph *g = NULL;
    int n = -1;
    CHECK_OK(gr_graph_parse(text, "<epilogue test>", NULL, &g));
    if (!g) return -1;
    CHECK_OK(gr_pass_fuse_epilogue(g, &n));
    if (n > 0) CHECK_OK(gr_ir_verify(g));
    static char last[32];
    last[0] = 0;
    for (int i = 0; i < g->nodes.len; i++) {
        const gr_ir_node *m = &g->nodes.data[i];
        const gr_ir_attr *a = m->op == GR_OP_MATMUL ? gr_ir_attr_find(m, "epilogue") : NULL;
        if (!a) continue;
        snprintf(last, sizeof last, "%s", a->s);
        if (n_bias_inputs) *n_bias_inputs = m->n_in > 2 && m->in[2] >= 0;
    }
    if (epi) *epi = last;
    /* fused: the chain's result is a view (identity) or a cast of the pre-activation */
    if (n > 0) CHECK(count_op(g, GR_OP_IDENTITY) + count_op(g, GR_OP_CAST) >= 1);
    gr_graph_destroy(g);
    return n;
}

static void expect(const char *what, const char *text, int want, const char *want_epi) {
    const char *epi = "";
    int n = fused_in(text, &epi, NULL);
    CHECK_MSG(n == want, "%s: %d fused, expected %d", what, n, want);
    if (want > 0 && want_epi) CHECK_MSG(!strcmp(epi, want_epi), "%s: epilogue %s, expected %s", what, epi, want_epi);
}

/* ==== 1. recognition =========================================================================== */
static void test_recognition(void) {
    char buf[4096];
    expect("hf chain", model("f32", NULL, HF_CHAIN, "", buf, sizeof buf), 1, "gelu_tanh");
    /* the add's bias became the matmul's */
    int has_bias = 0;
    CHECK(fused_in(model("f32", NULL, HF_CHAIN, "", buf, sizeof buf), NULL, &has_bias) == 1 && has_bias);
    expect("x*x*x, operands swapped",
           model("f32", NULL,
                 "[sq] sq = mul(u, u)\n[cu] p3 = mul(u, sq)\n[m2] q = mul(cub, p3)\n[a1] s = add(q, u)\n"
                 "[m3] t = mul(c1, s)\n[th] th = tanh(t)\n[a2] o1 = add(one, th)\n[m0] h0 = mul(u, o1)\n"
                 "[m4] out = mul(h0, half)",
                 "", buf, sizeof buf),
           1, "gelu_tanh");
    expect("x*0.5*(1+tanh) with x*(1 + 0.044715*x*x) folded",
           model("f32", NULL,
                 "const k: f32[] = [0.035677408136300125]\n"
                 "[h] h = mul(half, u)\n[sq] sq = mul(u, u)\n[m2] q = mul(sq, k)\n[a1] s = add(c1, q)\n"
                 "[m3] t = mul(s, u)\n[th] th = tanh(t)\n[a2] o1 = add(th, one)\n[m4] out = mul(o1, h)",
                 "", buf, sizeof buf),
           1, "gelu_tanh");
    expect("x / 2 * (0.5 + 0.5 tanh) * 2: constants multiplied out",
           model("f32", NULL,
                 "const two: f32[] = [2.0]\n"
                 "[d] h = div(u, two)\n[p] p3 = pow(u, three)\n[m2] q = mul(p3, cub)\n[a1] s = add(u, q)\n"
                 "[m3] t = mul(s, c1)\n[th] th = tanh(t)\n[m5] th2 = mul(th, half)\n[a2] o1 = add(half, th2)\n"
                 "[m6] h2 = mul(h, o1)\n[m4] out = mul(h2, two)",
                 "", buf, sizeof buf),
           1, "gelu_tanh");
    expect("gelu op, approximate=tanh", model("f32", NULL, "[g] out = gelu(u, approximate=\"tanh\")", "", buf, sizeof buf), 1,
           "gelu_tanh");
    expect("relu", model("f32", NULL, "[r] out = relu(u)", "", buf, sizeof buf), 1, "relu");
    expect("relu without a bias", model("f32", "[mm] u = matmul(x, w)", "[r] out = relu(u)", "", buf, sizeof buf), 1, "relu");
    expect("the matmul's own bias (a Gemm)", model("f32", "[mm] u = matmul(x, w, bias)", HF_CHAIN, "", buf, sizeof buf), 1,
           "gelu_tanh");
    expect("a reshape between matmul and chain (GPT-2's Gemm on [batch*seq, n])",
           model("f32", "[mm] y = matmul(x, w, bias)\n[rs] u = reshape(y, shape=[1, rows, 24])", HF_CHAIN, "", buf, sizeof buf),
           1, "gelu_tanh");
    expect("bias added after the reshape",
           model("f32", "[mm] y = matmul(x, w)\n[rs] y2 = reshape(y, shape=[1, rows, 24])\n[badd] u = add(bias, y2)", HF_CHAIN,
                 "", buf, sizeof buf),
           1, "gelu_tanh");
    expect("bf16 chain", model("bf16", NULL, HF_CHAIN, "", buf, sizeof buf), 1, "gelu_tanh");
    expect("bf16 matmul, f32 chain between casts",
           model("bf16",
                 "[mm] y = matmul(x, w)\n[badd] y2 = add(y, bias)\n[c] u = cast(y2, to=\"f32\")\n"
                 "const halff: f32[] = [0.5]\nconst onef: f32[] = [1.0]\nconst threef: f32[] = [3.0]\n"
                 "const cubf: f32[] = [0.044715]\nconst c1f: f32[] = [0.7978845608028654]",
                 "[m1] h = mul(u, halff)\n[p] p3 = pow(u, threef)\n[m2] q = mul(p3, cubf)\n[a1] s = add(u, q)\n"
                 "[m3] t = mul(s, c1f)\n[th] th = tanh(t)\n[a2] o1 = add(th, onef)\n[m4] o = mul(h, o1)\n"
                 "[cb] out = cast(o, to=\"bf16\")",
                 "", buf, sizeof buf),
           1, "gelu_tanh");
    expect("bf16 matmul, f32 chain, f32 result (a cast of the fused output)",
           model("bf16", "[mm] y = matmul(x, w)\n[badd] y2 = add(y, bias)\n[c] u = cast(y2, to=\"f32\")",
                 "[r] out = relu(u)", "", buf, sizeof buf),
           1, "relu");

    {
        /* an f32 activation whose result goes through a view into a cast back to bf16 (the
         * --precision bf16 graph): no f32 round trip is left, the cast becomes a view */
        const char *text = model("bf16", "[mm] y = matmul(x, w)\n[badd] y2 = add(y, bias)\n[c] u = cast(y2, to=\"f32\")",
                                 "[g] r = gelu(u, approximate=\"tanh\")\n[rs] v = reshape(r, shape=[1, rows, 24])\n"
                                 "[cb] out = cast(v, to=\"bf16\")",
                                 "", buf, sizeof buf);
        gr_graph *g = NULL;
        int n = -1;
        CHECK_OK(gr_graph_parse(text, "<cast back>", NULL, &g));
        if (g) {
            CHECK_OK(gr_pass_fuse_epilogue(g, &n));
            CHECK(n == 1);
            int cb = gr_ir_find_value(g, "out"), r = gr_ir_find_value(g, "r");
            CHECK(cb >= 0 && r >= 0 && g->nodes.data[g->values.data[cb].producer].op == GR_OP_IDENTITY);
            CHECK(r >= 0 && g->values.data[r].dtype == GR_BF16 && g->nodes.data[g->values.data[r].producer].op == GR_OP_IDENTITY);
            CHECK_OK(gr_ir_verify(g));
            gr_graph_destroy(g);
        }
    }

    /* near misses */
    expect("wrong cubic constant",
           model("f32", NULL,
                 "const bad: f32[] = [0.05]\n[m1] h = mul(u, half)\n[p] p3 = pow(u, three)\n[m2] q = mul(p3, bad)\n"
                 "[a1] s = add(u, q)\n[m3] t = mul(s, c1)\n[th] th = tanh(t)\n[a2] o1 = add(th, one)\n[m4] out = mul(h, o1)",
                 "", buf, sizeof buf),
           0, NULL);
    expect("wrong sqrt(2/pi)",
           model("f32", NULL,
                 "const bad: f32[] = [0.8]\n[m1] h = mul(u, half)\n[p] p3 = pow(u, three)\n[m2] q = mul(p3, cub)\n"
                 "[a1] s = add(u, q)\n[m3] t = mul(s, bad)\n[th] th = tanh(t)\n[a2] o1 = add(th, one)\n[m4] out = mul(h, o1)",
                 "", buf, sizeof buf),
           0, NULL);
    expect("0.4 instead of 0.5",
           model("f32", NULL,
                 "const bad: f32[] = [0.4]\n[m1] h = mul(u, bad)\n[p] p3 = pow(u, three)\n[m2] q = mul(p3, cub)\n"
                 "[a1] s = add(u, q)\n[m3] t = mul(s, c1)\n[th] th = tanh(t)\n[a2] o1 = add(th, one)\n[m4] out = mul(h, o1)",
                 "", buf, sizeof buf),
           0, NULL);
    expect("x^2 instead of x^3",
           model("f32", NULL,
                 "const two: f32[] = [2.0]\n[m1] h = mul(u, half)\n[p] p3 = pow(u, two)\n[m2] q = mul(p3, cub)\n"
                 "[a1] s = add(u, q)\n[m3] t = mul(s, c1)\n[th] th = tanh(t)\n[a2] o1 = add(th, one)\n[m4] out = mul(h, o1)",
                 "", buf, sizeof buf),
           0, NULL);
    expect("sigmoid instead of tanh",
           model("f32", NULL,
                 "[m1] h = mul(u, half)\n[p] p3 = pow(u, three)\n[m2] q = mul(p3, cub)\n[a1] s = add(u, q)\n"
                 "[m3] t = mul(s, c1)\n[th] th = sigmoid(t)\n[a2] o1 = add(th, one)\n[m4] out = mul(h, o1)",
                 "", buf, sizeof buf),
           0, NULL);
    expect("pre-activation is a graph output", model("f32", NULL, HF_CHAIN, "output u\n", buf, sizeof buf), 0, NULL);
    expect("matmul output is a graph output", model("f32", NULL, HF_CHAIN, "output y\n", buf, sizeof buf), 0, NULL);
    expect("pre-activation read by another node",
           model("f32", NULL, HF_CHAIN, "[other] z = neg(u)\noutput z\n", buf, sizeof buf), 0, NULL);
    expect("an inner value of the chain read elsewhere",
           model("f32", NULL, HF_CHAIN, "output th\n", buf, sizeof buf), 0, NULL);
    expect("erf GELU", model("f32", NULL, "[g] out = gelu(u)", "", buf, sizeof buf), 0, NULL);
    expect("a full bias, not a row",
           model("f32", "input fb: f32[rows, 24]\n[mm] y = matmul(x, w)\n[badd] u = add(y, fb)", "[r] out = relu(u)", "", buf,
                 sizeof buf),
           0, NULL);
    expect("a bias computed before the matmul",
           model("f32", "input hb: f16[24]\n[hc] hbf = cast(hb, to=\"f32\")\n[mm] y = matmul(x, w)\n[badd] u = add(y, hbf)",
                 "[r] out = relu(u)", "", buf, sizeof buf),
           1, "relu");
    /* the fused matmul takes the matmul's place, where a bias computed after it does not exist yet */
    expect("a bias computed after the matmul",
           model("f32", "input hb: f16[24]\n[mm] y = matmul(x, w)\n[hc] hbf = cast(hb, to=\"f32\")\n[badd] u = add(y, hbf)",
                 "[r] out = relu(u)", "", buf, sizeof buf),
           0, NULL);
    expect("a [1, N] row bias",
           model("f32", "input b2: f32[1, 24]\n[mm] y = matmul(x, w)\n[badd] u = add(y, b2)", "[r] out = relu(u)", "", buf,
                 sizeof buf),
           1, "relu");
    expect("a bias that is a column",
           model("f32", "input bc: f32[rows, 1]\n[mm] y = matmul(x, w)\n[badd] u = add(y, bc)", "[r] out = relu(u)", "", buf,
                 sizeof buf),
           0, NULL);
    expect("a reshape that changes the last dim before the bias",
           model("f32", "[mm] y = matmul(x, w)\n[rs] y2 = reshape(y, shape=[rows, 2, 12])\ninput b12: f32[12]\n"
                        "[badd] u = add(y2, b12)",
                 "[r] out = relu(u)", "", buf, sizeof buf),
           0, NULL);
    expect("a chain broadcasting x up (a [1,1,1] constant)",
           model("f32", NULL, "const h3: f32[1, 1, 1] = [0.5]\n[m1] h = mul(u, h3)\n[r] out = relu(h)", "", buf, sizeof buf), 0,
           NULL);
    expect("f64 (no cuBLASLt epilogue)", model("f64", NULL, HF_CHAIN, "", buf, sizeof buf), 0, NULL);
}

/* ==== 2. fused vs unfused ========================================================================= */
static uint64_t rng = 4321;
static double urand(void) { return fc_urand(&rng); }

static bool generic_policy; /* shape policy generic: x @ w (two inputs) is a generated kernel */

/* g on the simulator (fused_check.h); *n_epi the explain lines naming the epilogue `epi` */
static float *run(gr_graph_t g, bool unfused, int n_in, float *const *data, const int64_t (*dims)[3], const int *ndims,
                  size_t *n_out, const char *epi, int *n_epi) {
    char pat[64];
    snprintf(pat, sizeof pat, " +%s ", epi);
    return fc_run(g, unfused, generic_policy, n_in, data, dims, ndims, n_out, pat, n_epi);
}

static void compare(const char *what, const char *text, const char *epi, double tol) {
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(text, what, NULL, &g));
    if (!g) return;
    if (generic_policy) CHECK_OK(gr_graph_set_dim_range(g, "rows", 1, 64));
    static const int64_t rows_list[] = {1, 5, 64};
    for (int ri = 0; ri < 3; ri++) {
        int64_t R = rows_list[ri];
        int64_t dims[3][3] = {{R, 16}, {16, 24}, {24}};
        int ndims[3] = {2, 2, 1};
        float *data[3];
        for (int i = 0; i < 3; i++) {
            int64_t n = dims[i][0] * (ndims[i] > 1 ? dims[i][1] : 1);
            data[i] = malloc(sizeof(float) * (size_t)n);
            /* pre-activations over GELU's curved part and both tails: x in [-2, 2], w ~ 0.25 */
            double scale = i == 0 ? 2.0 : i == 1 ? 0.4 : 1.0;
            for (int64_t j = 0; j < n; j++) data[i][j] = (float)(scale * (2 * urand() - 1));
        }
        size_t nf = 0, nu = 0;
        int ef = -1, eu = -1;
        float *f = run(g, false, 3, data, (const int64_t(*)[3])dims, ndims, &nf, epi, &ef);
        float *u = run(g, true, 3, data, (const int64_t(*)[3])dims, ndims, &nu, epi, &eu);
        if (f && u && nf == nu && nf == (size_t)(R * 24)) {
            double e = fc_rel_err(f, u, nf);
            CHECK_MSG(e <= tol, "%s rows=%lld: fused vs unfused %.3e > %.0e", what, (long long)R, e, tol);
            /* generic: the matmul is a generated kernel, which explain does not list as a matmul */
            CHECK_MSG(generic_policy || (ef == 1 && eu == 0), "%s rows=%lld: explain shows %d fused (%d unfused), expected 1 (0)",
                      what, (long long)R, ef, eu);
            if (ri == 2) printf("%s: fused vs unfused %.2e (tolerance %.0e)\n", what, e, tol);
        } else {
            CHECK_MSG(false, "%s rows=%lld: no result", what, (long long)R);
        }
        free(f);
        free(u);
        for (int i = 0; i < 3; i++) free(data[i]);
    }
    gr_graph_destroy(g);
}

static void test_fused_vs_unfused(void) {
    char buf[4096];
    compare("f32 hf chain", model("f32", NULL, HF_CHAIN, "", buf, sizeof buf), "gelu_tanh", 1e-6);
    compare("f32 gemm bias gelu op", model("f32", "[mm] u = matmul(x, w, bias)", "[g] out = gelu(u, approximate=\"tanh\")", "",
                                           buf, sizeof buf),
            "gelu_tanh", 1e-6);
    /* relu itself is exact; the difference is the bias added before the rounding (fused) or after */
    compare("f32 relu", model("f32", NULL, "[r] out = relu(u)", "", buf, sizeof buf), "relu", 1e-6);
    compare("bf16 hf chain", model("bf16", NULL, HF_CHAIN, "", buf, sizeof buf), "gelu_tanh", 1e-2);
    compare("f16 hf chain", model("f16", NULL, HF_CHAIN, "", buf, sizeof buf), "gelu_tanh", 2e-3);
    compare("bf16 relu", model("bf16", NULL, "[r] out = relu(u)", "", buf, sizeof buf), "relu", 1e-2);
    compare("bf16 matmul, f32 gelu, reshape, cast back",
            model("bf16", "[mm] y = matmul(x, w)\n[badd] y2 = add(y, bias)\n[c] u = cast(y2, to=\"f32\")",
                  "[g] r = gelu(u, approximate=\"tanh\")\n[rs] v = reshape(r, shape=[rows, 24])\n[cb] out = cast(v, to=\"bf16\")",
                  "", buf, sizeof buf),
            "gelu_tanh", 1e-2);
    compare("f32 gemm bias relu", model("f32", "[mm] u = matmul(x, w, bias)", "[r] out = relu(u)", "", buf, sizeof buf), "relu", 0);
    /* the epilogue inside a generated matmul kernel (lower-gen.c's mm_kernel) */
    generic_policy = true;
    compare("f32 hf chain, generated matmul kernel", model("f32", NULL, HF_CHAIN, "", buf, sizeof buf), "gelu_tanh", 1e-6);
    compare("bf16 hf chain, generated matmul kernel", model("bf16", NULL, HF_CHAIN, "", buf, sizeof buf), "gelu_tanh", 1e-2);
    generic_policy = false;
}

/* ==== 3. the GPT-2 export ======================================================================== */
static void test_gpt2(void) {
    const char *path = "tests/data/onnx/dyn/gpt2_dynamo/model.onnx";
    gr_graph *g = NULL;
    CHECK_OK(gr_onnx_load(path, &g));
    if (!g) return;
    int n = -1;
    CHECK_OK(gr_pass_fuse_epilogue(g, &n));
    CHECK_MSG(n == 2, "gpt2: %d GELUs fused, expected 2 (one per layer)", n);
    CHECK(count_op(g, GR_OP_TANH) == 2); /* the old chains stay, unread */
    CHECK_OK(gr_ir_verify(g));
    gr_ir_graph_destroy(g);
    /* sessions fused and not, on the same tokens */
    fc_export_fused_vs_unfused("gpt2 export", path, &rng, 1e-5);
}

/* ==== 4. generated kernels and bad attributes ====================================================== */
static void test_kernel_and_errors(void) {
    /* an integer matmul is a generated reduction kernel: its epilogue is applied there */
    const char *text = "graft 1\n"
                       "input a: i64[2, 3]\n"
                       "input b: i64[3, 2]\n"
                       "[mm] y = matmul(a, b, epilogue=\"relu\")\n"
                       "output y\n";
    gr_graph_t g = NULL;
    CHECK_OK(gr_graph_parse(text, "<int relu>", NULL, &g));
    if (g) {
        gr_session_options o;
        gr_session_options_init(&o);
        o.device = GR_DEVICE_SIM;
        gr_session_t s = NULL;
        CHECK_OK(gr_session_create(g, &o, &s));
        int64_t a[6] = {1, -2, 3, -4, 5, -6}, b[6] = {1, 2, 3, 4, 5, 6}, y[4] = {0};
        const int64_t da[2] = {2, 3}, db[2] = {3, 2};
        if (s) {
            CHECK_OK(gr_session_set_input(s, "a", GR_I64, 2, da, a, sizeof a));
            CHECK_OK(gr_session_set_input(s, "b", GR_I64, 2, db, b, sizeof b));
            CHECK_OK(gr_session_run(s));
            gr_output out;
            CHECK_OK(gr_session_output(s, 0, &out));
            CHECK_OK(gr_session_output_read(s, out, y, sizeof y));
            /* a@b = [[10, 12], [-22, -28]] -> relu */
            CHECK_MSG(y[0] == 10 && y[1] == 12 && y[2] == 0 && y[3] == 0, "int relu: %lld %lld %lld %lld", (long long)y[0],
                      (long long)y[1], (long long)y[2], (long long)y[3]);
            gr_session_destroy(s);
        }
        gr_graph_destroy(g);
    }
    /* an unknown epilogue, erf GELU, gelu_tanh of integers: clear errors naming the node */
    static const char *const bad[][2] = {
        {"f32", "bogus"}, {"f32", "gelu"}, {"i64", "gelu_tanh"},
    };
    for (int i = 0; i < 3; i++) {
        char buf[512];
        snprintf(buf, sizeof buf,
                 "graft 1\ninput a: %s[2, 3]\ninput b: %s[3, 2]\n[mymatmul] y = matmul(a, b, epilogue=\"%s\")\noutput y\n",
                 bad[i][0], bad[i][0], bad[i][1]);
        g = NULL;
        CHECK_OK(gr_graph_parse(buf, "<bad epilogue>", NULL, &g));
        if (!g) continue;
        gr_session_options o;
        gr_session_options_init(&o);
        o.device = GR_DEVICE_SIM;
        gr_session_t s = NULL;
        gr_status st = gr_session_create(g, &o, &s);
        if (st == GR_OK) {
            const int64_t da[2] = {2, 3}, db[2] = {3, 2};
            char zeros[64] = {0};
            gr_dtype t = bad[i][0][0] == 'i' ? GR_I64 : GR_F32;
            CHECK_OK(gr_session_set_input(s, "a", t, 2, da, zeros, 6 * gr_dtype_size(t)));
            CHECK_OK(gr_session_set_input(s, "b", t, 2, db, zeros, 6 * gr_dtype_size(t)));
            st = gr_session_run(s);
        }
        CHECK_MSG(st != GR_OK && strstr(gr_last_error(), "mymatmul") && strstr(gr_last_error(), "epilogue"),
                  "epilogue %s of %s: status %d, '%s'", bad[i][1], bad[i][0], (int)st, gr_last_error());
        gr_session_destroy(s);
        gr_graph_destroy(g);
    }
}

/* ==== 5. allocation failures ======================================================================= */
static void test_alloc_failures(void) {
    char buf[4096];
    model("f32", NULL, HF_CHAIN, "", buf, sizeof buf);
    /* every allocation the pass makes fails once: NOMEM (or a failure the callee absorbs,
     * such as a name index: then the fusion happens), never a crash or a leak */
    fc_alloc_failures(buf, gr_pass_fuse_epilogue, 1);
}

int main(void) {
    long live0 = gr_debug_live_allocs();
    test_recognition();
    test_fused_vs_unfused();
    test_gpt2();
    test_kernel_and_errors();
    test_alloc_failures();
    CHECK_MSG(gr_debug_live_allocs() == live0, "%ld allocations leaked", gr_debug_live_allocs() - live0);
    return check_summary("test_epilogue");
}
