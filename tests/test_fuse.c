/* tests/test_fuse — fusion with recomputation, CSE inside kernels, dead-step
 * elimination, and the fold limit for fill / range.
 *
 * Graphs are built with the ir.c builder and typed by hand, lowered, fused
 * (or not) and EXECUTED by a small executor on host buffers
 * (gr_kernel_interpret / gr_libcall_reference, with every kernel's byte
 * ranges checked against its buffers), as in test_lower. Fused results must
 * be bit-identical to unfused ones. */
#include "check.h"
#include "passes/passes.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ==== graph building ===================================================================== */

#include "host_exec.h" /* MAXV, input_data, A_* attrs, set_type, t_input, t_const, the executor */

static int t_node(gr_graph *g, gr_op op, int n_in, const int *in, int n_attr, const gr_ir_attr *attrs, gr_dtype t,
                  int nd, const int64_t *dims) {
    int node = -1;
    CHECK_OK(gr_ir_add_node(g, op, NULL, n_in, in, 1, NULL, n_attr, attrs, &node));
    if (node < 0) return -1;
    int out = g->nodes.data[node].out[0];
    set_type(g, out, t, nd, dims);
    return out;
}

static int un(gr_graph *g, gr_op op, int a, gr_dtype t, int nd, const int64_t *dims) {
    return t_node(g, op, 1, &a, 0, NULL, t, nd, dims);
}

static int bin(gr_graph *g, gr_op op, int a, int b, gr_dtype t, int nd, const int64_t *dims) {
    return t_node(g, op, 2, (int[]){a, b}, 0, NULL, t, nd, dims);
}

static int cst(gr_graph *g, float v) { return t_const(g, GR_F32, 0, DIMS(0), &v); }

static uint64_t rng_state = 777;
static double frand(double lo, double hi) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (double)(rng_state >> 11) * 0x1p-53;
}

/* n elements of t from [lo, hi); the values as stored go to vals (optional) */
static void *make_data(gr_dtype t, int64_t n, double lo, double hi, double *vals) {
    void *b = malloc((size_t)(n ? n : 1) * gr_dtype_size(t));
    for (int64_t i = 0; i < n; i++) {
        gr_store_f64(b, t, i, frand(lo, hi));
        if (vals) vals[i] = gr_load_f64(b, t, i);
    }
    return b;
}


static int count_compute(const gr_step_list *l) {
    int n = 0;
    for (int i = 0; i < l->len; i++) n += l->data[i].kind == GR_STEP_KERNEL || l->data[i].kind == GR_STEP_LIBCALL;
    return n;
}

/* Lowers (and optionally fuses) g, runs it, returns the raw bytes of value v (malloc'd). */
static void *run_value(gr_graph *g, int v, bool fuse, int *n_compute, gr_step_list *keep) {
    gr_step_list steps;
    gr_status st = gr_pass_lower(g, &steps);
    CHECK_OK(st);
    if (st != GR_OK) return NULL;
    if (fuse) CHECK_OK(gr_pass_fuse(g, &steps));
    for (int i = 0; i < steps.len; i++)
        if (steps.data[i].kind == GR_STEP_KERNEL) CHECK_OK(gr_kernel_verify(steps.data[i].kernel));
    if (n_compute) *n_compute = count_compute(&steps);
    exec_t e;
    st = exec_run(&e, g, &steps);
    CHECK_OK(st);
    void *out = NULL;
    if (st == GR_OK) {
        const gr_ir_value *x = &g->values.data[v];
        size_t bytes = (size_t)gr_ir_value_numel(x) * gr_dtype_size(x->dtype);
        out = malloc(bytes + 1);
        memcpy(out, e.buf[v], bytes);
    }
    exec_free(&e);
    if (keep) *keep = steps;
    else gr_step_list_free(&steps);
    return out;
}

/* Runs g unfused and fused; every output must match bit for bit; checks kernel counts. */
static void check_fused(const char *what, gr_graph *g, int want_unfused, int want_fused) {
    for (int o = 0; o < g->outputs.len; o++) {
        int y = g->outputs.data[o];
        int nu = -1, nf = -1;
        void *a = run_value(g, y, false, &nu, NULL), *b = run_value(g, y, true, &nf, NULL);
        const gr_ir_value *x = &g->values.data[y];
        size_t bytes = (size_t)gr_ir_value_numel(x) * gr_dtype_size(x->dtype);
        CHECK_MSG(a && b && memcmp(a, b, bytes) == 0, "%s: output %d: fused and unfused results differ", what, o);
        CHECK_MSG(nu == want_unfused && nf == want_fused, "%s: %d kernels unfused (want %d), %d fused (want %d)", what,
                  nu, want_unfused, nf, want_fused);
        free(a), free(b);
    }
}

static int count_ops(const gr_kernel *k, gr_kexpr_op op) {
    int n = 0;
    for (int i = 0; i < k->nodes.len; i++) n += k->nodes.data[i].op == op;
    return n;
}

/* the one kernel step of a fused plan, or NULL */
static const gr_kernel *only_kernel(const gr_step_list *l) {
    const gr_kernel *k = NULL;
    for (int i = 0; i < l->len; i++)
        if (l->data[i].kind == GR_STEP_KERNEL) {
            if (k) return NULL;
            k = l->data[i].kernel;
        }
    return k;
}

/* ==== EOS ========================================================================================= */

static float f32(double v) { return (float)v; }

/* examples/gen_examples.py's eos() with n elements; fills ref with a float reference */
static gr_graph *build_eos(int64_t n, int rounds, bool x_out, void **data, float *ref) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    double *sv = malloc(sizeof(double) * (size_t)n), *tv = malloc(sizeof(double) * (size_t)n),
           *pv = malloc(sizeof(double) * (size_t)n);
    data[0] = make_data(GR_F32, n, 0, 2, sv);
    data[1] = make_data(GR_F32, n, -1, 1, tv);
    data[2] = make_data(GR_F32, n, -1, 1, pv);
    const int64_t *d = (const int64_t[]){n};
    int s = t_input(g, "s", GR_F32, 1, d, data[0]), t = t_input(g, "t", GR_F32, 1, d, data[1]),
        p = t_input(g, "p", GR_F32, 1, d, data[2]);
    int x = un(g, GR_OP_SQRT, bin(g, GR_OP_MUL, s, cst(g, f32(0.0248826675584615)), GR_F32, 1, d), GR_F32, 1, d);
    int y = bin(g, GR_OP_MUL, t, cst(g, f32(0.025)), GR_F32, 1, d);
    int z = bin(g, GR_OP_MUL, p, cst(g, f32(1e-4)), GR_F32, 1, d);
    int acc = t_node(g, GR_OP_FILL, 0, NULL, 2, (gr_ir_attr[]){A_INTS("shape", d, 1), A_FLOAT("value", 0.0)}, GR_F32, 1, d);
    for (int k = 0; k < rounds; k++) {
        double c = 1.0 / (k + 1);
        int a = bin(g, GR_OP_MUL, bin(g, GR_OP_MUL, cst(g, f32(c)), x, GR_F32, 1, d), y, GR_F32, 1, d);
        int b = bin(g, GR_OP_MUL, bin(g, GR_OP_MUL, cst(g, f32(c * 0.5)), z, GR_F32, 1, d), x, GR_F32, 1, d);
        int tt = bin(g, GR_OP_MUL, un(g, GR_OP_TANH, bin(g, GR_OP_MUL, y, cst(g, f32(c)), GR_F32, 1, d), GR_F32, 1, d), z,
                     GR_F32, 1, d);
        acc = bin(g, GR_OP_ADD, bin(g, GR_OP_SUB, bin(g, GR_OP_ADD, acc, a, GR_F32, 1, d), b, GR_F32, 1, d), tt, GR_F32, 1, d);
        x = bin(g, GR_OP_ADD, bin(g, GR_OP_MUL, x, cst(g, f32(0.999)), GR_F32, 1, d), cst(g, f32(0.001)), GR_F32, 1, d);
    }
    gr_ir_add_output(g, acc);
    if (x_out) gr_ir_add_output(g, x);
    for (int64_t i = 0; i < n && ref; i++) {
        float xs = sqrtf((float)sv[i] * f32(0.0248826675584615)), ys = (float)tv[i] * f32(0.025),
              zs = (float)pv[i] * f32(1e-4), as = 0;
        for (int k = 0; k < rounds; k++) {
            float c = f32(1.0 / (k + 1)), c2 = f32(1.0 / (k + 1) * 0.5);
            as = as + c * xs * ys - c2 * zs * xs + tanhf(ys * c) * zs;
            xs = xs * f32(0.999) + f32(0.001);
        }
        ref[i] = as;
    }
    free(sv), free(tv), free(pv);
    return g;
}

static void test_eos(void) {
    enum { N = 1000 };
    void *data[3];
    static float ref[N];
    gr_graph *g = build_eos(N, 24, false, data, ref);
    int y = g->outputs.data[0];
    int nu = -1, nf = -1;
    gr_step_list fused;
    float *a = run_value(g, y, false, &nu, NULL), *b = run_value(g, y, true, &nf, &fused);
    CHECK_MSG(a && b && memcmp(a, b, sizeof(float) * N) == 0, "eos: fused and unfused results differ");
    CHECK_MSG(nf == 1, "eos: %d kernels fused, want 1 (unfused %d)", nf, nu);
    CHECK_MSG(nu == 5 + 24 * 12, "eos: %d kernels unfused", nu);
    int64_t bad = -1;
    for (int i = 0; i < N && b && bad < 0; i++)
        if (!(fabsf(b[i] - ref[i]) <= 1e-5f * (1 + fabsf(ref[i])))) bad = i;
    CHECK_MSG(bad < 0, "eos: element %lld is %.9g, reference %.9g", (long long)bad, bad >= 0 ? b[bad] : 0,
              bad >= 0 ? ref[bad] : 0);
    /* reads s, t, p once each, writes acc once; the DAG stays linear in the rounds */
    const gr_kernel *k = only_kernel(&fused);
    CHECK(k != NULL);
    if (k) {
        CHECK_MSG(count_ops(k, GR_KX_LOAD) == 3, "eos: %d loads", count_ops(k, GR_KX_LOAD));
        CHECK(k->n_stages == 1 && k->stages[0].kind == GR_KS_STORE);
        CHECK_MSG(k->nodes.len <= 24 * 16, "eos: %d nodes", k->nodes.len);
        int buffers = 0;
        for (int p = 0; p < k->n_params; p++) buffers += k->params[p].kind == GR_KP_BUFFER;
        CHECK(buffers == 4);
    }
    gr_step_list_free(&fused);
    free(a), free(b);
    for (int i = 0; i < 3; i++) free(data[i]);
    gr_ir_graph_destroy(g);

    /* with the last x an output too, every x_k has two live readers (the acc
     * kernel and the x kernel): recomputed in both, CSE keeps both linear */
    g = build_eos(N, 24, true, data, NULL);
    check_fused("eos, x output", g, 5 + 24 * 12, 2);
    free(run_value(g, g->outputs.data[0], true, NULL, &fused));
    for (int i = 0; i < fused.len; i++)
        CHECK_MSG(fused.data[i].kind == GR_STEP_KERNEL && fused.data[i].kernel->nodes.len <= 24 * 16 &&
                      count_ops(fused.data[i].kernel, GR_KX_LOAD) <= 3,
                  "eos, x output: step %d", i);
    gr_step_list_free(&fused);
    for (int i = 0; i < 3; i++) free(data[i]);
    gr_ir_graph_destroy(g);
}

/* ==== recomputation ===================================================================================== */

static void test_recompute(void) {
    const int64_t *d = DIMS(3, 5);
    double xv[15];
    void *xd = make_data(GR_F32, 15, -2, 2, xv);
    /* diamond: a -> b, a -> c, b + c */
    {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        int x = t_input(g, "x", GR_F32, 2, d, xd);
        int a = un(g, GR_OP_EXP, x, GR_F32, 2, d);
        int b = un(g, GR_OP_SIN, a, GR_F32, 2, d), c = un(g, GR_OP_COS, a, GR_F32, 2, d);
        gr_ir_add_output(g, bin(g, GR_OP_ADD, b, c, GR_F32, 2, d));
        check_fused("diamond", g, 4, 1);
        gr_ir_graph_destroy(g);
    }
    /* diamond whose arms are outputs too: a is recomputed in all three kernels */
    {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        int x = t_input(g, "x", GR_F32, 2, d, xd);
        int a = un(g, GR_OP_EXP, x, GR_F32, 2, d);
        int b = un(g, GR_OP_SIN, a, GR_F32, 2, d), c = un(g, GR_OP_COS, a, GR_F32, 2, d);
        int e = bin(g, GR_OP_MUL, b, a, GR_F32, 2, d);
        gr_ir_add_output(g, b);
        gr_ir_add_output(g, c);
        gr_ir_add_output(g, e);
        check_fused("diamond with outputs", g, 4, 3);
        gr_ir_graph_destroy(g);
    }
    /* f16: each recomputed copy rounds exactly as the stored intermediate did */
    {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        void *hd = make_data(GR_F16, 15, -2, 2, NULL);
        int x = t_input(g, "x", GR_F16, 2, d, hd);
        int a = bin(g, GR_OP_MUL, un(g, GR_OP_EXP, x, GR_F16, 2, d), x, GR_F16, 2, d);
        gr_ir_add_output(g, un(g, GR_OP_TANH, a, GR_F16, 2, d));
        gr_ir_add_output(g, bin(g, GR_OP_SUB, a, x, GR_F16, 2, d));
        check_fused("f16 recompute", g, 4, 2);
        gr_ir_graph_destroy(g);
        free(hd);
    }
    /* a producer read by an elementwise kernel and by a reduction */
    {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        int x = t_input(g, "x", GR_F32, 2, d, xd);
        int a = un(g, GR_OP_EXP, x, GR_F32, 2, d);
        gr_ir_add_output(g, t_node(g, GR_OP_REDUCE_SUM, 1, &a, 2,
                                   (gr_ir_attr[]){A_INTS("axes", DIMS(1), 1), A_INT("keepdims", 0)}, GR_F32, 1, DIMS(3)));
        gr_ir_add_output(g, un(g, GR_OP_NEG, a, GR_F32, 2, d));
        check_fused("elementwise + reduction readers", g, 3, 2);
        gr_ir_graph_destroy(g);
    }
    /* 8 readers: recomputed; 9 readers: stays (and the first reader, a function of it alone,
     * becomes a second store of its kernel: fuse-store.c) */
    for (int nr = 8; nr <= 9; nr++) {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        int x = t_input(g, "x", GR_F32, 2, d, xd);
        int a = un(g, GR_OP_EXP, x, GR_F32, 2, d);
        for (int r = 0; r < nr; r++) gr_ir_add_output(g, bin(g, GR_OP_MUL, a, cst(g, (float)r), GR_F32, 2, d));
        check_fused(nr == 8 ? "8 readers" : "9 readers", g, nr + 1, nr == 8 ? 8 : 9);
        gr_ir_graph_destroy(g);
    }
    free(xd);
}

/* ==== producers that must not be duplicated ================================================================ */

static void test_not_duplicated(void) {
    double xv[12], vv[4];
    void *xd = make_data(GR_F32, 12, -1, 1, xv), *vd = make_data(GR_F32, 4, -1, 1, vv);
    const int64_t *d = DIMS(3, 4);
    /* a reduction's output read twice (the first reader is stored by the reduction, fuse-store.c) */
    {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        int x = t_input(g, "x", GR_F32, 2, d, xd);
        int r = t_node(g, GR_OP_REDUCE_SUM, 1, &x, 2, (gr_ir_attr[]){A_INTS("axes", DIMS(1), 1), A_INT("keepdims", 0)},
                       GR_F32, 1, DIMS(3));
        gr_ir_add_output(g, un(g, GR_OP_EXP, r, GR_F32, 1, DIMS(3)));
        gr_ir_add_output(g, un(g, GR_OP_NEG, r, GR_F32, 1, DIMS(3)));
        check_fused("reduction read twice", g, 3, 2);
        gr_ir_graph_destroy(g);
    }
    /* a producer read with broadcasting (by one reader, and by two) */
    {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        int x = t_input(g, "x", GR_F32, 2, d, xd), v = t_input(g, "v", GR_F32, 1, DIMS(4), vd);
        int w = un(g, GR_OP_EXP, v, GR_F32, 1, DIMS(4));
        gr_ir_add_output(g, bin(g, GR_OP_ADD, x, w, GR_F32, 2, d));
        check_fused("broadcast read", g, 2, 2);
        gr_ir_add_output(g, bin(g, GR_OP_MUL, w, x, GR_F32, 2, d));
        check_fused("broadcast read twice", g, 3, 3);
        gr_ir_graph_destroy(g);
    }
    /* one broadcast reader among contiguous ones: nothing is duplicated (the contiguous reader,
     * a function of w alone, is a second store of w's kernel: fuse-store.c) */
    {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        int x = t_input(g, "x", GR_F32, 2, d, xd), v = t_input(g, "v", GR_F32, 1, DIMS(4), vd);
        int w = un(g, GR_OP_EXP, v, GR_F32, 1, DIMS(4));
        gr_ir_add_output(g, un(g, GR_OP_NEG, w, GR_F32, 1, DIMS(4)));
        gr_ir_add_output(g, bin(g, GR_OP_ADD, x, w, GR_F32, 2, d));
        check_fused("mixed readers", g, 3, 2);
        gr_ir_graph_destroy(g);
    }
    /* a graph output */
    {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        int x = t_input(g, "x", GR_F32, 2, d, xd);
        int t = un(g, GR_OP_EXP, x, GR_F32, 2, d);
        gr_ir_add_output(g, t);
        gr_ir_add_output(g, un(g, GR_OP_SIN, t, GR_F32, 2, d));
        gr_ir_add_output(g, un(g, GR_OP_COS, t, GR_F32, 2, d));
        check_fused("graph output read twice", g, 3, 3);
        gr_ir_graph_destroy(g);
    }
    /* a producer too large to recompute (its fused DAG exceeds 64 nodes); sin(t) is stored by
     * t's kernel (fuse-store.c), cos(t) reads t */
    {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        int x = t_input(g, "x", GR_F32, 2, d, xd), t = x;
        for (int r = 0; r < 40; r++)
            t = bin(g, GR_OP_ADD, bin(g, GR_OP_MUL, t, cst(g, 0.5f + 0.01f * (float)r), GR_F32, 2, d),
                    cst(g, 0.25f - 0.01f * (float)r), GR_F32, 2, d);
        gr_ir_add_output(g, un(g, GR_OP_SIN, t, GR_F32, 2, d));
        gr_ir_add_output(g, un(g, GR_OP_COS, t, GR_F32, 2, d));
        check_fused("large producer", g, 82, 2);
        gr_ir_graph_destroy(g);
    }
    free(xd), free(vd);
}

/* ==== dead-step elimination ================================================================================= */

static bool has_step_for(const gr_step_list *l, int value) {
    for (int i = 0; i < l->len; i++) {
        const gr_step *s = &l->data[i];
        if (s->kind == GR_STEP_ALIAS && s->out_value == value) return true;
        if (s->kind == GR_STEP_LIBCALL && s->args[2].value == value) return true;
        if (s->kind == GR_STEP_KERNEL)
            for (int p = 0; p < s->n_args; p++)
                if (s->kernel->params[p].written && s->args[p].kind == GR_ARG_VALUE && s->args[p].value == value) return true;
    }
    return false;
}

static void test_dce(void) {
    double xv[12];
    void *xd = make_data(GR_F32, 12, -1, 1, xv);
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    const int64_t *d = DIMS(3, 4);
    int x = t_input(g, "x", GR_F32, 2, d, xd);
    /* dead: a chain of elementwise ops, a matmul, a view */
    int a = un(g, GR_OP_EXP, x, GR_F32, 2, d);
    int b = un(g, GR_OP_SIN, a, GR_F32, 2, d);
    int m = t_node(g, GR_OP_MATMUL, 2, (int[]){x, b}, 1, (gr_ir_attr[]){A_INT("trans_b", 1)}, GR_F32, 2, DIMS(3, 3));
    int mm = un(g, GR_OP_NEG, m, GR_F32, 2, DIMS(3, 3));
    int rv = t_node(g, GR_OP_RESHAPE, 2, (int[]){x, t_const(g, GR_I64, 1, DIMS(1), (int64_t[]){12})}, 0, NULL, GR_F32, 1,
                    DIMS(12));
    /* live: an output through a view, and an output whose producer feeds a dead step */
    int c = un(g, GR_OP_COS, x, GR_F32, 2, d);
    int cv = t_node(g, GR_OP_RESHAPE, 2, (int[]){c, t_const(g, GR_I64, 1, DIMS(1), (int64_t[]){12})}, 0, NULL, GR_F32, 1,
                    DIMS(12));
    int e = un(g, GR_OP_ABS, x, GR_F32, 2, d);
    int dead_e = un(g, GR_OP_NEG, e, GR_F32, 2, d);
    gr_ir_add_output(g, cv);
    gr_ir_add_output(g, e);
    gr_step_list steps;
    CHECK_OK(gr_pass_lower(g, &steps));
    CHECK(has_step_for(&steps, a) && has_step_for(&steps, m) && has_step_for(&steps, rv) && has_step_for(&steps, dead_e));
    CHECK_OK(gr_pass_dce(g, &steps));
    CHECK(!has_step_for(&steps, a) && !has_step_for(&steps, b) && !has_step_for(&steps, m) && !has_step_for(&steps, mm));
    CHECK(!has_step_for(&steps, rv) && !has_step_for(&steps, dead_e));
    CHECK(has_step_for(&steps, c) && has_step_for(&steps, cv) && has_step_for(&steps, e));
    CHECK_MSG(steps.len == 3, "dce: %d steps left", steps.len);
    int n_before = steps.len;
    CHECK_OK(gr_pass_dce(g, &steps)); /* a fixed point */
    CHECK(steps.len == n_before);
    exec_t ex;
    CHECK_OK(exec_run(&ex, g, &steps));
    for (int i = 0; i < 12; i++) {
        CHECK(((float *)ex.buf[cv])[i] == cosf((float)xv[i]) || fabsf(((float *)ex.buf[cv])[i] - cosf((float)xv[i])) < 1e-6f);
        CHECK(((float *)ex.buf[e])[i] == fabsf((float)xv[i]));
    }
    exec_free(&ex);
    gr_step_list_free(&steps);
    /* after fusion the dead ones are gone too, and the live ones agree bit for bit */
    check_fused("dce + fusion", g, 7, 2);
    gr_ir_graph_destroy(g);
    free(xd);
}

/* ==== CSE ================================================================================================== */

static void test_cse(void) {
    double xv[10];
    void *xd = make_data(GR_F32, 10, -1, 1, xv);
    /* (x*2 + 1) * (x*2 + 1), spelled as two separate chains */
    {
        gr_graph *g;
        CHECK_OK(gr_ir_graph_create(&g));
        const int64_t *d = DIMS(10);
        int x = t_input(g, "x", GR_F32, 1, d, xd);
        int t = bin(g, GR_OP_ADD, bin(g, GR_OP_MUL, x, cst(g, 2), GR_F32, 1, d), cst(g, 1), GR_F32, 1, d);
        int u = bin(g, GR_OP_ADD, bin(g, GR_OP_MUL, x, cst(g, 2), GR_F32, 1, d), cst(g, 1), GR_F32, 1, d);
        int y = bin(g, GR_OP_MUL, t, u, GR_F32, 1, d);
        gr_ir_add_output(g, y);
        check_fused("cse graph", g, 5, 1);
        gr_step_list steps;
        void *r = run_value(g, y, true, NULL, &steps);
        const gr_kernel *k = only_kernel(&steps);
        CHECK(k != NULL);
        if (k) {
            /* load x, 2, mul, 1, add, mul: one copy of each */
            CHECK_MSG(k->nodes.len == 6, "cse graph: %d nodes", k->nodes.len);
            CHECK(count_ops(k, GR_KX_LOAD) == 1);
            CHECK(k->n_params == 3); /* n, x, y */
        }
        free(r);
        gr_step_list_free(&steps);
        gr_ir_graph_destroy(g);
    }
    /* directly: duplicated subexpressions, a dead node, two params bound to one value */
    {
        gr_kernel *k;
        CHECK_OK(gr_kernel_create("cse", &k));
        k->n_outer = 1;
        k->outer[0] = 10;
        int pn, pa, pb, py;
        CHECK_OK(gr_kernel_add_param(k, GR_KP_SHAPE, GR_I64, "n", &pn));
        CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "a", &pa));
        CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "b", &pb));
        CHECK_OK(gr_kernel_add_param(k, GR_KP_BUFFER, GR_F32, "y", &py));
        k->params[py].written = true;
        k->n_points_param = pn;
        gr_kaccess acc;
        gr_kaccess_init(&acc);
        acc.stride[0] = 1;
        int la, lb, c1, c2, m1, m2, e1, e2, dead, s;
        CHECK_OK(gr_kx_load(k, pa, &acc, &la));
        CHECK_OK(gr_kx_load(k, pb, &acc, &lb));
        CHECK_OK(gr_kx_const_f(k, GR_F32, 3.0, &c1));
        CHECK_OK(gr_kx_const_f(k, GR_F32, 3.0, &c2));
        CHECK_OK(gr_kx_binary(k, GR_KB_MUL, GR_F32, la, c1, &m1));
        CHECK_OK(gr_kx_binary(k, GR_KB_MUL, GR_F32, lb, c2, &m2));
        CHECK_OK(gr_kx_unary(k, GR_KU_EXP, GR_F32, m1, &e1));
        CHECK_OK(gr_kx_unary(k, GR_KU_SIN, GR_F32, m2, &dead));
        CHECK_OK(gr_kx_unary(k, GR_KU_EXP, GR_F32, m2, &e2));
        CHECK_OK(gr_kx_binary(k, GR_KB_SUB, GR_F32, e1, e2, &s));
        gr_kstage st = {.kind = GR_KS_STORE, .value = s, .param = py, .access = acc};
        CHECK_OK(gr_kernel_add_stage(k, &st));
        CHECK_OK(gr_kernel_verify(k));
        gr_step_arg args[GR_KMAX_PARAMS];
        memset(args, 0, sizeof args);
        args[pn] = (gr_step_arg){.kind = GR_ARG_LITERAL, .value = -1, .literal.i = 10};
        args[pa] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = 7};
        args[pb] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = 7};
        args[py] = (gr_step_arg){.kind = GR_ARG_VALUE, .value = 8};
        /* a kernel reading a buffer through two params bound to the same value */
        float in[10], out1[10], out2[10];
        for (int i = 0; i < 10; i++) in[i] = (float)xv[i];
        gr_karg ka[4] = {{.i = 10}, {.ptr = in}, {.ptr = in}, {.ptr = out1}};
        CHECK_OK(gr_kernel_interpret(k, ka, 4, NULL, NULL));
        CHECK_OK(gr_pass_cse_kernel(k, args));
        CHECK_OK(gr_kernel_verify(k));
        /* load, 3, mul, exp, sub */
        CHECK_MSG(k->nodes.len == 5, "cse kernel: %d nodes", k->nodes.len);
        CHECK(count_ops(k, GR_KX_UNARY) == 1 && count_ops(k, GR_KX_LOAD) == 1);
        CHECK_MSG(k->n_params == 3, "cse kernel: %d params", k->n_params);
        if (k->n_params == 3) {
            CHECK(args[0].kind == GR_ARG_LITERAL && args[1].value == 7 && args[2].value == 8 && k->params[2].written);
            gr_karg kb[3] = {{.i = 10}, {.ptr = in}, {.ptr = out2}};
            CHECK_OK(gr_kernel_interpret(k, kb, 3, NULL, NULL));
            CHECK(memcmp(out1, out2, sizeof out1) == 0);
        }
        /* a second run changes nothing */
        int nodes = k->nodes.len;
        CHECK_OK(gr_pass_cse_kernel(k, args));
        CHECK(k->nodes.len == nodes && k->n_params == 3);
        gr_kernel_destroy(k);
    }
    free(xd);
}

/* ==== fold limit for fill / range ============================================================================== */

static void test_fold_limit(void) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    int small = t_node(g, GR_OP_FILL, 0, NULL, 2, (gr_ir_attr[]){A_INTS("shape", DIMS(4096), 1), A_FLOAT("value", 1.5)},
                       GR_F32, 1, DIMS(4096));
    int big = t_node(g, GR_OP_FILL, 0, NULL, 2, (gr_ir_attr[]){A_INTS("shape", DIMS(4097), 1), A_FLOAT("value", 1.5)},
                     GR_F32, 1, DIMS(4097));
    int rsmall = t_node(g, GR_OP_RANGE, 0, NULL, 3, (gr_ir_attr[]){A_FLOAT("start", 0), A_FLOAT("limit", 100), A_FLOAT("delta", 1)},
                        GR_F32, 1, DIMS(100));
    int rbig = t_node(g, GR_OP_RANGE, 0, NULL, 3, (gr_ir_attr[]){A_FLOAT("start", 0), A_FLOAT("limit", 5000), A_FLOAT("delta", 1)},
                      GR_F32, 1, DIMS(5000));
    int rnd = t_node(g, GR_OP_RANDOM_UNIFORM, 0, NULL, 2, (gr_ir_attr[]){A_INTS("shape", DIMS(5000), 1), A_INT("seed", 3)},
                     GR_F32, 1, DIMS(5000));
    int outs[5] = {small, big, rsmall, rbig, rnd};
    for (int i = 0; i < 5; i++) gr_ir_add_output(g, outs[i]);
    CHECK_OK(gr_pass_fold_constants(g));
    CHECK(g->values.data[small].kind == GR_VAL_CONST && g->values.data[rsmall].kind == GR_VAL_CONST);
    CHECK(g->values.data[big].kind == GR_VAL_NODE && g->values.data[rbig].kind == GR_VAL_NODE);
    CHECK(g->values.data[rnd].kind == GR_VAL_CONST); /* random generators are weights: still folded */
    CHECK(g->nodes.len == 2);
    /* the unfolded fill and range still compute the right values, and fuse into their reader */
    void *r = run_value(g, big, false, NULL, NULL);
    int bad = 0;
    for (int i = 0; r && i < 4097; i++) bad += ((float *)r)[i] != 1.5f;
    CHECK(r && bad == 0);
    free(r);
    int s = bin(g, GR_OP_ADD, rbig, rbig, GR_F32, 1, DIMS(5000));
    int f = t_node(g, GR_OP_FILL, 0, NULL, 2, (gr_ir_attr[]){A_INTS("shape", DIMS(5000), 1), A_FLOAT("value", 0.5)},
                   GR_F32, 1, DIMS(5000));
    int y = bin(g, GR_OP_MUL, s, f, GR_F32, 1, DIMS(5000));
    g->outputs.len = 0; /* only y: the big fill above is dead now */
    gr_ir_add_output(g, y);
    check_fused("fill and range into a reader", g, 5, 1);
    r = run_value(g, y, true, NULL, NULL);
    bad = 0;
    for (int i = 0; r && i < 5000; i++) bad += ((float *)r)[i] != (float)i;
    CHECK(r && bad == 0);
    free(r);
    gr_ir_graph_destroy(g);
}

/* ==== allocation failures ========================================================================================= */

static void oom_loop(const char *what, gr_graph *g, bool dce_only) {
    int failures = 0, successes = 0;
    for (long n = 1; n < 20000 && !successes; n++) {
        long live = gr_debug_live_allocs();
        gr_step_list steps;
        CHECK_OK(gr_pass_lower(g, &steps));
        gr_debug_fail_alloc_after(n);
        gr_status st = dce_only ? gr_pass_dce(g, &steps) : gr_pass_fuse(g, &steps);
        gr_debug_fail_alloc_after(0);
        if (st == GR_OK) successes++;
        else failures++;
        CHECK_MSG(st == GR_OK || st == GR_ERR_NOMEM, "%s: allocation failure %ld gave %s", what, n, gr_status_name(st));
        /* the list stays valid after a failure: it verifies and still runs */
        for (int i = 0; i < steps.len; i++)
            if (steps.data[i].kind == GR_STEP_KERNEL) CHECK_OK(gr_kernel_verify(steps.data[i].kernel));
        exec_t e;
        CHECK_OK(exec_run(&e, g, &steps));
        exec_free(&e);
        gr_step_list_free(&steps);
        CHECK_MSG(gr_debug_live_allocs() == live, "%s: allocation failure %ld leaks %ld allocations", what, n,
                  gr_debug_live_allocs() - live);
    }
    CHECK_MSG(successes == 1 && failures >= 3, "%s: %d successes, %d failures", what, successes, failures);
}

static void test_oom(void) {
    void *data[3];
    gr_graph *g = build_eos(64, 4, true, data, NULL);
    oom_loop("eos fuse", g, false);
    oom_loop("eos dce", g, true);
    gr_ir_graph_destroy(g);
    for (int i = 0; i < 3; i++) free(data[i]);
    /* recomputation into several readers */
    CHECK_OK(gr_ir_graph_create(&g));
    double xv[6];
    void *xd = make_data(GR_F32, 6, -1, 1, xv);
    int x = t_input(g, "x", GR_F32, 1, DIMS(6), xd);
    int a = un(g, GR_OP_EXP, x, GR_F32, 1, DIMS(6));
    for (int r = 0; r < 3; r++) gr_ir_add_output(g, bin(g, GR_OP_MUL, a, cst(g, (float)r), GR_F32, 1, DIMS(6)));
    oom_loop("three readers", g, false);
    gr_ir_graph_destroy(g);
    free(xd);
}

/* ==== row consumers (fuse-row.c) ======================================================================= */

/* RMSNorm as exporters write it, over rows of x [2, 5, 40]:
 * y = w * (x * rsqrt(mean(x^2, -1, keepdims) + eps)); r_out: r is a graph output too;
 * between: a kernel between the reduction and its consumer writes a value the consumer reads. */
static void build_rms(gr_graph **out, void **data, bool r_out, bool between) {
    gr_graph *g;
    CHECK_OK(gr_ir_graph_create(&g));
    const int64_t *d = DIMS(2, 5, 40), *dr = DIMS(2, 5, 1), *dw = DIMS(40);
    data[0] = make_data(GR_F32, 400, -2, 2, NULL);
    data[1] = make_data(GR_F32, 40, 0.5, 1.5, NULL);
    int x = t_input(g, "x", GR_F32, 3, d, data[0]), w = t_input(g, "w", GR_F32, 1, dw, data[1]);
    int sq = bin(g, GR_OP_POW, x, cst(g, 2.0f), GR_F32, 3, d);
    int m = t_node(g, GR_OP_REDUCE_MEAN, 1, &sq, 2, (gr_ir_attr[]){A_INTS("axes", DIMS(-1), 1), A_INT("keepdims", 1)},
                   GR_F32, 3, dr);
    int r = un(g, GR_OP_RSQRT, bin(g, GR_OP_ADD, m, cst(g, 1e-6f), GR_F32, 3, dr), GR_F32, 3, dr);
    int xin = x;
    if (between) { /* a matmul lowered after r writes what the consumer reads: not fusable */
        data[2] = make_data(GR_F32, 80, -1, 1, NULL);
        data[3] = make_data(GR_F32, 320, -1, 1, NULL);
        int a = t_input(g, "a", GR_F32, 3, DIMS(2, 5, 8), data[2]), b = t_input(g, "b", GR_F32, 2, DIMS(8, 40), data[3]);
        xin = t_node(g, GR_OP_MATMUL, 2, (int[]){a, b}, 2, (gr_ir_attr[]){A_INT("trans_a", 0), A_INT("trans_b", 0)}, GR_F32, 3, d);
    }
    int y = bin(g, GR_OP_MUL, w, bin(g, GR_OP_MUL, xin, r, GR_F32, 3, d), GR_F32, 3, d);
    gr_ir_add_output(g, y);
    if (r_out) gr_ir_add_output(g, r);
    *out = g;
}

static void test_row_consumer(void) {
    for (int variant = 0; variant < 3; variant++) {
        const char *what = variant == 0 ? "rmsnorm" : variant == 1 ? "rmsnorm, r an output" : "rmsnorm, input made between";
        gr_graph *g;
        void *data[4] = {NULL, NULL, NULL, NULL};
        build_rms(&g, data, variant == 1, variant == 2);
        /* bit-identical to the unfused steps */
        int nu = -1, nf = -1;
        for (int o = 0; o < g->outputs.len; o++) {
            int y = g->outputs.data[o];
            void *a = run_value(g, y, false, &nu, NULL), *b = run_value(g, y, true, &nf, NULL);
            const gr_ir_value *xv = &g->values.data[y];
            size_t bytes = (size_t)gr_ir_value_numel(xv) * gr_dtype_size(xv->dtype);
            CHECK_MSG(a && b && memcmp(a, b, bytes) == 0, "%s: output %d: fused and unfused results differ", what, o);
            free(a), free(b);
        }
        gr_step_list l = {0};
        void *res = run_value(g, g->outputs.data[0], true, NULL, &l);
        free(res);
        const gr_kernel *k = only_kernel(&l);
        if (variant < 2) {
            /* one block kernel: the reduction, then the store over the row (and r's store when
             * r is an output); x read once (one load node after CSE) */
            CHECK_MSG(k != NULL, "%s: %d steps, want one kernel", what, l.len);
            if (k) {
                int over = 0, plain = 0;
                for (int s = 0; s < k->n_stages; s++)
                    if (k->stages[s].kind == GR_KS_STORE) {
                        if (k->stages[s].over_inner) over++;
                        else plain++;
                    }
                CHECK_MSG(k->n_inner == 1 && k->inner[0] == 40 && over == 1 && plain == (variant == 1),
                          "%s: inner %d, %d row stores, %d row-value stores", what, k->n_inner, over, plain);
                CHECK_MSG(count_ops(k, GR_KX_LOAD) == 2, "%s: %d loads (want x and w once)", what, count_ops(k, GR_KX_LOAD));
            }
        }
        else {
            CHECK_MSG(nf == 3, "%s: %d compute steps, want the reduction, the matmul and the consumer", what, nf);
        }
        gr_step_list_free(&l);
        if (variant < 2) oom_loop(what, g, false); /* every allocation failure: an error, no leak, a valid list */
        gr_ir_graph_destroy(g);
        for (int i = 0; i < 4; i++) free(data[i]);
    }
}

/* ==== permuted matmul operands and results (fuse-matmul.c) ============================================ */

typedef struct {
    gr_graph *g;
    void *data[16];
    int n_data;
} mmg;

static int mm_in(mmg *m, gr_dtype t, int nd, const int64_t *dims) {
    int64_t n = gr_shape_numel(nd, dims);
    void *d = make_data(t, n, -1, 1, NULL);
    m->data[m->n_data++] = d;
    char name[16];
    snprintf(name, sizeof name, "in%d", m->n_data);
    return t_input(m->g, name, t, nd, dims, d);
}

static int mm_tr(mmg *m, int x, int nd, const int64_t *perm, const int64_t *out) {
    gr_dtype t = m->g->values.data[x].dtype;
    return t_node(m->g, GR_OP_TRANSPOSE, 1, &x, 1, (gr_ir_attr[]){A_INTS("perm", perm, nd)}, t, nd, out);
}

static int mm_rs(mmg *m, int x, int nd, const int64_t *out) {
    return t_node(m->g, GR_OP_RESHAPE, 1, &x, 0, NULL, m->g->values.data[x].dtype, nd, out);
}

static int mm_mm(mmg *m, int a, int b, int ta, int tb, int nd, const int64_t *out) {
    return t_node(m->g, GR_OP_MATMUL, 2, (int[]){a, b}, 2, (gr_ir_attr[]){A_INT("trans_a", ta), A_INT("trans_b", tb)},
                  m->g->values.data[a].dtype, nd, out);
}

static void mm_begin(mmg *m) {
    memset(m, 0, sizeof *m);
    CHECK_OK(gr_ir_graph_create(&m->g));
}

static void mm_end(mmg *m) {
    gr_ir_graph_destroy(m->g);
    for (int i = 0; i < m->n_data; i++) free(m->data[i]);
}

/* Every libcall operand range (as the simulator computes it) lies inside its value. */
static void check_libcall_ranges(const char *what, const gr_graph *g, const gr_step_list *l) {
    for (int i = 0; i < l->len; i++) {
        const gr_step *s = &l->data[i];
        if (s->kind != GR_STEP_LIBCALL) continue;
        const gr_libcall *c = &s->call;
        for (int w = 0; w < 3; w++) {
            bool tr = w == 0 ? c->trans_a : w == 1 ? c->trans_b : false;
            int64_t rows = w == 0 ? (tr ? c->k : c->m) : w == 1 ? (tr ? c->n : c->k) : c->m;
            int64_t cols = w == 0 ? (tr ? c->m : c->k) : w == 1 ? (tr ? c->k : c->n) : c->n;
            int64_t ld = w == 0 ? c->lda : w == 1 ? c->ldb : c->ldc;
            int64_t bs = w == 0 ? c->batch_stride_a : w == 1 ? c->batch_stride_b : c->batch_stride_c;
            int64_t hi = s->args[w].elem_offset + (rows - 1) * ld + cols + (c->batch - 1) * bs;
            int64_t have = gr_ir_value_numel(&g->values.data[s->args[w].value]);
            CHECK_MSG(ld >= cols && bs >= 0 && hi <= have, "%s: %s operand %d reads [.., %lld) of %lld elements (ld %lld)",
                      what, c->name, w, (long long)hi, (long long)have, (long long)ld);
        }
    }
}

/* Fused and unfused agree bit for bit, with these step counts; returns the fused steps. */
static gr_step_list mm_check(const char *what, mmg *m, int want_unfused, int want_fused) {
    check_fused(what, m->g, want_unfused, want_fused);
    gr_step_list l = {0};
    void *r = run_value(m->g, m->g->outputs.data[0], true, NULL, &l);
    free(r);
    check_libcall_ranges(what, m->g, &l);
    return l;
}

static const gr_step *nth_libcall(const gr_step_list *l, int n) {
    for (int i = 0; i < l->len; i++)
        if (l->data[i].kind == GR_STEP_LIBCALL && n-- == 0) return &l->data[i];
    return NULL;
}

static int count_kind(const gr_step_list *l, gr_step_kind k) {
    int n = 0;
    for (int i = 0; i < l->len; i++) n += l->data[i].kind == k;
    return n;
}

/* The speech transformer's attention: q/k/v = x.view(b,n,h,d).permute(2,0,1,3).reshape(h*b,n,d),
 * bmm(q, k^T), bmm(att, v), then .view(h,b,n,d).permute(1,2,0,3).reshape(b,n,h*d) into a linear. */
static void test_mm_attention(gr_dtype t) {
    const int64_t b = 1, n = 6, h = 3, d = 4;
    mmg m;
    mm_begin(&m);
    int qkv[3];
    for (int i = 0; i < 3; i++) {
        int x = mm_in(&m, t, 3, DIMS(b, n, h * d));
        int v4 = mm_rs(&m, x, 4, DIMS(b, n, h, d));
        int p = mm_tr(&m, v4, 4, DIMS(2, 0, 1, 3), DIMS(h, b, n, d));
        qkv[i] = mm_rs(&m, p, 3, DIMS(h * b, n, d));
    }
    int att = mm_mm(&m, qkv[0], qkv[1], 0, 1, 3, DIMS(h * b, n, n));
    int o = mm_mm(&m, att, qkv[2], 0, 0, 3, DIMS(h * b, n, d));
    int o4 = mm_rs(&m, o, 4, DIMS(h, b, n, d));
    int op = mm_tr(&m, o4, 4, DIMS(1, 2, 0, 3), DIMS(b, n, h, d));
    int o2 = mm_rs(&m, op, 2, DIMS(b * n, h * d));
    int w = mm_in(&m, t, 2, DIMS(5, h * d));
    int y = mm_mm(&m, o2, w, 0, 1, 2, DIMS(b * n, 5));
    gr_ir_add_output(m.g, y);
    const char *what = t == GR_F16 ? "attention f16" : "attention f32";
    gr_step_list l = mm_check(what, &m, 7, 3);
    CHECK(count_kind(&l, GR_STEP_KERNEL) == 0);
    const gr_step *s0 = nth_libcall(&l, 0), *s1 = nth_libcall(&l, 1);
    /* q: [h, n, d] read from x [n, h*d]: row stride h*d, head stride d */
    CHECK(s0 && !s0->call.trans_a && s0->call.lda == h * d && s0->call.batch_stride_a == d);
    CHECK(s0 && s0->call.trans_b && s0->call.ldb == h * d && s0->call.batch_stride_b == d);
    /* att @ v writes [n, h, d] directly */
    CHECK(s1 && s1->call.ldc == h * d && s1->call.batch_stride_c == d && s1->args[2].value == op);
    gr_step_list_free(&l);
    mm_end(&m);
}

/* Several permutations, with and without batch, with trans flags, a broadcast operand. */
static void test_mm_permutations(void) {
    mmg m;
    /* A = X.permute(1,2,0): unit stride along A's rows: trans_a flips */
    mm_begin(&m);
    int x = mm_in(&m, GR_F32, 3, DIMS(5, 4, 3));
    int a = mm_tr(&m, x, 3, DIMS(1, 2, 0), DIMS(4, 3, 5));
    int yv = mm_in(&m, GR_F32, 3, DIMS(4, 6, 5));
    int bt = mm_tr(&m, yv, 3, DIMS(0, 2, 1), DIMS(4, 5, 6));
    gr_ir_add_output(m.g, mm_mm(&m, a, bt, 0, 0, 3, DIMS(4, 3, 6)));
    gr_step_list l = mm_check("permuted A and B", &m, 3, 1);
    const gr_step *s = nth_libcall(&l, 0);
    CHECK(s && s->call.trans_a && s->call.lda == 12 && s->call.batch_stride_a == 3);
    CHECK(s && s->call.trans_b && s->call.ldb == 5 && s->call.batch_stride_b == 30);
    gr_step_list_free(&l);
    mm_end(&m);

    /* trans_b on a permuted operand: B' = Z.permute(1,0,2), op(B) = B'^T keeps trans_b */
    mm_begin(&m);
    int a2 = mm_in(&m, GR_F32, 3, DIMS(4, 3, 5));
    int z = mm_in(&m, GR_F32, 3, DIMS(6, 4, 5));
    int zb = mm_tr(&m, z, 3, DIMS(1, 0, 2), DIMS(4, 6, 5));
    gr_ir_add_output(m.g, mm_mm(&m, a2, zb, 0, 1, 3, DIMS(4, 3, 6)));
    l = mm_check("trans_b of a permuted B", &m, 2, 1);
    s = nth_libcall(&l, 0);
    CHECK(s && s->call.trans_b && s->call.ldb == 20 && s->call.batch_stride_b == 5);
    gr_step_list_free(&l);
    mm_end(&m);

    /* no batch: trans_a of a transposed A cancels */
    mm_begin(&m);
    int w = mm_in(&m, GR_F64, 2, DIMS(3, 5));
    int wt = mm_tr(&m, w, 2, DIMS(1, 0), DIMS(5, 3));
    int b2 = mm_in(&m, GR_F64, 2, DIMS(5, 7));
    gr_ir_add_output(m.g, mm_mm(&m, wt, b2, 1, 0, 2, DIMS(3, 7)));
    l = mm_check("transposed A with trans_a", &m, 2, 1);
    s = nth_libcall(&l, 0);
    CHECK(s && !s->call.trans_a && s->call.lda == 5);
    gr_step_list_free(&l);
    mm_end(&m);

    /* a transposed 2-D A broadcast over the batch of B, and a bf16 case */
    for (int lowp = 0; lowp < 2; lowp++) {
        gr_dtype t = lowp ? GR_BF16 : GR_F32;
        mm_begin(&m);
        int w2 = mm_in(&m, t, 2, DIMS(5, 3));
        int a3 = mm_tr(&m, w2, 2, DIMS(1, 0), DIMS(3, 5));
        int b3 = mm_in(&m, t, 3, DIMS(4, 5, 2));
        gr_ir_add_output(m.g, mm_mm(&m, a3, b3, 0, 0, 3, DIMS(4, 3, 2)));
        l = mm_check(lowp ? "broadcast permuted A bf16" : "broadcast permuted A", &m, 2, 1);
        s = nth_libcall(&l, 0);
        CHECK(s && s->call.trans_a && s->call.lda == 3 && s->call.batch_stride_a == 0);
        gr_step_list_free(&l);
        mm_end(&m);
    }

    /* GPT-2: slices of a fused qkv projection, then head transposes: a chain of copies */
    {
        const int64_t n = 5, h = 2, d = 3;
        mm_begin(&m);
        int qkv = mm_in(&m, GR_F32, 2, DIMS(n, 3 * h * d));
        int parts[2];
        for (int i = 0; i < 2; i++) {
            int sl = t_node(m.g, GR_OP_SLICE, 1, &qkv, 3,
                            (gr_ir_attr[]){A_INTS("starts", DIMS(i * h * d), 1), A_INTS("ends", DIMS((i + 1) * h * d), 1),
                                           A_INTS("axes", DIMS(1), 1)},
                            GR_F32, 2, DIMS(n, h * d));
            int v3 = mm_rs(&m, sl, 3, DIMS(n, h, d));
            parts[i] = i == 0 ? mm_tr(&m, v3, 3, DIMS(1, 0, 2), DIMS(h, n, d)) : mm_tr(&m, v3, 3, DIMS(1, 2, 0), DIMS(h, d, n));
        }
        gr_ir_add_output(m.g, mm_mm(&m, parts[0], parts[1], 0, 0, 3, DIMS(h, n, n)));
        l = mm_check("sliced qkv", &m, 5, 1);
        s = nth_libcall(&l, 0);
        CHECK(s && !s->call.trans_a && s->call.lda == 3 * h * d && s->call.batch_stride_a == d && s->args[0].value == qkv &&
              s->args[0].elem_offset == 0);
        CHECK(s && s->call.trans_b && s->call.ldb == 3 * h * d && s->call.batch_stride_b == d && s->args[1].value == qkv &&
              s->args[1].elem_offset == h * d);
        gr_step_list_free(&l);
        mm_end(&m);
    }

    /* a matmul result transposed into a graph output, and read back through a view */
    mm_begin(&m);
    int p = mm_in(&m, GR_F32, 3, DIMS(4, 3, 5));
    int q = mm_in(&m, GR_F32, 3, DIMS(4, 5, 6));
    int r = mm_mm(&m, p, q, 0, 0, 3, DIMS(4, 3, 6));
    gr_ir_add_output(m.g, mm_tr(&m, r, 3, DIMS(1, 0, 2), DIMS(3, 4, 6)));
    l = mm_check("result permuted into an output", &m, 2, 1);
    s = nth_libcall(&l, 0);
    CHECK(s && s->call.ldc == 24 && s->call.batch_stride_c == 6 && s->args[2].value == m.g->outputs.data[0]);
    gr_step_list_free(&l);
    mm_end(&m);
}

/* What must stay a copy. */
static void test_mm_kept(void) {
    mmg m;
    /* the copy is also read by an elementwise op */
    mm_begin(&m);
    int x = mm_in(&m, GR_F32, 2, DIMS(5, 3));
    int xt = mm_tr(&m, x, 2, DIMS(1, 0), DIMS(3, 5));
    int b = mm_in(&m, GR_F32, 2, DIMS(5, 4));
    int y = mm_mm(&m, xt, b, 0, 0, 2, DIMS(3, 4));
    gr_ir_add_output(m.g, y);
    gr_ir_add_output(m.g, un(m.g, GR_OP_EXP, xt, GR_F32, 2, DIMS(3, 5)));
    /* the exp goes into the copy's kernel as a second store (a matmul reading the copy does not
     * write it: fuse-store.c); the copy stays */
    gr_step_list l = mm_check("copy read by an elementwise op", &m, 3, 2);
    CHECK(!nth_libcall(&l, 0)->call.trans_a);
    gr_step_list_free(&l);
    mm_end(&m);

    /* the copy is a graph output */
    mm_begin(&m);
    x = mm_in(&m, GR_F32, 2, DIMS(5, 3));
    xt = mm_tr(&m, x, 2, DIMS(1, 0), DIMS(3, 5));
    b = mm_in(&m, GR_F32, 2, DIMS(5, 4));
    gr_ir_add_output(m.g, mm_mm(&m, xt, b, 0, 0, 2, DIMS(3, 4)));
    gr_ir_add_output(m.g, xt);
    gr_step_list_free((l = mm_check("copy is an output", &m, 2, 2), &l));
    mm_end(&m);

    /* a broadcast (expand) copy */
    mm_begin(&m);
    int e = mm_in(&m, GR_F32, 3, DIMS(1, 5, 3));
    int ex = t_node(m.g, GR_OP_EXPAND, 1, &e, 1, (gr_ir_attr[]){A_INTS("shape", DIMS(4, 5, 3), 3)}, GR_F32, 3, DIMS(4, 5, 3));
    int a = mm_in(&m, GR_F32, 3, DIMS(4, 2, 5));
    gr_ir_add_output(m.g, mm_mm(&m, a, ex, 0, 0, 3, DIMS(4, 2, 3)));
    gr_step_list_free((l = mm_check("broadcast copy", &m, 2, 2), &l));
    mm_end(&m);

    /* batch dims that do not collapse: b = 2 in x.view(b,n,h,d).permute(2,0,1,3).reshape(h*b,n,d) */
    mm_begin(&m);
    int q = mm_in(&m, GR_F32, 4, DIMS(2, 4, 3, 5));
    int qp = mm_rs(&m, mm_tr(&m, q, 4, DIMS(2, 0, 1, 3), DIMS(3, 2, 4, 5)), 3, DIMS(6, 4, 5));
    int k = mm_in(&m, GR_F32, 3, DIMS(6, 5, 4));
    gr_ir_add_output(m.g, mm_mm(&m, qp, k, 0, 0, 3, DIMS(6, 4, 4)));
    gr_step_list_free((l = mm_check("batch dims that do not collapse", &m, 2, 2), &l));
    mm_end(&m);

    /* neither matrix dim has unit stride: A is every other column of s (slice step 2) */
    mm_begin(&m);
    int s = mm_in(&m, GR_F32, 2, DIMS(3, 10));
    int ss = t_node(m.g, GR_OP_SLICE, 1, &s, 4,
                    (gr_ir_attr[]){A_INTS("starts", DIMS(0), 1), A_INTS("ends", DIMS(10), 1), A_INTS("axes", DIMS(1), 1),
                                   A_INTS("steps", DIMS(2), 1)},
                    GR_F32, 2, DIMS(3, 5));
    b = mm_in(&m, GR_F32, 2, DIMS(5, 4));
    gr_ir_add_output(m.g, mm_mm(&m, ss, b, 0, 0, 2, DIMS(3, 4)));
    gr_step_list_free((l = mm_check("no unit stride", &m, 2, 2), &l));
    mm_end(&m);

    /* a matmul result read by a partial copy (not a permutation of it) and by nothing else */
    mm_begin(&m);
    int p = mm_in(&m, GR_F32, 2, DIMS(3, 5));
    int pq = mm_in(&m, GR_F32, 2, DIMS(5, 6));
    int r = mm_mm(&m, p, pq, 0, 0, 2, DIMS(3, 6));
    gr_ir_add_output(m.g, t_node(m.g, GR_OP_SLICE, 1, &r, 3,
                                 (gr_ir_attr[]){A_INTS("starts", DIMS(1), 1), A_INTS("ends", DIMS(4), 1), A_INTS("axes", DIMS(1), 1)},
                                 GR_F32, 2, DIMS(3, 3)));
    gr_step_list_free((l = mm_check("result sliced", &m, 2, 2), &l));
    mm_end(&m);

    /* a result transposed with unit stride along m (would need C^T) */
    mm_begin(&m);
    p = mm_in(&m, GR_F32, 2, DIMS(3, 5));
    pq = mm_in(&m, GR_F32, 2, DIMS(5, 6));
    r = mm_mm(&m, p, pq, 0, 0, 2, DIMS(3, 6));
    gr_ir_add_output(m.g, mm_tr(&m, r, 2, DIMS(1, 0), DIMS(6, 3)));
    gr_step_list_free((l = mm_check("result transposed", &m, 2, 2), &l));
    mm_end(&m);
}

static void test_mm_oom(void) {
    const int64_t n = 4, h = 2, d = 3;
    mmg m;
    mm_begin(&m);
    int qkv[2];
    for (int i = 0; i < 2; i++) {
        int x = mm_in(&m, GR_F32, 3, DIMS(1, n, h * d));
        int p = mm_tr(&m, mm_rs(&m, x, 4, DIMS(1, n, h, d)), 4, DIMS(2, 0, 1, 3), DIMS(h, 1, n, d));
        qkv[i] = mm_rs(&m, p, 3, DIMS(h, n, d));
    }
    int o = mm_mm(&m, qkv[0], qkv[1], 0, 1, 3, DIMS(h, n, n));
    gr_ir_add_output(m.g, mm_tr(&m, o, 3, DIMS(1, 0, 2), DIMS(n, h, n)));
    oom_loop("permuted matmul operands", m.g, false);
    mm_end(&m);
}

int main(void) {
    test_eos();
    test_row_consumer();
    test_recompute();
    test_not_duplicated();
    test_dce();
    test_cse();
    test_fold_limit();
    test_oom();
    test_mm_attention(GR_F32);
    test_mm_attention(GR_F16);
    test_mm_permutations();
    test_mm_kept();
    test_mm_oom();
    return check_summary("test_fuse");
}
